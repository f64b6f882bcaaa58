"""Why a Slurm job waits, in words, with what the user can do about it.

``scontrol show job`` gives a pending job a ``Reason`` code (the "JOB REASON CODES" of ``man
squeue``) and, once the scheduler has planned it, a ``StartTime`` (what ``squeue --start`` prints):
:func:`why_pending` turns both into one line for ``train jobs``. Codes not in :data:`REASONS` are
read by their shape (``QOSMaxJobsPerUserLimit``: the QOS, its maximum of jobs per user) or shown as
Slurm wrote them. Standard library only.
"""

from __future__ import annotations

import re
from datetime import datetime

# Reason code -> (what it means, what the user can do). "{job}" is the job id.
REASONS: dict[str, tuple[str, str]] = {
    "None": ("not yet looked at by the scheduler", "wait a scheduling cycle"),
    "Resources": (
        "the nodes it asks for are busy",
        "starts by itself; fewer nodes or a shorter --slurm.time may start it sooner",
    ),
    "Priority": (
        "jobs of higher priority go first",
        "starts by itself; a shorter --slurm.time may let it start in a gap sooner",
    ),
    "Dependency": ("waiting for the job(s) it depends on to end", "it starts when they end as --slurm.dependency asks"),
    "DependencyNeverSatisfied": (
        "never starts: a job it depends on ended in a way the dependency excludes",
        "cancel it (`train cancel {job}`) and submit again",
    ),
    "JobHeldUser": ("held by you (or a hold on submit)", "release it: `scontrol release {job}`"),
    "JobHeldAdmin": ("held by an administrator", "ask your cluster's administrators to release it"),
    "BeginTime": (
        "its earliest start time has not come yet",
        "it starts by itself then (`scontrol update JobId={job} StartTime=now` to start now)",
    ),
    "PartitionTimeLimit": (
        "its time limit is over the partition's MaxTime: it never starts there",
        "lower it: `scontrol update JobId={job} TimeLimit=HH:MM:SS`, or resubmit with a shorter --slurm.time",
    ),
    "PartitionNodeLimit": (
        "asks for more nodes than the partition allows a job: it never starts there",
        "cancel it and submit with fewer --trainer.num_nodes or to another --slurm.partition",
    ),
    "PartitionDown": ("its partition is down", "wait for the administrators, or submit to another --slurm.partition"),
    "PartitionInactive": (
        "its partition is inactive",
        "wait for the administrators, or submit to another --slurm.partition",
    ),
    "ReqNodeNotAvail": (
        "a node it needs is down, drained or reserved",
        "wait for the node, or cancel and submit without it (another --slurm.partition or fewer nodes)",
    ),
    "NodeDown": ("a node it needs is down", "wait for the node to return; it then starts by itself"),
    "Reservation": ("waiting for its reservation to start", "it starts by itself when the reservation begins"),
    "Licenses": ("waiting for a license", "it starts when one is free"),
    "JobArrayTaskLimit": (
        "the array's limit of tasks at once is reached (--slurm.array_parallelism)",
        "it starts when a task of the array ends",
    ),
    "Cleaning": ("being requeued: the previous run is still cleaning up", "it starts by itself"),
    "BadConstraints": (
        "its constraints cannot be met by any node",
        "cancel it and submit with another --slurm.constraint",
    ),
    "InvalidAccount": ("its account is not valid", "cancel it and submit with a valid --slurm.account"),
    "InvalidQOS": ("its QOS is not valid", "cancel it and submit with a valid --slurm.qos"),
    "QOSNotAllowed": (
        "its QOS may not be used with this account or partition",
        "cancel it and submit with another --slurm.qos",
    ),
    "launch failed requeued held": (
        "its launch failed and Slurm held it",
        "look at its log, then `scontrol release {job}`",
    ),
    "Prolog": ("its node's prolog is running", "it starts by itself"),
    "SystemFailure": ("Slurm or its file systems failed", "ask your cluster's administrators"),
}

_LIMIT_WORDS = {  # the parts of a QOS/association limit code, e.g. QOSMaxJobsPerUserLimit, AssocGrpGRES
    "Jobs": "running jobs",
    "SubmitJob": "queued jobs",
    "Cpu": "CPUs",
    "CPU": "CPUs",
    "Node": "nodes",
    "GRES": "GPUs (GRES)",
    "Mem": "memory",
    "WallDuration": "time limit",
    "Wall": "time limit",
    "Billing": "billing",
    "TRES": "resources",
}
_LIMIT = re.compile(r"(QOS|Assoc)(Grp|Max)?(.*?)(PerUser|PerJob|PerAccount|PerNode)?(Minutes|RunMinutes)?(Limit)?$")


def reason_words(reason: str, job_id: str = "") -> tuple[str, str]:
    """``(what it means, what to do)`` for a pending job's ``Reason`` code.

    Args:
        reason: The code as ``scontrol show job`` gives it (``Resources``, ``QOSMaxJobsPerUserLimit``,
            ``ReqNodeNotAvail``...).
        job_id: Put into the commands suggested (``scontrol release ID``).
    """
    code = reason.split(",")[0].strip() or "None"
    if code in REASONS:
        meaning, action = REASONS[code]
        return meaning, action.format(job=job_id or "JOBID")
    match = _LIMIT.match(code)
    if match and match.group(3) is not None and code not in ("QOS", "Assoc"):
        whose = "your QOS" if match.group(1) == "QOS" else "your account"
        scope = {
            "PerUser": " per user",
            "PerJob": " per job",
            "PerAccount": " per account",
            "PerNode": " per node",
        }.get(match.group(4) or "", "")
        group = " for the whole group" if match.group(2) == "Grp" else ""
        what = _LIMIT_WORDS.get(match.group(3), match.group(3) or "resources")
        if match.group(5):
            what += "-minutes"
        if what == "time limit":
            return (
                f"its time limit is over {whose}'s maximum: it never starts as it is",
                f"lower it (`scontrol update JobId={job_id or 'JOBID'} TimeLimit=HH:MM:SS`) or resubmit with a shorter "
                "--slurm.time",
            )
        if match.group(4) == "PerJob":
            return (
                f"asks for more {what} than {whose} allows a job: it never starts as it is",
                "cancel it and ask for less (or use another --slurm.qos / --slurm.account)",
            )
        return (
            f"{whose}'s limit of {what}{scope}{group} is reached",
            "it starts when jobs of yours (or your group's) end",
        )
    return (f"Slurm says {code}", "see REASON in `man squeue`")


def start_estimate(start_time: str, now: datetime | None = None) -> str | None:
    """Slurm's planned start of a pending job (``StartTime``, local time ``2026-11-25T06:52:10``) as
    ``06:52 (in 9 min)``; None when Slurm has none (``Unknown``, ``None``, empty)."""
    try:
        when = datetime.fromisoformat(start_time)
    except (TypeError, ValueError):
        return None
    now = now or datetime.now()
    seconds = (when - now).total_seconds()
    day = "" if when.date() == now.date() else when.strftime("%Y-%m-%d ")
    if seconds <= 0:
        return f"{day}{when:%H:%M} (now)"
    minutes = max(1, round(seconds / 60))  # (29 s ahead is not now: in 1 min)
    wait = f"{minutes} min" if minutes < 120 else f"{minutes / 60:.1f} h"
    return f"{day}{when:%H:%M} (in {wait})"


def why_pending(fields: dict[str, str], now: datetime | None = None) -> str:
    """One line for a pending job (fields of ``scontrol show job``): its reason code, in words,
    what to do, and Slurm's estimated start when it has one; the nodes Slurm names unavailable."""
    reason = fields.get("Reason", "None")
    meaning, action = reason_words(reason, fields.get("JobId", ""))
    unavailable = fields.get("UnavailableNodes")
    if unavailable:
        meaning += f" ({unavailable})"
    if reason.startswith("Dependency") and fields.get("Dependency") not in (None, "(null)", ""):
        meaning += f" ({fields['Dependency']})"
    start = start_estimate(fields.get("StartTime", ""), now)
    line = f"{reason.split(',')[0]}: {meaning}; {action}"
    return line + (f"; est. start {start}" if start else "")
