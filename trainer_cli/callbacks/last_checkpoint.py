"""``last.ckpt``: the run's latest state at epoch ends, at most every ``min_interval_s`` in between."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
from lightning.pytorch.callbacks import ModelCheckpoint

from trainer_cli.rundir.layout import RESUME_CKPT

MIN_INTERVAL_S = 60.0


class LastCheckpoint(ModelCheckpoint):
    """Lightning's ``ModelCheckpoint`` saving ``<dirpath>/last.ckpt`` (one file, rewritten) where
    Lightning saves an epoch's checkpoint (the training epoch's end, or the end of its validation),
    but skipping the ends that come less than ``min_interval_s`` after its previous save.

    It always saves at the first epoch end it can after a start or a resume (where Lightning saves:
    with ``check_val_every_n_epoch: 2``, the first validation's end), and at the last one (the
    trainer's ``max_epochs`` or ``max_steps`` reached, or ``should_stop`` set by early stopping or
    ``max_time``), so a finished run's ``last.ckpt`` holds its final state. With epochs longer than
    ``min_interval_s`` that is every epoch end, as Lightning's default; with short epochs (digits:
    20 steps, a few hundredths of a second) it saves one epoch in many instead of all, and
    a write per epoch was the largest single cost of such a step (``benchmarks/README.md``). A
    crash (``kill -9``, out of memory) then loses at most ``min_interval_s`` plus one epoch;
    SIGTERM, Ctrl-C and Slurm's requeue signal save the state of the step they stop at
    (:class:`trainer_cli.runtime.checkpointing.InterruptCheckpoint`, the requeue checkpoint). ``0`` saves
    at every epoch end.

    Under DDP global rank 0 decides (its clock), and every rank follows.

    It never writes over another callback's file: where another ``ModelCheckpoint`` of the Trainer
    saves the same file (a user's ``save_last: true`` into the same folder, whatever added it: the
    callbacks list, ``add_lightning_class_args``, the model's ``configure_callbacks``), it saves
    ``resume.ckpt`` instead (:func:`resume_file_name`, decided in ``setup``): Lightning rewrites a
    ``save_last`` file only when its callback saves a top-k file (a monitor that did not improve,
    ``every_n_epochs: 2``), so that ``last.ckpt`` falls behind the run; ``--ckpt_path last`` takes the
    newer of the two (:func:`trainer_cli.rundir.layout.newest_checkpoint`). Where both names are taken,
    it saves nothing.

    Args:
        dirpath: Folder of ``last.ckpt``; default: the run directory's ``checkpoints/``.
        filename: File name without ``.ckpt``.
        min_interval_s: Least time between two saves before the last epoch, in seconds.
        save_weights_only: Save only the model's weights (not resumable), as in ``ModelCheckpoint``.
    """

    def __init__(
        self,
        dirpath: str | None = None,
        filename: str = "last",
        min_interval_s: float = MIN_INTERVAL_S,
        save_weights_only: bool = False,
    ) -> None:
        if min_interval_s < 0:
            raise ValueError(f"min_interval_s must be >= 0, got {min_interval_s}")
        super().__init__(
            dirpath=dirpath,
            filename=filename,
            save_top_k=1,
            enable_version_counter=False,
            save_weights_only=save_weights_only,
        )
        self.min_interval_s = min_interval_s
        self._saved_at_s: float | None = None  # monotonic time of this callback's latest save
        self._in_hook = False  # inside Lightning's epoch-end hook: a checkpoint dumped now is this callback's
        self._given_name = filename  # its file name unless another callback saves that file (setup)
        self._stands_aside = False  # other callbacks save this file and resume.ckpt (setup)

    @property
    def state_key(self) -> str:
        """``ModelCheckpoint``'s key, made once: Lightning formats it for every hook call, a dozen a step."""
        key: str | None = self.__dict__.get("_state_key")
        if key is None:
            key = self.__dict__["_state_key"] = super().state_key
        return key

    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        super().setup(trainer, pl_module, stage)  # its dirpath resolved
        # every callback is attached by now (the model's configure_callbacks too), before their states are restored
        name = resume_file_name(trainer.checkpoint_callbacks, self.dirpath, f"{self._given_name}{self.FILE_EXTENSION}")
        self._stands_aside = name is None
        self.filename = (name or self._given_name).removesuffix(self.FILE_EXTENSION)

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        super().load_state_dict(state_dict)
        if Path(self.best_model_path or "").name != f"{self.filename}{self.FILE_EXTENSION}":
            self.best_model_path = ""  # another file's name (a start that saved under the other name): never removed

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        super().on_train_start(trainer, pl_module)
        self._saved_at_s = None

    def on_train_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self._due(trainer):
            self._saving(super().on_train_epoch_end, trainer, pl_module)

    def on_validation_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self._due(trainer):
            self._saving(super().on_validation_end, trainer, pl_module)

    def on_save_checkpoint(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, checkpoint: dict[str, Any]
    ) -> None:
        if self._in_hook:  # Lightning's hook saved (only one of the two saves, and only once per step)
            self._saved_at_s = time.monotonic()

    def _saving(
        self, hook: Callable[[pl.Trainer, pl.LightningModule], None], trainer: pl.Trainer, pl_module: pl.LightningModule
    ) -> None:
        self._in_hook = True
        try:
            hook(trainer, pl_module)
        finally:
            self._in_hook = False

    def _due(self, trainer: pl.Trainer) -> bool:
        """Whether this epoch end may save (Lightning's ``ModelCheckpoint`` then decides as usual:
        not in the sanity check, not twice at one step, only from the hook it saves in)."""
        if self._stands_aside:
            return False
        if trainer.sanity_checking:
            return True
        due = (
            self._saved_at_s is None
            or time.monotonic() - self._saved_at_s >= self.min_interval_s
            or _last_epoch(trainer)
        )
        return bool(trainer.strategy.broadcast(due))  # rank 0's clock: every rank saves together


def _last_epoch(trainer: pl.Trainer) -> bool:
    """Whether training stops after this epoch end (or validation): a limit reached or a stop requested."""
    max_steps, max_epochs = trainer.max_steps, trainer.max_epochs
    return (
        trainer.should_stop
        or (max_steps is not None and max_steps >= 0 and trainer.global_step >= max_steps)
        or (max_epochs is not None and max_epochs >= 0 and trainer.current_epoch + 1 >= max_epochs)
    )


def resume_file_name(callbacks: Iterable[Any], folder: str | Path | None, name: str = "last.ckpt") -> str | None:
    """The file name the launcher's resume checkpoint saves under in ``folder`` (:class:`LastCheckpoint`, the
    checkpoint on SIGTERM or Ctrl-C): ``name`` unless one of ``callbacks`` but the launcher's own saves that
    file (:func:`writes_last`: a user's ``save_last``), then ``resume.ckpt``
    (:data:`trainer_cli.rundir.layout.RESUME_CKPT`); None when both are taken.

    Args:
        callbacks: The Trainer's callbacks (``trainer.checkpoint_callbacks``).
        folder: The folder of the file (None: the run's folder, not known yet).
        name: The file name it saves under unless taken.
    """
    others = [c for c in callbacks if not isinstance(c, LastCheckpoint)]
    for candidate in dict.fromkeys((name, RESUME_CKPT.name)):
        if not any(writes_last(c, folder, candidate) for c in others):
            return candidate
    return None


def writes_last(callback: Any, folder: str | Path | None, name: str = "last.ckpt") -> bool:
    """Whether ``callback`` (a ``ModelCheckpoint``) saves ``<folder>/<name>``: with ``save_last`` (its
    ``CHECKPOINT_NAME_LAST``) or as its ``filename`` (a :class:`LastCheckpoint`). Its ``dirpath`` not
    set yet counts as ``folder``: the launcher points it at the run's ``checkpoints/``
    (:func:`trainer_cli.rundir.identity.checkpoints_in_run_dir`); ``folder`` None: the run's folder, not
    known yet.

    Args:
        callback: Any callback (False for one that is no ``ModelCheckpoint``).
        folder: The folder of the file.
        name: The file name.
    """
    if not isinstance(callback, ModelCheckpoint):
        return False
    if callback.dirpath is not None and (folder is None or not _same_folder(callback.dirpath, folder)):
        return False
    names = {callback.filename, callback.CHECKPOINT_NAME_LAST if callback.save_last else None}
    return name in {f"{n}{callback.FILE_EXTENSION}" for n in names if n}


def _same_folder(a: str | Path, b: str | Path) -> bool:
    if "://" in str(a) or "://" in str(b):  # remote: as written
        return str(a).rstrip("/") == str(b).rstrip("/")
    return Path(a).absolute() == Path(b).absolute()
