"""The recogniser: a small MLP over stroke features."""

from __future__ import annotations

import os

import lightning.pytorch as pl
import torch
import torch.nn.functional as F

HWR_MARKER = "as-committed"


class Recognizer(pl.LightningModule):
    """Classifies stroke feature rows.

    Args:
        input_dim: Features per row (linked from the data module).
        num_classes: Classes (linked from the data module).
        hidden: Hidden width (linked: 8 per class).
        lr: SGD learning rate.
    """

    def __init__(self, input_dim: int = 0, num_classes: int = 0, hidden: int = 0, lr: float = 0.1) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.net = torch.nn.Sequential(
            torch.nn.Linear(input_dim, hidden), torch.nn.ReLU(), torch.nn.Linear(hidden, num_classes)
        )

    def on_fit_start(self) -> None:
        print(f"HWR_MARKER={HWR_MARKER} FILE={__file__} CWD={os.getcwd()}", flush=True)

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = F.cross_entropy(self.net(x), y)
        self.log("train_loss", loss, on_step=True, on_epoch=True)
        return loss

    def validation_step(self, batch, batch_idx):
        x, y = batch
        logits = self.net(x)
        self.log("val_loss", F.cross_entropy(logits, y))
        self.log("val_acc", (logits.argmax(-1) == y).float().mean())

    def test_step(self, batch, batch_idx):
        x, y = batch
        self.log("test_acc", (self.net(x).argmax(-1) == y).float().mean())

    def predict_step(self, batch, batch_idx):
        return self.net(batch[0]).argmax(-1)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=self.hparams.lr)
