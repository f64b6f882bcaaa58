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


# what Lightning's tuners and fit loop print that a run of the launcher does not need (issue 29)
LIBRARY_NOISE = (
    "\r",  # a tqdm bar's carriage returns
    "Finding best initial lr",  # Tuner.lr_find's own tqdm bar
    "`Trainer.fit` stopped",  # each trial fit's end, and a run's normal end before its epoch line
    "smaller than the logging interval",  # a trial fit of a few steps
    "will continue with full run",  # scale-batch-size does not continue
    "Restoring states from the checkpoint",  # the tuner's temporary checkpoint
    "Restored all states from the checkpoint",
)


def run_into_log_file(log: Path, *args: str) -> str:
    """Run ``python -m trainer_cli ARGS`` with stdout and stderr into the file ``log`` (as a batch job
    does); returns the file's text after checking the exit status is 0."""
    import os

    import forkserver
    from support import REPO

    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    env.pop("TRAINER_CLI_RUN_DIR", None)
    with log.open("w") as out:  # the file itself on both descriptors, forked from the suite's server where it can be
        code = forkserver.run_python_to(["-m", "trainer_cli", *args], REPO, env, out.fileno(), out.fileno(), 600)
    text = log.read_text()
    assert code == 0, text[-3000:]
    return text
