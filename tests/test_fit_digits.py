"""The default run end to end: real digits, real training on CPU, outputs read back."""

from __future__ import annotations

from pathlib import Path

import torch
from support import DIGITS, quiet_args, run_train, scalars


def values(run_dir: Path, tag: str) -> list[float]:
    return [event.value for event in scalars(run_dir, tag)]


def test_digits_reaches_95_percent_and_writes_run_directory(tmp_path: Path) -> None:
    root = tmp_path / "runs"
    proc = run_train("fit", "--config", DIGITS, *quiet_args(root, epochs=10))
    assert proc.returncode == 0, proc.stderr[-3000:]
    run = root / "digits" / "version_0"
    val_acc = values(run, "val/acc")
    assert len(val_acc) == 10
    assert val_acc[-1] >= 0.95, val_acc
    assert values(run, "train/loss"), "train/loss was not logged"
    assert (run / "config.yaml").is_file()
    assert (run / "checkpoints" / "last.ckpt").is_file()
    best = list((run / "checkpoints").glob("best-*.ckpt"))
    assert len(best) == 1
    # what people reason about, printed at the start; where to look, printed at the end
    for text in ("world size", "global batch size", "64 = 64 per device", "steps per epoch", "total optimizer steps", "run directory"):
        assert text in proc.stdout
    assert f"tensorboard --logdir {run}" in proc.stdout

    # the best checkpoint reloads into the LightningModule and classifies the held-out test split
    from trainer_cli.data import DigitsDataModule
    from trainer_cli.models import ImageClassifier

    model = ImageClassifier.load_from_checkpoint(best[0], map_location="cpu").eval()
    data = DigitsDataModule()
    data.setup("test")
    x, y = data.test_set.tensors  # type: ignore[union-attr]
    with torch.no_grad():
        accuracy = (model(x).argmax(-1) == y).float().mean().item()
    assert accuracy >= 0.93

    # the run directory's config re-runs as it is: a new version, nothing of version_0 touched
    before = {p: p.stat().st_mtime_ns for p in run.rglob("*")}
    again = run_train("fit", "--config", str(run / "config.yaml"), "--trainer.max_epochs", "1")
    assert again.returncode == 0, again.stderr[-3000:]
    assert (root / "digits" / "version_1" / "checkpoints" / "last.ckpt").is_file()
    assert {p: p.stat().st_mtime_ns for p in run.rglob("*")} == before


def test_resume_last_continues_the_newest_run(tmp_path: Path) -> None:
    root = tmp_path / "runs"
    first = run_train("fit", "--config", DIGITS, *quiet_args(root, epochs=1))
    assert first.returncode == 0, first.stderr[-3000:]
    run = root / "digits" / "version_0"
    assert torch.load(run / "checkpoints" / "last.ckpt", weights_only=False)["global_step"] == 20

    resumed = run_train("fit", "--config", DIGITS, *quiet_args(root, epochs=2), "--ckpt_path", "last")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert f"Resuming {run}" in resumed.stdout
    assert not (root / "digits" / "version_1").exists()  # same run directory, same TensorBoard version
    ckpt = torch.load(run / "checkpoints" / "last.ckpt", weights_only=False)
    assert ckpt["global_step"] == 40 and ckpt["epoch"] == 1
    assert len(scalars(run, "val/acc")) == 2  # one continuous TensorBoard run


def test_resume_last_without_a_run_is_a_clear_error(tmp_path: Path) -> None:
    proc = run_train("fit", "--config", DIGITS, *quiet_args(tmp_path / "runs"), "--ckpt_path", "last")
    assert proc.returncode == 2
    assert "--ckpt_path last: no run of 'digits'" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_last_checkpoint_follows_every_epoch_even_without_improvement(tmp_path: Path) -> None:
    root = tmp_path / "runs"
    proc = run_train("fit", "--config", DIGITS, *quiet_args(root, epochs=3), "--optimizer.lr", "1e-9",
                     "--trainer.limit_train_batches", "2", "--trainer.limit_val_batches", "1")
    assert proc.returncode == 0, proc.stderr[-3000:]
    checkpoints = root / "digits" / "version_0" / "checkpoints"
    assert torch.load(checkpoints / "last.ckpt", weights_only=False)["global_step"] == 6
    assert [p.name for p in checkpoints.glob("best-*.ckpt")] == ["best-epoch000-val_acc" + p.name.split("val_acc")[1] for p in checkpoints.glob("best-*.ckpt")]


def test_enable_checkpointing_false_drops_the_checkpoint_callbacks_and_says_so(tmp_path: Path) -> None:
    """The bundled callbacks list ModelCheckpoint and LastCheckpoint; the switch wins over them (Lightning
    alone refuses the run), and one line says what it costs."""
    root = tmp_path / "runs"
    fast = ["--trainer.limit_train_batches", "2", "--trainer.limit_val_batches", "1"]
    proc = run_train("fit", "--config", DIGITS, *quiet_args(root), *fast, "--trainer.enable_checkpointing", "false")
    assert proc.returncode == 0, proc.stderr[-3000:]
    notes = [line for line in proc.stdout.splitlines() if "keeps no checkpoints" in line]
    assert len(notes) == 1 and "cannot be resumed" in notes[0], proc.stdout
    run = root / "digits" / "version_0"
    assert (run / "config.yaml").is_file() and (run / "run.json").is_file()
    assert not list(run.rglob("*.ckpt"))
