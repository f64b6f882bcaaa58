"""Slurm's accounting: every attempt of jobs from ``sacct``, as the engine's ``accounting`` answers it
(:meth:`trainer_cli.schedulers.slurm.engine.SlurmScheduler.accounting`) and as its ``describe`` reads the
jobs the controller has forgotten (:mod:`trainer_cli.schedulers.slurm.states`).

``sacct -D -X -P -n -j ID1,ID2,... -o`` its fields (:func:`trainer_cli.schedulers.slurm.commands.sacct_attempts`,
read by name), one call for any number of jobs, gives one row per attempt of each job (``-D``: the
attempts a requeue ended too, state ``REQUEUED``; without it only the last), and each row's ``AllocTRES``
(``billing=1,cpu=2,gres/gpu=1,mem=0,node=1``; ``gres/gpu`` only where GPUs were allocated) times its
``ElapsedRaw`` seconds is what that attempt held. A row of an attempt that never started (``Start``
``None``, empty ``AllocTRES``: a job pending now) holds nothing. Records reach the database a moment after a
job ends, so a job that has just ended may show its last attempt late.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from trainer_cli.job.cost import SACCT, Attempt, Cost, of_attempts, parse_time
from trainer_cli.schedulers.slurm import commands as slurm_commands
from trainer_cli.schedulers.slurm.output import READS, parsable


def parse_tres(text: str) -> dict[str, float]:
    """``AllocTRES`` as ``{"cpu", "gpu", "node"}`` counts: ``gres/gpu=N`` (else the sum of the typed
    ``gres/gpu:TYPE=N``); empty for an empty field (an attempt that never started)."""
    found: dict[str, float] = {}
    typed = 0.0
    for part in text.split(","):
        key, _, value = part.partition("=")
        try:
            number = float(value)
        except ValueError:
            continue
        if key in ("cpu", "node"):
            found[key] = number
        elif key == "gres/gpu":
            found["gpu"] = number
        elif key.startswith("gres/gpu:"):
            typed += number
    if "gpu" not in found and typed:
        found["gpu"] = typed
    return found


@dataclass
class Row:
    """One attempt of a job: a record of :func:`trainer_cli.schedulers.slurm.commands.sacct_attempts`."""

    job_id: str
    raw_id: str
    state: str
    submit: float | None
    start: float | None
    end: float | None
    elapsed_s: float
    tres: dict[str, float]
    """What it held; empty where not known (never started, or a Slurm without ``AllocTRES``/``ElapsedRaw``)."""
    elapsed: str = "-"
    """``Elapsed`` as sacct prints it (``00:01:23``, ``1-02:03:04``); ``-`` where not known."""
    exit_code: str = ""
    """``ExitCode``: ``<code>:<signal>``."""
    nodes: str = ""
    """``NodeList``: ``node[1-2]``; ``None assigned`` before a start."""


def row_of(record: dict[str, str]) -> Row:
    """One sacct record (``{field name: value}``) as a :class:`Row`: a state such as ``CANCELLED by 0`` kept
    as its first word; a field the record lacks is unknown (an unknown ``ElapsedRaw`` is ``End - Start``
    where both are known, else the attempt's resources are unknown: no figure rather than a wrong one)."""
    start, end = parse_time(record.get("Start")), parse_time(record.get("End"))
    raw = str(record.get("ElapsedRaw") or "").strip()
    elapsed_s = float(raw) if raw.isdigit() else (end - start if start is not None and end is not None else None)
    return Row(
        job_id=record.get("JobID") or record.get("JobIDRaw") or "?",
        raw_id=record.get("JobIDRaw") or record.get("JobID") or "?",
        state=(str(record.get("State") or "").split() or ["UNKNOWN"])[0],
        submit=parse_time(record.get("Submit")),
        start=start,
        end=end,
        elapsed_s=elapsed_s or 0.0,
        tres=parse_tres(record.get("AllocTRES") or "") if elapsed_s is not None else {},
        elapsed=record.get("Elapsed") or "-",
        exit_code=record.get("ExitCode") or "",
        nodes=record.get("NodeList") or "",
    )


def newest_rows(rows: Iterable[Row]) -> dict[str, Row]:
    """Each job's newest attempt (by ``JobIDRaw``): the one submitted last (a requeue's row carries
    the requeue's time), as ``sacct`` without ``-D`` would give it."""
    newest: dict[str, tuple[tuple[float, float, int], Row]] = {}
    for index, row in enumerate(rows):
        key = (row.submit or 0.0, row.start or 0.0, index)
        if row.raw_id not in newest or key > newest[row.raw_id][0]:
            newest[row.raw_id] = (key, row)
    return {raw: row for raw, (_, row) in newest.items()}


def parse_sacct(text: str, names: Sequence[str] = READS["sacct"].names) -> list[Row]:
    """The rows of ``sacct -P -n -o NAMES`` output (by default the launcher's own fields), by name."""
    return [row_of(r) for r in parsable(text, tuple(names))]


def query_sacct(job_ids: Iterable[str]) -> list[Row] | None:
    """Every attempt of ``job_ids`` in the accounting database, in one ``sacct -D -X`` call (the cost of
    runs, and the state of jobs the controller has forgotten through :func:`newest_rows`); None where
    ``sacct`` is missing, hangs or refuses (no accounting: ``Slurm accounting storage is disabled``)."""
    records = slurm_commands.sacct_attempts(job_ids)
    return None if records is None else [row_of(r) for r in records]


def attempts_of(rows: Sequence[Row], now: float | None = None) -> list[Attempt]:
    """The attempts of jobs' sacct rows, in the order they started (those pending now last): each
    attempt's wait from its submission, or from the end of the attempt before it where that is later (a
    requeue); one pending now (start None) with its wait so far; one that never started and waits no more
    (cancelled while pending) with none."""
    now = time.time() if now is None else now
    ordered = sorted(rows, key=lambda r: (r.start is None, r.start or 0.0, r.submit or 0.0))
    attempts: list[Attempt] = []
    ends: dict[str, float] = {}  # per job: the end of its latest attempt (a requeue waits from there)
    for row in ordered:
        queued = max((t for t in (row.submit, ends.get(row.job_id)) if t is not None), default=None)
        raw = row.raw_id if row.raw_id != row.job_id else ""
        if row.start is None:  # pending now: its wait so far, no allocation
            waited = max(now - queued, 0.0) if row.state == "PENDING" and queued is not None else None
            attempts.append(Attempt(row.job_id, row.state, None, 0.0, {}, waited, raw))
            continue
        wait = max(row.start - queued, 0.0) if queued is not None else None
        attempts.append(Attempt(row.job_id, row.state, row.start, row.elapsed_s, row.tres, wait, raw))
        ends[row.job_id] = row.end if row.end is not None else row.start + row.elapsed_s
    return attempts


def from_sacct(rows: Sequence[Row], now: float | None = None) -> Cost:
    """The cost of one run from its jobs' sacct rows (:func:`attempts_of`, :func:`trainer_cli.job.cost.of_attempts`)."""
    return of_attempts(attempts_of(rows, now), SACCT)


def accounting(job_ids: Iterable[str]) -> list[Attempt] | None:
    """Every attempt of ``job_ids`` (:func:`attempts_of` of :func:`query_sacct`), in one ``sacct`` call; None
    where there is no accounting."""
    rows = query_sacct(job_ids)
    return None if rows is None else attempts_of(rows)
