"""What an engine, or the run directory, says of submitted jobs: states, restarts, progress.

:class:`JobStatus` is an engine's answer for one job (:meth:`trainer_cli.job.scheduler.Scheduler.describe`:
Slurm's from ``scontrol`` and ``sacct``, :mod:`trainer_cli.schedulers.slurm.states`; Ray's from its job
server). Once an engine has forgotten a job, its state and restarts are the ones the job recorded in
``<run>/job.json`` (:mod:`trainer_cli.job.jobstate`, :func:`with_run_record`). Used by ``train jobs`` and
``train sweep-results``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from trainer_cli.job import jobstate

UNKNOWN = "UNKNOWN"
FROM_ACCOUNTING = "sacct"
"""The ``source`` of an engine's answer read from its accounting, for a job it no longer runs (Slurm's
``sacct``): its state, not its restarts, which the run's ``job.json`` completes (:func:`with_run_record`)."""
ACTIVE_STATES = {
    "PENDING",
    "RUNNING",
    "CONFIGURING",
    "COMPLETING",
    "REQUEUED",
    "RESIZING",
    "SUSPENDED",
    "REQUEUE_HOLD",
    "REQUEUE_FED",
    "STOPPED",
    "SIGNALING",
    "STAGE_OUT",
}
"""Slurm's states of a job that has not ended (``train jobs --tail`` follows it; a sweep's worker in
one of them keeps its trial: :func:`trainer_cli.schedulers.slurm.sweep_worker.job_alive`)."""


def is_active(state: str) -> bool:
    """Whether a job in ``state`` has not ended: one of :data:`ACTIVE_STATES` in it (an array's summed
    ``RUNNING x2, PENDING x1`` too; ``UNKNOWN``: no)."""
    return any(word in ACTIVE_STATES for word in re.findall(r"[A-Z_]+", state))


TAIL_BYTES = 16384  # of a log read for its last epoch line
VALIDATION_SHOWN = 2
"""The validation metrics of a log's last epoch line shown as a job's progress (``val/...``, ``val_...``): the
first two, a line that stays short."""


@dataclass
class JobStatus:
    """What an engine (or the run directory) says of one job."""

    state: str = UNKNOWN
    restarts: int = 0
    elapsed: str = "-"
    source: str = "none"
    """Where the figures came from: the engine's (Slurm: scontrol, or :data:`FROM_ACCOUNTING`; ray), job.json or
    none."""
    why: str = ""
    """What the engine says beyond the state, in words, for the job's DETAIL cell: the nodes it runs on, why it
    waits and what to do (with its estimated start), or why it ended; '' for a job that completed."""
    nodes: str = ""
    """The nodes the job runs or last ran on, as the engine writes them; '' where it does not say."""
    run_dir: str = ""
    """The run folder the engine's job writes into, where the engine says (Slurm: its batch script's
    folder); '' where it does not. A registry line whose run is another is not this job (a reused id)."""

    def is_of(self, run_dir: str | Path) -> bool:
        """Whether this is the answer for a job of ``run_dir`` (the engine names no folder: taken as so); an
        engine's job that runs another folder's script is another job that had its id."""
        return not self.run_dir or self.run_dir == str(run_dir)


def exit_cause(code: object, signal: object = None) -> str:
    """``failed: exit code 1`` (``failed: killed by signal 9`` for a process a signal killed), ``failed`` where
    neither is known."""
    if str(code) not in ("", "0", "None"):
        return f"failed: exit code {code}"
    if str(signal) not in ("", "0", "None"):
        return f"failed: killed by signal {signal}"
    return "failed"


def with_run_record(status: JobStatus | None, job_id: str, run_dir: Path) -> JobStatus:
    """The engine's status, completed from ``run_dir/job.json`` for a job the engine no longer knows."""
    recorded = jobstate.read(run_dir)
    if str(recorded.get("job_id")) != job_id:
        recorded = {}
    if status is not None and status.source != FROM_ACCOUNTING:  # the engine's live answer
        return status
    if recorded:
        state = str(recorded.get("state") or UNKNOWN)
        restarts = int(recorded.get("restarts") or 0)
        if status is not None:  # the accounting knows the state, the run directory the restarts
            return JobStatus(
                status.state,
                max(restarts, status.restarts),
                status.elapsed,
                status.source,
                status.why,
                status.nodes,
                status.run_dir,
            )
        exit_code = recorded.get("exit_code")
        return JobStatus(state, restarts, "-", "job.json", exit_cause(exit_code) if state == "FAILED" else "")
    return status or JobStatus()


def last_epoch_line(log: Path) -> str:
    """The last ``epoch N/M ...`` line of a job's log (its progress), shortened to its epoch, its first
    validation metrics (:data:`VALIDATION_SHOWN`, whatever the project names them) and its speed; '-' without one."""
    try:
        with open(log, "rb") as f:
            f.seek(0, 2)
            f.seek(max(f.tell() - TAIL_BYTES, 0))
            text = f.read().decode(errors="replace")
    except OSError:
        return "-"
    lines = [line for line in re.split(r"[\r\n]", text) if line.startswith("epoch ")]
    if not lines:
        return "-"
    words = lines[-1].split()
    validated = [f"{k} {v}" for k, v in zip(words[2::2], words[3::2]) if k.startswith(("val/", "val_"))]
    keep = words[:2] + validated[:VALIDATION_SHOWN]  # a project's own names too (val_acc), the first few
    if words[-1] == "steps/s":  # the speed of that epoch (trainer_cli.callbacks.progress.EpochLineProgress)
        keep.append(f"{words[-2]} steps/s")
    return " ".join(keep)
