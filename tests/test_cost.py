"""Cost per run over every attempt (trainer_cli.job.cost, trainer_cli.rundir.run_cost): allocated GPU-,
CPU- and node-hours from sacct's rows of every attempt (requeues included), else estimated from the
run's own records and the resources it asked for, the queue wait beside it; shown by `train jobs RUN`
(a cost block, --json), `train runs` (a column) and `train sweep-results` (per trial, the total with
the pruned trials' apart).

``REQUEUED_ONCE`` and the run records of :func:`_run_records` were captured on scripts/local-slurm
(Slurm 22.05, accounting through slurmdbd: ``sacct -D -X -P -n -j ID -o
JobID,JobIDRaw,State,Submit,Start,End,ElapsedRaw,AllocTRES``) from the job of
test_cost_of_a_two_task_job_preempted_once; the other rows are written in that format. The cluster
test at the end runs a 2-task job preempted once (`scancel -s USR1`) and compares the launcher's
figures with sacct's (long tier; the default tier checks the same on test_slurm_cluster's requeued job).
"""

from __future__ import annotations

import contextlib
import io
import json
import subprocess
from datetime import datetime, timezone
from pathlib import Path

import pytest
from slurm_support import (  # noqa: F401 - slurm_cluster is a fixture
    newest_step,
    sacct_attempts,
    sacct_hours,
    slurm_cluster,
    wait_for_requeue,
    wait_for_state,
    wait_for_step,
)

from trainer_cli.job import cost
from trainer_cli.launch import jobs
from trainer_cli.rundir import run_cost
from trainer_cli.schedulers import engines
from trainer_cli.schedulers.slurm import accounting as sacct
from trainer_cli.sweeps import costs as sweep_costs
from trainer_cli.tools import runs

EIGHT = "JobID,JobIDRaw,State,Submit,Start,End,ElapsedRaw,AllocTRES".split(",")  # the fields of the rows below
# a 2-task CPU job on one node, preempted once (scancel -s USR1), requeued, completed
REQUEUED_ONCE = """\
106|106|REQUEUED|2026-11-27T18:28:00|2026-11-27T18:28:01|2026-11-27T18:28:33|32|billing=2,cpu=2,node=1
106|106|COMPLETED|2026-11-27T18:28:33|2026-11-27T18:28:37|2026-11-27T18:29:20|43|billing=2,cpu=2,node=1
"""
# a GPU job (--gres=gpu:1 -c 2), completed at once
GPU_JOB = "7|7|COMPLETED|2026-11-27T17:00:00|2026-11-27T17:00:02|2026-11-27T18:00:02|3600|billing=2,cpu=2,gres/gpu=1,mem=0,node=1\n"
# requeued, and pending again now: its second attempt has no start and no allocation
PENDING_AGAIN = """\
52|52|REQUEUED|2026-11-27T18:40:00|2026-11-27T18:40:05|2026-11-27T18:40:35|30|billing=1,cpu=1,mem=0,node=1
52|52|PENDING|2026-11-27T18:40:35|Unknown|Unknown|0|
"""
# cancelled before it started
NEVER_STARTED = "60|60|CANCELLED by 0|2026-11-27T18:50:00|None|2026-11-27T18:50:09|0|\n"


def _local(text: str) -> float:
    return datetime.fromisoformat(text).timestamp()  # sacct prints the local time


def test_tres_of_an_attempt() -> None:
    assert sacct.parse_tres("billing=2,cpu=2,mem=0,node=1") == {"cpu": 2, "node": 1}
    assert sacct.parse_tres("billing=2,cpu=2,gres/gpu=1,mem=0,node=1") == {"cpu": 2, "gpu": 1, "node": 1}
    assert sacct.parse_tres("cpu=16,gres/gpu:a100=8,gres/gpu=8,mem=500G,node=2") == {"cpu": 16, "gpu": 8, "node": 2}
    assert sacct.parse_tres("cpu=16,gres/gpu:a100=4,gres/gpu:v100=2,node=2") == {"cpu": 16, "gpu": 6, "node": 2}
    assert sacct.parse_tres("") == {}


def test_every_attempt_of_a_requeued_job_counts() -> None:
    spent = sacct.from_sacct(sacct.parse_sacct(REQUEUED_ONCE, EIGHT))
    assert spent.source == "sacct" and len(spent.started) == 2
    assert spent.hours("cpu") == pytest.approx(2 * (32 + 43) / 3600)
    assert spent.hours("node") == pytest.approx((32 + 43) / 3600) and spent.hours("gpu") == 0
    # the first waited from its submission; the requeue from the end of the first attempt (its Submit then)
    assert [a.wait_s for a in spent.started] == [1, 4]
    assert spent.queue_wait_s == 5 and spent.cell() == "0.0417 CPU-h"
    figures = spent.as_json()
    assert (figures["attempts"], figures["cpu_hours"], figures["node_hours"], figures["gpu_hours"]) == (2, 0.041667, 0.020833, 0.0)
    assert [(a["state"], a["elapsed_s"], a["cpus"], a["queue_wait_s"]) for a in figures["per_attempt"]] == [
        ("REQUEUED", 32, 2, 1), ("COMPLETED", 43, 2, 4)]
    block = spent.block()
    assert block[0] == ("cost: 0.0417 CPU-h, 0.0208 node-h allocated over 2 attempt(s), requeues included (from sacct); "
                        "queue wait 0:00:05, not in it")
    assert block[1].startswith("  attempt 1: job 106 REQUEUED, started 2026-11-27 18:28:01") and "ran 0:00:32 on 2 CPU(s), 1 node(s); waited 0:00:01" in block[1]


def test_gpu_hours_where_a_gpu_was_allocated() -> None:
    spent = sacct.from_sacct(sacct.parse_sacct(GPU_JOB, EIGHT))
    assert spent.has_gpus and spent.hours("gpu") == 1.0 and spent.hours("cpu") == 2.0
    assert spent.cell() == "1.00 GPU-h"
    assert spent.block()[0].startswith("cost: 1.00 GPU-h, 1.00 node-h allocated over 1 attempt(s)")


def test_a_pending_attempt_holds_nothing_and_its_wait_shows() -> None:
    rows = sacct.parse_sacct(PENDING_AGAIN, EIGHT)
    assert rows[1].start is None and rows[1].tres == {}
    spent = sacct.from_sacct(rows, now=_local("2026-11-27T18:41:35"))
    assert len(spent.started) == 1 and spent.hours("cpu") == pytest.approx(30 / 3600)
    assert spent.waiting_s == 60 and spent.queue_wait_s == 5 + 60
    assert "(waiting now: 0:01:00)" in spent.block()[0]
    never = sacct.from_sacct(sacct.parse_sacct(NEVER_STARTED, EIGHT))
    assert never.started == [] and never.cell() == "-" and never.as_json()["attempts"] == 0
    assert sacct.parse_sacct(NEVER_STARTED, EIGHT)[0].state == "CANCELLED"


def test_times_as_sacct_and_the_launcher_write_them() -> None:
    assert cost.parse_time("2026-11-27T18:30:01") == _local("2026-11-27T18:30:01")
    assert cost.parse_time("2026-11-27T18:30:01+00:00") == datetime(2026, 11, 27, 18, 30, 1, tzinfo=timezone.utc).timestamp()
    assert cost.parse_time("1795800000") == 1795800000.0
    assert cost.parse_time("None") is cost.parse_time("Unknown") is cost.parse_time("") is None


def _utc(hms: str) -> str:
    return f"2026-11-27T{hms}+00:00"


def _run_records(run_dir: Path) -> None:
    """A run's records as a 2-task job preempted once writes them (job.json, history.jsonl, restarts.jsonl)."""
    run_dir.mkdir(parents=True)
    (run_dir / "config.yaml").write_text("trainer:\n  max_epochs: 3\n")
    record = {"job_id": "106", "run_dir": str(run_dir), "nodes": 1, "ntasks_per_node": 2, "gpus_per_node": 0,
              "cpus_per_process": 1, "submitted": _utc("18:28:00"), "state": "COMPLETED", "restarts": 1,
              "started": _utc("18:28:37"), "starts": [_utc("18:28:01"), _utc("18:28:37")], "ended": _utc("18:29:19"),
              "exit_code": 0}
    (run_dir / "job.json").write_text(json.dumps(record))
    starts = [{"time": _utc("18:28:30"), "verb": "fit", "kind": "new", "job": {"scheduler": "slurm", "job_id": "106", "restart_count": 0}},
              {"time": _utc("18:29:07"), "verb": "fit", "kind": "requeue", "job": {"scheduler": "slurm", "job_id": "106", "restart_count": 1}}]
    (run_dir / "history.jsonl").write_text("".join(json.dumps(s) + "\n" for s in starts))
    event = {"time": _utc("18:28:33"), "job_id": "106", "restart": 1, "cause": "preempted", "action": "requeue"}
    (run_dir / "restarts.jsonl").write_text(json.dumps(event) + "\n")


def test_without_accounting_the_run_s_own_records_give_an_estimate(tmp_path: Path) -> None:
    """Each attempt from the batch script's start (job.json's starts) to its requeue (restarts.jsonl)
    or the job's end (job.json), priced at 1 node x 2 tasks x 1 CPU: within a second of sacct's (75 s)."""
    run_dir = tmp_path / "run"
    _run_records(run_dir)
    assert run_cost.job_ids(run_dir) == ["106"]
    assert run_cost.spans(run_dir) == [("106", _local("2026-11-27T18:28:01+00:00"), _local("2026-11-27T18:28:33+00:00")),
                                       ("106", _local("2026-11-27T18:28:37+00:00"), _local("2026-11-27T18:29:19+00:00"))]
    spent = run_cost.estimate(run_dir)
    assert spent.source == "estimated" and len(spent.started) == 2
    assert spent.hours("cpu") == pytest.approx(2 * (32 + 42) / 3600) and spent.hours("node") == pytest.approx(74 / 3600)
    assert [a.wait_s for a in spent.started] == [1, 4] and [a.state for a in spent.started] == ["REQUEUED", "COMPLETED"]
    assert spent.cell() == "~0.0411 CPU-h"
    assert "(estimated from the run's own timestamps and the resources it asked for: no accounting)" in spent.block()[0]
    # a record from before job.json kept each start: the earlier attempts from their fit starts (history.jsonl),
    # late by the set-up and imports (29 s of 2 ranks on 2 loaded cores here)
    record = json.loads((run_dir / "job.json").read_text())
    del record["starts"]
    (run_dir / "job.json").write_text(json.dumps(record))
    assert [(a.start, a.elapsed_s) for a in run_cost.estimate(run_dir).started] == [
        (_local("2026-11-27T18:28:30+00:00"), 3), (_local("2026-11-27T18:28:37+00:00"), 42)]
    # a run no Slurm job ran: no cost
    assert run_cost.estimate(tmp_path / "nothing").source == "none"


def test_a_running_attempt_counts_until_now(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    _run_records(run_dir)
    record = json.loads((run_dir / "job.json").read_text())
    (run_dir / "job.json").write_text(json.dumps(record | {"state": "RUNNING", "ended": _utc("18:28:33")}))
    spent = run_cost.estimate(run_dir, now=_local("2026-11-27T18:30:37+00:00"))
    assert [a.elapsed_s for a in spent.started] == [32, 120] and spent.started[-1].state == "RUNNING"


def test_a_sweep_trial_is_its_task_and_the_total_puts_pruned_trials_apart(tmp_path: Path) -> None:
    run_dir = tmp_path / "trial_001"
    run_dir.mkdir()
    (run_dir / "job.json").write_text(json.dumps({"job_id": "90", "array_task": 1, "submitted": _utc("18:00:00")}))
    assert run_cost.job_ids(run_dir) == ["90_1"], "the array's own id would name every task"
    one = sacct.from_sacct(sacct.parse_sacct(GPU_JOB, EIGHT)).as_json()
    two = sacct.from_sacct(sacct.parse_sacct(REQUEUED_ONCE, EIGHT)).as_json()
    rows = [{"cost": one, "study": "COMPLETE"}, {"cost": two, "study": "PRUNED"}, {"cost": cost.Cost().as_json(), "study": "FAIL"}]
    total = sweep_costs.total_cost(rows)
    assert (total["source"], total["trials"], total["gpu_hours"]) == ("sacct", 2, 1.0)
    assert total["cpu_hours"] == pytest.approx(2 + 0.041667) and total["pruned"]["trials"] == 1
    assert total["pruned"]["cpu_hours"] == 0.041667
    line = sweep_costs.cost_line({"cost": total})
    assert line == "cost: 1.00 GPU-h over 2 trial(s) (sacct), 0 GPU-h of it in 1 pruned trial(s); queue wait 0:00:07, not in it"


def test_train_runs_shows_the_estimate_of_a_run_without_accounting(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`train runs`: its cost column and JSON; sacct not installed here (PATH without it): estimated."""
    _run_records(tmp_path / "run")
    monkeypatch.setenv("PATH", str(tmp_path / "no-slurm-here"))
    found = runs.collect([tmp_path], engines=engines())  # Slurm's engine asked: no sacct to answer
    header, rows = runs.table_rows(found)
    assert rows[0][header.index("cost")] == "~0.0411 CPU-h"
    assert found["runs"][0]["cost"]["source"] == "estimated" and found["runs"][0]["cost"]["attempts"] == 2
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert runs.main([str(tmp_path), "--format", "json"], engines()) == 0
    listed = json.loads(out.getvalue())["runs"][0]
    assert listed["cost"]["cpu_hours"] == pytest.approx(2 * 74 / 3600, abs=1e-6) and "cost_cell" not in listed


def _train_jobs_json(root: Path, run: str) -> dict:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert jobs.main(["--root", str(root), run, "--json"], engines()) == 0
    return json.loads(out.getvalue())


def assert_cost_matches_sacct(root: Path, job_id: str, run_dir: Path, attempts: int) -> dict:
    """`train jobs JOB` (its cost block and --json) and `train runs --format json` report the run's
    allocated CPU-hours within 2% of sacct's (AllocTRES cpu x ElapsedRaw of every attempt), and
    ``attempts`` attempts; its goodput and badput add up to 100% of sacct's allocated time; the
    estimate from the run's own records within 15%. Returns the figures,
    sacct's and the launcher's (and its estimate's)."""
    rows = sacct_attempts(job_id, attempts)
    assert [r["State"] for r in rows] == ["REQUEUED"] * (attempts - 1) + ["COMPLETED"], rows
    expected = sacct_hours(rows, "cpu")
    shown = _train_jobs_json(root, job_id)
    figures = shown["cost"]
    assert (figures["source"], figures["attempts"]) == ("sacct", attempts), figures
    assert figures["cpu_hours"] == pytest.approx(expected, rel=0.02), (figures, rows)
    assert figures["node_hours"] == pytest.approx(sacct_hours(rows, "node"), rel=0.02) and figures["gpu_hours"] == 0
    assert shown["jobs"][0]["job"] == job_id and shown["jobs"][0]["state"] == "COMPLETED"
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert jobs.main(["--root", str(root), str(run_dir)], engines()) == 0
    block = next(line for line in out.getvalue().splitlines() if line.startswith("cost: "))
    assert f"{cost.hours_text(figures['cpu_hours'])} CPU-h" in block and f"over {attempts} attempt(s)" in block and "(from sacct)" in block, block
    listed = runs.collect([run_dir], engines=engines())["runs"][0]["cost"]
    assert listed["cpu_hours"] == figures["cpu_hours"] and listed["attempts"] == attempts
    # goodput: the measured buckets and the allocation outside the processes add up to sacct's allocated time
    measured = shown["goodput"]
    assert measured["source"] == "sacct" and len(measured["attempts"]) == attempts, measured
    shares = [measured["goodput_pct"], *(b["percent"] for b in measured["badput"].values())]
    assert sum(shares) == pytest.approx(100, abs=1) and min(shares) >= 0 and measured["goodput_pct"] > 0, measured
    elapsed = sum(int(r["ElapsedRaw"]) for r in rows)  # whole seconds: a process may outlast one by a second
    assert measured["allocated_s"] == pytest.approx(elapsed, abs=attempts), (measured, rows)
    estimated = run_cost.estimate(run_dir)  # what a site without accounting gets: the job's own start and end of each attempt
    # within 15%, or 2 s an attempt of its CPUs (the records are to the second; sacct counts the epilog too):
    # a 13 s job's 2 attempts were estimated at 11 s (15.4% off)
    cpus = max(float(a.tres.get("cpu", 1)) for a in estimated.started) if estimated.started else 1.0
    slack_h = max(0.15 * expected, 2.0 * attempts * cpus / 3600)
    assert len(estimated.started) == attempts and abs(estimated.hours("cpu") - expected) <= slack_h, (estimated, expected)
    return {"sacct_cpu_hours": expected, "launcher_cpu_hours": figures["cpu_hours"], "estimated_cpu_hours": estimated.hours("cpu"),
            "estimated_attempts": len(estimated.started), "queue_wait_s": figures["queue_wait_s"]}


@pytest.mark.long  # a job of its own (about a minute on 2 cores); the default tier checks the same on test_slurm_cluster's requeued job
def test_cost_of_a_two_task_job_preempted_once(slurm_cluster: None, tmp_path: Path) -> None:  # noqa: F811
    """1 node x 2 tasks (CPU, digits), `scancel -s USR1` once mid-training, requeued, completed:
    2 attempts; the CPU-hours `train jobs` and `train runs` report equal sacct's within 2%; the
    estimate from the run's own records (what a site without accounting gets) is near them."""
    from test_slurm_cluster import _submit

    epochs, batches = 30, 5
    job_id, run_dir, _ = _submit(tmp_path, 1, 2, "--trainer.max_epochs", str(epochs))
    wait_for_step(run_dir, batches, job_id=job_id)
    subprocess.run(["scancel", "-s", "USR1", job_id], check=True, timeout=30)
    wait_for_requeue(job_id)
    assert wait_for_state(job_id, timeout_s=400) == "COMPLETED", (run_dir / f"slurm-{job_id}.log").read_text()[-3000:]
    assert newest_step(run_dir) == epochs * batches
    figures = assert_cost_matches_sacct(tmp_path, job_id, run_dir, attempts=2)
    print("cost figures:", figures)
