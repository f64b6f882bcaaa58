"""Each start of a run measured where it happens (trainer_cli/rundir/attempts.py, goodput.py): a digits
fit killed mid-run and resumed gives two attempts whose start step, last step and redone steps are
what history.jsonl and the checkpoint say; the buckets add up to each attempt's wall time."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

from resume_support import every_n_steps_config, global_step, start_train
from support import DIGITS, quiet_args, run_train

from trainer_cli.rundir import attempts, goodput, history
from trainer_cli.rundir.attempts import CHECKPOINT, TRAIN, VALIDATION, Recorder
from trainer_cli.tools import run_row, runs

STEPS_PER_EPOCH = 10
IDLE_S = 4
# an attempt's start is its process's creation time (psutil: the kernel's boot time, in whole seconds, plus the
# process's start ticks), so each attempt's wall time may be off by up to a second; a listing rounds to one
START_ERROR_S = 1


def _fit_args(root: Path, ckpt_config: str) -> list[str]:
    return [
        "fit", "--config", DIGITS, "--config", ckpt_config, *quiet_args(root, 1), "--trainer.deterministic", "true",
        "--trainer.limit_train_batches", str(STEPS_PER_EPOCH), "--trainer.limit_val_batches", "2",
        "--trainer.plugins", "trainer_cli.runtime.checkpointing.AtomicCheckpointIO",  # saved on the training thread
    ]


def _stops_itself_before(epoch: int, batch: int) -> list[str]:
    """SIGSTOP to itself as batch ``batch`` of epoch ``epoch`` starts: the steps before it are done and noted."""
    return [
        "--trainer.callbacks+", "tests.resume_signals.SignalAt", "--trainer.callbacks+.init_args.hook", "on_train_batch_start",
        "--trainer.callbacks+.init_args.epoch", str(epoch), "--trainer.callbacks+.init_args.batch", str(batch),
        "--trainer.callbacks+.init_args.signal", "SIGSTOP",
    ]


def _stopped(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] in "Tt"
    except OSError:
        return False


def _adds_up(row: dict) -> None:
    parts = [row[k] for k in goodput.BUCKETS] + [row["goodput_s"]]
    assert all(p >= 0 for p in parts), row
    assert abs(sum(parts) - row["wall_s"]) <= 0.01 * row["wall_s"], row


def test_a_killed_and_resumed_fit_gives_two_measured_attempts(tmp_path: Path) -> None:
    root = tmp_path / "runs"
    run = root / "digits" / "version_0"
    args = _fit_args(root, every_n_steps_config(tmp_path, 4))
    proc = start_train(*args, *_stops_itself_before(0, 6))  # after step 6; saves at 4, 8
    deadline = time.monotonic() + 120
    while not _stopped(proc.pid):
        assert proc.poll() is None and time.monotonic() < deadline, "the run did not stop itself at step 6"
        time.sleep(0.05)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    resumed_from = global_step(run / "checkpoints" / "last.ckpt")
    assert resumed_from == 4  # written by the training thread before it went on
    time.sleep(IDLE_S)  # between the stop and the resume: no attempt's time
    done = run_train(*args, *_stops_itself_before(0, 6), "--ckpt_path", "last")  # (SignalAt: not on a resume)
    assert done.returncode == 0, done.stderr[-3000:]

    starts = [r["global_step"] for r in history.read(run) if r["verb"] == "fit"]
    measured = attempts.read(run)
    assert [a["rank"] for a in measured] == [0, 0]
    first, second = measured
    assert [first["start_step"], second["start_step"]] == starts == [0, resumed_from]
    assert first["last_step"] == 6 and first["open"] and "ended_by" not in first  # killed: its last note
    assert second["last_step"] == STEPS_PER_EPOCH and second["ended_by"] == "completed" and not second["open"]
    assert first["attempt"] != second["attempt"]
    assert "checkpoint_loaded" in second["marks"] and "checkpoint_loaded" not in first["marks"]
    marks = second["marks"]
    assert second["started"] <= marks["setup"] <= marks["fit_start"] <= marks["train_start"] <= marks["first_step"]
    assert [c[0] for c in first["checkpoints"]] == [4]  # the save every 4 steps, with where training stood then

    measures = goodput.buckets(run)
    one, two = measures["attempts"]
    assert one["redone_steps"] == 6 - resumed_from and two["redone_steps"] == 0
    assert measures["total"]["redone_steps"] == 6 - resumed_from
    assert one["redone_s"] > 0 and not one["redone_estimated"]  # the resumed save's moment was recorded
    for row in (one, two):
        _adds_up(row)
        assert row["startup_s"] > 0 and row["validation_s"] > 0 and row["checkpoint_s"] > 0 and row["goodput_s"] > 0
        assert row["memory"]["rss_peak_bytes"] > 0
    assert two["tail_s"] > 0 and two["wall_s"] >= two["startup_s"] + two["goodput_s"]
    assert measures["memory"]["rss_peak_bytes"] > 50 * 2**20  # torch and Lightning in memory
    _adds_up(measures["total"])

    listed = run_row.read_run(run)  # train runs' duration: the attempts' own, not the idle time between them
    assert listed["duration_s"] == round(first["wall_s"] + second["wall_s"])
    # the idle time between the attempts is not in it (each start's error counts once more in the sum than in the span)
    assert listed["duration_s"] <= second["end"] - first["started"] - IDLE_S + 1 + START_ERROR_S


def test_a_stalled_attempt_ends_at_the_watchdogs_decision(tmp_path: Path) -> None:
    """An attempt the watchdog ended (its stall record in job.json) counts from its last step to the
    decision as stall, and the steps after the save the next attempt resumed from as redone (exact)."""
    info = {"node": "n1", "pid": 1, "slurm": {"job_id": "7", "restart": 0}}
    stalled = Recorder(tmp_path, 0, "7.0", 1000.0, info)
    stalled.mark("setup", 1010.0)
    stalled.train_started(0)
    for step in range(1, 9):  # the first step ends the start-up at 1020
        stalled.step(step, 1019.0 + step)
    stalled.enter(VALIDATION, 1028.0)
    stalled.leave(VALIDATION, 1030.0)
    stalled.enter(CHECKPOINT, 1030.0)
    stalled.checkpoint_saved(8)
    stalled.leave(CHECKPOINT, 1030.5)
    for step in range(9, 13):
        stalled.step(step, 1022.0 + step)  # 1031..1034
    stalled.write(now=1034.0)
    stalled.close_note()
    assert stalled.stack == [TRAIN]
    (tmp_path / "job.json").write_text(json.dumps({"stall": {"job_id": "7", "restart": 0, "idle_s": 60, "time": 1100.0}}))
    resumed = Recorder(tmp_path, 0, "7.1", 1200.0, {**info, "slurm": {"job_id": "7", "restart": 1}})
    resumed.train_started(8)
    for step in range(9, 13):
        resumed.step(step, 1221.0 + step)  # 1230..1233
    resumed.write(ended_by="completed", now=1240.0)
    resumed.close_note()

    one, two = goodput.buckets(tmp_path)["attempts"]
    assert one["ended_by"] == "stall" and one["open"] and one["end"] == 1100.0 and one["wall_s"] == 100.0
    assert (one["startup_s"], one["validation_s"], one["checkpoint_s"], one["stall_s"], one["tail_s"]) == (20, 2, 0.5, 66, 0)
    assert (one["redone_steps"], one["redone_s"], one["goodput_s"], one["redone_estimated"]) == (4, 3.5, 8, False)
    _adds_up(one)
    assert (two["startup_s"], two["goodput_s"], two["tail_s"], two["wall_s"], two["redone_steps"]) == (30, 3, 7, 40, 0)
    _adds_up(two)
