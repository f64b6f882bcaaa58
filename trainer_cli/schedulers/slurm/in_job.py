"""What a process inside a Slurm job asks Slurm of that job: whether Slurm is requeueing it by itself,
and why its SIGUSR1 came.

The engine's in-job side (:data:`trainer_cli.job.scheduler.IN_JOB`): a fit process reaches it
through :func:`trainer_cli.job.scheduler.in_job_side`, the batch script's steps
(:mod:`trainer_cli.schedulers.slurm.batch`) import it.
Standard library only at import, as the batch script that runs it on a host without the launcher's
packages (a container job's ``<run>/.launcher``).

Slurm sends the same SIGUSR1 before the time limit (``#SBATCH --signal=SIGUSR1@<signal_delay_s>``)
and when an operator or the scheduler preempts a job (``scancel -s USR1``, or a preemption with
``SlurmctldParameters=preempt_send_user_signal``, ``PreemptParameters=send_user_signal`` from Slurm
23.02). They are told apart when the signal is acted on, from ``scontrol show job`` of the job itself
(:func:`classify`):

- ``PreemptTime`` set: Slurm preempted the job (preempted). Seen on Slurm 22.05 with
  ``PreemptMode=CANCEL`` and ``GraceTime=60``: the signal at once, ``PreemptTime`` set, ``EndTime``
  moved to 60 s later while ``TimeLimit`` stays (so ``EndTime`` alone would read as a time limit);
- else the time the job had left when the signal came (``TimeLimit - RunTime``, so independent of
  clocks and time zones, and of time spent suspended) within ``signal_delay_s +``
  :data:`~trainer_cli.job.restarts.EARLY_MARGIN_S`: Slurm's warning before the time limit (time
  limit). Slurm checks time limits every 30 s and may signal up to 60 s early, seen here:
  ``--signal=USR1@60`` arrived with 77 s left;
- else (more time left, or no time limit): someone or something else sent it (preempted).

A signal sent by hand in the last ``signal_delay_s + 90`` seconds of a job counts as the time limit:
the job was about to hit it anyway. Where ``scontrol`` cannot be asked the cause is ``unknown``.
"""

from __future__ import annotations

import os
import time

from trainer_cli.job.context import JobContext
from trainer_cli.job.restarts import EARLY_MARGIN_S, ENV_SIGNAL_DELAY_S, PREEMPTED, TIME_LIMIT, UNKNOWN, env_count
from trainer_cli.schedulers.slurm import commands
from trainer_cli.schedulers.slurm.output import time_limit_s


def _requeued_by_slurm(job: JobContext) -> dict[str, str] | None:
    """``scontrol show job`` of ``job`` when Slurm is requeueing it itself: its restart count is past
    ``job``'s (``SLURM_RESTART_COUNT``); None when it is not, or when scontrol cannot be asked."""
    if not job.own_id:
        return None
    fields = commands.show_job(job.own_id)
    restarts = str(fields.get("Restarts"))
    return fields if restarts.isdigit() and int(restarts) > job.attempt else None


def requeued_by_itself(job: JobContext) -> str | None:
    """The in-job side's answer (:class:`trainer_cli.job.scheduler.InJobSide`): a line saying Slurm is
    requeueing ``job`` by itself (a node failure, ``scontrol requeue`` by hand), so that the process's
    stop is not the run's end; None when it is not (or scontrol cannot be asked)."""
    fields = _requeued_by_slurm(job)  # an array task: its own record (own_id), not every task's
    if fields is None:
        return None
    state, restarts = fields.get("JobState", "?"), fields.get("Restarts")
    return f"Slurm requeued job {job.own_id} ({state}): it resumes on its own (restart {restarts})"


def classify(job: dict[str, str], signal_delay_s: int, since_signal_s: float = 0.0) -> tuple[str, int | None]:
    """The cause of a SIGUSR1 from the job's ``scontrol show job -o`` fields (the module's description).

    Args:
        job: ``scontrol show job -o`` of the job (:func:`trainer_cli.schedulers.slurm.commands.show_job`).
        signal_delay_s: The job's ``--signal`` lead time in seconds (``--slurm.signal_delay_s``).
        since_signal_s: Seconds between the signal and the moment ``job`` was read.

    Returns:
        ``(cause, seconds left when the signal came)``: cause ``time limit``, ``preempted`` or
        ``unknown`` (``job`` empty; :mod:`trainer_cli.job.restarts`); seconds None without a time limit.
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


def cause_of_signal(job: JobContext, signalled_at: float | None) -> tuple[str, int | None]:
    """The in-job side's answer (:class:`trainer_cli.job.scheduler.InJobSide`): :func:`classify` for
    ``job``, asking ``scontrol show job -o`` of it (:attr:`~trainer_cli.job.context.JobContext.own_id`)
    now; the lead time is the job's ``--slurm.signal_delay_s`` (:data:`~trainer_cli.job.restarts.ENV_SIGNAL_DELAY_S`).

    Args:
        job: The job the signal came to.
        signalled_at: ``time.time()`` when the signal arrived (None: now).
    """
    fields = commands.show_job(job.own_id) if job.own_id else {}
    since = max(time.time() - signalled_at, 0.0) if signalled_at else 0.0
    return classify(fields, env_count(os.environ, ENV_SIGNAL_DELAY_S), since)
