"""Prints the quantities people reason about when a run starts."""

from __future__ import annotations

import math
import sys

import lightning.pytorch as pl
from lightning.pytorch.utilities import rank_zero_only

from trainer_cli.tables import print_table


class RunSummary(pl.Callback):
    """At the start of training, print world size, global batch size, steps per epoch, total
    optimizer steps, accelerator, precision, strategy and the run directory (global rank 0 only)."""

    def __init__(self, run_dir: str | None = None) -> None:
        self.run_dir = run_dir

    @staticmethod
    def quantities(trainer: pl.Trainer) -> dict[str, object]:
        """The summary as a dict (also used by tests)."""
        datamodule = getattr(trainer, "datamodule", None)  # set by Lightning outside the Trainer class body
        per_device = getattr(datamodule, "batch_size", None) if datamodule is not None else None
        if not isinstance(per_device, int):  # a data module with its own name for it: the loader's
            size = getattr(getattr(trainer, "train_dataloader", None), "batch_size", None)
            per_device = size if isinstance(size, int) else None
        accumulate = trainer.accumulate_grad_batches
        batches = trainer.num_training_batches
        steps_per_epoch = math.ceil(batches / accumulate) if math.isfinite(batches) else batches
        return {
            "world_size": trainer.world_size,
            "devices": trainer.num_devices,
            "num_nodes": trainer.num_nodes,
            "batch_size_per_device": per_device,
            "accumulate_grad_batches": accumulate,
            "global_batch_size": per_device * trainer.world_size * accumulate if per_device else None,
            "steps_per_epoch": steps_per_epoch,
            "total_steps": trainer.estimated_stepping_batches,
            "accelerator": type(trainer.accelerator).__name__.removesuffix("Accelerator").lower(),
            "precision": trainer.precision,
            "strategy": type(trainer.strategy).__name__,
        }

    @rank_zero_only
    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        q = self.quantities(trainer)
        batch = (
            f"{q['global_batch_size']} = {q['batch_size_per_device']} per device x {q['world_size']} x "
            f"accumulate {q['accumulate_grad_batches']}"
            if q["global_batch_size"]
            else "unknown (no data.batch_size, and the training DataLoader has none)"
        )
        rows = [
            ("world size", f"{q['world_size']} = {q['devices']} devices x {q['num_nodes']} nodes"),
            ("global batch size", batch),
            ("steps per epoch", q["steps_per_epoch"]),
            ("total optimizer steps", q["total_steps"]),
            ("accelerator", q["accelerator"]),
            ("precision", q["precision"]),
            ("strategy", q["strategy"]),
            ("run directory", self.run_dir or trainer.default_root_dir),
        ]
        print_table([(k, str(v)) for k, v in rows])
        sys.stdout.flush()
