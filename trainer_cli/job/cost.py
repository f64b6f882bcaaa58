"""What a run's jobs cost: allocated GPU-, CPU- and node-hours over every attempt, requeues included, and
the queue wait beside it (not in it). The values every engine's answers are put in (:class:`Attempt`,
:class:`Cost`), whatever produced them.

From the scheduler's accounting where it keeps one (:meth:`trainer_cli.job.scheduler.Scheduler.accounting`:
Slurm's ``sacct``, :mod:`trainer_cli.schedulers.slurm.accounting`): each attempt of each job, what it held
and for how long (:func:`of_attempts`: source ``sacct``).

Where there is no accounting (``sacct`` missing, refusing, or knowing none of the jobs) the attempts
are read from the run's own records (:func:`estimate`: when each attempt started and ended) and priced
at the resources the job asked for: marked ``estimated``. A scheduler that keeps no accounting (the
Ray engine) is read from the run's attempt records alone: each start of its worker group from its first
rank's process start to its last rank's end, at what each worker held (``records``,
:func:`trainer_cli.rundir.run_cost.record_attempts`).

Standard library only (the job layer): :mod:`trainer_cli.rundir.run_cost` gathers a run's jobs and
timestamps and calls this; ``train jobs``, ``train runs`` and ``train sweep-results`` show the result.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

SACCT = "sacct"
ESTIMATED = "estimated"
RECORDS = "records"
"""A scheduler without accounting (the Ray engine): the run's attempt records, the processes' own times."""
NONE = "none"
UNITS = (("gpu", "GPU"), ("cpu", "CPU"), ("node", "node"))
WAITING = ("PENDING", "REQUEUED", "RESUBMIT")
"""The states a run's ``job.json`` holds while the run waits in the queue for its next attempt."""


@dataclass
class Attempt:
    """One allocation of a job: from its start to its end (or now, while it runs)."""

    job_id: str
    state: str
    start: float | None
    """Seconds since the epoch; None for an attempt that has not started (pending)."""
    elapsed_s: float
    tres: dict[str, float] = field(default_factory=dict)
    """What the attempt held: ``cpu``, ``gpu``, ``node`` counts (empty: not known)."""
    wait_s: float | None = None
    """Seconds it waited in the queue before it started (from its submission, or the end of the
    attempt before it); for one pending now (start None), its wait so far; None where not known."""
    raw_id: str = ""
    """The scheduler's own id of the job the attempt is of, where it differs from ``job_id`` (a Slurm array
    task's ``JobIDRaw``: its ``SLURM_JOB_ID``, while ``job_id`` is ``<array id>_<task>``); '' where the same."""

    @property
    def end(self) -> float | None:
        """When it ended (for one running now, the time the engine was asked); None before its start."""
        return None if self.start is None else self.start + self.elapsed_s

    def hours(self, kind: str) -> float:
        """``kind``-hours (``gpu``, ``cpu``, ``node``) this attempt held."""
        return self.tres.get(kind, 0.0) * self.elapsed_s / 3600.0


@dataclass
class Cost:
    """A run's allocation over every attempt of its jobs."""

    source: str = NONE
    """``sacct`` (the accounting database), ``estimated`` (the run's own timestamps and the resources
    it asked for), ``records`` (a scheduler without accounting: the ranks' attempt records and what each
    worker held) or ``none`` (no scheduler's job ran it)."""
    attempts: list[Attempt] = field(default_factory=list)
    waiting_s: float | None = None
    """Seconds a job of the run has been waiting in the queue now (pending), else None."""

    @property
    def started(self) -> list[Attempt]:
        """The attempts that got an allocation."""
        return [a for a in self.attempts if a.start is not None]

    def hours(self, kind: str) -> float:
        """Allocated ``kind``-hours (``gpu``, ``cpu``, ``node``) over every attempt."""
        return sum(a.hours(kind) for a in self.started)

    @property
    def has_gpus(self) -> bool:
        """Whether any attempt was allocated a GPU."""
        return any(a.tres.get("gpu") for a in self.started)

    @property
    def known(self) -> bool:
        """Whether the resources of every attempt are known (a figure can be given)."""
        return bool(self.started) and all(a.tres for a in self.started)

    @property
    def queue_wait_s(self) -> float:
        """Seconds the run's jobs waited in the queue, over every attempt (and the wait now)."""
        return sum(a.wait_s or 0.0 for a in self.attempts) + (self.waiting_s or 0.0)

    def cell(self) -> str:
        """The cost in one cell: ``1.52 GPU-h``, ``0.0131 CPU-h``; ``~`` before an estimate or a figure from
        the run's records (the processes' times, not the scheduler's allocation); ``-`` without one."""
        if not self.known:
            return "-"
        kind = "gpu" if self.has_gpus else "cpu"
        return f"{'~' if self.source in (ESTIMATED, RECORDS) else ''}{hours_text(self.hours(kind))} {kind.upper()}-h"

    def as_json(self) -> dict[str, Any]:
        """The figures as JSON: source, attempts, GPU-, CPU- and node-hours, queue wait, each attempt's."""
        known = self.known
        return {
            "source": self.source,
            "attempts": len(self.started),
            "gpu_hours": round(self.hours("gpu"), 6) if known else None,
            "cpu_hours": round(self.hours("cpu"), 6) if known else None,
            "node_hours": round(self.hours("node"), 6) if known else None,
            "queue_wait_s": round(self.queue_wait_s),
            "waiting_s": None if self.waiting_s is None else round(self.waiting_s),
            "per_attempt": [
                {
                    "job_id": a.job_id,
                    "state": a.state,
                    "start": iso_time(a.start),
                    "elapsed_s": round(a.elapsed_s),
                    "cpus": a.tres.get("cpu"),
                    "gpus": a.tres.get("gpu"),
                    "nodes": a.tres.get("node"),
                    "queue_wait_s": None if a.wait_s is None else round(a.wait_s),
                }
                for a in self.started
            ],
        }

    def block(self) -> list[str]:
        """The cost in lines, for ``train jobs RUN``: the totals, then one line per attempt."""
        if self.source == NONE:
            return ["cost: - (no Slurm job of this run has started)"]
        started = self.started
        where = {
            SACCT: "from sacct",
            RECORDS: "from the run's attempt records, each worker group's first rank start to last rank end at "
            "what its workers held: the scheduler keeps no accounting",
        }.get(self.source, "estimated from the run's own timestamps and the resources it asked for: no accounting")
        wait = f"queue wait {duration_text(self.queue_wait_s)}" + (
            f" (waiting now: {duration_text(self.waiting_s)})" if self.waiting_s is not None else ""
        )
        if not self.known:
            figures = "- (the resources of an attempt are not known)"
        else:
            kinds = ["gpu", "node"] if self.has_gpus else ["cpu", "node"]
            figures = ", ".join(f"{hours_text(self.hours(k))} {dict(UNITS)[k]}-h" for k in kinds) + " allocated"
        lines = [f"cost: {figures} over {len(started)} attempt(s), requeues included ({where}); {wait}, not in it"]
        for i, a in enumerate(started, 1):
            held = ", ".join(f"{a.tres[k]:g} {name}(s)" for k, name in UNITS if a.tres.get(k)) or "resources unknown"
            waited = "-" if a.wait_s is None else duration_text(a.wait_s)
            ran, began = duration_text(a.elapsed_s), iso_time(a.start, " ")
            lines.append(
                f"  attempt {i}: job {a.job_id} {a.state}, started {began}, ran {ran} on {held}; waited {waited}"
            )
        return lines


def of_attempts(attempts: Sequence[Attempt], source: str = SACCT) -> Cost:
    """The cost of one run from its jobs' attempts as the scheduler's accounting lists them
    (:meth:`trainer_cli.job.scheduler.Scheduler.accounting`): those that started, and the wait so far of
    those pending now."""
    pending = [a.wait_s for a in attempts if a.start is None and a.state == "PENDING" and a.wait_s is not None]
    return Cost(source, [a for a in attempts if a.start is not None], sum(pending) if pending else None)


def hours_text(hours: float) -> str:
    """Hours in a few digits: ``123``, ``1.52``, ``0.0131``."""
    if hours >= 100:
        return f"{hours:.0f}"
    if hours >= 1:
        return f"{hours:.2f}"
    return f"{hours:.3g}"


def duration_text(seconds: float | None) -> str:
    """``H:MM:SS``."""
    if seconds is None:
        return "-"
    s = max(round(seconds), 0)
    return f"{s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}"


def iso_time(stamp: float | None, sep: str = "T") -> str | None:
    """Seconds since the epoch as local ISO time to the second (None for None)."""
    if stamp is None:
        return None
    return datetime.fromtimestamp(stamp).astimezone().isoformat(sep=sep, timespec="seconds")


def parse_time(text: Any) -> float | None:
    """A time as ``sacct`` prints it (``2026-11-27T18:04:07``, the local time; or seconds since the
    epoch under ``SLURM_TIME_FORMAT=%s``) or as the launcher writes it (ISO with its offset), in
    seconds since the epoch; None for ``None``, ``Unknown`` or anything else."""
    text = str(text or "").strip()
    if text.isdigit():
        return float(text)
    try:
        return datetime.fromisoformat(text).timestamp()  # a naive time is the local time, as sacct prints it
    except ValueError:
        return None


def estimate(
    spans: Sequence[tuple[str, float, float | None]],
    tres: dict[str, float],
    submitted: float | None = None,
    state: str = "",
    now: float | None = None,
) -> Cost:
    """The cost of one run without accounting, from when each attempt started and ended (the run's
    own records) and the resources its job asked for: ``estimated``.

    Args:
        spans: ``(job id, start, end)`` per attempt, oldest first; end None for an attempt running now.
        tres: What each attempt was given, as asked for (``cpu``, ``gpu``, ``node``; empty: not known).
        submitted: When the run was submitted (seconds since the epoch), for the first attempt's wait.
        state: The job's state now (one of :data:`WAITING`: the run waits for its next attempt since the
            last ended).
        now: The time now (seconds since the epoch).
    """
    now = time.time() if now is None else now
    attempts = []
    previous_end = None
    for job_id, start, end in spans:
        queued = max((t for t in (submitted, previous_end) if t is not None and t <= start), default=None)
        ended = end if end is not None else now
        attempts.append(
            Attempt(
                job_id,
                "RUNNING" if end is None else "REQUEUED",
                start,
                max(ended - start, 0.0),
                dict(tres),
                None if queued is None else start - queued,
            )
        )
        previous_end = ended
    if attempts and attempts[-1].state != "RUNNING" and state and state not in WAITING:
        attempts[-1].state = state  # the earlier attempts ended in a restart, the last as the job did
    waiting = None
    if state in WAITING:
        since = previous_end if previous_end is not None else submitted
        waiting = None if since is None else max(now - since, 0.0)
    return Cost(ESTIMATED, attempts, waiting)
