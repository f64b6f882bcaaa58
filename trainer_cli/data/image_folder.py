"""Any folder of images laid out one sub-folder per class (``torchvision.datasets.ImageFolder``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from torch.utils.data import Subset

from trainer_cli.data.base import ClassificationDataModule
from trainer_cli.errors import UserError

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)


class ImageFolderDataModule(ClassificationDataModule):
    """Images in ``<data_dir>/train/<class>/*`` (and optionally ``val/`` and ``test/`` alike).

    Without a ``val/`` folder a seeded ``val_fraction`` of ``train/`` is held out. Training
    augmentation: random resized crop and horizontal flip; evaluation: resize and centre crop;
    ImageNet normalisation (what pretrained torchvision weights expect).

    Args:
        data_dir: Root folder with ``train/`` and optionally ``val/`` and ``test/``.
        image_size: Side of the square crop in pixels.
        batch_size: Samples per device per step.
        val_fraction: Fraction of ``train/`` held out when there is no ``val/``.
        seed: Seed of the held-out split.
        num_workers: DataLoader worker processes.
        pin_memory: Page-locked host memory; empty: on when training on a GPU.
        persistent_workers: Keep workers alive between epochs; empty: on when ``num_workers > 0``.
        multiprocessing_context: How workers start: ``fork``, ``spawn`` or ``forkserver``; empty: the
            platform's default, ``forkserver`` under DDP on Python < 3.12 (``ClassificationDataModule``).

    Raises:
        UserError: when ``data_dir/train`` is missing or holds no class folders.
    """

    in_channels = 3

    def __init__(
        self,
        data_dir: str,
        image_size: int = 224,
        batch_size: int = 32,
        val_fraction: float = 0.1,
        seed: int = 0,
        num_workers: int = 4,
        pin_memory: bool | None = None,
        persistent_workers: bool | None = None,
        multiprocessing_context: str | None = None,
    ) -> None:
        super().__init__(batch_size, num_workers, pin_memory, persistent_workers, multiprocessing_context)
        self.root = Path(data_dir).expanduser()
        train = self.root / "train"
        if not train.is_dir():
            raise UserError(f"image folder not found: expected {train}/<class name>/<images>; set --data.data_dir")
        self.classes = sorted(p.name for p in train.iterdir() if p.is_dir())
        if not self.classes:
            raise UserError(f"{train} holds no class folders: expected {train}/<class name>/<images>")
        self.num_classes = len(self.classes)
        self.image_size = image_size
        self.val_fraction = val_fraction
        self.seed = seed

    def input_transform(self) -> dict[str, Any] | None:
        """Evaluation images resized, centre-cropped, scaled to [0, 1] and normalised with ImageNet's statistics."""
        size = self.image_size
        return {
            "raw": f"uint8 RGB images, resized to {int(size * 256 / 224)} (shorter side) and centre-cropped to {size}",
            "scale": 1 / 255,
            "mean": list(IMAGENET_MEAN),
            "std": list(IMAGENET_STD),
            "steps": f"Resize({int(size * 256 / 224)}), CenterCrop({size}), pixels / 255, (x - mean[c]) / std[c]",
        }

    def transforms(self, train: bool):  # noqa: ANN201 - a torchvision transform
        """The per-sample transform of the training (``train=True``) or evaluation splits."""
        from torchvision.transforms import v2

        size = self.image_size
        if train:
            steps = [v2.RandomResizedCrop(size, antialias=True), v2.RandomHorizontalFlip()]
        else:
            steps = [v2.Resize(int(size * 256 / 224), antialias=True), v2.CenterCrop(size)]
        return v2.Compose(
            [v2.ToImage(), *steps, v2.ToDtype(torch.float32, scale=True), v2.Normalize(IMAGENET_MEAN, IMAGENET_STD)]
        )

    def setup(self, stage: str | None = None) -> None:
        if self.train_set is not None:
            return
        from torchvision.datasets import ImageFolder

        train_dir = self.root / "train"
        if (self.root / "val").is_dir():
            self.train_set = ImageFolder(str(train_dir), transform=self.transforms(True))
            self.val_set = ImageFolder(str(self.root / "val"), transform=self.transforms(False))
        else:
            train_full = ImageFolder(str(train_dir), transform=self.transforms(True))
            eval_full = ImageFolder(str(train_dir), transform=self.transforms(False))
            n = len(train_full)
            n_val = max(1, int(round(n * self.val_fraction)))
            order = torch.randperm(n, generator=torch.Generator().manual_seed(self.seed)).tolist()
            self.train_set = Subset(train_full, order[n_val:])
            self.val_set = Subset(eval_full, order[:n_val])
        test_dir = self.root / "test"
        self.test_set = (
            ImageFolder(str(test_dir), transform=self.transforms(False)) if test_dir.is_dir() else self.val_set
        )
