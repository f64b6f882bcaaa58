import torch
from lightning.pytorch import LightningModule
from torch.nn import functional as F


class ToxicClassifier(LightningModule):
    def __init__(self, hidden: int = 32, learning_rate: float = 1e-2):
        super().__init__()
        self.save_hyperparameters()
        self.net = torch.nn.Sequential(torch.nn.Linear(64, hidden), torch.nn.ReLU(), torch.nn.Linear(hidden, 10))

    def forward(self, x):
        return self.net(x)

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = F.cross_entropy(self(x), y)
        self.log("train-loss", loss)
        return loss

    def validation_step(self, batch, batch_idx):
        x, y = batch
        self.log("val-loss", F.cross_entropy(self(x), y))

    def test_step(self, batch, batch_idx):
        x, y = batch
        self.log("test-loss", F.cross_entropy(self(x), y))

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=self.hparams.learning_rate)
