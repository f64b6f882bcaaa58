"""A data module of synthetic CIFAR-shaped batches, so both sides of a benchmark read the same data."""

from __future__ import annotations

from typing import Any

import lightning.pytorch as pl
import torch
from torch.utils.data import DataLoader, Dataset


class RepeatedBatch(Dataset[tuple[torch.Tensor, torch.Tensor]]):
    """``steps`` items, each the same batch ``(x [b, c, s, s], y [b])`` (no loading cost at all)."""

    def __init__(self, x: torch.Tensor, y: torch.Tensor, steps: int) -> None:
        self.x, self.y, self.steps = x, y, steps

    def __len__(self) -> int:
        return self.steps

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self.x, self.y


def random_batch(batch_size: int, image_size: int = 32, channels: int = 3, num_classes: int = 10, seed: int = 0, device: str | torch.device = "cpu") -> tuple[torch.Tensor, torch.Tensor]:
    """A seeded random batch ``x [b, c, s, s]`` (float32, standard normal), ``y [b]`` (int64)."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(batch_size, channels, image_size, image_size, generator=g)
    y = torch.randint(0, num_classes, (batch_size,), generator=g)
    return x.to(device), y.to(device)


class SyntheticImages(pl.LightningDataModule):
    """One random batch repeated ``steps`` times per epoch; made on the training device when
    ``on_device`` (the plain loop's synthetic on-device data), else on the host.

    Args:
        batch_size: Images per batch.
        steps: Batches per epoch.
        image_size: Side in pixels.
        num_classes: Label range.
        on_device: Build the batch on the trainer's device (no host-to-device copy per step).
        channels_last: Deliver ``x`` in ``torch.channels_last`` memory format.
    """

    in_channels = 3

    def __init__(self, batch_size: int = 32, steps: int = 20, image_size: int = 32, num_classes: int = 10, on_device: bool = False, channels_last: bool = False) -> None:
        super().__init__()
        self.batch_size, self.steps, self.image_size, self.num_classes = batch_size, steps, image_size, num_classes
        self.on_device, self.channels_last = on_device, channels_last

    def train_dataloader(self) -> DataLoader[Any]:
        device = self.trainer.strategy.root_device if (self.on_device and self.trainer is not None) else "cpu"
        x, y = random_batch(self.batch_size, self.image_size, num_classes=self.num_classes, device=device)
        if self.channels_last:
            x = x.contiguous(memory_format=torch.channels_last)
        return DataLoader(RepeatedBatch(x, y, self.steps), batch_size=None)
