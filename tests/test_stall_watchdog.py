"""The stall watchdog's rules without a cluster (trainer_cli.job.progress, its watchdog in
trainer_cli.schedulers.slurm.watchdog): what a rank notes, when
the notes read as a stall, the default timeout, and the stack dump a rank gives on SIGWINCH."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from trainer_cli.job import progress
from trainer_cli.schedulers.slurm import watchdog


def _beat(rank: int, age_s: float, phase: str = "train", step_s: float | None = 0.1, now: float = 1000.0) -> dict:
    return {"rank": rank, "step": 7, "time": now - age_s, "phase": phase, "step_s": step_s, "node": f"n{rank}"}


def test_a_rank_late_in_training_is_a_stall_even_while_the_others_wait_in_a_pause() -> None:
    assert progress.judge([_beat(0, 1), _beat(1, 5)], 1000.0, 10) is None
    stall = progress.judge([_beat(0, 11, "validation"), _beat(1, 12)], 1000.0, 10)
    assert stall is not None and [b["rank"] for b in stall.late] == [1] and stall.timeout_s == 10


def test_a_long_validation_or_checkpoint_is_no_stall_until_every_rank_is_late_past_the_pause_limit() -> None:
    limit = progress.pause_limit_s(10)
    assert limit == 3600
    assert progress.judge([_beat(0, 100, "validation"), _beat(1, 100, "checkpoint")], 1000.0, 10) is None
    assert progress.judge([_beat(0, limit + 1, "validation"), _beat(1, 5, "validation")], 1000.0, 10) is None
    assert progress.judge([_beat(0, limit + 1, "epoch end"), _beat(1, limit + 2, "validation")], 1000.0, 10)
    assert progress.judge([_beat(0, 500, "done"), _beat(1, 1)], 1000.0, 10) is None  # a rank that finished


def test_the_default_timeout_follows_the_slowest_rank_above_a_floor() -> None:
    assert progress.default_timeout_s([_beat(0, 0, step_s=0.1), _beat(1, 0, step_s=None)]) == progress.FLOOR_S
    assert progress.default_timeout_s([_beat(0, 0, step_s=2.0), _beat(1, 0, step_s=30.0)]) == 600.0
    assert progress.judge([_beat(0, 299), _beat(1, 1)], 1000.0, None) is None
    assert progress.judge([_beat(0, 301), _beat(1, 1)], 1000.0, None) is not None


def test_a_rank_notes_steps_throttled_and_pauses_at_once(tmp_path: Path) -> None:
    beacon = progress.Beacon(tmp_path, 3)
    beacon.step(1)
    first = progress.read_beats(tmp_path)
    beacon.step(2)  # within WRITE_EVERY_S: not written
    assert progress.read_beats(tmp_path) == first and first[0]["phase"] == "train" and first[0]["rank"] == 3
    beacon.pause("validation", 2)
    assert progress.read_beats(tmp_path)[0]["phase"] == "validation"
    beacon.step(3)  # back to training: written at once
    assert progress.read_beats(tmp_path)[0]["step"] == 3


def test_a_rank_dumps_its_stacks_on_sigwinch(tmp_path: Path) -> None:
    code = (
        "import sys, time; from pathlib import Path; from trainer_cli.job import progress\n"
        "progress.Beacon(Path(sys.argv[1]), 0).register_dump()\n"
        "def stuck_in_a_collective():\n    print('ready', flush=True)\n    time.sleep(30)\nstuck_in_a_collective()\n"
    )
    child = subprocess.Popen([sys.executable, "-c", code, str(tmp_path)], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "ready"
        os.kill(child.pid, signal.SIGWINCH)
        deadline = time.monotonic() + 10
        while "stuck_in_a_collective" not in (tmp_path / "stack.rank0").read_text() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert "stuck_in_a_collective" in (tmp_path / "stack.rank0").read_text()
        assert child.poll() is None  # the dump does not end the process
    finally:
        child.kill()
        child.wait()


def test_pyspy_reads_a_stopped_rank_where_installed() -> None:
    """Where py-spy is on PATH, the watchdog adds its dump of each rank (it reads a stopped process);
    without it, nothing (the faulthandler dump stands alone)."""
    import shutil

    import pytest

    code = "import time\ndef stopped_in_a_step():\n    time.sleep(30)\nstopped_in_a_step()\n"
    child = subprocess.Popen([sys.executable, "-c", code])
    try:
        time.sleep(0.5)
        os.kill(child.pid, signal.SIGSTOP)
        dump = watchdog.pyspy_dump({"pid": child.pid, "node": progress.node_name()}, "0")
        if not shutil.which("py-spy"):
            assert dump is None
            pytest.skip("py-spy is not installed: only its absence is checked")
        assert dump is not None and "stopped_in_a_step" in dump
    finally:
        child.kill()
        child.wait()
