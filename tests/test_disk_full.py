"""A full disk while saving a checkpoint (ENOSPC): one error line, exit 2, the checkpoints already
saved kept intact and the run resumable. The disk is a real small tmpfs (needs root to mount)."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from support import DIGITS, quiet_args, run_train


def _mount(tmp_path: Path, size: str) -> Path:
    mount = tmp_path / "disk"
    mount.mkdir()
    proc = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(mount)], capture_output=True, text=True)
    if proc.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here: {proc.stderr.strip()}")
    return mount


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 2000 KiB tmpfs: one epoch's best and last checkpoints of the digits CNN fit (830 KB each), a third does not."""
    mount = _mount(tmp_path, "2000k")
    yield mount
    subprocess.run(["umount", str(mount)], capture_output=True)


@pytest.fixture(params=["4k", "16k"])
def tiny_disk(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Path]:
    """A tmpfs too small for the run's own files (config, records, TensorBoard events) before any checkpoint."""
    mount = _mount(tmp_path, request.param)
    yield mount
    subprocess.run(["umount", str(mount)], capture_output=True)


def test_full_disk_while_saving_is_one_error_and_keeps_the_saved_checkpoints(small_disk: Path) -> None:
    done = run_train("fit", "--config", DIGITS, *quiet_args(small_disk, epochs=3))
    assert done.returncode == 2, done.stderr[-3000:]
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "no space left on the device while saving checkpoint" in errors[0], done.stderr[-3000:]
    run = small_disk / "digits" / "version_0"
    last = torch.load(run / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=False)
    assert last["global_step"] > 0, "the checkpoint saved before the disk filled is complete and kept"
    assert not list(run.rglob(".*.tmp-*")), "no partial temporary file left behind"


def test_full_disk_while_writing_the_runs_files_is_one_error_and_leaves_no_run(tiny_disk: Path) -> None:
    """Full before any checkpoint (the run's records, TensorBoard's writer thread): one error line,
    exit 2, no traceback from the main thread or a writer thread, the empty run directory removed."""
    done = run_train("fit", "--config", DIGITS, *quiet_args(tiny_disk, epochs=1))
    assert done.returncode == 2, done.stderr[-3000:]
    assert "Traceback" not in done.stderr + done.stdout, done.stderr[-3000:]
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and errors[0].startswith("error: no space left on the device while writing"), done.stderr[-3000:]
    assert not (tiny_disk / "digits" / "version_0").exists()
