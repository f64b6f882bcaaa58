"""What every image-classification data module of the project shares: loader settings, the
resumable training loader and the shape facts (``num_classes``, ``in_channels``, ``image_size``)
that flow to the model."""

from __future__ import annotations

import multiprocessing
import sys
from typing import Any

import lightning.pytorch as pl
import torch
from torch.utils.data import DataLoader, Dataset, Sampler
from torchdata.stateful_dataloader import StatefulDataLoader

from trainer_cli.data.sampler import ResumableShuffleSampler
from trainer_cli.imports import is_own_process
from trainer_cli.job.stop_signals import start_forkserver

TRAIN_LOADER_KEY = "train_loader"
INPUT_TRANSFORM_KEY = "input_transform"
"""Key of the data module's state (in each checkpoint) that records :meth:`ClassificationDataModule.input_transform`."""
FORK_CAN_DEADLOCK = sys.implementation.name == "cpython" and sys.version_info < (3, 12)
"""CPython before 3.12 (gh-112275, fixed in 3.12 and in late security releases of older branches):
a child of ``os.fork`` can deadlock at once in ``PyOS_AfterFork_Child`` when another thread holds
the interpreter's thread-list lock at the fork. Seen here on 3.11.7: a 2-rank DDP run (gloo) whose
DataLoader workers start each epoch (80 epochs) hung in 2 of 7 tries, the new worker stuck in
``_PyThreadState_DeleteExcept``. A worker that hangs at start stops its rank, and every other rank
waits for it until the job's time limit (README.md, "DataLoader workers under DDP")."""


class ClassificationDataModule(pl.LightningDataModule):
    """Base class: subclasses set ``train_set``, ``val_set``, ``test_set`` in ``setup``.

    Args:
        batch_size: Samples per device per step (global batch = batch_size x devices x num_nodes).
        num_workers: DataLoader worker processes.
        pin_memory: Page-locked host memory for faster host-to-GPU copies; ``None``: on when
            the trainer runs on a CUDA GPU, off otherwise (pinning only costs on CPU).
        persistent_workers: Keep workers alive between epochs (needs num_workers > 0); ``None``:
            on whenever ``num_workers > 0`` (no worker start-up at every epoch).
        multiprocessing_context: How worker processes start: ``fork``, ``spawn`` or ``forkserver``
            (Python's start methods). ``None``: the platform's default (``fork`` on Linux), except
            ``forkserver`` in a distributed run of ``train`` (world size > 1) on CPython before 3.12,
            whose ``fork`` can deadlock a new worker (:data:`FORK_CAN_DEADLOCK`). ``spawn`` and
            ``forkserver`` pickle the dataset to each worker and import the program's main module
            there: a script of your own needs ``if __name__ == "__main__":``.

    Raises:
        ValueError: ``batch_size`` < 1, ``num_workers`` < 0, or a start method this platform lacks.
    """

    num_classes: int
    in_channels: int
    image_size: int

    def __init__(
        self,
        batch_size: int,
        num_workers: int = 0,
        pin_memory: bool | None = None,
        persistent_workers: bool | None = None,
        multiprocessing_context: str | None = None,
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
        methods = multiprocessing.get_all_start_methods()
        if multiprocessing_context is not None and multiprocessing_context not in methods:
            raise ValueError(
                f"multiprocessing_context must be one of {', '.join(methods)} (or empty), got "
                f"{multiprocessing_context!r}"
            )
        self.multiprocessing_context = multiprocessing_context
        self._start_method_told = False
        self.train_set: Dataset[Any] | None = None
        self.val_set: Dataset[Any] | None = None
        self.test_set: Dataset[Any] | None = None
        self._train_loader: StatefulDataLoader | None = None
        self._train_loader_state: dict[str, Any] | None = None

    def _loader(
        self, dataset: Dataset[Any] | None, shuffle: bool, sampler: Sampler[int] | None = None
    ) -> DataLoader[Any]:
        """A loader of ``dataset``; with a ``sampler`` (training) a ``StatefulDataLoader``."""
        if dataset is None:
            raise RuntimeError(f"{type(self).__name__}.setup() has not made this split")
        method = self.worker_start_method()
        context = multiprocessing.get_context(method) if method else None
        if method == "forkserver":  # its server imports torch and this module's code once; each worker forks from it
            context.set_forkserver_preload(["torch", type(self).__module__])  # type: ignore[union-attr]
            start_forkserver()
        return (DataLoader if sampler is None else StatefulDataLoader)(
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
            multiprocessing_context=context,
            drop_last=False,
        )

    def worker_start_method(self) -> str | None:
        """``multiprocessing_context``, or when it is ``None``: ``forkserver`` where ``fork`` can
        deadlock a worker (:data:`FORK_CAN_DEADLOCK`, a distributed run, ``train``'s own process:
        its main module is safe to import in a worker), else ``None`` (the platform's default)."""
        if not self.num_workers:
            return None
        if self.multiprocessing_context is not None:
            return self.multiprocessing_context
        trainer = self.trainer
        default = multiprocessing.get_start_method(allow_none=True) in (None, "fork")
        if not (FORK_CAN_DEADLOCK and default and is_own_process() and trainer is not None and trainer.world_size > 1):
            return None
        if trainer.is_global_zero and not self._start_method_told:
            print(
                f"DataLoader workers start by forkserver: fork can deadlock a new worker under DDP on Python "
                f"{sys.version.split()[0]} "
                "(CPython gh-112275; Python 3.12+ is not affected). Choose with "
                "--data.init_args.multiprocessing_context.",
                flush=True,
            )
        self._start_method_told = True
        return "forkserver"

    def use_pin_memory(self) -> bool:
        """``pin_memory``, or when it is ``None``, whether the attached trainer trains on a CUDA GPU."""
        if self.pin_memory is not None:
            return self.pin_memory
        from lightning.pytorch.accelerators import CUDAAccelerator

        return self.trainer is not None and isinstance(self.trainer.accelerator, CUDAAccelerator)

    def train_sampler(
        self, sampler_class: type[ResumableShuffleSampler] = ResumableShuffleSampler
    ) -> ResumableShuffleSampler:
        """The training order: shuffled by (seed, epoch), this process's share under a distributed
        strategy (``trainer.distributed_sampler_kwargs``), resumable mid-epoch."""
        if self.train_set is None:
            raise RuntimeError(f"{type(self).__name__}.setup() has not made this split")
        trainer = self.trainer
        split = (trainer.distributed_sampler_kwargs if trainer is not None else None) or {}
        return sampler_class(
            len(self.train_set),  # type: ignore[arg-type]
            seed=getattr(self, "seed", 0),
            num_replicas=split.get("num_replicas", 1),
            rank=split.get("rank", 0),
            batch_size=self.batch_size,
            limit_train_batches=trainer.limit_train_batches if trainer is not None else None,
        )

    def train_dataloader(self) -> DataLoader[Any]:
        """A ``StatefulDataLoader`` over :meth:`train_sampler`: its position (epoch, batches done,
        worker snapshots) is saved with every checkpoint (:meth:`state_dict`) and a resumed run
        continues the interrupted epoch where it stopped."""
        loader = self._loader(self.train_set, shuffle=False, sampler=self.train_sampler())
        self._train_loader = self._resume_train_loader(loader)  # type: ignore[assignment]
        return loader

    def _resume_train_loader(self, loader: DataLoader[Any]) -> DataLoader[Any]:
        """Give ``loader`` the position loaded from the checkpoint being resumed, if any (once)."""
        state, self._train_loader_state = self._train_loader_state, None
        trainer = self.trainer
        if state and trainer is not None and trainer.ckpt_path is not None and isinstance(loader, StatefulDataLoader):
            loader.load_state_dict(state)
        return loader

    def input_transform(self) -> dict[str, Any] | None:
        """How a raw image becomes the model's input, for a model used outside the launcher
        (``train export`` writes it to ``module.json``): ``images = (raw * scale - mean[c]) / std[c]``
        per channel ``c``. Keys: ``raw`` (what a raw image is), ``scale``, ``mean`` and ``std`` (one
        value per channel), ``steps`` (the evaluation transform in words). None: not known (the
        default of a subclass that does not say).
        """
        return None

    def state_dict(self) -> dict[str, Any]:
        """The training loader's position, saved in each checkpoint (every rank computes it; the
        checkpoint holds rank 0's, which is every rank's: see :mod:`trainer_cli.data.sampler`),
        and the :meth:`input_transform` (plain values, under :data:`INPUT_TRANSFORM_KEY`).

        Lightning also keeps a stateful loader's state in its fit loop, but restores it only when
        the training loader is first built after the checkpoint's loops were restored; a step-wise
        scheduler asks for ``trainer.estimated_stepping_batches`` earlier (in
        ``configure_optimizers``) and Lightning then never gives the state back. The data module's
        own state is restored before that, so the loader is built at its saved position.
        """
        state: dict[str, Any] = {}
        if self._train_loader is not None:
            state[TRAIN_LOADER_KEY] = self._train_loader.state_dict()
        transform = self.input_transform()
        if transform is not None:
            state[INPUT_TRANSFORM_KEY] = transform
        return state

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Keep the checkpoint's loader position for the next :meth:`train_dataloader` call."""
        self._train_loader_state = state_dict.get(TRAIN_LOADER_KEY)

    def val_dataloader(self) -> DataLoader[Any]:
        return self._loader(self.val_set, shuffle=False)

    def test_dataloader(self) -> DataLoader[Any]:
        return self._loader(self.test_set, shuffle=False)

    def predict_dataloader(self) -> DataLoader[Any]:
        return self._loader(self.test_set, shuffle=False)
