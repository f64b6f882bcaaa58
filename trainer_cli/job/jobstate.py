"""``<run>/job.json``: the job of a run, as the job itself last reported it.

The engine's submission writes the record (job id, script, resources: ``nodes``, ``ntasks_per_node``,
``gpus_per_node``, ``cpus_per_process``); the job adds to it at each start (``restarts``, ``state``
RUNNING), when it requeues itself (state REQUEUED) or asks to be resubmitted (state RESUBMIT) and at
its end (COMPLETED or FAILED with the exit code). Slurm's batch script writes it through
:mod:`trainer_cli.schedulers.slurm.batch` (``python -m trainer_cli.schedulers.slurm.batch RUN_DIR
start|end [RC]``), the Ray engine's driver through :func:`update`. ``train jobs`` shows these once the
engine has forgotten the job. A job that resubmitted itself names the new job (``job_id``) and the ones
before it (``resubmitted_from``), which ``train jobs`` and ``train cancel`` follow (:func:`follow`).
Standard library and :mod:`filelock` only.
"""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from trainer_cli.atomic import read_json, update_json
from trainer_cli.job import context
from trainer_cli.job.restarts import RestartPolicy

JOB_FILE = "job.json"
REQUEUED = "REQUEUED"
RESUBMIT = "RESUBMIT"
EXIT_USR1 = 128 + 10
"""srun's exit code when a task was killed by SIGUSR1 itself: it came before the task's handler
(:mod:`trainer_cli.job.requeue_signal`) was installed, in the first instant of the task."""
EXIT_REQUEUE = 75
"""The exit code of a ``train fit`` task that saved its checkpoint on Slurm's SIGUSR1 and stopped
training for a restart (EX_TEMPFAIL of sysexits.h: try again later); the batch script then
requeues, resubmits, or stops at the cap (:func:`trainer_cli.schedulers.slurm.batch.end_of_step`)."""


def now() -> str:
    """This moment as the record writes it (UTC, ISO 8601, to the second)."""
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def read(run_dir: Path) -> dict[str, Any]:
    """The run's job record; empty when there is none or it cannot be read."""
    return read_json(Path(run_dir) / JOB_FILE)


def write(run_dir: Path, record: dict[str, Any]) -> None:
    """Replace the run's job record atomically, under its lock (a reader never sees half a file)."""
    update_json(Path(run_dir) / JOB_FILE, lambda _: record)


def update(run_dir: Path, **fields: Any) -> dict[str, Any]:
    """Merge ``fields`` into the run's job record under its lock (:func:`trainer_cli.atomic.update_json`:
    the submitter, the batch script and rank 0 never lose each other's changes); returns the new record."""
    return update_json(Path(run_dir) / JOB_FILE, lambda record: record | fields)


def this_job_id() -> str | None:
    """The id ``train submit`` recorded for the job this process runs in (the array's id for an array task)."""
    job = context.current()
    return job.array_job_id or job.job_id


def runs_in(run_dir: Path) -> bool:
    """Whether this process runs in the job of ``run_dir``: the fit job its job record names (the job's own
    start recorded it) or the test job queued after it."""
    job = this_job_id()
    record = read(run_dir) if job else {}
    return job is not None and job in (str(record.get("job_id")), str(record.get("test_job_id")))


def policy(run_dir: Path | None = None) -> RestartPolicy:
    """The restart policy of this job (:class:`trainer_cli.job.restarts.RestartPolicy`): its
    restart count, and with ``run_dir`` the restarts of this submission that consumed the cap."""
    record = read(run_dir) if run_dir is not None else {}
    return RestartPolicy.of_job(run_dir, [*map(str, record.get("resubmitted_from") or []), str(this_job_id())])


def follow(run_dir: Path, job_id: str) -> str:
    """The job that now runs the submission ``job_id`` of ``run_dir``: the job it resubmitted
    itself as (recorded in the run's job record), else ``job_id``."""
    record = read(run_dir)
    return str(record["job_id"]) if job_id in map(str, record.get("resubmitted_from") or []) else job_id


def run_restarts(record: dict[str, Any]) -> int:
    """The restarts a run directory went through (its ``job.json`` ``record``): its job's restarts
    since the run first started in it. A Slurm array worker's trial starts in a task that may have
    restarted before, for an earlier trial (``restarts_before``)."""
    return max(0, int(record.get("restarts") or 0) - int(record.get("restarts_before") or 0))
