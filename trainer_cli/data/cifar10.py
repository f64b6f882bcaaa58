"""CIFAR-10 from a local folder (``torchvision.datasets.CIFAR10``, no download here)."""

from __future__ import annotations

from pathlib import Path

import torch
from torch.utils.data import Subset

from trainer_cli.data.base import ClassificationDataModule
from trainer_cli.errors import UserError

CIFAR10_MEAN = (0.4914, 0.4822, 0.4465)
CIFAR10_STD = (0.2470, 0.2435, 0.2616)
TRAIN_SIZE = 50_000
FOLDER = "cifar-10-batches-py"


def check_cifar10_dir(data_dir: str) -> Path:
    """The CIFAR-10 root folder, checked to hold ``cifar-10-batches-py``.

    Raises:
        UserError: naming the folder, where the files go and how to fetch them elsewhere.
    """
    root = Path(data_dir).expanduser()
    if not (root / FOLDER / "batches.meta").is_file():
        raise UserError(
            f"CIFAR-10 not found: expected {root / FOLDER}/ (data_batch_1..5, test_batch, batches.meta). "
            "There is no download here: on a machine with internet run "
            f"`python -c \"import torchvision; torchvision.datasets.CIFAR10('{root}', download=True)\"` "
            f"and copy the folder, or set --data.data_dir to where it is."
        )
    return root


class CIFAR10DataModule(ClassificationDataModule):
    """CIFAR-10 with a seeded train/val split of the 50,000 training images (default 45k/5k).

    Training augmentation: random crop 32 with padding 4 and horizontal flip; every split is
    normalised with the CIFAR-10 channel mean and std.

    Args:
        data_dir: Folder that holds ``cifar-10-batches-py/`` (the official pickle layout).
        batch_size: Samples per device per step.
        val_size: Training images held out for validation.
        augment: Random crop and flip on the training split.
        seed: Seed of the train/val split.
        num_workers: DataLoader worker processes.
        pin_memory: Page-locked host memory (faster host-to-GPU copies).
        persistent_workers: Keep workers alive between epochs.

    Raises:
        UserError: when ``data_dir`` does not hold the dataset.
    """

    num_classes = 10
    in_channels = 3
    image_size = 32

    def __init__(
        self,
        data_dir: str = "data/cifar10",
        batch_size: int = 256,
        val_size: int = 5000,
        augment: bool = True,
        seed: int = 0,
        num_workers: int = 4,
        pin_memory: bool = True,
        persistent_workers: bool = True,
    ) -> None:
        super().__init__(batch_size, num_workers, pin_memory, persistent_workers)
        self.root = check_cifar10_dir(data_dir)
        if val_size < 0:
            raise ValueError(f"val_size must be >= 0, got {val_size}")
        self.val_size = val_size
        self.augment = augment
        self.seed = seed

    def transforms(self, train: bool):  # noqa: ANN201 - a torchvision transform
        """The per-sample transform of the training (``train=True``) or evaluation splits."""
        from torchvision.transforms import v2

        steps = [v2.ToImage()]
        if train and self.augment:
            steps += [v2.RandomCrop(32, padding=4), v2.RandomHorizontalFlip()]
        steps += [v2.ToDtype(torch.float32, scale=True), v2.Normalize(CIFAR10_MEAN, CIFAR10_STD)]
        return v2.Compose(steps)

    def setup(self, stage: str | None = None) -> None:
        if self.train_set is not None:
            return
        from torchvision.datasets import CIFAR10

        train_full = CIFAR10(str(self.root), train=True, transform=self.transforms(train=True))
        eval_full = CIFAR10(str(self.root), train=True, transform=self.transforms(train=False))
        n = len(train_full)
        if self.val_size >= n:
            raise UserError(f"data.val_size {self.val_size} must be smaller than the {n} training images")
        order = torch.randperm(n, generator=torch.Generator().manual_seed(self.seed)).tolist()
        self.train_set = Subset(train_full, order[self.val_size :])
        self.val_set = Subset(eval_full, order[: self.val_size])
        self.test_set = CIFAR10(str(self.root), train=False, transform=self.transforms(train=False))
