"""A job checked against the cluster it goes to, before anything is written or queued.

Slurm itself refuses an unknown partition or an unsatisfiable request only at sbatch time, and a
request larger than the partition (more nodes than it has) is accepted and pends forever. So
``train submit`` asks Slurm first, with two read-only queries, ``scontrol show partition -o``
and ``scontrol show node -o`` (the same facts ``sinfo`` prints), and refuses with one message
naming each value and what the cluster offers:

- a partition the cluster does not have (the partitions are listed);
- more nodes than the partition has (or than its ``MaxNodes``);
- a time limit over the partition's ``MaxTime``;
- GPUs per node above the ``gpu`` GRES of the partition's nodes (of ``--slurm.gpu_type`` when set);
- CPUs per task x tasks per node above the CPUs of the partition's largest node;
- ``--slurm.mem`` above the memory of the partition's largest node.

With ``--slurm.account`` or ``--slurm.qos`` it also asks the accounting database (``sacctmgr -P -n
show assoc`` of this user, ``sacctmgr -P -n show qos``) and refuses:

- an account that is not one of the user's (their accounts are listed);
- a QOS the cluster does not have, or that the account may not use (the allowed ones are listed);
- a time limit over the QOS's ``MaxWall``: that of ``--slurm.qos``, else the ``DefaultQOS`` of the
  account the job is charged to (``--slurm.account``, else the user's default account), which Slurm
  would otherwise leave pending for ever (``QOSMaxWallDurationPerJobLimit``). This one is asked even
  without those options where there is accounting, quietly skipped where there is none.

It also warns (without refusing: a path may exist on the compute nodes alone) about a file the
job's first lines need that is missing here: a ``--slurm.setup`` line that sources one (``source
/path/venv/bin/activate``, ``. file``) and an absolute ``--slurm.python``; a job that starts by
failing on them costs a place in the queue.

Where the queries fail (no Slurm here, the controller unreachable, no accounting: ``sacctmgr``
refuses without ``accounting_storage/slurmdbd``) those checks are skipped with one warning: sbatch,
if it can run, still judges the job. The local test cluster (scripts/local-slurm) keeps accounting.
"""

from __future__ import annotations

import os
import pwd
import re
import shlex
import sys
from dataclasses import dataclass, field
from typing import Any

from trainer_cli.errors import UserError
from trainer_cli.schedulers.resources import Resources
from trainer_cli.schedulers.slurm import commands as slurm_commands
from trainer_cli.schedulers.slurm.commands import SlurmCommandError
from trainer_cli.schedulers.slurm.options import SlurmOptions
from trainer_cli.schedulers.slurm.output import time_limit_s

UNLIMITED = {"UNLIMITED", "INFINITE", "NONE"}
_MEM_UNITS_MB = {"K": 1 / 1024, "M": 1, "G": 1024, "T": 1024 * 1024}


@dataclass(frozen=True)
class Node:
    """One node as ``scontrol show node`` reports it."""

    name: str
    cpus: int
    """CPUs (``CPUTot``)."""
    mem_mb: int
    """Memory in MB (``RealMemory``)."""
    gres: str
    """Generic resources, e.g. ``gpu:a100:8(S:0-1)`` or ``(null)``."""
    partitions: tuple[str, ...]
    state: str = field(default="", compare=False)
    """``State`` (``IDLE``, ``DOWN+DRAIN``...); empty where not known."""

    def gpus(self, gpu_type: str | None = None) -> int:
        """GPUs of the node (of ``gpu_type`` when given) from its GRES."""
        total = 0
        for entry in self.gres.split(","):
            parts = re.sub(r"\(.*?\)", "", entry).split(":")
            if parts[0] != "gpu" or len(parts) < 2 or not parts[-1].isdigit():
                continue
            kind = parts[1] if len(parts) == 3 else None
            if gpu_type is None or kind == gpu_type:
                total += int(parts[-1])
        return total


@dataclass(frozen=True)
class Partition:
    """One partition as ``scontrol show partition`` reports it."""

    name: str
    default: bool
    total_nodes: int
    max_nodes: int | None
    """``MaxNodes`` per job; None: unlimited."""
    max_time_s: int | None
    """``MaxTime`` in seconds; None: unlimited."""
    nodes: list[Node] = field(default_factory=list)
    settings: dict[str, str] = field(default_factory=dict, compare=False)
    """Every field ``scontrol show partition`` gave (``DefaultTime``, ``PreemptMode``, ``GraceTime``, ...)."""


def _query(kind: str) -> list[dict[str, str]]:
    try:
        return slurm_commands.show(kind)
    except SlurmCommandError as err:
        raise RuntimeError(err.message.splitlines()[-1]) from None


def _count(value: str | None) -> int:
    """A count Slurm printed; 0 (nothing known) for an absent or unreadable one."""
    return int(value) if value and value.isdigit() else 0


def _limit(value: str | None) -> int | None:
    return None if value is None or value.upper() in UNLIMITED or not value.isdigit() else int(value)


def read_cluster() -> list[Partition]:
    """The cluster's partitions with their nodes.

    Raises:
        RuntimeError: when Slurm cannot be asked (no ``scontrol``, controller unreachable).
    """
    return parse_cluster(_query("partition"), _query("node"))


def parse_cluster(partition_lines: list[dict[str, str]], node_lines: list[dict[str, str]]) -> list[Partition]:
    """The partitions with their nodes, from the lines of ``scontrol show partition -o`` and
    ``scontrol show node -o`` (each read by :func:`trainer_cli.schedulers.slurm.output.key_values`)."""
    nodes = [
        Node(
            name=n.get("NodeName", "?"),
            cpus=_count(n.get("CPUTot")),
            mem_mb=_count(n.get("RealMemory")),
            gres=n.get("Gres") or "(null)",
            partitions=tuple(p for p in (n.get("Partitions") or "").split(",") if p),
            state=n.get("State") or "",
        )
        for n in node_lines
    ]
    partitions = []
    for p in partition_lines:
        name = p.get("PartitionName", "?")
        max_time = p.get("MaxTime") or "UNLIMITED"
        partitions.append(
            Partition(
                name=name,
                default=p.get("Default") == "YES",
                total_nodes=_count(p.get("TotalNodes")),
                max_nodes=_limit(p.get("MaxNodes")),
                max_time_s=None if max_time.upper() in UNLIMITED else time_limit_s(max_time),
                nodes=[n for n in nodes if name in n.partitions],
                settings=p,
            )
        )
    return partitions


def mem_mb(text: str) -> int | None:
    """MB of an sbatch ``--mem`` value (``64G``, ``500M``, ``1T``, a bare number is MB); None if unreadable."""
    match = re.fullmatch(r"(\d+)([KMGT]?)B?", str(text).strip().upper())
    if not match:
        return None
    return int(int(match.group(1)) * _MEM_UNITS_MB[match.group(2) or "M"])


def problems_with(partitions: list[Partition], slurm: SlurmOptions, resources: Resources) -> list[str]:
    """What the cluster cannot give this job, one line each (empty: it fits)."""
    names = [p.name + (" (default)" if p.default else "") for p in partitions]
    if slurm.partition:
        chosen = next((p for p in partitions if p.name == slurm.partition), None)
        if chosen is None:
            return [
                f"--slurm.partition {slurm.partition}: this cluster has no such partition; it has "
                f"{', '.join(names) or 'none'}"
            ]
    else:
        chosen = next((p for p in partitions if p.default), None)
        if chosen is None:
            return (
                []
                if not partitions
                else [f"this cluster has no default partition: choose one with --slurm.partition ({', '.join(names)})"]
            )
    where = f"partition {chosen.name}"
    problems = []
    nodes_limit = min(chosen.total_nodes, chosen.max_nodes or chosen.total_nodes)
    if resources.nodes > nodes_limit:
        problems.append(
            f"--trainer.num_nodes {resources.nodes}: {where} has {nodes_limit} node(s) for a job; use at most "
            f"{nodes_limit}"
        )
    limit_s = time_limit_s(slurm.time)
    if chosen.max_time_s is not None and limit_s is not None and limit_s > chosen.max_time_s:
        problems.append(
            f"--slurm.time {slurm.time}: over the MaxTime of {where} ({chosen.max_time_s // 60} min); use a shorter "
            "time or another partition"
        )
    if not chosen.nodes:
        return problems
    if resources.gpus_per_node:
        most = max(n.gpus(slurm.gpu_type) for n in chosen.nodes)
        if resources.gpus_per_node > most:
            kind = f" {slurm.gpu_type}" if slurm.gpu_type else ""
            problems.append(
                f"--trainer.devices {resources.gpus_per_node} GPUs per node: the nodes of {where} have at most "
                f"{most}{kind} GPU(s)"
                f"; use --trainer.devices {most} or fewer (and more --trainer.num_nodes)"
            )
    cpus = (slurm.cpus_per_task or 1) * resources.ntasks_per_node  # filled in by check_resources
    most_cpus = max(n.cpus for n in chosen.nodes)
    if resources.ntasks_per_node > most_cpus:
        problems.append(
            f"--trainer.devices {resources.ntasks_per_node}: one task per device needs {resources.ntasks_per_node} "
            "CPUs per node; "
            f"the nodes of {where} have at most {most_cpus}: use --trainer.devices {most_cpus} or fewer (and more "
            "--trainer.num_nodes)"
        )
    elif cpus > most_cpus:
        problems.append(
            f"--slurm.cpus_per_task {slurm.cpus_per_task} x {resources.ntasks_per_node} task(s) per node = {cpus} "
            "CPUs: "
            f"the nodes of {where} have at most {most_cpus}; use --slurm.cpus_per_task "
            f"{max(most_cpus // resources.ntasks_per_node, 1)} or fewer"
        )
    wanted_mb = mem_mb(slurm.mem) if slurm.mem else None
    most_mb = max(n.mem_mb for n in chosen.nodes)
    if wanted_mb is not None and most_mb > 0 and wanted_mb > most_mb:
        problems.append(f"--slurm.mem {slurm.mem}: the nodes of {where} have at most {most_mb} MB")
    return problems


@dataclass(frozen=True)
class Association:
    """One account association of the user, as ``sacctmgr show assoc`` reports it."""

    account: str
    partition: str
    """The partition it is limited to; empty: every partition."""
    qos: tuple[str, ...]
    """The QOS the association may use; empty: not listed (not checked)."""
    default_qos: str = ""
    """The QOS its jobs run in without ``--qos`` (``DefaultQOS``); empty: not set."""


def associations_of(records: list[dict[str, str]]) -> list[Association]:
    """``sacctmgr show assoc`` records (:func:`trainer_cli.schedulers.slurm.commands.sacctmgr`) as associations
    (``DefaultQOS`` empty where this Slurm lacks it)."""
    return [
        Association(
            r["Account"],
            r.get("Partition") or "",
            tuple(q for q in (r.get("QOS") or "").split(",") if q),
            r.get("DefaultQOS") or "",
        )
        for r in records
        if r.get("Account")
    ]


def qos_of(records: list[dict[str, str]]) -> dict[str, int | None]:
    """``sacctmgr show qos`` records as ``{name: MaxWall in seconds}`` (None: no limit, or not known)."""
    return {r["Name"]: time_limit_s(r.get("MaxWall") or "") for r in records if r.get("Name")}


def _sacctmgr(what: str, user: str = "") -> list[dict[str, str]]:
    try:
        return slurm_commands.sacctmgr(what, user)
    except SlurmCommandError as err:
        raise RuntimeError(err.message.splitlines()[0]) from None


def read_accounting(user: str) -> tuple[list[Association], dict[str, int | None]]:
    """``user``'s associations and the cluster's QOS with their ``MaxWall``.

    Raises:
        RuntimeError: when the accounting database cannot be asked (no ``sacctmgr``, no
            accounting, or it lists no association for ``user``).
    """
    associations = associations_of(_sacctmgr("assoc", user))
    if not associations:
        raise RuntimeError(f"sacctmgr lists no association for user {user}")
    return associations, qos_of(_sacctmgr("qos"))


def read_default_account(user: str) -> str | None:
    """``user``'s default account (``sacctmgr show user``), None where none is set.

    Raises:
        RuntimeError: when the accounting database cannot be asked.
    """
    return next((r.get("DefaultAccount") or None for r in _sacctmgr("user", user)), None)


def job_qos(
    associations: list[Association], slurm: SlurmOptions, default_account: str | None
) -> tuple[str, str] | None:
    """The QOS a job runs in and how to name it in a message: ``--slurm.qos``, else the ``DefaultQOS``
    of the association of the account it is charged to (``--slurm.account``, else ``default_account``)
    and its partition; None where neither is known."""
    if slurm.qos:
        return slurm.qos, f"QOS {slurm.qos}"
    account = slurm.account or default_account
    for assoc in associations:
        if assoc.account == account and assoc.default_qos and assoc.partition in ("", slurm.partition or ""):
            return assoc.default_qos, f"QOS {assoc.default_qos}, the default QOS of account {account},"
    return None


def accounting_problems(
    associations: list[Association],
    qos: dict[str, int | None],
    slurm: SlurmOptions,
    user: str,
    default_account: str | None = None,
) -> list[str]:
    """What the accounting refuses of ``slurm.account``, ``slurm.qos`` and ``slurm.time``, one line each
    (the time against the MaxWall of the QOS the job runs in: :func:`job_qos`)."""
    mine = [a for a in associations if not a.partition or not slurm.partition or a.partition == slurm.partition]
    accounts = sorted({a.account for a in mine})
    if slurm.account and slurm.account not in accounts:
        return [
            f"--slurm.account {slurm.account}: not an account of user {user} here; yours: "
            f"{', '.join(accounts) or 'none'}"
        ]
    if not slurm.qos:
        return _over_max_wall(qos, job_qos(associations, slurm, default_account), slurm.time)
    if slurm.qos not in qos:
        return [f"--slurm.qos {slurm.qos}: this cluster has no such QOS; it has {', '.join(sorted(qos)) or 'none'}"]
    allowed = sorted({q for a in mine if not slurm.account or a.account == slurm.account for q in a.qos})
    if allowed and slurm.qos not in allowed:
        whose = f"account {slurm.account}" if slurm.account else f"user {user}"
        return [f"--slurm.qos {slurm.qos}: not allowed for {whose}; allowed: {', '.join(allowed)}"]
    return _over_max_wall(qos, (slurm.qos, f"QOS {slurm.qos}"), slurm.time)


def _over_max_wall(qos: dict[str, int | None], chosen: tuple[str, str] | None, time: str) -> list[str]:
    max_wall_s, limit_s = (qos.get(chosen[0]) if chosen else None), time_limit_s(time)
    if chosen is None or max_wall_s is None or limit_s is None or limit_s <= max_wall_s:
        return []
    over = f"over the MaxWall of {chosen[1]} ({max_wall_s // 60} min)"
    return [f"--slurm.time {time}: {over}; use a shorter time or another QOS"]


def qos_max_wall(slurm: SlurmOptions) -> tuple[int, str] | None:
    """The ``MaxWall`` in seconds of the QOS the job runs in (:func:`job_qos`) and its name for a
    message; None where it has none or the accounting cannot be asked."""
    user = pwd.getpwuid(os.getuid()).pw_name
    try:
        associations, qos = read_accounting(user)
        chosen = job_qos(associations, slurm, None if slurm.qos or slurm.account else read_default_account(user))
    except (RuntimeError, OSError, ValueError):
        return None
    max_wall = qos.get(chosen[0]) if chosen else None
    return (max_wall, chosen[1]) if chosen and max_wall is not None else None


def check_resources(slurm: SlurmOptions, resources: Resources, config: Any, dry_run: bool) -> None:
    """Fill in ``slurm.cpus_per_task`` when not given (a core per data loader worker of ``config``,
    plus the training process) and, unless ``dry_run`` (a dry run may be for another cluster), check
    the job against this cluster (:func:`check_against_cluster`).

    Raises:
        UserError: naming every value the cluster cannot give.
    """
    if slurm.cpus_per_task is None:
        data = config.get("data")
        init: Any = data.get("init_args") if hasattr(data, "get") else None
        workers = init.get("num_workers") if hasattr(init, "get") else None
        slurm.cpus_per_task = (workers if isinstance(workers, int) and workers > 0 else 0) + 1
    if not dry_run:
        warning = check_against_cluster(slurm, resources)
        if warning:
            print(f"warning: {warning}", file=sys.stderr)


def check_against_cluster(slurm: SlurmOptions, resources: Resources) -> str | None:
    """Refuse a job the cluster cannot run (see the module docstring).

    Returns:
        One warning naming what Slurm could not be asked (those checks were skipped), else None.

    Raises:
        UserError: naming every value the cluster cannot give, with what it offers.
    """
    problems: list[str] = []
    unasked: list[str] = []
    try:
        problems += problems_with(read_cluster(), slurm, resources)
    except (RuntimeError, OSError, ValueError) as err:
        unasked.append(f"{UNCHECKED} ({err}): the job is not checked against the cluster")
    user = pwd.getpwuid(os.getuid()).pw_name
    try:  # without --slurm.account/qos: the time against the default QOS's MaxWall, where there is accounting
        default_account = None if slurm.account or slurm.qos else read_default_account(user)
        problems += accounting_problems(*read_accounting(user), slurm, user, default_account)
    except (RuntimeError, OSError, ValueError) as err:
        given = " and ".join(f"--slurm.{k} {getattr(slurm, k)}" for k in ("account", "qos") if getattr(slurm, k))
        if given:
            unasked.append(f"could not ask Slurm's accounting ({err}): {given} not checked")
    if problems:
        raise UserError("the cluster cannot run this job:\n  " + "\n  ".join(problems))
    return "; ".join(unasked + missing_setup_files(slurm)) or None


def missing_setup_files(slurm: SlurmOptions, cwd: str | None = None) -> list[str]:
    """The files the job's first lines need that do not exist on this machine: what a ``--slurm.setup``
    line sources (``source FILE``, ``. FILE``; a relative one from ``cwd``, the submit directory, where
    the job starts) and an absolute ``--slurm.python``. One warning each, naming the option and the fix."""
    found = []
    for line in slurm.setup:
        try:
            words = shlex.split(line)
        except ValueError:
            continue
        if len(words) >= 2 and words[0] in ("source", "."):
            path = os.path.join(cwd or os.getcwd(), os.path.expanduser(words[1]))
            if not os.path.exists(path):
                found.append(
                    f"--slurm.setup {line!r}: {path} does not exist here, so the job would fail at its first "
                    "line; fix the path (or ignore this if it exists on the compute nodes only)"
                )
    python = slurm.python
    if python and os.path.isabs(python) and not os.path.exists(python):
        found.append(f"--slurm.python {python}: does not exist here; give the python of the job's environment")
    return found


UNCHECKED = "could not ask Slurm about its partitions and nodes"
