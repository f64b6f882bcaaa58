"""The project's data modules: strokes read from ``<project>/data/raw/strokes``, found from this file."""

from __future__ import annotations

import json
from pathlib import Path

import lightning.pytorch as pl
import torch
from torch.utils.data import DataLoader, TensorDataset

DATA_ROOT = Path(__file__).parents[2] / "data"  # the project's git-ignored data folder


class StrokeDataBase(pl.LightningDataModule):
    """The base class the CLI takes in subclass mode."""

    num_classes: int
    input_dim: int


class StrokeData(StrokeDataBase):
    """Strokes as feature rows (``samples.csv``: label first) with their ``metadata.json``.

    Args:
        name: Folder under ``<project>/data/raw``.
        batch_size: Samples per batch.
    """

    def __init__(self, name: str = "strokes", batch_size: int = 16) -> None:
        super().__init__()
        self.name, self.batch_size = name, batch_size
        folder = DATA_ROOT / "raw" / name
        meta = json.loads((folder / "metadata.json").read_text())  # FileNotFoundError where the data is missing
        self.folder, self.num_classes, self.input_dim = folder, int(meta["num_classes"]), int(meta["input_dim"])

    def setup(self, stage: str) -> None:
        rows = [[float(v) for v in line.split(",")] for line in (self.folder / "samples.csv").read_text().split()]
        t = torch.tensor(rows)
        data = TensorDataset(t[:, 1:], t[:, 0].long())
        n = len(data) * 3 // 4
        self.train_set = torch.utils.data.Subset(data, range(n))
        self.val_set = torch.utils.data.Subset(data, range(n, len(data)))

    def train_dataloader(self) -> DataLoader:
        return DataLoader(self.train_set, batch_size=self.batch_size, shuffle=True)

    def val_dataloader(self) -> DataLoader:
        return DataLoader(self.val_set, batch_size=self.batch_size)

    def test_dataloader(self) -> DataLoader:
        return DataLoader(self.val_set, batch_size=self.batch_size)

    def predict_dataloader(self) -> DataLoader:
        return DataLoader(self.val_set, batch_size=self.batch_size)
