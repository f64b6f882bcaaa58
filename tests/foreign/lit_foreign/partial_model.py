"""The user's module that takes its optimizer and scheduler as partials, typed with LightningCLI's
``OptimizerCallable`` / ``LRSchedulerCallable`` and called in ``configure_optimizers`` (the stock
LightningCLI way of injecting them; its checkpoints load with ``PartialNet.load_from_checkpoint(path)``)."""

from __future__ import annotations

from typing import Any

import torch
from lightning.pytorch.cli import LRSchedulerCallable, OptimizerCallable

from lit_foreign.model import SmallNet


class PartialNet(SmallNet):
    """:class:`SmallNet` with an injected optimizer and scheduler."""

    def __init__(self, optimizer: OptimizerCallable = torch.optim.SGD,
                 scheduler: LRSchedulerCallable | None = None, num_classes: int = 10, hidden_dim: int = 32,
                 in_features: int = 16, loss_weight: float = 1.0) -> None:
        super().__init__(num_classes, hidden_dim, in_features, loss_weight=loss_weight)
        self.save_hyperparameters()
        self.optimizer, self.scheduler = optimizer, scheduler

    def configure_optimizers(self) -> Any:
        optimizer = self.optimizer(self.parameters())
        if self.scheduler is None:
            return optimizer
        return {"optimizer": optimizer, "lr_scheduler": self.scheduler(optimizer)}
