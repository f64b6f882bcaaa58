"""CIFAR-10 from a local folder in the official ``cifar-10-batches-py`` pickle layout (no download here).

Two data paths:

- per-sample (default): PIL images through torchvision ``v2`` transforms in DataLoader workers;
- ``batched=True``: the uint8 dataset is held as one tensor ``[n, 3, 32, 32]``, batches are
  sliced from it and augmented on the training device in :meth:`on_after_batch_transfer`
  (:mod:`trainer_cli.data.batch_augment`), as the fastest CIFAR-10 trainers do. On a GPU this
  moves uint8 (4x fewer bytes) and needs no worker processes.
"""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.utils.data import BatchSampler, DataLoader, Dataset, RandomSampler, SequentialSampler, Subset, TensorDataset
from torchdata.stateful_dataloader import StatefulDataLoader

from trainer_cli.data.base import ClassificationDataModule
from trainer_cli.data.batch_augment import crop_flip_normalize
from trainer_cli.data.sampler import ResumableBatchSampler, ResumableShuffleSampler
from trainer_cli.errors import UserError

CIFAR10_MEAN = (0.4914, 0.4822, 0.4465)
CIFAR10_STD = (0.2470, 0.2435, 0.2616)
TRAIN_SIZE = 50_000
FOLDER = "cifar-10-batches-py"
TRAIN_FILES = tuple(f"data_batch_{i}" for i in range(1, 6))
TEST_FILES = ("test_batch",)
CROP_PADDING = 4


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


def load_cifar10_arrays(root: Path, train: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """The images and labels of one CIFAR-10 split, read from the official pickles.

    The files are read as torchvision's ``CIFAR10`` reads them, without its MD5 check of every
    file (about 0.5 s per start, and it rejects the small stand-ins tests write).

    Args:
        root: Folder that holds ``cifar-10-batches-py/``.
        train: The 50,000 training images (``data_batch_1..5``) or the 10,000 test images.

    Returns:
        uint8 images ``[n, 3, 32, 32]`` and int64 labels ``[n]``.

    Raises:
        UserError: when a batch file is missing.
    """
    images, labels = [], []
    for name in TRAIN_FILES if train else TEST_FILES:
        path = root / FOLDER / name
        if not path.is_file():
            raise UserError(f"CIFAR-10 file missing: {path}; copy the whole cifar-10-batches-py folder")
        with path.open("rb") as f:
            entry = pickle.load(f, encoding="latin1")
        images.append(np.asarray(entry["data"], dtype=np.uint8))
        labels.extend(entry["labels"] if "labels" in entry else entry["fine_labels"])
    data = torch.from_numpy(np.vstack(images).reshape(-1, 3, 32, 32))
    return data, torch.tensor(labels, dtype=torch.int64)


class UInt8ImageDataset(Dataset[tuple[Any, int]]):
    """Per-sample view of uint8 images ``[n, c, h, w]``: each item is ``(transform(PIL image), label)``,
    as torchvision's ``CIFAR10`` yields them."""

    def __init__(self, images: torch.Tensor, labels: torch.Tensor, transform: Any = None) -> None:
        self.images = images.permute(0, 2, 3, 1).numpy()  # HWC for PIL, a view
        self.labels = labels.tolist()
        self.transform = transform

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, index: int) -> tuple[Any, int]:
        from PIL import Image

        img = Image.fromarray(self.images[index])
        return (self.transform(img) if self.transform is not None else img), self.labels[index]


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
        batched: Hold the uint8 dataset as one tensor and augment whole batches on the training
            device (GPU) after the transfer, instead of per-sample PIL transforms in workers.
            Much faster; ``num_workers`` and ``persistent_workers`` are then unused. Under DDP,
            each rank cuts its batches from its own share of the epoch's order.
        channels_last: Batched path only: deliver batches in ``torch.channels_last`` memory
            format (pair with the model's ``channels_last``).
        num_workers: DataLoader worker processes (per-sample path).
        pin_memory: Page-locked host memory; empty: on when training on a GPU.
        persistent_workers: Keep workers alive between epochs; empty: on when ``num_workers > 0``.
        multiprocessing_context: How workers start: ``fork``, ``spawn`` or ``forkserver``; empty: the
            platform's default, ``forkserver`` under DDP on Python < 3.12 (``ClassificationDataModule``).

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
        batched: bool = False,
        channels_last: bool = False,
        num_workers: int = 4,
        pin_memory: bool | None = None,
        persistent_workers: bool | None = None,
        multiprocessing_context: str | None = None,
    ) -> None:
        super().__init__(
            batch_size, 0 if batched else num_workers, pin_memory, persistent_workers, multiprocessing_context
        )
        self.root = check_cifar10_dir(data_dir)
        if val_size < 0:
            raise ValueError(f"val_size must be >= 0, got {val_size}")
        self.val_size = val_size
        self.augment = augment
        self.seed = seed
        self.batched = batched
        self.channels_last = channels_last

    def input_transform(self) -> dict[str, Any] | None:
        """uint8 RGB pixels scaled to [0, 1], normalised with the CIFAR-10 channel mean and std."""
        return {
            "raw": "uint8 RGB images [b, 3, 32, 32], 0..255",
            "scale": 1 / 255,
            "mean": list(CIFAR10_MEAN),
            "std": list(CIFAR10_STD),
            "steps": "pixels / 255, then (x - mean[c]) / std[c] per channel",
        }

    def transforms(self, train: bool):  # noqa: ANN201 - a torchvision transform
        """The per-sample transform of the training (``train=True``) or evaluation splits."""
        from torchvision.transforms import v2

        steps = [v2.ToImage()]
        if train and self.augment:
            steps += [v2.RandomCrop(32, padding=CROP_PADDING), v2.RandomHorizontalFlip()]
        steps += [v2.ToDtype(torch.float32, scale=True), v2.Normalize(CIFAR10_MEAN, CIFAR10_STD)]
        return v2.Compose(steps)

    def setup(self, stage: str | None = None) -> None:
        if self.train_set is not None:
            return
        x, y = load_cifar10_arrays(self.root, train=True)
        x_test, y_test = load_cifar10_arrays(self.root, train=False)
        n = len(y)
        if self.val_size >= n:
            raise UserError(f"data.val_size {self.val_size} must be smaller than the {n} training images")
        order = torch.randperm(n, generator=torch.Generator().manual_seed(self.seed))
        train_idx, val_idx = order[self.val_size :], order[: self.val_size]
        if self.batched:
            self.train_set = TensorDataset(x[train_idx], y[train_idx])
            self.val_set = TensorDataset(x[val_idx], y[val_idx])
            self.test_set = TensorDataset(x_test, y_test)
            return
        train_full = UInt8ImageDataset(x, y, self.transforms(train=True))
        eval_full = UInt8ImageDataset(x, y, self.transforms(train=False))
        self.train_set = Subset(train_full, train_idx.tolist())
        self.val_set = Subset(eval_full, val_idx.tolist())
        self.test_set = UInt8ImageDataset(x_test, y_test, self.transforms(train=False))

    def train_sampler(
        self, sampler_class: type[ResumableShuffleSampler] = ResumableShuffleSampler
    ) -> ResumableShuffleSampler:
        """Batched path: the resumable order already cut into batches (:class:`ResumableBatchSampler`)."""
        return super().train_sampler(ResumableBatchSampler if self.batched else sampler_class)

    def _loader(self, dataset: Dataset[Any] | None, shuffle: bool, sampler: Any = None) -> DataLoader[Any]:
        if not self.batched:
            return super()._loader(dataset, shuffle, sampler)
        if not isinstance(dataset, TensorDataset):
            raise RuntimeError(f"{type(self).__name__}.setup() has not made this split")
        # whole batches by one fancy index each (TensorDataset accepts a list of indices): training
        # takes the resumable batches of ``sampler``, evaluation batches the samples in order
        if isinstance(sampler, ResumableBatchSampler):
            return StatefulDataLoader(dataset, sampler=sampler, batch_size=None, pin_memory=self.use_pin_memory())
        order = sampler if sampler is not None else RandomSampler(dataset) if shuffle else SequentialSampler(dataset)
        return DataLoader(
            dataset,
            sampler=BatchSampler(order, self.batch_size, drop_last=False),
            batch_size=None,
            pin_memory=self.use_pin_memory(),
        )

    def on_after_batch_transfer(self, batch: Any, dataloader_idx: int) -> Any:
        """Batched path: crop, flip and normalise the uint8 batch ``[b, 3, 32, 32]`` on its device.

        Anything else passes unchanged (e.g. the model summary's float ``example_input_array``).
        """
        is_uint8_pair = isinstance(batch, (tuple, list)) and len(batch) == 2 and batch[0].dtype == torch.uint8
        if not (self.batched and is_uint8_pair):
            return batch
        x, y = batch
        training = self.trainer is not None and self.trainer.training
        x = crop_flip_normalize(
            x,
            CIFAR10_MEAN,
            CIFAR10_STD,
            CROP_PADDING,
            augment=training and self.augment,
            channels_last=self.channels_last,
        )
        return x, y
