"""A full disk while saving a checkpoint (ENOSPC): one error line, exit 2, the checkpoints already
saved kept intact and the run resumable. The disk is a real small tmpfs (needs root to mount)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import torch

from support import DIGITS, quiet_args, run_train


@pytest.fixture
def small_disk(tmp_path: Path) -> Path:
    """A 2000 KiB tmpfs: one epoch's best and last checkpoints of the digits CNN fit (830 KB each), a third does not."""
    mount = tmp_path / "disk"
    mount.mkdir()
    proc = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2000k", "tmpfs", str(mount)], capture_output=True, text=True)
    if proc.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here: {proc.stderr.strip()}")
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
