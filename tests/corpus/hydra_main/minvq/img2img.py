import lightning as L
import torch
from torch import nn


class Img2Img(L.LightningModule):
    """Reconstruction of the input by ``model``; ``vis_kwargs`` say how many samples to show."""

    def __init__(self, model: nn.Module, vis_kwargs: dict, learning_rate: float = 3e-4):
        super().__init__()
        self.save_hyperparameters(ignore=["model"])
        self.vis_kwargs = vis_kwargs
        self.learning_rate = learning_rate
        self.model = model

    def forward(self, x):
        return self.model(x)

    def _loss(self, batch):
        (x,) = batch
        return nn.functional.mse_loss(self(x), x)

    def training_step(self, batch, batch_idx):
        loss = self._loss(batch)
        self.log_dict({"train_loss": loss}, on_step=True, on_epoch=True, prog_bar=True)
        return loss

    def validation_step(self, batch, batch_idx):
        self.log_dict({"val_loss": self._loss(batch)})

    def test_step(self, batch, batch_idx):
        self.log_dict({"test_loss": self._loss(batch)})

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=self.learning_rate)
