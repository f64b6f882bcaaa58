"""Checkpoints that survive crashes and resume exactly.

* :class:`AtomicCheckpointIO` writes every checkpoint to a temporary file in the same directory,
  flushes it to disk and renames it over the target (``os.replace`` is atomic on POSIX), so a
  process killed at any moment leaves either the previous complete file or the new complete file.
  Lightning's own ``TorchCheckpointIO`` goes through fsspec's local transaction, whose temporary
  file is made by ``tempfile.mkstemp`` in the system temp folder: when that folder is on another
  file system the final ``shutil.move`` is a copy, and a kill during the copy leaves a truncated
  ``last.ckpt``.
* :class:`AsyncAtomicCheckpointIO` (the CLI's default) writes them that way on a thread of its own,
  once the checkpoint's tensors are copied, so training goes on while the file is written.
* :class:`ResumeState` stores the global random number generator states in every checkpoint and
  puts them back on resume, so dropout and augmentation draw the same numbers as a run left alone.
* :class:`InterruptCheckpoint` saves ``checkpoints/last.ckpt`` (or ``resume.ckpt``) when training is stopped by SIGTERM
  or Ctrl-C, on every rank at the step they agreed on (:mod:`trainer_cli.job.stop_signals`).
* :func:`check_checkpoint_file` tells a truncated or corrupt ``--ckpt_path`` apart before anything
  is built.
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import zipfile
from pathlib import Path
from typing import Any, Optional

import lightning.pytorch as pl
import numpy as np
import torch
from lightning.fabric.plugins import CheckpointIO
from lightning.fabric.plugins.io.torch_io import TorchCheckpointIO
from lightning.pytorch.plugins.io import AsyncCheckpointIO
from lightning.pytorch.trainer.states import TrainerFn
from lightning.pytorch.utilities.exceptions import SIGTERMException

from trainer_cli.callbacks.attempt_clock import checkpoint_written
from trainer_cli.callbacks.last_checkpoint import resume_file_name
from trainer_cli.errors import UserError, is_disk_full
from trainer_cli.job import stop_signals, task_output
from trainer_cli.job.progress import DONE as PROGRESS_DONE
from trainer_cli.job.progress import beacon as progress_beacon

TMP_MARK = ".tmp-"
RNG_KEY = "trainer_cli_rng_states"
CTRL_C: list[int] = []  # non-empty once Ctrl-C stopped training (see InterruptCheckpoint.on_train_batch_end)


def _is_local(path: str | os.PathLike[str]) -> bool:
    return "://" not in str(path) or str(path).startswith("file://")


def _fsync_dir(directory: Path) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _out_of_space(err: BaseException, folder: Path) -> bool:
    """Whether a failed write was a full disk: ENOSPC (or EDQUOT), or torch's zip writer failing
    (a RuntimeError such as "unexpected pos") where the folder has less than 1 MiB left."""
    if is_disk_full(err):
        return True
    try:
        return shutil.disk_usage(folder).free < 1 << 20
    except OSError:
        return False


class AtomicCheckpointIO(TorchCheckpointIO):
    """``TorchCheckpointIO`` whose local saves are atomic: write ``.<name>.tmp-<pid>``, fsync, rename.

    Remote paths (``s3://...``) keep Lightning's fsspec transaction.
    """

    def save_checkpoint(self, checkpoint: dict[str, Any], path: Any, storage_options: Optional[Any] = None) -> None:
        if storage_options is not None or not _is_local(path):
            super().save_checkpoint(checkpoint, path, storage_options)
            checkpoint_written()
            return
        target = Path(str(path).removeprefix("file://"))
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(f".{target.name}{TMP_MARK}{os.getpid()}")
        try:
            with open(tmp, "wb") as f:
                torch.save(checkpoint, f)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, target)
        except BaseException as err:
            full = isinstance(err, (OSError, RuntimeError)) and _out_of_space(err, target.parent)
            tmp.unlink(missing_ok=True)
            if full:
                kept = f"the previous {target.name} is kept" if target.is_file() else f"no {target.name} was written"
                raise UserError(
                    f"no space left on the device while saving checkpoint {target} ({kept}): free space "
                    f"(or choose another --trainer.default_root_dir) and run again; --ckpt_path last resumes "
                    f"from the run's newest complete checkpoint"
                ) from None
            raise
        _fsync_dir(target.parent)
        for stale in target.parent.glob(f".{target.name}{TMP_MARK}*"):  # left by a killed process
            stale.unlink(missing_ok=True)
        checkpoint_written()  # the training thread's part of the save ends (not the writer thread's)


class AsyncAtomicCheckpointIO(AsyncCheckpointIO):
    """Lightning's ``AsyncCheckpointIO`` around :class:`AtomicCheckpointIO`: ``save_checkpoint``
    copies the checkpoint's tensors (on their device) and returns; one worker thread writes the
    copies in order, each atomically (temporary file, fsync, rename), so ``last.ckpt`` is always the
    previous or the new complete file.

    Removals (``ModelCheckpoint`` replacing its ``best-*.ckpt``) go through the same worker, after
    the saves before them: the old best is deleted only once its successor is complete on disk, and
    not at all when that save failed. A failed write (a full disk: one
    :class:`~trainer_cli.errors.UserError`) is raised by the next ``save_checkpoint`` or when
    training ends (Lightning's strategy teardown waits for the writes), so every ``fit`` returns
    with its checkpoints on disk, including after SIGTERM, Ctrl-C or a Slurm requeue. The copies
    take host (CPU run) or device memory the size of the state until written.

    Args:
        checkpoint_io: The plugin that writes; default :class:`AtomicCheckpointIO`.
    """

    def __init__(self, checkpoint_io: Optional[CheckpointIO] = None) -> None:
        super().__init__(checkpoint_io if checkpoint_io is not None else AtomicCheckpointIO())

    def save_checkpoint(self, *args: Any, **kwargs: Any) -> None:
        super().save_checkpoint(*args, **kwargs)
        checkpoint_written()  # the copy is taken: the training thread goes on (trainer_cli.rundir.attempts)

    def remove_checkpoint(self, *args: Any, **kwargs: Any) -> None:
        self._ensure_setup()
        assert self._executor is not None

        def remove() -> None:
            if self._error is not None:  # its successor was not written: keep it
                return
            try:
                assert self.checkpoint_io is not None
                self.checkpoint_io.remove_checkpoint(*args, **kwargs)
            except BaseException as err:
                self._error = err

        self._executor.submit(remove)


def check_checkpoint_file(path: str) -> None:
    """Check that ``path`` is a complete checkpoint file written by ``torch.save``.

    Reads the zip archive's directory and verifies every member's CRC; nothing is unpickled.

    Raises:
        UserError: when the file is missing, is not a ``torch.save`` archive, or is truncated or corrupt
            (naming the complete checkpoints beside it: :func:`other_checkpoints_hint`).
    """
    file = Path(path).expanduser()
    if not file.exists():
        raise UserError(f"--ckpt_path {path}: file not found (`--ckpt_path last` resumes the newest run)")
    if not file.is_file():
        raise UserError(f"--ckpt_path {path}: is not a file")
    if not zipfile.is_zipfile(file):
        raise UserError(
            f"--ckpt_path {path}: not a readable checkpoint (truncated, corrupt, or not written by torch.save); "
            + other_checkpoints_hint(Path(path))
        )
    try:
        with zipfile.ZipFile(file) as archive:
            bad = archive.testzip()
    except (zipfile.BadZipFile, OSError, EOFError, ValueError) as err:
        raise UserError(
            f"--ckpt_path {path}: truncated or corrupt checkpoint ({err}); {other_checkpoints_hint(Path(path))}"
        ) from None
    if bad is not None:
        raise UserError(
            f"--ckpt_path {path}: corrupt checkpoint (bad CRC in {bad}); {other_checkpoints_hint(Path(path))}"
        )


def other_checkpoints_hint(path: Path, shown: int = 3) -> str:
    """What to use instead of the damaged checkpoint ``path``: the complete checkpoints in its folder, as
    they are named there (whatever callback wrote them: ``epoch=0-step=64.ckpt``, ``best-...``), the
    newest by saved global step first, at most ``shown`` of them."""
    from trainer_cli.rundir.layout import read_checkpoint_progress

    beside = [f for f in path.parent.glob("*.ckpt") if f.name != path.name and f.is_file()]
    complete = sorted((c for c in map(read_checkpoint_progress, beside) if c is not None), key=lambda c: -c.global_step)
    if not complete:
        return f"no other complete checkpoint is in {path.parent}: give another checkpoint file"
    names = ", ".join(str(path.parent / c.path.name) for c in complete[:shown])
    more = f" ({len(complete) - shown} more there)" if len(complete) > shown else ""
    return f"use another checkpoint of the run: {names}{more}"


class ResumeState(pl.Callback):
    """Saves the global RNG states (torch, CUDA, numpy, Python) with each checkpoint and restores
    them on resume, through each library's public getters and setters.

    RNG states are stored as tensors and plain Python values (the keys Lightning's Fabric uses),
    so the checkpoint still loads with ``weights_only=True``. (A step-wise scheduler's schedule
    across a resume: :mod:`trainer_cli.optim.schedule_resume`.)
    """

    def on_save_checkpoint(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, checkpoint: dict[str, Any]
    ) -> None:
        legacy = np.random.get_state()  # the legacy tuple (numpy types it as the tuple or the dict form)
        assert isinstance(legacy, tuple)
        kind, keys, pos, has_gauss, cached = legacy
        version, python_state, gauss = random.getstate()
        states: dict[str, Any] = {
            "torch": torch.get_rng_state(),
            "numpy": [kind, torch.from_numpy(keys.astype("int64")), int(pos), int(has_gauss), float(cached)],
            "python": [version, list(python_state), gauss],
        }
        if torch.cuda.is_available():
            states["torch.cuda"] = torch.cuda.get_rng_state_all()
        checkpoint[RNG_KEY] = states

    def on_load_checkpoint(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, checkpoint: dict[str, Any]
    ) -> None:
        states = checkpoint.get(RNG_KEY)
        if states is None:
            return
        torch.set_rng_state(states["torch"])
        if torch.cuda.is_available() and states.get("torch.cuda"):
            torch.cuda.set_rng_state_all(states["torch.cuda"])
        kind, keys, pos, has_gauss, cached = states["numpy"]
        np.random.set_state((kind, keys.numpy().astype("uint32"), pos, has_gauss, cached))
        version, python_state, gauss = states["python"]
        random.setstate((version, tuple(python_state), gauss))


class InterruptCheckpoint(pl.Callback):
    """Saves ``<dirpath>/last.ckpt`` when ``fit`` is stopped by SIGTERM or Ctrl-C after it trained
    (``resume.ckpt`` where a user's ``save_last`` callback writes ``last.ckpt``, as
    :class:`~trainer_cli.callbacks.LastCheckpoint` does:
    :func:`~trainer_cli.callbacks.last_checkpoint.resume_file_name`).

    Like Lightning's ``OnExceptionCheckpoint`` (``trainer.save_checkpoint`` from ``on_exception``)
    but not a subclass of it: Lightning makes every ``fit`` with an ``OnExceptionCheckpoint`` and no
    ``ckpt_path`` resume from ``"last"``, and that callback deletes its file at teardown.

    In a ``train`` process the signals are recorded, never handled
    (:mod:`trainer_cli.job.stop_signals`): at the end of every training batch the ranks agree
    on the records with one all-reduce, and on a stop every rank raises Lightning's
    ``SIGTERMException`` at that same step, so ``on_exception`` saves on every rank together (the
    checkpoint holds a finished optimizer step). Elsewhere (a trainer built in a notebook or a
    test) Lightning's own SIGTERM handling raises it, possibly in a validation run of ``fit``: that
    validation is then saved as not begun, so the resumed run runs it in full (saved as it is,
    Lightning would take the epoch's validation as done and skip it). Nothing is saved when no
    batch was trained since the start (or the resume: its checkpoint still holds that state), nor
    on other exceptions (bugs, bad values, a second Ctrl-C that aborts).
    """

    def __init__(self, dirpath: str) -> None:
        self.ckpt_path = os.path.join(dirpath, "last.ckpt")
        self.saved: str | None = None
        self.trained = False  # a batch was trained by this process
        self._in_validation = False  # saving from inside a validation run of fit

    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        CTRL_C.clear()  # a Ctrl-C of an earlier run in this process is not this one's
        if stage == "fit":
            stop_signals.note(task_output.STARTED)  # this step's training started (trainer_cli.job.jobstate)
        if stage == "fit" and stop_signals.installed():
            stop_signals.arm()  # a signal from now on waits for the step all ranks agree on
        if stage == "fit" and (beacon := progress_beacon()) is not None:
            beacon.register_dump()  # the stall watchdog's stack dump

    # the stall watchdog (trainer_cli.job.progress): each step noted; validation, checkpoints and
    # epoch ends are phases that are no training step, not stalls
    def on_validation_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if trainer.state.fn == TrainerFn.FITTING and (beacon := progress_beacon()) is not None:
            beacon.pause("validation", trainer.global_step)

    def on_train_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if (beacon := progress_beacon()) is not None:
            beacon.pause("epoch end", trainer.global_step)

    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if (beacon := progress_beacon()) is not None:
            beacon.pause(PROGRESS_DONE, trainer.global_step)

    def on_train_batch_end(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        self.trained = True
        if (beacon := progress_beacon()) is not None:
            beacon.step(trainer.global_step)
        if not stop_signals.installed() or batch_idx + 1 >= trainer.num_training_batches:
            # the epoch's last batch: saved before its end, Lightning would resume it one batch off (61 of 60 steps)
            return
        stop = stop_signals.agree(trainer, (trainer.current_epoch, batch_idx, trainer.global_step))
        if stop is not None:  # every rank, at this same step
            if stop == signal.SIGINT:
                CTRL_C.append(stop)
            raise SIGTERMException

    def teardown(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        if stage == "fit" and stop_signals.installed():
            stop_signals.disarm(finished=True)  # the next fit in this process (a cv fold) arms again

    def on_exception(self, trainer: pl.Trainer, pl_module: pl.LightningModule, exception: BaseException) -> None:
        # during fit, its validation loop included (a signal may land there: trainer.training is False)
        if not isinstance(exception, SIGTERMException) or trainer.state.fn != TrainerFn.FITTING:
            return
        if not self.trained:
            return
        folder, given = os.path.split(self.ckpt_path)
        name = resume_file_name(trainer.checkpoint_callbacks, folder, given)  # a user's save_last: resume.ckpt
        if name is None:  # the user's callbacks save both: none of theirs is written over
            return
        self._in_validation = trainer.validating and not trainer.sanity_checking
        try:
            trainer.save_checkpoint(os.path.join(folder, name))
        finally:
            self._in_validation = False
        self.saved = os.path.join(folder, name)

    def on_save_checkpoint(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, checkpoint: dict[str, Any]
    ) -> None:
        if self._in_validation:
            _as_validation_not_begun(checkpoint)
        if trainer.state.fn == TrainerFn.FITTING and (beacon := progress_beacon()) is not None:
            beacon.pause("checkpoint", trainer.global_step)  # writing it is no stall


def _as_validation_not_begun(checkpoint: dict[str, Any]) -> None:
    """Set the fit loop's validation progress in ``checkpoint`` to "stopped before its first batch".

    Lightning restarts a validation found in the middle (``RESTARTED_MID_EVALUATION``: one batch
    started, not processed) from its first batch; any other state after the epoch's last training
    batch reads as "validation done".
    """
    progress = checkpoint.get("loops", {}).get("fit_loop", {}).get("epoch_loop.val_loop.batch_progress")
    if not progress:
        return
    before = progress["total"]["completed"] - progress["current"]["completed"]  # earlier validation runs of the epoch
    for key, base in (("total", before), ("current", 0)):
        progress[key].update(ready=base + 1, started=base + 1, processed=base, completed=base)
    progress["is_last_batch"] = False


def with_atomic_checkpoint_io(plugins: Any) -> list[Any]:
    """``plugins`` plus :class:`AsyncAtomicCheckpointIO` unless a CheckpointIO plugin is already
    given (``AtomicCheckpointIO``: the same files written on the training thread); a Lightning
    ``AsyncCheckpointIO`` given without the plugin it wraps wraps :class:`AtomicCheckpointIO`."""
    items = [] if plugins is None else list(plugins) if isinstance(plugins, (list, tuple)) else [plugins]
    for item in items:
        if isinstance(item, AsyncCheckpointIO) and item.checkpoint_io is None:
            item.checkpoint_io = AtomicCheckpointIO()
    if not any(isinstance(p, CheckpointIO) for p in items):
        items.append(AsyncAtomicCheckpointIO())
    return items
