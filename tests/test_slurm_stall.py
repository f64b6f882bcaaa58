"""The stall watchdog on the real local Slurm cluster (scripts/local-slurm, four nodes): a 2-node
DDP job one of whose ranks is stopped (SIGSTOP) mid-epoch is ended by the batch script's watchdog
within the stall timeout plus a margin, its stacks dumped, the rank and node named in the log, and
requeued without that node; it resumes from its last checkpoint and completes, its final weights,
optimizer and scheduler state bitwise equal to the same job's left alone beside it. The same job's long
but healthy validation before the stop (twice the timeout, in epoch 0) is not taken for a stall.
One job for both: each start of a 2-node job on this machine costs about 10 s."""

from __future__ import annotations

import json
import os
import shutil
import signal
import time
from pathlib import Path

import pytest
from slurm_support import (  # noqa: F401 - slurm_cluster is a fixture
    _job_processes,
    scontrol_job,
    slurm_cluster,
    wait_for_file,
    wait_for_requeue,
    wait_for_state,
)
from resume_support import final_state, same_tensors
from support import REPO
from test_slurm_cluster import _submit

from trainer_cli.job import jobstate, restarts
from trainer_cli.rundir import attempts, goodput, history
from trainer_cli.launch.jobs import stall_note

TESTS = str(REPO / "tests")


def _slow(**init_args: float) -> list[str]:
    callback = json.dumps({"class_path": "stall_support.Slow", "init_args": init_args})
    return ["--trainer.callbacks+", callback, "--slurm.env", json.dumps({"PYTHONPATH": TESTS})]


def _rank_process(job_id: str, rank: int) -> tuple[int, str]:
    """The pid of the training process of ``rank`` (not its loader workers) and its node."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        found = {}
        for pid in _job_processes(job_id):
            try:
                env = dict(v.split("=", 1) for v in Path(f"/proc/{pid}/environ").read_text().split("\0") if "=" in v)
                ppid = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            if env.get("SLURM_PROCID") == str(rank):
                found[pid] = (ppid, env.get("SLURMD_NODENAME", "?"))
        mains = [pid for pid, (ppid, _) in found.items() if ppid not in found]
        if mains:
            return mains[0], found[mains[0]][1]
        time.sleep(0.25)
    raise AssertionError(f"no process of rank {rank} in job {job_id}")


def _wait_mid_epoch(beat: Path, steps_per_epoch: int, timeout_s: float = 120) -> None:
    """Until the rank's progress note says it trains in the middle of an epoch after the first."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            note = json.loads(beat.read_text())
        except (OSError, ValueError):
            note = {}
        step = note.get("step", 0)
        # a step well inside the epoch (the note is written at most every so often: a wide window, not a few steps)
        if note.get("phase") == "train" and step > steps_per_epoch and 1 <= step % steps_per_epoch <= steps_per_epoch - 3:
            return
        time.sleep(0.05)
    raise AssertionError(f"{beat} never showed a step in the middle of an epoch")


# make test's 12 minutes: the watchdog's judgement and records are tests/test_stall_watchdog.py; a stall on the
# cluster is in the long tier twice (here, and tests/test_goodput_cluster.py's job preempted twice and stalled once)
@pytest.mark.long
def test_a_stopped_rank_is_a_stall_requeued_without_its_node(slurm_cluster: None, tmp_path: Path) -> None:  # noqa: F811
    timeout_s, epochs, batches = 6, 2, 10  # 1,257 digits / (64 x 2 ranks): 10 batches an epoch
    exact = ["--trainer.max_epochs", str(epochs), "--trainer.limit_train_batches", str(batches), "--trainer.deterministic", "true"]
    job_id, run_dir, _ = _submit(
        tmp_path / "stalled", 2, 1, *exact, "--slurm.stall_timeout_s", str(timeout_s),
        *_slow(step_s=0.3, validation_s=2 * timeout_s, slow_epoch=0),
    )
    # the same run left alone, beside it (the slow callback only sleeps: it changes no weight)
    reference_id, reference_dir, _ = _submit(tmp_path / "reference", 2, 1, *exact)
    log = run_dir / f"slurm-{job_id}.log"
    wait_for_file(run_dir / "checkpoints" / "last.ckpt", timeout_s=300)  # epoch 0 done: stop in epoch 1
    _wait_mid_epoch(run_dir / ".progress" / "rank1", steps_per_epoch=batches)
    pid, node = _rank_process(job_id, 1)
    os.kill(pid, signal.SIGSTOP)
    stopped_at = time.monotonic()
    try:
        wait_for_requeue(job_id, timeout_s=timeout_s + 60)
        requeued_after = time.monotonic() - stopped_at
    except AssertionError as err:
        beats = [p.read_text() for p in sorted((run_dir / ".progress").glob("rank*"))]
        raise AssertionError(f"{err}\n{beats}\n{log.read_text()[-3000:]}") from None
    finally:
        try:
            os.kill(pid, signal.SIGKILL)  # already gone when the watchdog did its work
        except ProcessLookupError:
            pass
    assert wait_for_state(job_id, timeout_s=300) == "COMPLETED", log.read_text()[-3000:]
    text = log.read_text()
    # SIGSTOP -> PENDING: the timeout, the watchdog's poll (timeout / 4), the dump wait (5 s), the requeue
    assert requeued_after < timeout_s + 30, f"requeued {requeued_after:.0f} s after the stop\n{text[-3000:]}"
    assert f"trainer-cli: stall: rank 1 on {node} made no step for" in text, text[-3000:]
    assert f"requeueing without {node}" in text and f"job {job_id} excludes {node}" in text, text[-3000:]
    job = scontrol_job(job_id)
    assert node in job.get("ExcNodeList", ""), job
    assert node not in job.get("NodeList", "").split(",") and job["Restarts"] == "1", job
    events = restarts.read(run_dir)  # one restart: the stop in epoch 1, not epoch 0's long validation
    assert [(e["cause"], e["action"], e["restart"], e["stalled"]) for e in events] == [
        (restarts.STALL, "requeue", 1, [1])
    ]
    assert events[0]["step"] > batches and text.count("trainer-cli: stall:") == 1
    stacks = Path(events[0]["stacks"])
    assert "did not answer" in (stacks / "rank1.txt").read_text()
    if shutil.which("py-spy"):  # read on node2 through srun --overlap, the process stopped
        assert "py-spy dump" in (stacks / "rank1.txt").read_text(), (stacks / "rank1.txt").read_text()
    assert "most recent call first" in (stacks / "rank0.txt").read_text()  # faulthandler's dump of the waiting rank
    assert "Resuming" in text and str(run_dir / "checkpoints") in text, text[-3000:]
    import torch

    last = torch.load(run_dir / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=False)
    assert last["global_step"] == epochs * batches
    assert f"rank 1 on {node}" in stall_note(run_dir, job_id) and str(stacks) in stall_note(run_dir, job_id)
    assert jobstate.read(run_dir)["excluded_nodes"] == [node]
    # measured where it happened (trainer_cli/rundir/attempts.py): both ranks' first attempt ended within a
    # step of each other (DDP in lockstep at the gradients' allreduce; a rank stopped between that and its
    # record of the step is one behind: seen 11 and 12), rank 0 at or past the step the watchdog read; the
    # requeue started from the checkpoint
    measured = attempts.read(run_dir)
    assert sorted((a["job"]["restart"], a["rank"]) for a in measured) == [(0, 0), (0, 1), (1, 0), (1, 1)]
    first, second = [a for a in measured if a["rank"] == 0]
    stalled_at = {a["last_step"] for a in measured if a["job"]["restart"] == 0}
    assert max(stalled_at) - min(stalled_at) <= 1 and first["last_step"] >= events[0]["step"] and first["open"], stalled_at
    resumed_from = [h["global_step"] for h in history.read(run_dir) if h["kind"] == "requeue"]
    assert resumed_from == [second["start_step"]] == [batches]  # the checkpoint of epoch 0's end
    measures = goodput.buckets(run_dir)
    one, two = measures["attempts"]
    assert one["ended_by"] == "stall" and one["redone_steps"] == first["last_step"] - batches and not one["redone_estimated"]
    assert timeout_s <= one["stall_s"] <= timeout_s + 30 and one["redone_s"] > 0 and two["redone_steps"] == 0
    for row in (one, two, measures["total"]):
        parts = [row[k] for k in goodput.BUCKETS] + [row["goodput_s"]]
        assert min(parts) >= 0 and abs(sum(parts) - row["wall_s"]) <= 0.01 * row["wall_s"], row
    assert measures["memory"]["rss_peak_bytes"] > 0
    reference_log = (reference_dir / f"slurm-{reference_id}.log")
    assert wait_for_state(reference_id, timeout_s=300) == "COMPLETED", reference_log.read_text()[-3000:]
    resumed, alone = final_state(run_dir), final_state(reference_dir)
    assert resumed["step"] == alone["step"] == epochs * batches
    assert same_tensors(resumed["model"], alone["model"]), "weights differ from the run left alone"
    assert same_tensors(resumed["optimizer"], alone["optimizer"]) and same_tensors(resumed["scheduler"], alone["scheduler"])

