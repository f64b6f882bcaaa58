from pathlib import Path

import numpy as np
import torch
from lightning import LightningDataModule
from torch.utils.data import DataLoader, TensorDataset


class DigitsDataModule(LightningDataModule):
    """``x.npy``/``y.npy`` under ``data_dir`` (an absolute path of the site, in ``configs/paths``)."""

    def __init__(self, data_dir: str, batch_size: int = 32, num_workers: int = 0):
        super().__init__()
        self.data_dir, self.batch_size, self.num_workers = data_dir, batch_size, num_workers

    def setup(self, stage: str) -> None:
        x = torch.from_numpy(np.load(Path(self.data_dir) / "x.npy")).float()
        cut = len(x) * 8 // 10
        self.train, self.val = TensorDataset(x[:cut]), TensorDataset(x[cut:])

    def train_dataloader(self):
        return DataLoader(self.train, batch_size=self.batch_size, shuffle=True, num_workers=self.num_workers)

    def val_dataloader(self):
        return DataLoader(self.val, batch_size=self.batch_size, num_workers=self.num_workers)

    def test_dataloader(self):
        return self.val_dataloader()
