"""Announced maintenance: a job whose time limit runs into a ``MAINT`` reservation on its nodes.

Slurm does not start a job that would still run when a maintenance reservation begins on its nodes:
it pends, with ``Reason=ReqNodeNotAvail`` or ``Resources``, until the maintenance is over. ``train
submit`` reads the reservations (``scontrol show reservation -o``, the same read-only kind of query as
the partitions') and refuses such a time limit with the fix: the longest ``--slurm.time`` that ends
before the maintenance, or the time it is over.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timedelta

from trainer_cli.schedulers.slurm import commands as slurm_commands


@dataclass(frozen=True)
class Reservation:
    """One reservation as ``scontrol show reservation`` reports it."""

    name: str
    start: datetime
    end: datetime
    nodes: frozenset[str]
    """Its nodes, expanded from Slurm's host list (``node[1-4]``)."""
    maintenance: bool
    """``MAINT`` among its flags."""


def expand_hostlist(text: str) -> list[str]:
    """Slurm's host list (``node[1-3,7],gpu01``) as names."""
    names: list[str] = []
    for prefix, ranges, plain in re.findall(r"([^,\[]+)\[([^\]]+)\]|([^,\[\]]+)", text):
        if plain:
            names.append(plain)
            continue
        for part in ranges.split(","):
            low, _, high = part.partition("-")
            width = len(low)
            names += [f"{prefix}{n:0{width}d}" for n in range(int(low), int(high or low) + 1)]
    return names


def parse_reservations(records: list[dict[str, str]]) -> list[Reservation]:
    """``scontrol show reservation -o`` records (:func:`trainer_cli.schedulers.slurm.commands.show`), one a
    reservation (one without a readable StartTime or EndTime skipped)."""
    out = []
    for f in records:
        try:
            start, end = datetime.fromisoformat(f["StartTime"]), datetime.fromisoformat(f["EndTime"])
        except (KeyError, ValueError):
            continue
        out.append(
            Reservation(
                f.get("ReservationName", "?"),
                start,
                end,
                frozenset(expand_hostlist(f.get("Nodes") or "")),
                "MAINT" in (f.get("Flags") or "").split(","),
            )
        )
    return out


def read_reservations() -> list[Reservation]:
    """The cluster's reservations.

    Raises:
        RuntimeError: when Slurm cannot be asked.
    """
    try:
        return parse_reservations(slurm_commands.show("reservation"))
    except slurm_commands.SlurmCommandError as err:
        raise RuntimeError(err.message.splitlines()[-1] if err.message else str(err)) from None


def maintenance_problems(
    reservations: list[Reservation],
    nodes: set[str],
    partition: str,
    time_limit_s: int | None,
    time_text: str,
    now: datetime | None = None,
) -> list[str]:
    """What a job of ``time_limit_s`` on ``partition`` (its ``nodes``) starting now runs into, one line each."""
    if time_limit_s is None:
        return []
    now = now or datetime.now()
    problems = []
    for r in reservations:
        if (
            not r.maintenance
            or not (r.nodes & nodes)
            or r.end <= now
            or now + timedelta(seconds=time_limit_s) <= r.start
        ):
            continue
        if r.start <= now:
            problems.append(
                f"--slurm.time {time_text}: maintenance {r.name} holds nodes of partition {partition} until "
                f"{r.end:%Y-%m-%d %H:%M}; the job waits until then (submit to another partition, or later)"
            )
            continue
        fits_min = int((r.start - now).total_seconds() // 60)
        problems.append(
            f"--slurm.time {time_text}: runs into maintenance {r.name} on partition {partition} at "
            f"{r.start:%Y-%m-%d %H:%M} "
            f"(in {fits_min} min), so the job would wait until {r.end:%Y-%m-%d %H:%M}; use --slurm.time {fits_min} "
            "(minutes) or less to run before it"
        )
    return problems


def check_maintenance(partition: str | None, time_text: str) -> list[str]:
    """The maintenance problems of a job on ``partition`` (the default one when None) with time limit
    ``time_text``, reading the cluster; empty when Slurm cannot be asked (the partition checks
    already said so)."""
    from trainer_cli.schedulers.slurm.cluster import read_cluster
    from trainer_cli.schedulers.slurm.output import time_limit_s

    try:
        partitions = read_cluster()
        reservations = read_reservations()
    except (RuntimeError, OSError, ValueError):
        return []
    chosen = next((p for p in partitions if (p.name == partition if partition else p.default)), None)
    if chosen is None:
        return []
    return maintenance_problems(
        reservations, {n.name for n in chosen.nodes}, chosen.name, time_limit_s(time_text), time_text
    )


def refuse_maintenance(partition: str | None, time_text: str) -> None:
    """Refuse a time limit that runs into an announced maintenance (:func:`check_maintenance`).

    Raises:
        UserError: naming the reservation, and the longest ``--slurm.time`` that ends before it.
    """
    from trainer_cli.errors import UserError

    problems = check_maintenance(partition, time_text)
    if problems:
        raise UserError("the cluster cannot run this job:\n  " + "\n  ".join(problems))
