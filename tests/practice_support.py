"""Helpers for the training-practice tests: in-process runs of the real CLI, metric files read
back, and small probes plugged in through ``class_path`` like any user's own class."""

from __future__ import annotations

import csv
import os
from collections import defaultdict
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import torch
from support import CONFIGS, DIGITS

from trainer_cli.models import ImageClassifier
from trainer_cli.rundir import layout


def cfg(group_file: str) -> str:
    """``configs/<group_file>`` as a path string."""
    return str(CONFIGS / group_file)


def short_run(root: Path, epochs: int = 2, train_batches: int = 4, val_batches: int = 2) -> list[str]:
    """Flags for a short, quiet digits run under ``root`` logging every step to metrics.csv."""
    return [
        "--config", DIGITS, "--config", cfg("logger/csv.yaml"),
        "--trainer.default_root_dir", str(root),
        "--trainer.max_epochs", str(epochs),
        "--trainer.limit_train_batches", str(train_batches),
        "--trainer.limit_val_batches", str(val_batches),
        "--trainer.log_every_n_steps", "1",
        "--trainer.enable_progress_bar", "false",
        "--trainer.enable_model_summary", "false",
    ]


def fit(*args: str, verb: str = "fit") -> Any:
    """Run ``train <verb> ARGS`` in this process through the real :class:`TrainerCLI`; returns it
    (``.trainer``, ``.model``, ``.run_dir``)."""
    from trainer_cli.config.compose import expand_config_args
    from trainer_cli.config.request import Request
    from trainer_cli.runtime.cli import TrainerCLI
    from trainer_cli.runtime.run import Run

    try:  # the run directory policy of `train <verb>` (a user's script follows Lightning's log_dir instead)
        return TrainerCLI(args=[verb, *expand_config_args(Request.of(list(args))).tokens()], run_directory=Run(verb))
    finally:
        os.environ.pop(layout.ENV_RUN_DIR, None)


def metrics(run_dir: Path) -> dict[str, list[tuple[int, float]]]:
    """CSVLogger's ``metrics.csv`` as metric -> [(step, value), ...] in file order."""
    out: dict[str, list[tuple[int, float]]] = defaultdict(list)
    with open(run_dir / "metrics.csv") as f:
        for row in csv.DictReader(f):
            for key, value in row.items():
                if key != "step" and value not in ("", None):
                    out[key].append((int(row["step"]), float(value)))
    return out


def per_step(series: list[tuple[int, float]]) -> dict[int, float]:
    """The value of a per-step series at each optimizer step (rows repeat under accumulation)."""
    return {step: value for step, value in series}


class BatchProbe(pl.Callback):
    """Records the targets of the batches the model's steps receive, per stage."""

    def __init__(self) -> None:
        self.train_targets: list[torch.Tensor] = []
        self.val_targets: list[torch.Tensor] = []

    def on_train_batch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: Any, batch_idx: int) -> None:
        x, y = pl_module.mixed(*batch)  # what training_step trains on (each batch is mixed once)
        self.train_targets.append(y.detach().clone())

    def on_validation_batch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None:
        self.val_targets.append(batch[1].detach().clone())


class ClippedGradProbe(pl.Callback):
    """The global 2-norm of the gradients the optimizer stepped with (read before they are zeroed)."""

    def __init__(self) -> None:
        self.norms: list[float] = []

    def on_before_zero_grad(self, trainer: pl.Trainer, pl_module: pl.LightningModule, optimizer: Any) -> None:
        grads = [p.grad for p in pl_module.parameters() if p.grad is not None]
        if grads:
            self.norms.append(float(torch.stack([g.norm() for g in grads]).norm()))


class EpochSnapshots(pl.Callback):
    """A copy of the model's ``state_dict`` at the end of every training epoch."""

    def __init__(self) -> None:
        self.states: list[dict[str, torch.Tensor]] = []

    def on_train_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self.states.append({k: v.detach().clone() for k, v in pl_module.state_dict().items()})


class NaNAtStep(ImageClassifier):
    """An :class:`ImageClassifier` whose loss is NaN at the given optimizer steps (fault injection).

    Args:
        nan_steps: Global steps (0-based) whose training loss is NaN.
    """

    def __init__(self, nan_steps: list[int] | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.nan_steps = set(nan_steps or [])

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        loss = super().training_step(batch, batch_idx)
        return loss * float("nan") if self.global_step in self.nan_steps else loss
