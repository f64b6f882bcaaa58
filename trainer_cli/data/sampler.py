"""A shuffling sampler whose order is a pure function of (seed, epoch), resumable mid-epoch.

``torch.utils.data.RandomSampler`` draws each epoch's order from the global RNG, so a run resumed
from a checkpoint shuffles differently from the same run left alone, and Lightning restarts an
interrupted epoch with a fresh iterator. This sampler orders epoch ``e`` by
``torch.randperm(n, generator=seed + e)`` and, when the trainer has restored a checkpoint taken
in the middle of an epoch, skips the batches that epoch had already trained on, so the resumed
run sees exactly the batches the uninterrupted run would have seen.

Single process only: under a distributed strategy (DDP, even with one task) Lightning wraps
samplers in its own ``DistributedSamplerWrapper`` and the skip is not applied (the resumed epoch
gets a fresh order).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any, Optional

import torch
from torch.utils.data import Sampler


class ResumableShuffleSampler(Sampler[int]):
    """Shuffle ``num_samples`` indices per epoch by ``seed + epoch``; resume mid-epoch exactly.

    Args:
        num_samples: Dataset length.
        batch_size: Samples per batch (to turn finished batches into samples to skip).
        seed: Base seed of the order; Lightning's global seed (``seed_everything``, env
            ``PL_GLOBAL_SEED``) is added, so changing it changes the order.
        datamodule: The LightningDataModule that owns the loader; its ``trainer`` (set by
            Lightning) tells the epoch and the batches already done. Without a trainer, epoch 0.
    """

    def __init__(self, num_samples: int, batch_size: int, seed: int = 0, datamodule: Optional[Any] = None) -> None:
        self.num_samples = num_samples
        self.batch_size = batch_size
        self.seed = seed + int(os.environ.get("PL_GLOBAL_SEED", "0"))
        self.datamodule = datamodule
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        """Called by Lightning before each epoch (like ``DistributedSampler.set_epoch``)."""
        self.epoch = epoch

    def __len__(self) -> int:
        return self.num_samples

    def _position(self) -> tuple[int, int]:
        """(epoch, batches of it already trained), read from the trainer's loop progress."""
        trainer = getattr(self.datamodule, "trainer", None)
        if trainer is None or not trainer.training or trainer.distributed_sampler_kwargs is not None:
            # under a distributed strategy (one task included) Lightning's DistributedSamplerWrapper
            # indexes this sampler's output up to len(self): it must yield the whole epoch
            return self.epoch, 0
        fit_loop = trainer.fit_loop
        epoch = fit_loop.epoch_progress.current.processed
        done = fit_loop.epoch_loop.batch_progress.current.processed
        batches = -(-self.num_samples // self.batch_size)
        limit = trainer.limit_train_batches
        if isinstance(limit, int):
            batches = min(batches, limit)
        elif limit is not None and limit < 1.0:
            batches = int(batches * limit)
        if done >= batches:  # a checkpoint taken after the last batch: the next epoch starts afresh
            return epoch + 1, 0
        return epoch, done

    def __iter__(self) -> Iterator[int]:
        epoch, done = self._position()
        generator = torch.Generator().manual_seed(self.seed + epoch)
        order = torch.randperm(self.num_samples, generator=generator).tolist()
        yield from order[done * self.batch_size :]
