"""Gradient-norm logging (Lightning 2 dropped the Trainer's ``track_grad_norm``)."""

from __future__ import annotations

from typing import Any

import lightning.pytorch as pl
import torch
from lightning.pytorch.utilities import grad_norm
from torch.optim import Optimizer

TOTAL_KEY = "grad/norm_total"


class GradNormMonitor(pl.Callback):
    """Logs the gradient norm of every optimizer step as ``grad/norm_total`` (and, with
    ``per_parameter``, ``grad/norm_<parameter name>``), computed by Lightning's
    ``lightning.pytorch.utilities.grad_norm`` in ``on_before_optimizer_step``: after AMP
    unscaling and before gradient clipping, so it shows how far clipping cuts.

    Args:
        norm_type: The p of the p-norm (2.0: Euclidean; ``inf``: largest absolute value).
        per_parameter: Also log one norm per parameter tensor (many curves for big models).
    """

    def __init__(self, norm_type: float = 2.0, per_parameter: bool = False) -> None:
        if norm_type <= 0:
            raise ValueError(f"norm_type must be > 0, got {norm_type}")
        self.norm_type = norm_type
        self.per_parameter = per_parameter

    def on_before_optimizer_step(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, optimizer: Optimizer
    ) -> None:
        norms = grad_norm(pl_module, norm_type=self.norm_type)
        total_key = next((k for k in norms if k.startswith("grad_") and k.endswith("_norm_total")), None)
        if total_key is None:
            return
        logged: dict[str, Any] = {TOTAL_KEY: norms[total_key]}
        if self.per_parameter:
            prefix = f"grad_{float(self.norm_type)}_norm/"
            logged |= {f"grad/norm_{k.removeprefix(prefix)}": v for k, v in norms.items() if k != total_key}
        pl_module.log_dict(logged, on_step=True, on_epoch=False)


def batch_size(batch: Any) -> int:
    """Samples in a batch: the first dimension of its first tensor (for ``ThroughputMonitor``)."""
    first = batch[0] if isinstance(batch, (list, tuple)) else batch
    if not isinstance(first, torch.Tensor):
        raise TypeError(f"cannot tell the batch size of a {type(first).__name__}")
    return int(first.shape[0])
