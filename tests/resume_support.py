"""Helpers for the reliability tests: start a training process, wait for a checkpoint, read it back."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable

import torch

from support import REPO


def start_train(*args: str, cwd: Path = REPO) -> subprocess.Popen[str]:
    """Start ``python -m trainer_cli ARGS`` in the background (output collected on exit)."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    env.pop("TRAINER_CLI_RUN_DIR", None)
    return subprocess.Popen(
        [sys.executable, "-m", "trainer_cli", *args], cwd=cwd, env=env, text=True,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
    )


def load(path: Path) -> dict[str, Any]:
    """A checkpoint loaded the way Lightning resumes it (``weights_only=True``)."""
    return torch.load(path, map_location="cpu", weights_only=True)


def wait_for(proc: subprocess.Popen[str], ready: Callable[[], bool], timeout_s: float = 300) -> None:
    """Poll ``ready`` until true; fails when the process ends first or the time runs out."""
    end = time.monotonic() + timeout_s
    while not ready():
        if proc.poll() is not None:
            raise AssertionError(f"training ended (exit {proc.returncode}) before the awaited moment:\n{proc.stdout.read()[-3000:] if proc.stdout else ''}")
        if time.monotonic() > end:
            proc.kill()
            raise AssertionError("timed out waiting for the training process")
        time.sleep(0.02)


def global_step(path: Path) -> int | None:
    """The checkpoint's global step, or None while there is no checkpoint."""
    if not path.is_file():
        return None
    return int(load(path)["global_step"])


def same_tensors(a: Any, b: Any) -> bool:
    """Bitwise equality of nested dicts/lists of tensors and plain values."""
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b)
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(same_tensors(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return isinstance(b, (list, tuple)) and len(a) == len(b) and all(same_tensors(x, y) for x, y in zip(a, b))
    return a == b
