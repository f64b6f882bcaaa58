"""Test callbacks for the stall watchdog's cluster tests (named by ``class_path``; the job finds this
folder through ``PYTHONPATH``): slow but healthy steps and validations."""

from __future__ import annotations

import time
from typing import Any

import lightning.pytorch as pl


class Slow(pl.Callback):
    """Sleep ``step_s`` after every training batch, and ``validation_s`` at the end of the validation
    of epoch ``slow_epoch`` (a long, healthy validation)."""

    def __init__(self, step_s: float = 0.0, validation_s: float = 0.0, slow_epoch: int = 0) -> None:
        self.step_s, self.validation_s, self.slow_epoch = step_s, validation_s, slow_epoch

    def on_train_batch_end(self, trainer: pl.Trainer, *args: Any) -> None:
        time.sleep(self.step_s)

    def on_validation_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if not trainer.sanity_checking and trainer.current_epoch == self.slow_epoch:
            time.sleep(self.validation_s)
