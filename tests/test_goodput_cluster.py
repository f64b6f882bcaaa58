"""Issue 38's Done-when on the local cluster with accounting (scripts/local-slurm, slurmdbd): a 2-node
DDP digits job preempted twice (`scancel -s USR1`), one of its ranks stopped once (SIGSTOP: the
batch script's watchdog requeues it), then completed. `train jobs RUN --json` and `train runs` report
allocated CPU-hours within 2% of sacct's (AllocTRES x ElapsedRaw of every attempt, summed here from
sacct's own output); goodput and the badput buckets add up to 100% of the allocated time within 1%,
and that allocated time is sacct's within 2%; the lost progress equals the steps actually redone
(from history.jsonl's start steps and rank 0's attempt records); the text of `train jobs RUN` holds
the same figures as its JSON; `<run>/timeline.svg` shows every attempt. Long tier: about 3 minutes
on 2 cores (4 starts of a 2-node job)."""

from __future__ import annotations

import contextlib
import io
import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
from slurm_support import (  # noqa: F401 - slurm_cluster is a fixture
    sacct_attempts,
    sacct_hours,
    slurm_cluster,
    wait_for_requeue,
    wait_for_state,
)
from support import REPO
from test_cost import assert_cost_matches_sacct
from test_slurm_cluster import _submit
from test_slurm_stall import _rank_process

from trainer_cli.job import restarts
from trainer_cli.launch import jobs
from trainer_cli.rundir import attempts, goodput, history
from trainer_cli.schedulers import engines
from trainer_cli.schedulers.slurm.states import query_slurm
from trainer_cli.tools import runs

EPOCHS, BATCHES, STALL_TIMEOUT_S = 6, 10, 6  # 1,257 digits / (64 x 2 ranks): 10 batches an epoch


def _rank0_attempts(run_dir: Path) -> list[dict]:
    return [a for a in attempts.read(run_dir) if a.get("rank") == 0]


def _wait_training(run_dir: Path, count: int, past: int, timeout_s: float = 240) -> dict:
    """Until rank 0's ``count``-th attempt has completed a step past ``past`` (its per-step note);
    returns that attempt."""
    deadline, found = time.monotonic() + timeout_s, []
    while time.monotonic() < deadline:
        found = _rank0_attempts(run_dir)
        if len(found) >= count and (found[count - 1].get("last_step") or -1) > past:
            return found[count - 1]
        time.sleep(0.2)
    raise AssertionError(f"{run_dir}: attempt {count} never passed step {past}: {found}")


def _text_and_json(root: Path, run_dir: Path) -> tuple[str, dict]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert jobs.main(["--root", str(root), str(run_dir)], engines()) == 0
    shown = io.StringIO()
    with contextlib.redirect_stdout(shown):
        assert jobs.main(["--root", str(root), str(run_dir), "--json"], engines()) == 0
    return out.getvalue(), json.loads(shown.getvalue())


@pytest.mark.long
def test_goodput_of_a_two_node_job_preempted_twice_and_stalled_once(slurm_cluster: None, tmp_path: Path) -> None:  # noqa: F811
    slow = json.dumps({"class_path": "stall_support.Slow", "init_args": {"step_s": 0.25}})
    job_id, run_dir, _ = _submit(
        tmp_path, 2, 1, "--trainer.max_epochs", str(EPOCHS), "--trainer.limit_train_batches", str(BATCHES),
        "--slurm.stall_timeout_s", str(STALL_TIMEOUT_S), "--trainer.callbacks+", slow,
        "--slurm.env", json.dumps({"PYTHONPATH": str(REPO / "tests")}),
    )
    log = run_dir / f"slurm-{job_id}.log"
    # two preemptions mid-epoch (each saves the exact step: nothing lost), each once the attempt trains
    _wait_training(run_dir, 1, BATCHES + 2)
    subprocess.run(["scancel", "-s", "USR1", job_id], check=True, timeout=30)
    wait_for_requeue(job_id)
    second = _wait_training(run_dir, 2, 0)
    _wait_training(run_dir, 2, second["start_step"] + 3)
    subprocess.run(["scancel", "-s", "USR1", job_id], check=True, timeout=30)
    wait_for_requeue(job_id)
    # the third attempt past an epoch's checkpoint and then some: rank 1 stopped, the watchdog requeues
    third = _wait_training(run_dir, 3, 0)
    _wait_training(run_dir, 3, (third["start_step"] // BATCHES + 1) * BATCHES + 3)
    pid, _ = _rank_process(job_id, 1)
    os.kill(pid, signal.SIGSTOP)
    try:
        wait_for_requeue(job_id, timeout_s=STALL_TIMEOUT_S + 90)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    assert wait_for_state(job_id, timeout_s=400) == "COMPLETED", log.read_text()[-3000:]
    causes = [(e["cause"], e["restart"]) for e in restarts.read(run_dir)]
    assert causes == [(restarts.PREEMPTED, 1), (restarts.PREEMPTED, 2), (restarts.STALL, 3)], causes

    # cost: the CPU-hours of `train jobs` (text and --json) and `train runs` within 2% of sacct's
    assert_cost_matches_sacct(tmp_path, job_id, run_dir, attempts=4)
    rows = sacct_attempts(job_id, 4)
    sacct_cpu_h, sacct_elapsed = sacct_hours(rows, "cpu"), sum(int(r["ElapsedRaw"]) for r in rows)
    text, shown = _text_and_json(tmp_path, run_dir)
    assert shown["cost"]["cpu_hours"] == pytest.approx(sacct_cpu_h, rel=0.02)
    listed = runs.collect([run_dir], engines=engines())["runs"][0]
    assert listed["cost"]["cpu_hours"] == pytest.approx(sacct_cpu_h, rel=0.02)

    # goodput: the buckets add up to 100% of the allocated time, which is sacct's
    figures = shown["goodput"]
    assert figures["source"] == "sacct" and len(figures["attempts"]) == 4, figures
    parts = [figures["goodput_s"]] + [b["seconds"] for b in figures["badput"].values()]
    shares = [figures["goodput_pct"]] + [b["percent"] for b in figures["badput"].values()]
    assert min(parts) >= 0 and sum(shares) == pytest.approx(100, abs=1), figures
    assert sum(parts) == pytest.approx(figures["allocated_s"], rel=0.01)
    # (sacct's Start and End are whole seconds: a process may outlast its allocation's ElapsedRaw by a second)
    assert figures["allocated_s"] == pytest.approx(sacct_elapsed, abs=len(rows)), (figures["allocated_s"], rows)
    badput = {k: b["seconds"] for k, b in figures["badput"].items()}
    # launch (the allocation outside the ranks' processes) can round to 0: sacct's times are whole seconds
    # and the ranks' own may fill them (0.0 once on Slurm 24.11, quiet machine, 2026-12-02)
    assert badput["startup_s"] > 0 and badput["launch_s"] >= 0 and badput["stall_s"] >= STALL_TIMEOUT_S, badput
    assert badput["failed_s"] == 0 and 0 < figures["goodput_pct"] < 100, figures

    # lost progress: each attempt's last step (rank 0's records) less the step the next starts from
    # (history.jsonl), the steps it did again; 0 for a preemption (its exact step saved), some for the stall
    starts = [h["global_step"] for h in history.read(run_dir) if h.get("job") and h.get("verb", "fit") == "fit"]
    mine = _rank0_attempts(run_dir)
    assert len(starts) == len(mine) == 4 and starts[0] == 0, (starts, mine)
    lost = [max(a["last_step"] - min(starts[i + 1 :]), 0) if i < 3 else 0 for i, a in enumerate(mine)]
    assert lost[:2] == [0, 0] and lost[2] > 0 and mine[-1]["last_step"] == EPOCHS * BATCHES, (lost, starts, mine)
    assert figures["redone_steps"] == sum(lost) and [a["redone_steps"] for a in figures["attempts"]] == lost
    assert goodput.allocated(run_dir, jobs.run_cost.cost(run_dir, engines=engines()))["total"]["redone_steps"] == sum(lost)

    # the text holds the JSON's figures; `train runs` the same goodput
    assert f"goodput: {figures['goodput_pct']:.1f}% of {figures['allocated_s']:.1f} s allocated over 4 attempt(s)" in text, text
    for key, bucket in figures["badput"].items():
        line = next(line for line in text.splitlines() if line.startswith(f"  {key.removesuffix('_s'):<11}"))
        assert f"{bucket['seconds']:.1f} s" in line and f"{bucket['percent']:.1f}%" in line, (line, bucket)
    assert f"lost progress: {sum(lost)} step(s) redone" in text and "peak memory: host RSS" in text, text
    assert listed["goodput"]["goodput_pct"] == figures["goodput_pct"]
    header, table = runs.table_rows(runs.collect([run_dir], engines=engines()))
    assert table[0][header.index("goodput")] == f"{figures['goodput_pct']:.1f}%"

    # the timeline: one row per attempt, its buckets in the legend
    svg = (run_dir / "timeline.svg").read_text()
    assert f"timeline: {run_dir / 'timeline.svg'}" in text and shown["goodput"]["timeline"] == str(run_dir / "timeline.svg")
    assert all(f"job {job_id} attempt {i} (REQUEUED)" in svg for i in (1, 2, 3)) and f"job {job_id} attempt 4 (COMPLETED)" in svg
    drawn = ("training kept (goodput)", "stall", "redone (lost progress)") + (("launch",) if badput["launch_s"] > 0 else ())
    # (a bucket of 0 s in every attempt is neither drawn nor in the legend: launch, on a quick machine, 2026-12-03)
    assert all(words in svg for words in drawn), (drawn, badput)

    # the one sacct reader serves the status of a job the controller does not match (another script):
    # its newest attempt, with its nodes
    status = query_slurm([(job_id, Path("/not/its/script"))])[(job_id, "/not/its/script")]
    assert (status.source, status.state) == ("sacct", "COMPLETED") and status.nodes.startswith("node")
    print(text)
    print("goodput figures:", json.dumps({k: v for k, v in figures.items() if k != "attempts"}))
