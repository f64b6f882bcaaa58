"""Why a run's Slurm job restarted: its time limit, or a preemption. One JSON line per event in
``<run>/restarts.jsonl``.

Slurm sends the same SIGUSR1 before the time limit (``#SBATCH --signal=SIGUSR1@<signal_delay_s>``)
and when an operator or the scheduler preempts a job (``scancel -s USR1``, or a preemption with
``SlurmctldParameters=preempt_send_user_signal``, ``PreemptParameters=send_user_signal`` from Slurm
23.02). They are told apart when the signal is acted on, from ``scontrol show job`` of the job itself:

- ``PreemptTime`` set: Slurm preempted the job (preempted). Seen on Slurm 22.05 with
  ``PreemptMode=CANCEL`` and ``GraceTime=60``: the signal at once, ``PreemptTime`` set, ``EndTime``
  moved to 60 s later while ``TimeLimit`` stays (so ``EndTime`` alone would read as a time limit);
- else the time the job had left when the signal came (``TimeLimit - RunTime``, so independent of
  clocks and time zones, and of time spent suspended) within ``signal_delay_s +``
  :data:`EARLY_MARGIN_S`: Slurm's warning before the time limit (time limit). Slurm checks time
  limits every 30 s and may signal up to 60 s early, seen here: ``--signal=USR1@60`` arrived with
  77 s left;
- else (more time left, or no time limit): someone or something else sent it (preempted).

A signal sent by hand in the last ``signal_delay_s + 90`` seconds of a job counts as the time limit:
the job was about to hit it anyway. Where ``scontrol`` cannot be asked the cause is ``unknown``.

The cause is found by global rank 0 of the job (:class:`trainer_cli.callbacks.requeue.SynchronizedRequeue`), the
log
written by the batch script once the step ended (:func:`trainer_cli.schedulers.slurm.batch.end_of_step`)
and read by ``train jobs``: ``RESTARTS 2 (1 time limit, 1 preempted)``.

How many restarts a run may take is :class:`RestartPolicy`, the one place that counts them:
``--slurm.max_restarts`` caps the restarts after a time limit or a failure; a preemption and a
requeue Slurm makes itself (a node failure) never consume it (submitit's rule). Standard library
only at import: the batch script's ``python -m trainer_cli.schedulers.slurm.batch`` imports it.
"""

from __future__ import annotations

import json
import os
import time
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from trainer_cli.job import context, slurm_commands
from trainer_cli.job.slurm_output import time_limit_s

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
watchdog (:mod:`trainer_cli.job.progress`) and requeued without the node of the stalled rank."""
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


def requeued_by_slurm(job_id: str | None) -> dict[str, str] | None:
    """Whether Slurm is requeueing ``job_id`` itself (a node failure, ``scontrol requeue`` by hand):
    its restart count (``scontrol show job``) is past this process's ``SLURM_RESTART_COUNT``.

    Returns:
        The job's ``scontrol show job`` fields when it is, else None (also when scontrol cannot be asked).
    """
    if not job_id:
        return None
    job = slurm_commands.show_job(job_id)
    restarts = str(job.get("Restarts"))
    return job if restarts.isdigit() and int(restarts) > context.current().attempt else None


def classify(job: dict[str, str], signal_delay_s: int, since_signal_s: float = 0.0) -> tuple[str, int | None]:
    """The cause of a SIGUSR1 from the job's ``scontrol show job -o`` fields.

    Args:
        job: ``scontrol show job -o`` of the job (:func:`trainer_cli.job.slurm_commands.show_job`).
        signal_delay_s: The job's ``--signal`` lead time in seconds (``--slurm.signal_delay_s``).
        since_signal_s: Seconds between the signal and the moment ``job`` was read.

    Returns:
        ``(cause, seconds left when the signal came)``: cause :data:`TIME_LIMIT`, :data:`PREEMPTED`
        or :data:`UNKNOWN` (``job`` empty); seconds None without a time limit.
    """

    if not job:
        return UNKNOWN, None
    limit_s, run_s = time_limit_s(job.get("TimeLimit") or ""), time_limit_s(job.get("RunTime") or "")
    left_s = None if limit_s is None or run_s is None else max(limit_s - run_s, 0) + round(since_signal_s)
    if job.get("PreemptTime", "None") not in ("None", "Unknown", ""):
        return PREEMPTED, left_s
    if left_s is not None and left_s <= signal_delay_s + EARLY_MARGIN_S:
        return TIME_LIMIT, left_s
    return PREEMPTED, left_s


def cause_of_signal(job_id: str | None, signal_delay_s: int, signalled_at: float | None) -> tuple[str, int | None]:
    """:func:`classify` for this job, asking ``scontrol show job -o JOB_ID`` now.

    Args:
        job_id: The job as scontrol names it alone (:func:`trainer_cli.job.jobstate.scontrol_id`: `<array id>_<task>`
            for an array task).
        signal_delay_s: The job's ``--signal`` lead time in seconds.
        signalled_at: ``time.time()`` when the signal arrived (None: now).
    """
    job: dict[str, str] = {}
    if job_id:
        job = slurm_commands.show_job(job_id)
    since = max(time.time() - signalled_at, 0.0) if signalled_at else 0.0
    return classify(job, signal_delay_s, since)


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
