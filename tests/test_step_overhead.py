"""What keeps the per-step overhead down behaves: the classifier logs ``train/loss`` only on the
steps the logger writes (TensorBoard gets the same points as with per-step logging) and
``train/acc`` once per epoch; in a terminal the default progress bar is the throttled TQDM bar
and still ends every epoch on its full count."""

from __future__ import annotations

from lightning.pytorch.callbacks import RichProgressBar

from tests.support import DIGITS, quiet_args, scalars
from tests.tty_support import run_train_in_terminal
from trainer_cli.callbacks import EpochLineProgress, ThrottledTQDMProgressBar
from trainer_cli.callbacks.progress import default_progress_bar


def test_default_progress_bar_is_throttled_tqdm_unless_configured_or_off() -> None:
    assert [type(cb) for cb in default_progress_bar({}, [], interactive=True)] == [ThrottledTQDMProgressBar]
    assert [type(cb) for cb in default_progress_bar({}, [], interactive=False)] == [EpochLineProgress]
    assert default_progress_bar({"enable_progress_bar": False}, []) == []
    assert default_progress_bar({"callbacks": [RichProgressBar()]}, []) == []


def test_logged_points_and_progress_bar_of_a_digits_run(tmp_path) -> None:
    code, stdout, stderr = run_train_in_terminal(
        "fit", "--config", DIGITS, *quiet_args(tmp_path, epochs=2), "--trainer.enable_progress_bar", "true",
        "--trainer.log_every_n_steps", "7",
    )
    assert code == 0, stderr[-3000:]
    run = next(tmp_path.glob("*/version_0"))
    steps_per_epoch = 20  # 1,257 training digits / 64
    # exactly the steps stock Lightning writes: (batches stepped + 1) % log_every_n_steps == 0
    assert [e.step for e in scalars(run, "train/loss")] == [s for s in range(2 * steps_per_epoch) if (s + 1) % 7 == 0]
    assert [e.step for e in scalars(run, "train/acc")] == [steps_per_epoch - 1, 2 * steps_per_epoch - 1]
    assert all(0.0 <= e.value <= 1.0 for e in scalars(run, "train/acc"))
    # the throttled bar skips redraws but draws each epoch's last batch
    assert "Epoch 0: 100%" in stdout and "Epoch 1: 100%" in stdout and "20/20" in stdout
    assert "v_num" not in stdout and not any(line.startswith("epoch ") for line in stdout.splitlines())
