"""Helpers for the reliability tests: start a training process, wait for a checkpoint, read it back."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any, Callable

import torch
from support import CONFIGS, REPO, forkserver


def start_train(*args: str, cwd: Path = REPO, own_group: bool = False) -> Any:
    """Start ``python -m trainer_cli ARGS`` in the background (output collected on exit): a
    ``subprocess.Popen``, or its stand-in :class:`forkserver.Forked` for a process forked by the
    suite's fork server (no start-up imports); stdout and stderr on ``stdout``, text.

    ``own_group``: in a process group of its own, so that :func:`kill_group` also ends what it
    started (DDP's other ranks, DataLoader workers).
    """
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    env.pop("TRAINER_CLI_RUN_DIR", None)
    return forkserver.popen_python(["-m", "trainer_cli", *args], cwd, env, new_session=own_group)


def kill_group(proc: subprocess.Popen[str]) -> None:
    """SIGKILL a process started with ``own_group=True`` and everything in its group, then reap it
    (nothing is sent once it has ended and been reaped: its id may belong to another process by then)."""
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    proc.wait()


def every_n_steps_config(tmp: Path, n: int | None) -> str:
    """A callbacks layer checkpointing every ``n`` optimizer steps; None: the digits default
    (``configs/callbacks/default.yaml``: best and last at each validation)."""
    if n is None:
        return str(CONFIGS / "callbacks" / "default.yaml")
    path = tmp / f"ckpt_every_{n}.yaml"
    path.write_text(
        "trainer:\n  callbacks:\n    - class_path: lightning.pytorch.callbacks.ModelCheckpoint\n"
        f"      init_args:\n        every_n_train_steps: {n}\n        save_last: true\n        save_top_k: 0\n"
    )
    return str(path)


def stops_itself_at(epoch: int, batch: int) -> list[str]:
    """Flags adding a callback that stops the run (SIGSTOP to itself, in each rank) at the end of
    batch ``batch`` of epoch ``epoch``, before that step's checkpoint: a run waited on by
    :func:`kill_when` cannot run past the checkpoints the test wants while the test looks (a digits
    run of 16-20 steps once finished within one look). Only in a run that did not resume
    (``tests/resume_signals.py``, ``SignalAt``); it has no state, so the run's checkpoints are those of
    the same run without it."""
    return [
        "--trainer.callbacks+", "tests.resume_signals.SignalAt", "--trainer.callbacks+.init_args.hook", "on_train_batch_end",
        "--trainer.callbacks+.init_args.epoch", str(epoch), "--trainer.callbacks+.init_args.batch", str(batch),
        "--trainer.callbacks+.init_args.signal", "SIGSTOP",
    ]


def final_state(run: Path) -> dict[str, Any]:
    """Step, epoch, weights, optimizer and scheduler state of the run's ``last.ckpt``."""
    ckpt = load(run / "checkpoints" / "last.ckpt")
    return {"step": ckpt["global_step"], "epoch": ckpt["epoch"], "model": ckpt["state_dict"],
            "optimizer": ckpt["optimizer_states"], "scheduler": ckpt["lr_schedulers"]}


def load(path: Path) -> dict[str, Any]:
    """A checkpoint loaded the way Lightning resumes it (``weights_only=True``)."""
    return torch.load(path, map_location="cpu", weights_only=True)


def _members(proc: subprocess.Popen[str], group: bool) -> list[str]:
    """The process states (``/proc/<pid>/stat``: R, S, T, ...) of ``proc`` and, when ``group``, of
    every process in its process group."""
    if not group:
        pids = [str(proc.pid)]
    else:
        pids = [p for p in os.listdir("/proc") if p.isdigit()]
    lines = []
    for pid in pids:
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()  # state, ppid, pgrp, ...
        if pid == str(proc.pid) or (group and fields[2] == str(proc.pid)):
            lines.append(fields[0])
    return lines


def kill_when(proc: subprocess.Popen[str], ready: Callable[[], bool], group: bool = False, timeout_s: float = 300) -> None:
    """SIGKILL ``proc`` (its process group when ``group``: DDP's other rank, loader workers) at a
    moment ``ready`` holds: each try stops the process(es) with SIGSTOP and waits until every one is
    stopped, so the files ``ready`` reads (a checkpoint renamed by the writer thread) cannot change
    between the look and the kill; when not ready yet, SIGCONT and look again.

    Fails when the process ends first or the time runs out."""
    send = (lambda sig: os.killpg(proc.pid, sig)) if group else proc.send_signal
    end = time.monotonic() + timeout_s
    while True:
        if proc.poll() is not None:
            raise AssertionError(f"training ended (exit {proc.returncode}) before the awaited moment:\n{proc.stdout.read()[-3000:] if proc.stdout else ''}")
        send(signal.SIGSTOP)
        settle = time.monotonic() + 5
        while any(state not in "TtZX" for state in _members(proc, group)) and time.monotonic() < settle:
            time.sleep(0.001)
        if ready():
            send(signal.SIGKILL)
            proc.wait()
            return
        send(signal.SIGCONT)
        if time.monotonic() > end:
            kill_group(proc) if group else proc.kill()
            raise AssertionError("timed out waiting for the training process")
        time.sleep(0.02)


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
