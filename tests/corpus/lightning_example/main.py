"""A user's single-file project of the shape of Lightning's own example
``examples/pytorch/basics/backbone_image_classifier.py`` (Lightning-AI/pytorch-lightning@021e6b11da0e):
``LightningCLI(..., run=False)`` and the script calling ``fit``, ``test(ckpt_path="best")`` and
``predict`` itself; a module taking an ``nn.Module`` backbone that ``save_hyperparameters`` ignores; a
data module that loads its data in ``__init__`` from a folder found from ``__file__``, outside the
project (``<project>/../Datasets``); validation logged ``on_step``. Written for this suite (digits
features in ``x.npy``/``y.npy`` instead of MNIST), with TrainerCLI swapped in."""

from os import path

import numpy as np
import torch
from lightning.pytorch import LightningDataModule, LightningModule
from torch.nn import functional as F
from torch.utils.data import DataLoader, TensorDataset, random_split

from trainer_cli import TrainerCLI as LightningCLI

DATASETS_PATH = path.join(path.dirname(__file__), "..", "Datasets")


class Backbone(torch.nn.Module):
    def __init__(self, hidden_dim: int = 128):
        super().__init__()
        self.l1 = torch.nn.Linear(64, hidden_dim)
        self.l2 = torch.nn.Linear(hidden_dim, 10)

    def forward(self, x):
        return self.l2(torch.relu(self.l1(x.view(x.size(0), -1))))


class LitClassifier(LightningModule):
    def __init__(self, backbone: Backbone | None = None, learning_rate: float = 0.001):
        super().__init__()
        self.save_hyperparameters(ignore=["backbone"])
        self.backbone = backbone if backbone is not None else Backbone()

    def forward(self, x):
        return self.backbone(x)

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = F.cross_entropy(self(x), y)
        self.log("train_loss", loss, on_epoch=True)
        return loss

    def validation_step(self, batch, batch_idx):
        x, y = batch
        self.log("valid_loss", F.cross_entropy(self(x), y), on_step=True)

    def test_step(self, batch, batch_idx):
        x, y = batch
        self.log("test_loss", F.cross_entropy(self(x), y))

    def predict_step(self, batch, batch_idx, dataloader_idx=None):
        return self(batch[0])

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=self.hparams.learning_rate)


class MyDataModule(LightningDataModule):
    def __init__(self, batch_size: int = 32):
        super().__init__()
        x = torch.from_numpy(np.load(path.join(DATASETS_PATH, "x.npy"))).float()
        y = torch.from_numpy(np.load(path.join(DATASETS_PATH, "y.npy"))).long()
        generator = torch.Generator().manual_seed(42)
        self.train_set, self.val_set, self.test_set = random_split(TensorDataset(x, y), [0.8, 0.1, 0.1], generator)
        self.batch_size = batch_size

    def train_dataloader(self):
        return DataLoader(self.train_set, batch_size=self.batch_size)

    def val_dataloader(self):
        return DataLoader(self.val_set, batch_size=self.batch_size)

    def test_dataloader(self):
        return DataLoader(self.test_set, batch_size=self.batch_size)

    def predict_dataloader(self):
        return DataLoader(self.test_set, batch_size=self.batch_size)


def cli_main():
    cli = LightningCLI(
        LitClassifier, MyDataModule, seed_everything_default=1234, save_config_kwargs={"overwrite": True}, run=False
    )
    cli.trainer.fit(cli.model, datamodule=cli.datamodule)
    cli.trainer.test(ckpt_path="best", datamodule=cli.datamodule)
    predictions = cli.trainer.predict(ckpt_path="best", datamodule=cli.datamodule)
    print("PREDICTIONS", tuple(predictions[0].shape))


if __name__ == "__main__":
    cli_main()
