"""scikit-learn's handwritten digits: 1,797 real 8x8 grey images of 10 classes, shipped inside
the scikit-learn wheel (UCI optical recognition of handwritten digits), so nothing is downloaded."""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch.utils.data import TensorDataset

from trainer_cli.data.base import ClassificationDataModule

NATIVE_SIZE = 8
MAX_PIXEL = 16.0


class DigitsDataModule(ClassificationDataModule):
    """Handwritten digits with a stratified, seeded train/val/test split.

    Images are scaled to [0, 1] and standardised with the training split's mean and std.

    Args:
        batch_size: Samples per device per step.
        val_fraction: Fraction of all samples held out for validation.
        test_fraction: Fraction of all samples held out for testing.
        image_size: Side in pixels; 8 is native, larger sizes are bilinear resizes (32 for image models).
        rgb: Repeat the grey channel to 3 channels, for torchvision models.
        seed: Seed of the split.
        num_workers: DataLoader worker processes (the data is in memory: 0 is fastest).
        pin_memory: Page-locked host memory; empty: on when training on a GPU.
        persistent_workers: Keep workers alive between epochs; empty: on when ``num_workers > 0``.
        multiprocessing_context: How workers start: ``fork``, ``spawn`` or ``forkserver``; empty: the
            platform's default, ``forkserver`` under DDP on Python < 3.12 (``ClassificationDataModule``).
    """

    num_classes = 10

    def __init__(
        self,
        batch_size: int = 64,
        val_fraction: float = 0.15,
        test_fraction: float = 0.15,
        image_size: int = NATIVE_SIZE,
        rgb: bool = False,
        seed: int = 0,
        num_workers: int = 0,
        pin_memory: bool | None = None,
        persistent_workers: bool | None = None,
        multiprocessing_context: str | None = None,
    ) -> None:
        super().__init__(batch_size, num_workers, pin_memory, persistent_workers, multiprocessing_context)
        if not (0 < val_fraction < 1 and 0 < test_fraction < 1 and val_fraction + test_fraction < 1):
            raise ValueError(
                f"val_fraction and test_fraction must be in (0, 1) with a sum < 1, got {val_fraction} and "
                f"{test_fraction}"
            )
        if image_size < 1:
            raise ValueError(f"image_size must be >= 1, got {image_size}")
        self.val_fraction = val_fraction
        self.test_fraction = test_fraction
        self.image_size = image_size
        self.in_channels = 3 if rgb else 1
        self.seed = seed
        self.mean: float | None = None  # the training split's, set by setup
        self.std: float | None = None

    def input_transform(self) -> dict[str, Any] | None:
        """The pixels (scikit-learn's ``load_digits().images``, 0..16) scaled by 1/16 and standardised
        with the training split's mean and std; None before :meth:`setup`."""
        if self.mean is None or self.std is None:
            return None
        size = self.image_size
        resize = "" if size == NATIVE_SIZE else f", resized bilinearly to {size}x{size}"
        rgb = ", the grey channel repeated to 3" if self.in_channels == 3 else ""
        return {
            "raw": f"sklearn.datasets.load_digits().images as [b, 1, 8, 8], pixels 0..16{resize}{rgb}",
            "scale": 1 / MAX_PIXEL,
            "mean": [self.mean] * self.in_channels,
            "std": [self.std] * self.in_channels,
            "steps": "pixels / 16, then (x - mean) / std with the training split's mean and std",
        }

    def load_arrays(self) -> tuple[torch.Tensor, torch.Tensor]:
        """All images ``[1797, c, s, s]`` (float32 in [0, 1]) and labels ``[1797]`` (int64)."""
        from sklearn.datasets import load_digits

        digits = load_digits()
        x = torch.tensor(digits.images, dtype=torch.float32).unsqueeze(1) / MAX_PIXEL
        if self.image_size != NATIVE_SIZE:
            x = F.interpolate(x, size=(self.image_size, self.image_size), mode="bilinear", align_corners=False)
        if self.in_channels == 3:
            x = x.expand(-1, 3, -1, -1).contiguous()
        return x, torch.tensor(digits.target, dtype=torch.int64)

    def split_indices(self, y: torch.Tensor) -> tuple[list[int], list[int], list[int]]:
        """Stratified, seeded train/val/test indices."""
        from sklearn.model_selection import train_test_split

        idx = list(range(len(y)))
        held = self.val_fraction + self.test_fraction
        train_idx, rest = train_test_split(idx, test_size=held, stratify=y.numpy(), random_state=self.seed)
        val_idx, test_idx = train_test_split(
            rest, test_size=self.test_fraction / held, stratify=y[rest].numpy(), random_state=self.seed
        )
        return sorted(train_idx), sorted(val_idx), sorted(test_idx)

    def setup(self, stage: str | None = None) -> None:
        if self.train_set is not None:
            return
        x, y = self.load_arrays()
        train_idx, val_idx, test_idx = self.split_indices(y)
        mean, std = x[train_idx].mean(), x[train_idx].std()
        self.mean, self.std = float(mean), float(std)
        x = (x - mean) / std
        self.train_set = TensorDataset(x[train_idx], y[train_idx])
        self.val_set = TensorDataset(x[val_idx], y[val_idx])
        self.test_set = TensorDataset(x[test_idx], y[test_idx])
