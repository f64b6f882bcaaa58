"""The user's LightningModule: a small MLP classifier with its own argument names."""

from __future__ import annotations

import torch
from lightning.pytorch import LightningModule
from torch import nn


class SmallNet(LightningModule):
    """An MLP classifier for feature vectors.

    Args:
        num_classes: Number of output classes.
        hidden_dim: Width of the hidden layer.
        in_features: Length of an input vector.
        lr: SGD learning rate (used when no optimizer is configured).
        loss_weight: Factor on the loss (changes no tensor shape).
    """

    def __init__(self, num_classes: int = 10, hidden_dim: int = 32, in_features: int = 16,
                 lr: float = 0.1, loss_weight: float = 1.0) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.net = nn.Sequential(nn.Linear(in_features, hidden_dim), nn.ReLU(), nn.Linear(hidden_dim, num_classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)

    def _loss(self, batch: tuple[torch.Tensor, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        x, y = batch
        logits = self(x)
        return nn.functional.cross_entropy(logits, y) * self.hparams.loss_weight, (logits.argmax(1) == y).float().mean()

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> torch.Tensor:
        loss, _ = self._loss(batch)
        self.log("train_loss", loss)
        return loss

    def validation_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> None:
        loss, acc = self._loss(batch)
        self.log_dict({"val_loss": loss, "val_acc": acc})

    def test_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> None:
        loss, acc = self._loss(batch)
        self.log_dict({"test_loss": loss, "test_acc": acc})

    def predict_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> torch.Tensor:
        return self(batch[0]).argmax(1)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=self.hparams.lr)
