"""Test callbacks (named by ``class_path`` in test runs): deterministic interrupts and a record of validations; a
data module whose training loader is not resumable."""

from __future__ import annotations

import os
import signal
from typing import Any

import lightning.pytorch as pl
from torch.utils.data import DataLoader

from trainer_cli.data import DigitsDataModule

VALIDATED: list[int] = []  # epochs whose (non-sanity) validation finished in this process


class SignalAt(pl.Callback):
    """Send ``signal`` to this process once, at ``hook`` of epoch ``epoch`` (batch ``batch`` of batch hooks),
    in a run that did not resume (so a resumed run goes on).

    Args:
        hook: ``on_fit_start``, ``on_train_batch_start``, ``on_train_batch_end`` or ``on_validation_batch_end``.
        epoch: Epoch index to fire in.
        batch: Batch index to fire at (batch hooks).
        signal: Signal name, ``SIGTERM`` or ``SIGINT`` (or ``SIGSTOP``: the process stops there until
            the test kills it).
    """

    def __init__(self, hook: str = "on_validation_batch_end", epoch: int = 0, batch: int = 0, signal: str = "SIGTERM") -> None:
        self.hook, self.epoch, self.batch, self.sig = hook, epoch, batch, signal
        self.sent = False

    def _fire(self, hook: str, trainer: pl.Trainer, batch_idx: int = 0) -> None:
        if trainer.ckpt_path is None and not self.sent and hook == self.hook and trainer.current_epoch == self.epoch and batch_idx == self.batch:
            self.sent = True
            os.kill(os.getpid(), getattr(signal, self.sig))

    def on_fit_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._fire("on_fit_start", trainer)

    def on_train_batch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: Any, batch_idx: int) -> None:
        self._fire("on_train_batch_start", trainer, batch_idx)

    def on_train_batch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any, batch: Any, batch_idx: int) -> None:
        self._fire("on_train_batch_end", trainer, batch_idx)

    def on_validation_batch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None:
        if not trainer.sanity_checking:
            self._fire("on_validation_batch_end", trainer, batch_idx)


class RecordValidation(pl.Callback):
    """Append each finished (non-sanity) validation's epoch to :data:`VALIDATED`."""

    def on_validation_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if not trainer.sanity_checking:
            VALIDATED.append(trainer.current_epoch)


class PlainLoaderDigits(DigitsDataModule):
    """Digits whose training loader is a plain, shuffled ``DataLoader``, as most projects' are: not
    resumable mid-epoch (Lightning restores no position into it)."""

    def train_dataloader(self) -> DataLoader:
        assert self.train_set is not None
        return DataLoader(self.train_set, batch_size=self.batch_size, shuffle=True)
