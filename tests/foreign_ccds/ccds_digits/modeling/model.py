"""A small MLP classifier over the processed features."""

from __future__ import annotations

import lightning.pytorch as pl
import torch
import torch.nn.functional as F


class PointClassifier(pl.LightningModule):
    """Classifies feature rows.

    Args:
        input_dim: Features per row.
        num_classes: Classes.
        hidden: Hidden width.
        lr: Adam's learning rate.
    """

    def __init__(self, input_dim: int = 8, num_classes: int = 3, hidden: int = 16, lr: float = 0.01) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.net = torch.nn.Sequential(
            torch.nn.Linear(input_dim, hidden), torch.nn.ReLU(), torch.nn.Linear(hidden, num_classes)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = F.cross_entropy(self(x), y)
        self.log("train_loss", loss)
        return loss

    def validation_step(self, batch, batch_idx):
        x, y = batch
        logits = self(x)
        self.log("val_loss", F.cross_entropy(logits, y))
        self.log("val_acc", (logits.argmax(-1) == y).float().mean())

    def test_step(self, batch, batch_idx):
        x, y = batch
        self.log("test_acc", (self(x).argmax(-1) == y).float().mean())

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=self.hparams.lr)
