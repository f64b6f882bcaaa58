"""``<run>/job.json``: the Slurm job of a run, as the job itself last reported it.

``train submit`` writes the record (job id, script, resources); the job adds to it at each start
(``restarts``: Slurm's ``SLURM_RESTART_COUNT``, ``state`` RUNNING), when it requeues itself (state
REQUEUED) and at its end (COMPLETED or FAILED with the exit code). ``train jobs`` shows these once
Slurm has forgotten the job (``MinJobAge``, 300 s by default, with accounting off). Standard library
only: the sbatch script runs ``python -m trainer_cli.launch.jobstate RUN_DIR start|end [RC]``.
"""

from __future__ import annotations

import json
import os
import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

JOB_FILE = "job.json"
REQUEUED = "REQUEUED"


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def read(run_dir: Path) -> dict[str, Any]:
    """The run's job record; empty when there is none or it cannot be read."""
    try:
        data = json.loads((Path(run_dir) / JOB_FILE).read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def write(run_dir: Path, record: dict[str, Any]) -> None:
    """Replace the run's job record atomically (a reader never sees half a file)."""
    path = Path(run_dir) / JOB_FILE
    tmp = path.with_name(f".{JOB_FILE}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(record, indent=2) + "\n")
    os.replace(tmp, path)


def update(run_dir: Path, **fields: Any) -> dict[str, Any]:
    """Merge ``fields`` into the run's job record; returns the new record."""
    record = read(run_dir) | fields
    write(run_dir, record)
    return record


def this_job_id() -> str | None:
    """The id ``train submit`` recorded for the job this process runs in (the array's id for an array task)."""
    return os.environ.get("SLURM_ARRAY_JOB_ID") or os.environ.get("SLURM_JOB_ID")


def scontrol_id() -> str | None:
    """The id that names this job alone to ``scontrol`` (``requeue``, ``show job``): ``<array id>_<task id>``
    for a task of a job array (a bare id that is the array's names every task of it), else ``SLURM_JOB_ID``."""
    array, task = os.environ.get("SLURM_ARRAY_JOB_ID"), os.environ.get("SLURM_ARRAY_TASK_ID")
    return f"{array}_{task}" if array and task else os.environ.get("SLURM_JOB_ID")


def restart_count() -> int:
    """How many times Slurm has restarted this job (``SLURM_RESTART_COUNT``; 0 on the first start)."""
    try:
        return int(os.environ.get("SLURM_RESTART_COUNT") or 0)
    except ValueError:
        return 0


def started(run_dir: Path) -> dict[str, Any]:
    """Record a start (or restart) of this job."""
    return update(
        run_dir, job_id=this_job_id(), restarts=restart_count(), state="RUNNING", exit_code=None,
        started=_now(), node_list=os.environ.get("SLURM_JOB_NODELIST"),
    )


def requeued(run_dir: Path, checkpoint: str) -> dict[str, Any]:
    """Record that this job requeued itself after saving ``checkpoint``."""
    return update(run_dir, job_id=this_job_id(), restarts=restart_count(), state=REQUEUED, checkpoint=checkpoint, ended=_now())


def ended(run_dir: Path, exit_code: int) -> dict[str, Any]:
    """Record the end of this job's script: COMPLETED (exit 0) or FAILED, unless it requeued itself."""
    record = read(run_dir)
    if record.get("state") == REQUEUED and record.get("job_id") == this_job_id() and record.get("restarts") == restart_count():
        return record  # the script ended because the job requeued itself: it runs again
    return update(run_dir, job_id=this_job_id(), state="COMPLETED" if exit_code == 0 else "FAILED", exit_code=exit_code, ended=_now())


def main(argv: list[str]) -> int:
    """``python -m trainer_cli.launch.jobstate RUN_DIR start|end [EXIT_CODE]``; never fails the job."""
    try:
        run_dir, event = Path(argv[0]), argv[1]
        if event == "start":
            started(run_dir)
        elif event == "end":
            ended(run_dir, int(argv[2]) if len(argv) > 2 else 0)
        else:
            raise ValueError(f"unknown event {event!r}")
    except (IndexError, ValueError, OSError) as err:
        print(f"trainer-cli: job.json not updated: {err}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
