"""Step-wise schedulers take their length from the trainer: no hand-computed steps_per_epoch."""

from __future__ import annotations

from pathlib import Path

import torch
from support import DIGITS, quiet_args, run_train


def test_onecycle_length_follows_accumulation_and_limits(tmp_path: Path) -> None:
    proc = run_train(
        "fit", "--config", DIGITS, *quiet_args(tmp_path / "runs", epochs=3),
        "--trainer.limit_train_batches", "5", "--trainer.accumulate_grad_batches", "2", "--trainer.limit_val_batches", "1",
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "steps per epoch        3" in proc.stdout and "total optimizer steps  9" in proc.stdout
    ckpt = torch.load(tmp_path / "runs" / "digits" / "version_0" / "checkpoints" / "last.ckpt", weights_only=False)
    scheduler = ckpt["lr_schedulers"][0]
    assert scheduler["total_steps"] == 9  # ceil(5 / 2) optimizer steps x 3 epochs
    assert scheduler["_step_count"] == 10  # stepped once per optimizer step (+1 at construction)
    assert ckpt["global_step"] == 9


def test_resume_with_more_epochs_stretches_the_schedule(tmp_path: Path) -> None:
    root = tmp_path / "runs"
    common = ["--config", DIGITS, "--trainer.limit_train_batches", "4", "--trainer.limit_val_batches", "1"]
    assert run_train("fit", *common, *quiet_args(root, epochs=1)).returncode == 0
    proc = run_train("fit", *common, *quiet_args(root, epochs=2), "--ckpt_path", "last")
    assert proc.returncode == 0, proc.stderr[-3000:]
    scheduler = torch.load(root / "digits" / "version_0" / "checkpoints" / "last.ckpt", weights_only=False)["lr_schedulers"][0]
    # the resumed schedule is 8 steps long and went on from step 4 (last_epoch: steps taken after the initial one)
    assert scheduler["total_steps"] == 8 and scheduler["last_epoch"] == 8 and scheduler["_step_count"] == 9
