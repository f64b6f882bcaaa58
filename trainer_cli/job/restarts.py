"""Why a run's job restarted: its time limit, a preemption, a failure, a stall. One JSON line per event in
``<run>/restarts.jsonl``.

A scheduler's warning before it stops a job (Slurm's SIGUSR1 before the time limit or on a
preemption) is told apart by the scheduler's in-job side (Slurm's:
:func:`trainer_cli.schedulers.slurm.in_job.classify`) into the causes named here.

The cause is found by global rank 0 of the job (:class:`trainer_cli.callbacks.requeue.SynchronizedRequeue`),
the log written by the batch script once the step ended (:func:`trainer_cli.schedulers.slurm.batch.end_of_step`)
and read by ``train jobs``: ``RESTARTS 2 (1 time limit, 1 preempted)``.

How many restarts a run may take is :class:`RestartPolicy`, the one place that counts them:
``--slurm.max_restarts`` caps the restarts after a time limit or a failure; a preemption and a
requeue Slurm makes itself (a node failure) never consume it (submitit's rule). Standard library
only at import: the batch script's ``python -m trainer_cli.schedulers.slurm.batch`` imports it.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from trainer_cli.job import context

EVENTS_FILE = "restarts.jsonl"
TIME_LIMIT = "time limit"
PREEMPTED = "preempted"
UNKNOWN = "unknown"
BY_SLURM = "requeued by Slurm"
"""Restarts Slurm made itself (a node failure, ``PreemptMode=REQUEUE``, ``scontrol requeue`` by
hand): counted by Slurm, never seen by the job as a signal."""
STEP_KILLED = "step killed by Slurm"
"""A step that Slurm stopped (the cleanup after a node failure, a SIGUSR1 in the first instant of a
task) and the batch script requeued (:func:`trainer_cli.schedulers.slurm.batch.step_verdict`)."""
STALL = "stall"
"""A step in which a rank made no training step for the stall timeout, ended by the batch script's
watchdog (:mod:`trainer_cli.schedulers.slurm.watchdog`) and requeued without the node of the stalled rank."""
STEP_START = "step start timeout"
"""A step of which srun started no task within ``--slurm.step_start_timeout_s`` (``srun --immediate``:
a node still busy or cleaning up after an earlier step, "Requested nodes are busy"), requeued by the
batch script rather than left waiting until the time limit (:func:`trainer_cli.schedulers.slurm.batch.step_verdict`)."""
EARLY_MARGIN_S = 90
"""Seconds past ``signal_delay_s`` that still count as the time limit's warning (Slurm: up to 60 s early)."""
RESTART_ACTIONS = ("requeue", "resubmit")
ENDED_BY = {
    TIME_LIMIT: "the time limit",
    PREEMPTED: "a preemption",
    UNKNOWN: "a SIGUSR1 of unknown cause",
    STEP_KILLED: "Slurm killing the step",
    STALL: "a stall",
    STEP_START: "srun not starting the step in time",
}
CAPPED = frozenset({TIME_LIMIT, UNKNOWN, STEP_KILLED, STALL, STEP_START})
"""The causes whose restarts consume ``--slurm.max_restarts``: the time limit, a step Slurm killed
(an out-of-memory kill looks the same: without a cap it would loop), a stall, a step srun could not
start in time (a node that stays busy must not requeue the job forever) and a SIGUSR1 whose cause
could not be told. A preemption (:data:`PREEMPTED`: the scheduler's, an operator's ``scancel -s USR1``)
and a requeue Slurm made itself (:data:`BY_SLURM`: a node failure) restart without consuming it."""
ENV_MAX_RESTARTS = "TRAINER_CLI_MAX_RESTARTS"
"""Exported by the sbatch template: ``--slurm.max_restarts``."""
ENV_PRIOR_RESTARTS = "TRAINER_CLI_PRIOR_RESTARTS"
"""Set by a resubmission for the new job: the restarts of the jobs of the run before it."""
ENV_SIGNAL_DELAY_S = "TRAINER_CLI_SIGNAL_DELAY_S"
"""Exported by the sbatch template: ``--slurm.signal_delay_s``."""
ENV_STEP_START_TIMEOUT_S = "TRAINER_CLI_STEP_START_TIMEOUT_S"
"""Exported by the sbatch template: ``--slurm.step_start_timeout_s`` (0 or empty: srun waits as Slurm wants)."""


def env_count(environ: Mapping[str, str], name: str) -> int:
    """A count or a number of seconds the job's environment gives (0: unset or not a number)."""
    value = (environ.get(name) or "0").strip()
    return int(value) if value.isdigit() else 0


@dataclass(frozen=True)
class RestartPolicy:
    """How often this submission of a run has restarted, and whether it may restart once more.

    Submitit's rule: ``--slurm.max_restarts`` caps the restarts for a cause in :data:`CAPPED` (the
    time limit, a failure); preemptions restart the job however often they come. A new ``train
    submit`` into the run starts a new count.
    """

    count: int = 0
    """Every restart so far: Slurm's requeues of this job (``SLURM_RESTART_COUNT``, its own and its
    requeues by Slurm) plus the restarts of the jobs it was resubmitted from (:data:`ENV_PRIOR_RESTARTS`)."""
    capped: int = 0
    """The restarts of :attr:`count` that consumed the cap (their causes, in ``restarts.jsonl``)."""
    cap: int | None = None
    """``--slurm.max_restarts``; None where the script does not say (a site's own template): no cap."""

    @classmethod
    def of_job(
        cls, run_dir: Path | None = None, job_ids: Iterable[str] = (), environ: Mapping[str, str] | None = None
    ) -> "RestartPolicy":
        """The policy of the job this process runs in.

        Args:
            run_dir: The run directory (its ``restarts.jsonl`` gives the causes); None: :attr:`capped` 0.
            job_ids: The jobs of this submission: this job and those it resubmitted itself from.
            environ: The job's environment (the scheduler's and the template's variables); None: this
                process's (its job read by :func:`trainer_cli.job.context.current`).
        """
        job = context.current() if environ is None else context.JobContext.from_env(environ)
        environ = os.environ if environ is None else environ
        ids = {str(j) for j in job_ids}
        events = read(run_dir) if run_dir is not None else []
        capped = {
            e.get("restart")
            for e in events
            if str(e.get("job_id")) in ids and e.get("action") in RESTART_ACTIONS and e.get("cause") in CAPPED
        }
        cap = environ.get(ENV_MAX_RESTARTS) or ""
        count = job.attempt + env_count(environ, ENV_PRIOR_RESTARTS)
        return cls(count=count, capped=len(capped), cap=int(cap) if cap.isdigit() else None)

    @staticmethod
    def consumes_cap(cause: str) -> bool:
        """Whether a restart for ``cause`` counts against the cap (:data:`CAPPED`)."""
        return cause in CAPPED

    def allows(self, cause: str) -> bool:
        """Whether the job may restart once more for ``cause``."""
        return not self.consumes_cap(cause) or self.cap is None or self.capped < self.cap

    def refusal(self, cause: str) -> str:
        """Why a restart for ``cause`` is not made (when :meth:`allows` is False), for the log."""
        return (
            f"not requeued: {self.capped} of the restarts so far followed a time limit or a failure, the most "
            f"--slurm.max_restarts {self.cap} allows (preemptions do not count): the run stops here, "
            f"ended by {ENDED_BY.get(cause, cause)}"
        )


def record(run_dir: Path, **event: Any) -> None:
    """Append one event (``job_id``, ``restart``, ``cause``, ``action``, ``step``, ...) to the run's log."""
    line = {"time": datetime.now(timezone.utc).isoformat(timespec="seconds"), **event}
    with open(Path(run_dir) / EVENTS_FILE, "a") as log:
        log.write(json.dumps(line) + "\n")
        log.flush()
        os.fsync(log.fileno())


def read(run_dir: Path) -> list[dict[str, Any]]:
    """The run's events, oldest first (an unreadable line is skipped; no file: none)."""
    try:
        text = (Path(run_dir) / EVENTS_FILE).read_text()
    except OSError:
        return []
    events = []
    for line in text.splitlines():
        try:
            event = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(event, dict):
            events.append(event)
    return events


def by_scheduler(name: str | None) -> str:
    """How ``train jobs`` calls a restart the scheduler made by itself, no cause recorded: Slurm's requeue
    (:data:`BY_SLURM`: a node failure, ``scontrol requeue``), any other engine's restart (Ray's of a
    worker group that lost a worker: ``restarted by Ray``)."""
    return BY_SLURM if name in (None, "slurm") else f"restarted by {name.capitalize()}"


def summary(events: list[dict[str, Any]], job_ids: list[str], restarts: int, scheduler: str | None = None) -> str:
    """``restarts`` with their causes, for ``train jobs``: ``2 (1 time limit, 1 preempted)``.

    Args:
        events: The run's events (:func:`read`).
        job_ids: The jobs of this submission: the job and those it resubmitted itself from.
        restarts: How many times the job restarted (the engine's count plus earlier resubmissions).
        scheduler: The engine that ran the jobs (None: the default, Slurm).

    Returns:
        The count, the causes of the restarts the jobs made themselves, the rest as the scheduler's
        (:func:`by_scheduler`), and ``stopped by <cause>`` when ``--slurm.max_restarts`` ended the run.
    """
    mine = [e for e in events if str(e.get("job_id")) in job_ids]
    by_restart = {e.get("restart"): e["cause"] for e in mine if e.get("action") in RESTART_ACTIONS and e.get("cause")}
    causes = Counter(by_restart.values())
    if restarts > len(by_restart):
        causes[by_scheduler(scheduler)] += restarts - len(by_restart)
    restarts = max(restarts, len(by_restart))
    text = ", ".join(f"{n} {cause}" for cause, n in causes.items())
    stops = [e for e in mine if e.get("action") == "stop"]
    if stops:
        text += ("; " if text else "") + f"stopped by {stops[-1].get('cause', UNKNOWN)}"
    return f"{restarts} ({text})" if text else str(restarts)
