from pathlib import Path

import numpy as np
import torch
from lightning.pytorch import LightningDataModule
from torch.utils.data import DataLoader, TensorDataset

from detox.ml.config import CONFIG


class TokenizerDataModule(LightningDataModule):
    """Features cached under ``cache_dir`` (the project's config: ``$DETOX_CACHE`` or ``./cache``)."""

    def __init__(self, cache_dir: str = CONFIG.cache_dir, batch_size: int = 16):
        super().__init__()
        self.cache_dir, self.batch_size = cache_dir, batch_size

    def setup(self, stage: str) -> None:
        x = torch.from_numpy(np.load(Path(self.cache_dir) / "x.npy")).float()
        y = torch.from_numpy(np.load(Path(self.cache_dir) / "y.npy")).long()
        cut = len(x) * 8 // 10
        self.train, self.val = TensorDataset(x[:cut], y[:cut]), TensorDataset(x[cut:], y[cut:])

    def train_dataloader(self):
        return DataLoader(self.train, batch_size=self.batch_size, shuffle=True)

    def val_dataloader(self):
        return DataLoader(self.val, batch_size=self.batch_size)

    def test_dataloader(self):
        return DataLoader(self.val, batch_size=self.batch_size)
