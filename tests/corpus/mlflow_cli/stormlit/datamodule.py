import os
from pathlib import Path

import numpy as np
import torch
from lightning.pytorch import LightningDataModule
from torch.utils.data import DataLoader, TensorDataset


class TokenizedDataModule(LightningDataModule):
    """Rows of features under ``$STORMLIT_DATA`` (a folder outside the project), one label column each."""

    def __init__(self, model_name: str = "tiny-mlp", label_columns: list[str] = ["0", "1", "2", "3", "4", "5", "6", "7", "8", "9"], batch_size: int = 16):
        super().__init__()
        self.save_hyperparameters()
        self.label_columns = label_columns

    def setup(self, stage: str) -> None:
        folder = Path(os.environ["STORMLIT_DATA"])
        x = torch.from_numpy(np.load(folder / "x.npy")).float()
        y = torch.from_numpy(np.load(folder / "y.npy")).long() % len(self.label_columns)
        n = len(x)
        self.train, self.val = TensorDataset(x[: n * 8 // 10], y[: n * 8 // 10]), TensorDataset(x[n * 8 // 10 :], y[n * 8 // 10 :])

    def train_dataloader(self):
        return DataLoader(self.train, batch_size=self.hparams.batch_size, shuffle=True)

    def val_dataloader(self):
        return DataLoader(self.val, batch_size=self.hparams.batch_size)

    def test_dataloader(self):
        return DataLoader(self.val, batch_size=self.hparams.batch_size)
