"""``<run>/job.json``: the Slurm job of a run, as the job itself last reported it.

``train submit`` writes the record (job id, script, resources); the job adds to it at each start
(``restarts``: Slurm's ``SLURM_RESTART_COUNT`` plus the restarts of the jobs it was resubmitted
from, ``state`` RUNNING), when it requeues itself (state REQUEUED) or asks to be resubmitted (state
RESUBMIT) and at its end (COMPLETED or FAILED with the exit code). ``train jobs`` shows these once
Slurm has forgotten the job (``MinJobAge``, 300 s by default, with accounting off). Standard library
only: the sbatch script runs ``python -m trainer_cli.launch.jobstate RUN_DIR start|end [RC]``.

A job that resubmits itself (``--slurm.requeue_mode resubmit``, or a failed ``scontrol requeue``)
does so at its ``end``: ``sbatch`` of the run's own script (``<run>/submit.sbatch``), so the new job
runs in the same run directory and resumes from its newest checkpoint. The record then names the
new job (``job_id``) and the ones before it (``resubmitted_from``), which ``train jobs`` and
``train cancel`` follow (:func:`follow`).
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
RESUBMIT = "RESUBMIT"
ENV_PRIOR_RESTARTS = "TRAINER_CLI_PRIOR_RESTARTS"
"""Set by a resubmission for the new job: the restarts of the jobs of the run before it."""
_JOB_ENV_PREFIXES = ("SLURM_", "SBATCH_", "SRUN_", "SALLOC_")  # this job's; not passed to the one it submits


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
    """How many times this run's job has restarted: Slurm's requeues of this job
    (``SLURM_RESTART_COUNT``) plus the restarts before it was resubmitted (:data:`ENV_PRIOR_RESTARTS`);
    0 on the first start."""
    total = 0
    for name in ("SLURM_RESTART_COUNT", ENV_PRIOR_RESTARTS):
        value = os.environ.get(name) or "0"
        total += int(value) if value.isdigit() else 0
    return total


def follow(run_dir: Path, job_id: str) -> str:
    """The job that now runs the submission ``job_id`` of ``run_dir``: the job it resubmitted
    itself as (recorded in the run's job record), else ``job_id``."""
    record = read(run_dir)
    return str(record["job_id"]) if job_id in map(str, record.get("resubmitted_from") or []) else job_id


def started(run_dir: Path) -> dict[str, Any]:
    """Record a start (or restart) of this job."""
    return update(
        run_dir, job_id=this_job_id(), restarts=restart_count(), state="RUNNING", exit_code=None,
        started=_now(), node_list=os.environ.get("SLURM_JOB_NODELIST"),
    )


def requeued(run_dir: Path, checkpoint: str) -> dict[str, Any]:
    """Record that this job requeued itself after saving ``checkpoint``."""
    return update(run_dir, job_id=this_job_id(), restarts=restart_count(), state=REQUEUED, checkpoint=checkpoint, ended=_now())


def resubmit_requested(run_dir: Path, checkpoint: str) -> dict[str, Any]:
    """Record that this job is to be resubmitted, once its tasks have ended, after saving ``checkpoint``."""
    return update(run_dir, job_id=this_job_id(), restarts=restart_count(), state=RESUBMIT, checkpoint=checkpoint, ended=_now())


def ended(run_dir: Path, exit_code: int) -> dict[str, Any]:
    """Record the end of this job's script: COMPLETED (exit 0) or FAILED, unless it requeued itself
    or asked to be resubmitted (then it queues the run's script again: :func:`resubmit`)."""
    record = read(run_dir)
    ours = record.get("job_id") == this_job_id() and record.get("restarts") == restart_count()
    if record.get("state") == REQUEUED and ours:
        return record  # the script ended because the job requeued itself: it runs again
    if record.get("state") == RESUBMIT and ours:
        return resubmit(run_dir, record)
    return update(run_dir, job_id=this_job_id(), state="COMPLETED" if exit_code == 0 else "FAILED", exit_code=exit_code, ended=_now())


def resubmit(run_dir: Path, record: dict[str, Any]) -> dict[str, Any]:
    """Queue the run's own script again (``sbatch <run>/submit.sbatch``) as the next restart of
    this job, with the environment of this job's script less its Slurm variables; record the new job.

    Returns:
        The new record: state PENDING (or what the new job recorded already), or FAILED with
        ``error`` when sbatch refused (one line in the log says how to resume by hand).
    """
    import subprocess

    old_id, restarts = this_job_id(), restart_count() + 1
    script = Path(record.get("script") or Path(run_dir) / "submit.sbatch")
    chain = [*map(str, record.get("resubmitted_from") or []), str(old_id)]
    env = {k: v for k, v in os.environ.items() if not k.startswith(_JOB_ENV_PREFIXES) or k == "SLURM_CONF"}
    env[ENV_PRIOR_RESTARTS] = str(restarts)
    update(run_dir, resubmitted_from=chain)  # before sbatch: the new job's own start record keeps it
    try:
        proc = subprocess.run(["sbatch", "--parsable", str(script)], capture_output=True, text=True, timeout=120, env=env)
        error = "" if proc.returncode == 0 else (proc.stderr.strip() or proc.stdout.strip() or f"exit {proc.returncode}")
    except (OSError, subprocess.SubprocessError) as err:
        proc, error = None, str(err)
    if proc is None or error:
        print(f"trainer-cli: resubmitting {script} failed: {error}; resume with: train submit --config {Path(run_dir) / 'config.yaml'}", flush=True)
        return update(run_dir, job_id=old_id, state="FAILED", error=f"resubmission failed: {error}", ended=_now())
    new_id = proc.stdout.strip().split(";")[0]
    print(f"trainer-cli: resubmitted {run_dir} as job {new_id} (restart {restarts}), it resumes on its own", flush=True)
    if record.get("test_job_id"):  # --slurm.test_after_fit: the test waits for the new job, not this one (ending now)
        test_id = str(record["test_job_id"])
        done = subprocess.run(["scontrol", "update", f"JobId={test_id}", f"Dependency=afterok:{new_id}"], capture_output=True, text=True, timeout=60, env=env)
        if done.returncode != 0:
            print(f"trainer-cli: test job {test_id} not moved after job {new_id}: {done.stderr.strip()}", flush=True)
    now = read(run_dir)
    if str(now.get("job_id")) == new_id:  # the new job has started and recorded itself already
        return now
    log = Path(run_dir) / f"slurm-{new_id}.log"
    return update(run_dir, job_id=new_id, state="PENDING", restarts=restarts, prior_restarts=restarts, log=str(log), exit_code=None)


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
