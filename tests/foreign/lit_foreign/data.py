"""The user's LightningDataModule: Gaussian blobs, one per label (no download)."""

from __future__ import annotations

import torch
from lightning.pytorch import LightningDataModule
from torch.utils.data import DataLoader, TensorDataset


class BlobData(LightningDataModule):
    """Separable Gaussian blobs.

    Args:
        n_labels: Number of labels (blobs).
        n_features: Length of a feature vector.
        n_samples: Samples per split.
        batch_size: Samples per batch.
        seed: Seed of the generator that draws the samples.
    """

    def __init__(self, n_labels: int = 4, n_features: int = 16, n_samples: int = 128, batch_size: int = 16,
                 seed: int = 0) -> None:
        super().__init__()
        self.n_labels = n_labels
        self.n_features = n_features
        self.n_samples = n_samples
        self.batch_size = batch_size
        self.seed = seed

    def _split(self, offset: int) -> TensorDataset:
        gen = torch.Generator().manual_seed(self.seed + offset)
        centers = torch.randn(self.n_labels, self.n_features, generator=torch.Generator().manual_seed(self.seed)) * 3
        y = torch.randint(0, self.n_labels, (self.n_samples,), generator=gen)
        x = centers[y] + torch.randn(self.n_samples, self.n_features, generator=gen)
        return TensorDataset(x, y)

    def train_dataloader(self) -> DataLoader:
        return DataLoader(self._split(1), batch_size=self.batch_size, shuffle=True)

    def val_dataloader(self) -> DataLoader:
        return DataLoader(self._split(2), batch_size=self.batch_size)

    def test_dataloader(self) -> DataLoader:
        return DataLoader(self._split(3), batch_size=self.batch_size)

    def predict_dataloader(self) -> DataLoader:
        return DataLoader(self._split(4), batch_size=self.batch_size)
