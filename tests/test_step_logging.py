"""The classifier logs ``train/loss`` only on the steps the logger writes: TensorBoard gets the same
points as with per-step logging, and ``train/acc`` once per epoch."""

from __future__ import annotations

from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from tests.conftest import DIGITS, quiet_args, run_train


def test_train_loss_reaches_tensorboard_every_log_every_n_steps(tmp_path) -> None:
    done = run_train("fit", "--config", DIGITS, *quiet_args(tmp_path, epochs=2), "--trainer.log_every_n_steps", "7")
    assert done.returncode == 0, done.stderr[-3000:]
    events = EventAccumulator(str(next(tmp_path.glob("*/version_0"))))
    events.Reload()
    loss_steps = [e.step for e in events.Scalars("train/loss")]
    steps_per_epoch = 20  # 1,257 training digits / 64
    assert loss_steps == [s for s in range(2 * steps_per_epoch) if (s + 1) % 7 == 0]
    assert [e.step for e in events.Scalars("train/acc")] == [steps_per_epoch - 1, 2 * steps_per_epoch - 1]
    assert all(0.0 <= e.value <= 1.0 for e in events.Scalars("train/acc"))
