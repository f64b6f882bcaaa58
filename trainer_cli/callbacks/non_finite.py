"""What happens when the loss or the gradients stop being finite: skip the step, or stop with a
checkpoint and a clear message; never a run that silently trains on NaN.

Lightning's ``SpikeDetection`` raises on loss spikes (and, with ``finite_only=False``, on
non-finite losses) but neither skips the update nor saves the weights, and the Trainer's
``detect_anomaly`` only locates the operation; hence this callback. Skipping non-finite
updates is the practice of dynamic loss scaling (Micikevicius et al. 2018, "Mixed Precision
Training", arXiv 1710.03740), which drops the step whose gradients overflowed.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import lightning.pytorch as pl
import torch
from lightning.pytorch.utilities import rank_zero_warn
from torch.optim import Optimizer

from trainer_cli.errors import UserError

SKIPPED_METRIC = "train/skipped_steps"


class NonFiniteLossError(UserError):
    """Training stopped on a non-finite loss or gradient (``action: stop``)."""


class NonFiniteLoss(pl.Callback):
    """Checks every optimizer step's gradients for NaN or inf (a non-finite loss gives them).

    The check runs in ``on_before_optimizer_step`` (before gradient clipping), on gradients that
    DDP has already all-reduced, so every process takes the same decision. Under ``16-mixed``
    (a GradScaler, which itself skips steps with inf gradients) it checks the loss instead.

    Args:
        action: ``skip``: drop that optimizer step (the gradients are cleared, the weights and
            the optimizer state stay as they were; the scheduler still advances) and count it in
            the ``train/skipped_steps`` metric. ``stop``: save ``checkpoints/non_finite.ckpt``
            (the last finite weights) and end the run with a one-line error (exit code 2).
        max_skipped: With ``skip``, stop as with ``stop`` after this many skipped steps in a
            row (0: never); a run that only skips is not training.

    Raises:
        ValueError: for an unknown ``action`` or a negative ``max_skipped``.
    """

    def __init__(self, action: Literal["skip", "stop"] = "stop", max_skipped: int = 10) -> None:
        if action not in ("skip", "stop"):
            raise ValueError(f"NonFiniteLoss action must be 'skip' or 'stop', got {action!r}")
        if max_skipped < 0:
            raise ValueError(f"max_skipped must be >= 0, got {max_skipped}")
        self.action = action
        self.max_skipped = max_skipped
        self.skipped = 0
        self.in_a_row = 0
        self._loss_finite = True

    def on_before_backward(self, trainer: pl.Trainer, pl_module: pl.LightningModule, loss: torch.Tensor) -> None:
        self._loss_finite = self._loss_finite and bool(torch.isfinite(loss.detach()).all())

    def on_before_optimizer_step(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, optimizer: Optimizer
    ) -> None:
        loss_finite, self._loss_finite = self._loss_finite, True
        if getattr(trainer.precision_plugin, "scaler", None) is not None:
            # 16-mixed: inf gradients are the GradScaler's business (it skips the step and lowers the
            # scale); a non-finite loss is ours. The loss is per process: any process decides for all.
            finite = not trainer.strategy.reduce_boolean_decision(not loss_finite, all=False)
        else:  # the gradients are all-reduced already: every process sees the same
            grads = [p.grad for group in optimizer.param_groups for p in group["params"] if p.grad is not None]
            finite = bool(torch.stack([torch.isfinite(g).all() for g in grads]).all()) if grads else True
        if finite:
            self.in_a_row = 0
            return
        self.in_a_row += 1
        if self.action == "skip" and not (self.max_skipped and self.in_a_row >= self.max_skipped):
            self.skipped += 1
            optimizer.zero_grad(set_to_none=True)  # optimizers skip parameters without a gradient
            rank_zero_warn(f"non-finite gradient at step {trainer.global_step}: optimizer step skipped")
            pl_module.log(SKIPPED_METRIC, float(self.skipped), on_step=True, on_epoch=False)
            return
        self._stop(trainer, optimizer)

    def on_train_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self.action == "skip":
            pl_module.log(SKIPPED_METRIC, float(self.skipped), on_step=False, on_epoch=True)

    def _stop(self, trainer: pl.Trainer, optimizer: Optimizer) -> None:
        optimizer.zero_grad(set_to_none=True)
        path = Path(trainer.default_root_dir) / "checkpoints" / "non_finite.ckpt"
        trainer.save_checkpoint(path)
        why = f"{self.in_a_row} steps in a row" if self.action == "skip" else "once"
        raise NonFiniteLossError(
            f"training stopped: non-finite loss/gradient at step {trainer.global_step} (epoch {trainer.current_epoch}, "
            f"{why}); "
            f"the last finite weights are in {path}. Lower --optimizer.lr, set --trainer.gradient_clip_val, "
            "use --trainer.precision 32-true, or look for bad inputs with --config configs/debug/detect_anomaly.yaml"
        )

    def state_dict(self) -> dict[str, Any]:
        return {"skipped": self.skipped}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.skipped = int(state_dict.get("skipped", 0))
