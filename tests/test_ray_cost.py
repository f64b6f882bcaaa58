"""A Ray run's cost and goodput from its own attempt records (trainer_cli.rundir.run_cost.record_attempts):
Ray keeps no accounting, so ``train jobs RUN`` (text and --json) and ``train runs`` price each start of
the worker group from its ranks' records (source ``records``), never asking sacct.

Default tier, no Ray needed: two real local fits of one run in the environment the Ray engine gives its
workers (``TRAINER_CLI_RAY_JOB``, ``TRAINER_CLI_RAY_ATTEMPT`` 0 then 1: a ``new`` start and its
``requeue``), then the ``job.json`` and registry record ``train submit --scheduler ray`` and the driver
write. The run on a real Ray cluster, a worker killed: tests/test_ray_engine.py (long tier).
"""

from __future__ import annotations

import contextlib
import io
import json
from datetime import datetime, timezone
from pathlib import Path

import pytest
from support import DIGITS, quiet_args, run_train

from trainer_cli.job import jobstate
from trainer_cli.launch import jobs
from trainer_cli.schedulers.submissions import register
from trainer_cli.rundir import run_cost
from trainer_cli.schedulers import engines
from trainer_cli.tools import runs

JOB = "digits-20261202-150000-abc123"
SHORT = ("--trainer.limit_train_batches", "3", "--trainer.limit_val_batches", "1")


def ray_fit(*args: str, attempt: int) -> None:
    done = run_train("fit", *args, env={"TRAINER_CLI_RAY_JOB": JOB, "TRAINER_CLI_RAY_ATTEMPT": str(attempt)})
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]


def test_a_ray_run_s_cost_and_goodput_come_from_its_attempt_records(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "runs"
    submitted = datetime.now(timezone.utc).isoformat(timespec="seconds")
    ray_fit("--config", DIGITS, *quiet_args(root, epochs=1), *SHORT, attempt=0)
    run_dir = root / "digits" / "version_0"
    ray_fit("--config", str(run_dir / "config.yaml"), "--run_dir", str(run_dir), "--ckpt_path", "last",
            "--trainer.max_epochs", "2", attempt=1)  # fmt: skip
    lines = [json.loads(t) for t in (run_dir / "attempts" / "rank0.jsonl").read_text().splitlines()]
    assert [a["attempt"] for a in lines] == [f"{JOB}.0", f"{JOB}.1"] and all(a["job"]["scheduler"] == "ray" for a in lines)
    walls = [a["ended"] - a["started"] for a in lines]

    # a fit in a Ray job's environment, no job.json: the records name the scheduler (1 CPU a worker)
    spent = run_cost.cost(run_dir)
    assert spent.source == "records" and [a.state for a in spent.started] == ["COMPLETED", "COMPLETED"]
    assert spent.hours("cpu") == pytest.approx(sum(walls) / 3600, rel=1e-3)

    # as `train submit --scheduler ray` and the driver record it: 2 CPUs a worker (--ray.cpus_per_worker 2)
    entrypoint = f"python -m trainer_cli.schedulers.ray.driver --run_dir {run_dir} --job_id {JOB} --cpus_per_worker 2"
    record = {"job_id": JOB, "job_name": "digits", "run_dir": str(run_dir), "scheduler": "ray",
              "cluster": "http://127.0.0.1:8265", "nodes": 1, "ntasks_per_node": 1, "cpus_per_process": 2.0, "submitted": submitted,
              "log": str(run_dir / f"ray-{JOB}.log")}  # fmt: skip
    ray = {"address": "http://127.0.0.1:8265", "max_failures": 2, "entrypoint": entrypoint, "cpus_per_worker": 2.0}
    jobstate.update(run_dir, **{k: v for k, v in record.items() if k != "run_dir"}, ray=ray)
    jobstate.update(run_dir, state="COMPLETED", restarts=1, exit_code=0, ended=submitted)
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    monkeypatch.setenv("PATH", str(tmp_path / "no-slurm-here"))  # nothing asks Slurm (sacct is not there)
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    register(root, record)

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert jobs.main(["--root", str(root), str(run_dir), "--json"], engines()) == 0
    shown = json.loads(out.getvalue())
    cost = shown["cost"]
    assert cost["source"] == "records" and cost["attempts"] == 2, cost
    assert cost["cpu_hours"] == pytest.approx(2 * sum(walls) / 3600, abs=2e-6), (cost, walls)
    assert [(a["job_id"], a["state"], a["cpus"], a["nodes"]) for a in cost["per_attempt"]] == [
        (JOB, "COMPLETED", 2.0, 1.0)
    ] * 2
    assert cost["gpu_hours"] == 0.0 and cost["per_attempt"][0]["gpus"] is None
    measured = shown["goodput"]
    assert measured["source"] == "records" and len(measured["attempts"]) == 2, measured
    assert [a["job_id"] for a in measured["attempts"]] == [JOB, JOB], measured["attempts"]
    # (goodput_s has one decimal: 3 digits batches train in ~0.04 s on a quick machine; the share is of the unrounded)
    assert measured["goodput_pct"] > 0, measured
    parts = ("goodput_s", *(b["seconds"] for b in measured["badput"].values()))
    total = measured["goodput_s"] + sum(b["seconds"] for b in measured["badput"].values())
    assert total == pytest.approx(measured["allocated_s"], abs=0.1 * len(parts)), measured
    assert [j["job"] for j in shown["jobs"]] == [JOB]

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert jobs.main(["--root", str(root), str(run_dir)], engines()) == 0
    text = out.getvalue()
    assert "over 2 attempt(s), requeues included (from the run's attempt records" in text, text
    assert f"attempt 2: job {JOB} COMPLETED" in text and "on 2 CPU(s), 1 node(s)" in text, text
    assert "each worker group's span from the run's attempt records" in text, text

    found = runs.collect([root])
    header, rows = runs.table_rows(found)
    # the same figure as `train jobs` (its JSON rounds to 6 decimals: the cell is formatted from the unrounded one)
    assert rows[0][header.index("cost")] == run_cost.cost(run_dir).cell(), rows
    assert float(rows[0][header.index("cost")][1:].split()[0]) == pytest.approx(cost["cpu_hours"], rel=6e-3)  # 3 digits
    assert found["runs"][0]["cost"]["source"] == "records" and rows[0][header.index("goodput")] != "-"
