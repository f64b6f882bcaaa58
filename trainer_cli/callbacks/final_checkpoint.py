"""The weights a run ends with, saved once training is over."""

from __future__ import annotations

from pathlib import Path

import lightning.pytorch as pl

FINAL_CKPT = "final.ckpt"


class FinalCheckpoint(pl.Callback):
    """Saves ``<run dir>/checkpoints/final.ckpt`` in ``on_train_end``.

    List it after a weight-averaging callback (``StochasticWeightAveraging`` copies the average
    into the model in its own ``on_train_end``): ``final.ckpt`` then holds the averaged weights,
    which ``last.ckpt`` of a model without BatchNorm does not.

    Args:
        filename: File name inside the run directory's ``checkpoints/``.
    """

    def __init__(self, filename: str = FINAL_CKPT) -> None:
        self.filename = filename

    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if trainer.interrupted:
            return
        trainer.save_checkpoint(Path(trainer.default_root_dir) / "checkpoints" / self.filename)
