"""Training orders that are a pure function of (seed, epoch, rank) and carry their position as state.

``torch.utils.data.RandomSampler`` draws each epoch's order from the global RNG, so a run resumed
from a checkpoint shuffles differently from the same run left alone. :class:`ResumableShuffleSampler`
orders epoch ``e`` by ``torch.randperm(n, generator=seed + e)``, gives each of ``num_replicas``
processes every ``num_replicas``-th index of it (``DistributedSampler``'s split, so Lightning
leaves it in place under DDP instead of wrapping it) and counts the indices it has handed out.

Its ``state_dict()`` (epoch, indices handed out) is rank-independent: every rank of a DDP run has
handed out the same number of indices of its own share, so rank 0's state, the one a checkpoint
holds, puts every rank back at its own place. torchdata's ``StatefulDataLoader`` saves it with
its iterator (the sampler's state as of the last batch the loader yielded, also with worker
processes prefetching ahead) and gives it back through ``load_state_dict`` on resume.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterator
from typing import Any, Optional, Union

import torch
from torch.utils.data import DistributedSampler


def batches_per_epoch(samples: int, batch_size: int, limit: Optional[Union[int, float]]) -> int:
    """Batches of ``samples`` one epoch trains on under ``Trainer(limit_train_batches=limit)``
    (Lightning's rule: an int caps the count, a float takes that fraction, rounded down)."""
    batches = math.ceil(samples / batch_size)
    if isinstance(limit, int):
        return min(batches, limit)
    if limit is not None and limit < 1.0:
        return int(batches * limit)
    return batches


class ResumableShuffleSampler(DistributedSampler):
    """Shuffle ``num_samples`` indices per epoch by ``seed + epoch``; this rank's share, resumable.

    Args:
        num_samples: Dataset length.
        seed: Base seed of the order; Lightning's global seed (``seed_everything``, env
            ``PL_GLOBAL_SEED``) is added, so changing it changes the order.
        num_replicas: Processes sharing the epoch (DDP world size); 1 for a single process.
        rank: This process's rank among them.
        batch_size: Samples per batch; with ``limit_train_batches``, tells when a saved position
            is the end of its epoch (the next epoch then starts afresh).
        limit_train_batches: The trainer's ``limit_train_batches``.

    With one replica, epoch ``e`` is the whole ``randperm``; with several, the order is padded by
    its first indices to a multiple of ``num_replicas`` (as ``DistributedSampler(drop_last=False)``).
    """

    def __init__(
        self,
        num_samples: int,
        seed: int = 0,
        num_replicas: int = 1,
        rank: int = 0,
        batch_size: int = 1,
        limit_train_batches: Optional[Union[int, float]] = None,
    ) -> None:
        super().__init__(
            range(num_samples),  # type: ignore[arg-type]  # any sized sequence works
            num_replicas=num_replicas,
            rank=rank,
            shuffle=True,
            seed=seed + int(os.environ.get("PL_GLOBAL_SEED", "0")),
            drop_last=False,
        )
        self.batch_size = batch_size
        self.samples_per_epoch = min(
            self.num_samples, batches_per_epoch(self.num_samples, batch_size, limit_train_batches) * batch_size
        )
        self.position = (0, 0)  # (epoch, indices handed out) of the iteration under way
        self._resume: Optional[tuple[int, int]] = None

    def indices(self, epoch: int) -> list[int]:
        """This rank's indices of epoch ``epoch``, in order."""
        generator = torch.Generator().manual_seed(self.seed + epoch)
        order = torch.randperm(len(self.dataset), generator=generator).tolist()  # type: ignore[arg-type]
        padding = self.total_size - len(order)
        if padding > 0:
            order += (order * math.ceil(padding / len(order)))[:padding]
        return order[self.rank : self.total_size : self.num_replicas]

    def set_epoch(self, epoch: int) -> None:
        """Called by Lightning before each epoch; a position loaded for this iteration still wins."""
        super().set_epoch(epoch)
        if self._resume is None:
            self.position = (epoch, 0)

    def _start(self) -> tuple[int, int]:
        """(epoch, indices to skip) of the next iteration: a loaded position once, else a fresh epoch."""
        if self._resume is not None:
            start, self._resume = self._resume, None
            self.epoch = start[0]
        else:
            start = (self.epoch, 0)
        self.position = start
        return start

    def __iter__(self) -> Iterator[int]:
        epoch, done = self._start()
        for index in self.indices(epoch)[done:]:
            done += 1
            self.position = (epoch, done)
            yield index

    def state_dict(self) -> dict[str, Any]:
        """Where this rank stands: the epoch under way and how many of its indices were handed out."""
        epoch, done = self.position
        return {"epoch": epoch, "yielded": done}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue at ``state`` on the next iteration; a finished epoch continues with the next one."""
        epoch, yielded = int(state["epoch"]), int(state["yielded"])
        if yielded >= self.samples_per_epoch:
            epoch, yielded = epoch + 1, 0
        self._resume = self.position = (epoch, yielded)
        self.epoch = epoch


class ResumableBatchSampler(ResumableShuffleSampler):
    """:class:`ResumableShuffleSampler` cut into index tensors of ``batch_size`` (the last one may
    be shorter), for a ``DataLoader(batch_size=None)`` whose dataset takes a tensor of indices
    (a ``TensorDataset`` gathers a batch with one index op; from a Python list of 512 indices that
    cost about 1 ms per tensor, measured on an H100 machine's host)."""

    def __len__(self) -> int:
        return math.ceil(self.num_samples / self.batch_size)

    def __iter__(self) -> Iterator[torch.Tensor]:  # type: ignore[override]
        epoch, done = self._start()
        mine = torch.tensor(self.indices(epoch), dtype=torch.long)
        for begin in range(done, len(mine), self.batch_size):
            batch = mine[begin : begin + self.batch_size]
            done += len(batch)
            self.position = (epoch, done)
            yield batch
