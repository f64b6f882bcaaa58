"""Prints the quantities people reason about when a run starts, and records the metrics the run logs."""

from __future__ import annotations

import math
import sys
import time
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
from lightning.pytorch.utilities import rank_zero_only

from trainer_cli.rundir import metrics
from trainer_cli.tables import print_table


class RunSummary(pl.Callback):
    """At the start of training, print world size, global batch size, steps per epoch, total
    optimizer steps, accelerator, precision, strategy and the run directory (global rank 0 only).

    While fitting, it also keeps the run's own record of its metrics, whatever the logger: global
    rank 0 appends the Trainer's ``callback_metrics`` (numbers only) with the epoch and global step to
    the run directory's ``metrics.jsonl`` at the start of training, at each validation end (not the
    sanity check), after each training epoch (at the next epoch's start, when the metrics the
    module's own ``on_train_epoch_end`` logged are in: callbacks' epoch-end hooks run before it), at
    a stop or crash (the epoch and step it stopped at, no metrics) and at the end of training
    (:func:`trainer_cli.rundir.metrics.record`; read back by
    :func:`trainer_cli.rundir.metrics.read`). Nothing is written per step, nor without a run directory.

    Args:
        run_dir: The run directory (a user's script gets it once the Trainer's ``log_dir`` is known).
    """

    def __init__(self, run_dir: str | None = None) -> None:
        self.run_dir = run_dir
        self._epoch_started = False

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
        self._record(trainer, "start", {})

    def on_validation_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if not trainer.sanity_checking and trainer.state.fn == "fit":
            self._record(trainer, "validation", self.logged(trainer))

    def on_train_epoch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self._epoch_started:  # the epoch before ended: its metrics, those its module's epoch-end hook logged too
            self._record(trainer, metrics.EPOCH_STAGE, self.logged(trainer), trainer.current_epoch - 1)
        self._epoch_started = True

    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._record(trainer, "end", self.logged(trainer))

    def on_exception(self, trainer: pl.Trainer, pl_module: pl.LightningModule, exception: BaseException) -> None:
        # where a stop (SIGTERM, Ctrl-C) or a crash ended the fit: `train runs` reads the steps from here
        # when the loggers logged none of them (log_every_n_steps past the stop)
        if trainer.state.fn == "fit":
            self._record(trainer, metrics.STOP_STAGE, {})

    @staticmethod
    def logged(trainer: pl.Trainer) -> dict[str, float]:
        """The numbers in ``trainer.callback_metrics``, read on every rank (computing an epoch's
        metric may synchronize the ranks; only global rank 0 writes them)."""
        out = {}
        for key, value in trainer.callback_metrics.items():
            number: Any = value
            if hasattr(value, "numel"):
                number = value.item() if value.numel() == 1 else None
            if isinstance(number, (int, float)) and not isinstance(number, bool):
                out[str(key)] = float(number)
        return out

    def _record(self, trainer: pl.Trainer, stage: str, logged: dict[str, float], epoch: int | None = None) -> None:
        if self.run_dir and trainer.is_global_zero:
            epoch = trainer.current_epoch if epoch is None else epoch
            metrics.record(Path(self.run_dir), stage, epoch, trainer.global_step, time.time(), logged)
