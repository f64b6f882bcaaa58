"""``AsyncAtomicCheckpointIO``, the CLI's default CheckpointIO: the state as it was when the save was
asked for, written atomically off the training thread; removals after the saves before them; a
failed write raised, never lost. (Whole runs through it: every ``train fit`` test, the exact-resume
ones in ``tests/test_resume.py`` included.)"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import pytest
import torch
from lightning.pytorch.plugins.io import AsyncCheckpointIO

from trainer_cli.data import DigitsDataModule
from trainer_cli.runtime.checkpointing import AsyncAtomicCheckpointIO, AtomicCheckpointIO, with_atomic_checkpoint_io


class SlowAtomicCheckpointIO(AtomicCheckpointIO):
    """Atomic writes that wait for ``go`` first (a slow disk), recording the writing thread."""

    def __init__(self) -> None:
        self.go = threading.Event()
        self.threads: list[str] = []

    def save_checkpoint(self, checkpoint, path, storage_options=None) -> None:  # type: ignore[no-untyped-def]
        self.go.wait(30)
        self.threads.append(threading.current_thread().name)
        super().save_checkpoint(checkpoint, path, storage_options)


def load(path: Path) -> dict:
    return torch.load(path, map_location="cpu", weights_only=True)


def test_saves_the_state_as_it_was_off_the_calling_thread(tmp_path: Path) -> None:
    slow = SlowAtomicCheckpointIO()
    io = AsyncAtomicCheckpointIO(slow)
    weights = torch.arange(1000.0)
    io.save_checkpoint({"w": weights, "step": 1}, tmp_path / "last.ckpt")  # returns before the write
    assert not (tmp_path / "last.ckpt").exists()
    weights.mul_(-1)  # training goes on: the next optimizer step changes the weights in place
    io.save_checkpoint({"w": weights, "step": 2}, tmp_path / "other.ckpt")
    slow.go.set()
    io.teardown()  # what Lightning's strategy does when fit ends: waits for the writes
    assert torch.equal(load(tmp_path / "last.ckpt")["w"], torch.arange(1000.0))
    assert torch.equal(load(tmp_path / "other.ckpt")["w"], -torch.arange(1000.0))
    assert slow.threads and threading.main_thread().name not in slow.threads
    assert sorted(p.name for p in tmp_path.iterdir()) == ["last.ckpt", "other.ckpt"]  # no temporary file left


def test_a_replaced_checkpoint_is_removed_only_after_its_successor_is_written(tmp_path: Path) -> None:
    old, new = tmp_path / "best-epoch000.ckpt", tmp_path / "best-epoch001.ckpt"
    AtomicCheckpointIO().save_checkpoint({"epoch": 0}, old)
    slow = SlowAtomicCheckpointIO()
    io = AsyncAtomicCheckpointIO(slow)
    io.save_checkpoint({"epoch": 1}, new)
    io.remove_checkpoint(old)  # ModelCheckpoint's order: save the new best, remove the old one
    assert old.exists(), "removed while its successor was still being written"
    slow.go.set()
    io.teardown()
    assert not old.exists() and load(new)["epoch"] == 1


def test_a_failed_write_is_raised_and_keeps_the_older_checkpoint(tmp_path: Path) -> None:
    old = tmp_path / "best-epoch000.ckpt"
    AtomicCheckpointIO().save_checkpoint({"epoch": 0}, old)
    (tmp_path / "file").write_text("not a folder")
    slow = SlowAtomicCheckpointIO()
    io = AsyncAtomicCheckpointIO(slow)
    io.save_checkpoint({"epoch": 1}, tmp_path / "file" / "best-epoch001.ckpt")  # its folder cannot be made
    io.remove_checkpoint(old)  # queued behind the failing save (the disk is slow: it has not failed yet)
    slow.go.set()
    with pytest.raises(OSError):
        io.teardown()
    assert load(old)["epoch"] == 0


def test_a_failed_write_is_raised_by_the_next_save(tmp_path: Path) -> None:
    io = AsyncAtomicCheckpointIO()
    (tmp_path / "file").write_text("not a folder")
    with pytest.raises(OSError):
        io.save_checkpoint({"epoch": 1}, tmp_path / "file" / "best-epoch001.ckpt")  # raises if already failed
        for _ in range(200):  # the write fails on the worker; a later save (or teardown) raises it
            io.save_checkpoint({"epoch": 2}, tmp_path / "last.ckpt")
            threading.Event().wait(0.01)
        io.teardown()


def test_the_cli_default_plugin_is_the_async_atomic_one() -> None:
    [default] = with_atomic_checkpoint_io(None)
    assert isinstance(default, AsyncAtomicCheckpointIO) and isinstance(default.checkpoint_io, AtomicCheckpointIO)
    given = AtomicCheckpointIO()  # synchronous writes, as chosen
    assert with_atomic_checkpoint_io([given]) == [given]
    [lightnings] = with_atomic_checkpoint_io(AsyncCheckpointIO())  # Lightning's own, without the plugin it wraps
    assert isinstance(lightnings.checkpoint_io, AtomicCheckpointIO)


class SaveThenExit(pl.Callback):
    """What the Slurm requeue does (``SynchronizedRequeue``): save a checkpoint, then leave with an exit code."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def on_train_batch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any, batch: Any, batch_idx: int) -> None:
        if trainer.global_step == 3:
            trainer.save_checkpoint(self.path)
            raise SystemExit(3)


def test_a_run_that_exits_right_after_a_save_leaves_the_file_complete(tmp_path: Path) -> None:
    from tests.test_last_checkpoint import Digits

    slow = SlowAtomicCheckpointIO()
    threading.Timer(1.0, slow.go.set).start()  # a slow disk: the write is still pending when the callback exits
    trainer = pl.Trainer(
        accelerator="cpu", devices=1, max_epochs=1, limit_val_batches=0, logger=False, enable_progress_bar=False,
        enable_model_summary=False, enable_checkpointing=False, default_root_dir=tmp_path,
        callbacks=[SaveThenExit(tmp_path / "hpc_ckpt_1.ckpt")], plugins=[AsyncAtomicCheckpointIO(slow)],
    )
    with pytest.raises(SystemExit):
        trainer.fit(Digits(), DigitsDataModule(batch_size=32))
    assert load(tmp_path / "hpc_ckpt_1.ckpt")["global_step"] == 3  # written before fit let the exit through
    assert slow.threads and threading.main_thread().name not in slow.threads
