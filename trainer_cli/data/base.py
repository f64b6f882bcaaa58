"""What every image-classification data module of the project shares: loader settings and the
shape facts (``num_classes``, ``in_channels``, ``image_size``) that flow to the model."""

from __future__ import annotations

from typing import Any

import lightning.pytorch as pl
import torch
from torch.utils.data import DataLoader, Dataset, Sampler

from trainer_cli.data.sampler import ResumableShuffleSampler


class ClassificationDataModule(pl.LightningDataModule):
    """Base class: subclasses set ``train_set``, ``val_set``, ``test_set`` in ``setup``.

    Args:
        batch_size: Samples per device per step (global batch = batch_size x devices x num_nodes).
        num_workers: DataLoader worker processes.
        pin_memory: Page-locked host memory for faster host-to-GPU copies; ``None``: on when
            the trainer runs on a CUDA GPU, off otherwise (pinning only costs on CPU).
        persistent_workers: Keep workers alive between epochs (needs num_workers > 0); ``None``:
            on whenever ``num_workers > 0`` (no worker start-up at every epoch).
    """

    num_classes: int
    in_channels: int
    image_size: int

    def __init__(
        self, batch_size: int, num_workers: int = 0, pin_memory: bool | None = None, persistent_workers: bool | None = None
    ) -> None:
        super().__init__()
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        if num_workers < 0:
            raise ValueError(f"num_workers must be >= 0, got {num_workers}")
        self.batch_size = batch_size
        self.num_workers = num_workers
        self.pin_memory = pin_memory
        self.persistent_workers = (True if persistent_workers is None else persistent_workers) and num_workers > 0
        self.train_set: Dataset[Any] | None = None
        self.val_set: Dataset[Any] | None = None
        self.test_set: Dataset[Any] | None = None

    def _loader(self, dataset: Dataset[Any] | None, shuffle: bool, sampler: Sampler[int] | None = None) -> DataLoader[Any]:
        if dataset is None:
            raise RuntimeError(f"{type(self).__name__}.setup() has not made this split")
        return DataLoader(
            dataset,
            batch_size=self.batch_size,
            shuffle=shuffle,
            sampler=sampler,
            # each iterator draws its worker base seed from this generator, not the global RNG, so
            # opening a loader does not shift the random numbers dropout sees (exact resume)
            generator=torch.Generator().manual_seed(getattr(self, "seed", 0)),
            num_workers=self.num_workers,
            pin_memory=self.use_pin_memory(),
            persistent_workers=self.persistent_workers,
            drop_last=False,
        )

    def use_pin_memory(self) -> bool:
        """``pin_memory``, or when it is ``None``, whether the attached trainer trains on a CUDA GPU."""
        if self.pin_memory is not None:
            return self.pin_memory
        from lightning.pytorch.accelerators import CUDAAccelerator

        return self.trainer is not None and isinstance(self.trainer.accelerator, CUDAAccelerator)

    def train_dataloader(self) -> DataLoader[Any]:
        """Shuffled by (seed, epoch) and resumable mid-epoch (:class:`ResumableShuffleSampler`)."""
        if self.train_set is None:
            raise RuntimeError(f"{type(self).__name__}.setup() has not made this split")
        sampler = ResumableShuffleSampler(len(self.train_set), self.batch_size, getattr(self, "seed", 0), self)  # type: ignore[arg-type]
        return self._loader(self.train_set, shuffle=False, sampler=sampler)

    def val_dataloader(self) -> DataLoader[Any]:
        return self._loader(self.val_set, shuffle=False)

    def test_dataloader(self) -> DataLoader[Any]:
        return self._loader(self.test_set, shuffle=False)

    def predict_dataloader(self) -> DataLoader[Any]:
        return self._loader(self.test_set, shuffle=False)
