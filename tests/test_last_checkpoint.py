"""``LastCheckpoint`` (``configs/callbacks/default.yaml``'s ``last.ckpt``): saved at the first and the
last epoch end and, between them, at most every ``min_interval_s``; what it saved resumes.

Real digits trainings on the CPU (5 optimizer steps per epoch), the checkpoint read back from disk.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import pytest
import torch
from lightning.pytorch.callbacks import EarlyStopping

from trainer_cli.callbacks import LastCheckpoint
from trainer_cli.data import DigitsDataModule
from trainer_cli.models import ImageClassifier
from trainer_cli.runtime.checkpointing import AtomicCheckpointIO, ResumeState

STEPS_PER_EPOCH = 5


class Digits(ImageClassifier):
    def __init__(self) -> None:
        super().__init__(backbone="mlp", num_classes=10, in_channels=1, image_size=8)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.AdamW(self.parameters(), lr=0.01)


class StopAfter(pl.Callback):
    """Requests the stop at the end of training epoch ``epochs`` (as early stopping does)."""

    def __init__(self, epochs: int) -> None:
        self.epochs = epochs

    def on_train_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if trainer.current_epoch + 1 >= self.epochs:
            trainer.should_stop = True


class SavedSteps(pl.Callback):
    """The global step of every checkpoint the trainer writes."""

    def __init__(self) -> None:
        self.steps: list[int] = []

    def on_save_checkpoint(self, trainer: pl.Trainer, pl_module: pl.LightningModule, checkpoint: dict[str, Any]) -> None:
        self.steps.append(checkpoint["global_step"])


def fit(root: Path, last: LastCheckpoint, *extra: pl.Callback, ckpt_path: str | None = None, **trainer: Any) -> SavedSteps:
    saved = SavedSteps()
    pl.seed_everything(0)
    options = {"max_epochs": 4, "limit_val_batches": 2, **trainer}
    pl.Trainer(
        accelerator="cpu", devices=1, default_root_dir=root, logger=False, enable_progress_bar=False, enable_model_summary=False,
        limit_train_batches=STEPS_PER_EPOCH, callbacks=[last, saved, ResumeState(), *extra], plugins=[AtomicCheckpointIO()], **options,
    ).fit(Digits(), DigitsDataModule(batch_size=32), ckpt_path=ckpt_path)
    return saved


def stored_step(path: Path) -> int:
    return int(torch.load(path, map_location="cpu", weights_only=True)["global_step"])


def test_short_epochs_save_the_first_and_the_last_epoch_only(tmp_path: Path) -> None:
    last = LastCheckpoint(dirpath=str(tmp_path / "ckpt"), min_interval_s=3600)
    saved = fit(tmp_path, last)
    assert saved.steps == [STEPS_PER_EPOCH, 4 * STEPS_PER_EPOCH]
    stored = torch.load(tmp_path / "ckpt" / "last.ckpt", map_location="cpu", weights_only=True)
    assert stored["global_step"] == 4 * STEPS_PER_EPOCH
    assert stored["callbacks"][last.state_key]["best_model_path"].endswith("last.ckpt")  # its state, under its (cached) key
    assert sorted(p.name for p in (tmp_path / "ckpt").iterdir()) == ["last.ckpt"]


def test_validation_every_second_epoch_saves_at_the_first_one_it_can(tmp_path: Path) -> None:
    # Lightning's ModelCheckpoint then saves at validation ends only: the epoch ends without one do not count as saves
    saved = fit(tmp_path, LastCheckpoint(dirpath=str(tmp_path), min_interval_s=3600), check_val_every_n_epoch=2)
    assert saved.steps == [2 * STEPS_PER_EPOCH, 4 * STEPS_PER_EPOCH]


def test_max_steps_and_early_stop_end_with_a_save(tmp_path: Path) -> None:
    # max_steps reached at an epoch end, no validation (saved at the training epoch's end)
    saved = fit(tmp_path / "a", LastCheckpoint(dirpath=str(tmp_path / "a"), min_interval_s=3600), max_epochs=-1, max_steps=3 * STEPS_PER_EPOCH, limit_val_batches=0)
    assert saved.steps == [STEPS_PER_EPOCH, 3 * STEPS_PER_EPOCH]
    # early stopping (patience 0 on a metric that cannot improve: stops after the second validation)
    stop = EarlyStopping(monitor="val/acc", mode="max", patience=0, stopping_threshold=None, divergence_threshold=None, min_delta=1.0)
    saved = fit(tmp_path / "b", LastCheckpoint(dirpath=str(tmp_path / "b"), min_interval_s=3600), stop, max_epochs=10)
    assert saved.steps == [STEPS_PER_EPOCH, 2 * STEPS_PER_EPOCH]
    assert stored_step(tmp_path / "b" / "last.ckpt") == 2 * STEPS_PER_EPOCH


@pytest.mark.parametrize("interval_s", [3600, 0])
def test_resumed_run_ends_where_the_run_left_alone_ends(tmp_path: Path, interval_s: float) -> None:
    whole, part = tmp_path / "whole", tmp_path / "part"
    saved = fit(whole, LastCheckpoint(dirpath=str(whole), min_interval_s=interval_s), deterministic=True, limit_val_batches=0)
    assert saved.steps == ([STEPS_PER_EPOCH * e for e in (1, 2, 3, 4)] if interval_s == 0 else [STEPS_PER_EPOCH, 4 * STEPS_PER_EPOCH])
    # the same run stopped after 2 of its 4 epochs (a requested stop: its last epoch end saves), then resumed
    saved = fit(part, LastCheckpoint(dirpath=str(part), min_interval_s=interval_s), StopAfter(2), deterministic=True, limit_val_batches=0)
    assert saved.steps[-1] == stored_step(part / "last.ckpt") == 2 * STEPS_PER_EPOCH
    resumed = fit(part, LastCheckpoint(dirpath=str(part), min_interval_s=interval_s), deterministic=True, limit_val_batches=0,
                  ckpt_path=str(part / "last.ckpt"))
    # the first epoch end after a resume saves, and the last
    assert resumed.steps == [3 * STEPS_PER_EPOCH, 4 * STEPS_PER_EPOCH]
    a, b = (torch.load(d / "last.ckpt", map_location="cpu", weights_only=True) for d in (whole, part))
    assert a["global_step"] == b["global_step"] == 4 * STEPS_PER_EPOCH
    assert a["state_dict"].keys() == b["state_dict"].keys()
    assert all(torch.equal(a["state_dict"][k], b["state_dict"][k]) for k in a["state_dict"])
