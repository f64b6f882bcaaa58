"""``train jobs``: the runs submitted from here, with their Slurm job ids and states.

``train submit`` appends one JSON line per job to ``<trainer.default_root_dir>/submissions.jsonl``
(default ``runs/``). States come from ``squeue`` for queued and running jobs and from
``scontrol show job`` for finished ones (kept by Slurm for ``MinJobAge``, 300 s by default), then
``sacct`` where accounting is on. Once Slurm has forgotten a job, its state and restart count are
the ones the job recorded in ``<run>/job.json`` (:mod:`trainer_cli.launch.jobstate`).
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

from trainer_cli.errors import UserError
from trainer_cli.launch import jobstate

REGISTRY_NAME = "submissions.jsonl"
DEFAULT_ROOT = "runs"
UNKNOWN = "UNKNOWN"


def register(root: Path, record: dict[str, Any]) -> None:
    """Append a submitted job to ``root``'s registry."""
    root.mkdir(parents=True, exist_ok=True)
    keep = ("job_id", "test_job_id", "job_name", "run_dir", "log", "submitted")
    with open(root / REGISTRY_NAME, "a") as registry:
        registry.write(json.dumps({k: record.get(k) for k in keep}) + "\n")


def read_registry(root: Path) -> list[dict[str, Any]]:
    """The jobs submitted under ``root``, oldest first (an unreadable line is skipped)."""
    path = root / REGISTRY_NAME
    if not path.is_file():
        return []
    records = []
    for line in path.read_text().splitlines():
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return records


def _run(cmd: list[str]) -> str:
    if shutil.which(cmd[0]) is None:
        return ""
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return ""


def job_state(job_id: str) -> str:
    """Slurm's state of ``job_id`` (PENDING, RUNNING, COMPLETED, FAILED, ...), or UNKNOWN once forgotten."""
    state = _run(["squeue", "-h", "-j", job_id, "-o", "%T"]).strip()
    if state:
        return state.splitlines()[0]
    for field in _run(["scontrol", "show", "job", job_id]).split():
        if field.startswith("JobState="):
            return field.split("=", 1)[1]
    state = _run(["sacct", "-n", "-X", "-P", "-j", job_id, "-o", "State"]).strip()
    return state.splitlines()[0] if state else UNKNOWN


def restart_count(job_id: str) -> int | None:
    """How many times Slurm has restarted ``job_id`` (requeues), None once Slurm has forgotten it."""
    for field in _run(["scontrol", "show", "job", job_id]).split():
        if field.startswith("Restarts="):
            return int(field.split("=", 1)[1])
    return None


def state_and_restarts(job_id: str, run_dir: Path) -> tuple[str, int]:
    """``job_id``'s state and restart count: Slurm's while it knows the job, else what the job
    recorded in ``run_dir/job.json`` (state UNKNOWN, 0 restarts when neither knows)."""
    state, restarts = job_state(job_id), restart_count(job_id)
    recorded = jobstate.read(run_dir)
    if str(recorded.get("job_id")) != job_id:
        recorded = {}
    if state == UNKNOWN:
        state = str(recorded.get("state") or UNKNOWN)
    if restarts is None:
        restarts = int(recorded.get("restarts") or 0)
    return state, restarts


def main(args: list[str]) -> int:
    """``train jobs [--root DIR] [--last N]``: print a table of submitted jobs; returns the exit code.

    Raises:
        UserError: when ``--root`` is not a directory.
    """
    parser = argparse.ArgumentParser(prog="train jobs", description=__doc__.split("\n")[0])
    parser.add_argument("--root", default=DEFAULT_ROOT, help="trainer.default_root_dir the jobs were submitted with (default: runs)")
    parser.add_argument("--last", type=int, default=20, help="show the newest N jobs (default: 20)")
    opts = parser.parse_args(args)
    root = Path(opts.root)
    if not root.is_dir():
        raise UserError(f"--root {root}: no such directory (submit a job first, or name the trainer.default_root_dir you used)")
    records = read_registry(root)[-opts.last :]
    if not records:
        print(f"no jobs submitted under {root}")
        return 0
    rows = [("JOB", "STATE", "RESTARTS", "NAME", "RUN DIRECTORY / LOG")]
    for rec in records:
        for key, suffix in (("job_id", ""), ("test_job_id", " (test)")):
            job_id = rec.get(key)
            if not job_id:
                continue
            log = str(Path(rec["run_dir"]) / f"slurm-{job_id}.log")
            state, restarts = state_and_restarts(str(job_id), Path(rec["run_dir"]))
            rows.append((str(job_id), state, str(restarts), f"{rec.get('job_name')}{suffix}", f"{rec['run_dir']}  {log}"))
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    for row in rows:
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths)) + "  " + row[4])
    return 0
