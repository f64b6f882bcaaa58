"""Helpers for the tests of ``train lr-find``, ``scale-batch-size``, ``cv``, ``export`` and the
prediction writer: a short digits training run whose checkpoint several tests share."""

from __future__ import annotations

from pathlib import Path

from support import DIGITS, quiet_args, run_train

# a few optimizer steps per epoch keep every run to seconds on a CPU
FAST = ["--trainer.limit_train_batches", "3", "--trainer.limit_val_batches", "2"]


def only_run_dir(parent: Path) -> Path:
    """The single ``version_N`` folder under ``parent``."""
    runs = sorted(parent.glob("version_*"))
    assert len(runs) == 1, runs
    return runs[0]


def train_digits(root: Path) -> Path:
    """Train digits for one short epoch under ``root``; returns the run directory."""
    proc = run_train("fit", "--config", DIGITS, *quiet_args(root), *FAST)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return only_run_dir(root / "digits")
