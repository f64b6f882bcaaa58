"""The data: ``data/raw/points.csv`` (label, then features) processed into ``data/processed/`` as
``features.npy`` and ``labels.csv``, read back by :class:`ProcessedData`."""

from __future__ import annotations

import csv

import lightning.pytorch as pl
import numpy as np
import torch
from torch.utils.data import DataLoader, TensorDataset

from ccds_digits.config import PROCESSED_DATA_DIR, RAW_DATA_DIR


def main() -> None:
    """Process the raw rows: standardized features and the labels (the template's ``make data``)."""
    rows = list(csv.reader((RAW_DATA_DIR / "points.csv").open()))
    labels = [int(r[0]) for r in rows]
    features = np.array([[float(v) for v in r[1:]] for r in rows], dtype=np.float32)
    features = (features - features.mean(0)) / (features.std(0) + 1e-6)
    PROCESSED_DATA_DIR.mkdir(parents=True, exist_ok=True)
    np.save(PROCESSED_DATA_DIR / "features.npy", features)
    (PROCESSED_DATA_DIR / "labels.csv").write_text("\n".join(map(str, labels)) + "\n")


class ProcessedData(pl.LightningDataModule):
    """The processed rows, split 3:1 into train and validation (the test set is the validation's).

    Args:
        batch_size: Rows per batch.
    """

    def __init__(self, batch_size: int = 16) -> None:
        super().__init__()
        self.batch_size = batch_size

    def setup(self, stage: str) -> None:
        x = torch.from_numpy(np.load(PROCESSED_DATA_DIR / "features.npy"))
        y = torch.tensor([int(v) for v in (PROCESSED_DATA_DIR / "labels.csv").read_text().split()])
        cut = len(y) * 3 // 4
        self.train_set, self.val_set = TensorDataset(x[:cut], y[:cut]), TensorDataset(x[cut:], y[cut:])

    def train_dataloader(self) -> DataLoader:
        return DataLoader(self.train_set, batch_size=self.batch_size, shuffle=True)

    def val_dataloader(self) -> DataLoader:
        return DataLoader(self.val_set, batch_size=self.batch_size)

    def test_dataloader(self) -> DataLoader:
        return self.val_dataloader()


if __name__ == "__main__":
    main()
