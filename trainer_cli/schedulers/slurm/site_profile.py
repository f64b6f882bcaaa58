"""A site profile read from the cluster ``train init`` runs on: what Slurm says of its partitions,
nodes, preemption and requeue settings and of the user's accounts, and the environment this shell
would give the job, written as the ``slurm:`` (and ``trainer:``) options ``train submit --config``
takes, each value with a comment saying where it came from and what else there is.

Read-only queries, through :mod:`trainer_cli.schedulers.slurm.commands`: ``scontrol show partition -o`` and
``scontrol show node -o`` (:func:`trainer_cli.schedulers.slurm.cluster.read_cluster`), ``scontrol show config``,
and where accounting exists ``sacctmgr -P -n show assoc`` / ``show qos`` / ``show user`` (the first
two: :func:`trainer_cli.schedulers.slurm.cluster.read_accounting`). What cannot be read is said in the file and
left out of it (commented), never guessed.
"""

from __future__ import annotations

import json
import os
import re
import sys
import textwrap
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from trainer_cli.errors import UserError
from trainer_cli.schedulers.slurm import commands as slurm_commands
from trainer_cli.schedulers.slurm.cluster import (
    UNLIMITED,
    Association,
    Node,
    Partition,
    read_accounting,
    read_cluster,
    read_default_account,
)
from trainer_cli.schedulers.slurm.commands import SlurmCommandError
from trainer_cli.schedulers.slurm.output import time_limit_s, time_text

MODEST_TIME_S = 3600
"""The time limit written for a partition without a ``MaxTime`` (the launcher's own default)."""
LONGEST_TIME_S = 24 * 3600
"""The longest time limit written: a longer ``MaxTime`` is named in a comment (longer jobs wait longer)."""
WIDTH = 100
"""The width comments are wrapped to."""
UNCONFIGURED_MEM_MB = 1
"""``RealMemory`` of a node whose memory slurm.conf does not give (Slurm's default)."""


@dataclass(frozen=True)
class Accounting:
    """What the accounting database says of the user."""

    associations: list[Association]
    qos_max_wall_s: dict[str, int | None]
    """Every QOS of the cluster with its ``MaxWall`` in seconds (None: no limit)."""
    default_account: str | None
    default_qos: dict[str, str]
    """``{account: its association's DefaultQOS}`` where one is set."""


@dataclass(frozen=True)
class Environment:
    """The environment to activate on the compute nodes, as this shell has it."""

    python: str
    """The interpreter running ``train init``."""
    venv: str | None = None
    """The virtual environment it runs from (``sys.prefix`` of a venv)."""
    conda: tuple[str, str] | None = None
    """(``CONDA_PREFIX``, ``CONDA_EXE``) when it runs from the active conda environment."""
    modules: list[str] = field(default_factory=list)
    """The environment modules loaded (``LOADEDMODULES``)."""


@dataclass
class Facts:
    """Everything ``train init`` read, and what it could not read (one line each)."""

    user: str
    partitions: list[Partition]
    config: dict[str, str]
    accounting: Accounting | None
    environment: Environment
    unread: list[str] = field(default_factory=list)

    @property
    def cluster_name(self) -> str:
        """``ClusterName`` of slurm.conf, or ``?``."""
        return self.config.get("ClusterName", "?")


def read_environment(environ: dict[str, str] | None = None) -> Environment:
    """The environment the job should get: the venv or conda env ``train`` runs from and the modules loaded."""
    environ = dict(os.environ if environ is None else environ)
    venv = sys.prefix if sys.prefix != sys.base_prefix and (Path(sys.prefix) / "bin" / "activate").is_file() else None
    conda_prefix, conda_exe = environ.get("CONDA_PREFIX"), environ.get("CONDA_EXE")
    conda = None
    if not venv and conda_prefix and conda_exe and Path(sys.prefix).resolve() == Path(conda_prefix).resolve():
        conda = (conda_prefix, conda_exe)
    modules = [m for m in environ.get("LOADEDMODULES", "").split(":") if m]
    return Environment(python=os.path.abspath(sys.executable), venv=venv, conda=conda, modules=modules)


def read_user_accounting(user: str) -> Accounting:
    """``user``'s associations, the cluster's QOS, the user's default account and default QOS.

    Raises:
        RuntimeError: when the accounting database cannot be asked (no ``sacctmgr``, no accounting).
    """
    associations, qos = read_accounting(user)  # each association with its DefaultQOS
    return Accounting(associations, qos, read_default_account(user), default_qos(associations))


def default_qos(associations: list[Association]) -> dict[str, str]:
    """``{account: DefaultQOS}`` of ``associations`` (the first association of an account that names one)."""
    found: dict[str, str] = {}
    for assoc in associations:
        if assoc.default_qos:
            found.setdefault(assoc.account, assoc.default_qos)
    return found


def read_facts(user: str, environ: dict[str, str] | None = None) -> Facts:
    """Ask Slurm (and this shell) everything a site profile needs.

    Raises:
        UserError: when Slurm cannot say what partitions it has (the controller does not answer).
    """
    try:
        partitions = read_cluster()
    except (RuntimeError, OSError, ValueError) as err:
        raise UserError(
            f"train init: Slurm did not say what partitions it has ({err}); run it where `sinfo` answers, or copy a "
            "bundled profile to edit: train init slurm/example_gpu"
        ) from None
    facts = Facts(user=user, partitions=partitions, config={}, accounting=None, environment=read_environment(environ))
    try:
        facts.config = slurm_commands.show_config()
    except SlurmCommandError as err:
        facts.unread.append(f"preemption and requeue settings (scontrol show config: {err.message.splitlines()[0]})")
    try:
        facts.accounting = read_user_accounting(user)
    except (RuntimeError, OSError, ValueError) as err:
        facts.unread.append(f"accounts and QOS (sacctmgr: {err}): account and qos not set")
    return facts


def format_mem(mem_mb: int) -> str:
    """MB as sbatch takes it: in GB where it is a whole number of them."""
    return f"{mem_mb // 1024}G" if mem_mb >= 1024 and mem_mb % 1024 == 0 else f"{mem_mb}M"


def gpu_types(node: Node) -> set[str]:
    """The GPU types of a node's GRES (``gpu:a100:8`` -> ``a100``); empty where none is named."""
    types = set()
    for entry in node.gres.split(","):
        parts = entry.split("(")[0].split(":")
        if parts[0] == "gpu" and len(parts) == 3:
            types.add(parts[1])
    return types


def _limit(value: str | None) -> int | None:
    return None if not value or value.upper() in UNLIMITED or not value.isdigit() else int(value)


def choose_partition(partitions: list[Partition], name: str | None) -> Partition:
    """The partition named, else the cluster's default, else its first.

    Raises:
        UserError: for a partition the cluster does not have (its partitions listed).
    """
    if not partitions:
        raise UserError("train init: Slurm lists no partition; ask your site which one to use")
    if name:
        for partition in partitions:
            if partition.name == name:
                return partition
        names = ", ".join(p.name for p in partitions)
        raise UserError(f"train init --partition {name}: this cluster has no such partition; it has {names}")
    return next((p for p in partitions if p.default), partitions[0])


@dataclass
class Entry:
    """One ``key: value`` of the profile with the comment lines above it (value None: commented out)."""

    key: str
    value: object
    comment: list[str] = field(default_factory=list)
    commented: bool = False


def _yaml(value: object) -> str:
    if isinstance(value, list):
        return "".join(f"\n  - {_yaml(v)}" for v in value)
    if isinstance(value, (int, bool)):
        return json.dumps(value)
    if isinstance(value, str) and "\n" in value:
        return "|\n" + "\n".join(f"  {line}" for line in value.splitlines())
    text = str(value)
    if re.fullmatch(r"[\w./][\w./+-]*( [\w./+-]+)*", text) and yaml.safe_load(text) == text:
        return text
    return json.dumps(text)  # a JSON string is a YAML string: times ("01:00:00") stay strings


def slurm_entries(facts: Facts, partition: Partition, accelerator: str) -> list[Entry]:
    """The ``slurm:`` options chosen for ``partition``, each with where it came from."""
    others = [p.name for p in facts.partitions if p is not partition]
    entries = [
        Entry(
            "partition",
            partition.name,
            [
                f"{'the default partition' if partition.default else 'the partition asked for'}"
                + (f"; the others: {', '.join(others)}" if others else "")
            ],
        )
    ]
    entries += _time_entries(facts, partition)
    nodes = partition.nodes
    gpus = min((n.gpus() for n in nodes), default=0)
    tasks = gpus if accelerator == "gpu" and gpus > 0 else 1
    cpus = min((n.cpus for n in nodes), default=0)
    if cpus > 0:
        per_task = max(cpus // tasks, 1)
        why = f"{cpus} CPUs a node" + (f" / {tasks} GPUs (one task each)" if tasks > 1 else " (one task a node)")
        entries.append(
            Entry("cpus_per_task", per_task, [f"{why}; with N tasks a node (trainer.devices): {cpus} / N at most"])
        )
    else:
        facts.unread.append(f"CPUs of the nodes of {partition.name}: cpus_per_task not set")
    entries += _memory_entries(facts, partition, cpus)
    entries += _gpu_entries(partition, accelerator)
    entries += _account_entries(facts, partition)
    entries += _environment_entries(facts.environment)
    entries += _requeue_entries(facts, partition)
    return entries


def _time_entries(facts: Facts, partition: Partition) -> list[Entry]:
    limits = [("MaxTime", partition.max_time_s)]
    default_s = time_limit_s(partition.settings.get("DefaultTime") or "")
    if partition.max_time_s is not None:
        limit_s, why = min(partition.max_time_s, LONGEST_TIME_S), f"the MaxTime of {partition.name}"
        if limit_s < partition.max_time_s:
            why = f"a day; {partition.name} allows {time_text(partition.max_time_s)} (longer jobs wait longer)"
    elif default_s is not None:
        limit_s, why = default_s, f"the DefaultTime of {partition.name}, which has no MaxTime"
    else:
        limit_s, why = MODEST_TIME_S, "a modest limit: a short job starts sooner"
    account = _chosen_account(facts, partition)
    qos = _chosen_qos(facts, partition, account)
    if facts.accounting and qos:
        max_wall_s = facts.accounting.qos_max_wall_s.get(qos)
        limits.append((f"MaxWall of QOS {qos}", max_wall_s))
        if max_wall_s is not None and max_wall_s < limit_s:
            limit_s, why = max_wall_s, f"the MaxWall of QOS {qos}"
    told = ", ".join(f"{name} {time_text(s) if s is not None else 'UNLIMITED'}" for name, s in limits)
    return [
        Entry(
            "time",
            time_text(limit_s),
            [f"{why} ({partition.name}: {told}); the job checkpoints and requeues itself at its limit"],
        )
    ]


def _memory_entries(facts: Facts, partition: Partition, cpus: int) -> list[Entry]:
    mem_mb = min((n.mem_mb for n in partition.nodes), default=0)
    if mem_mb <= UNCONFIGURED_MEM_MB or cpus <= 0:
        facts.unread.append(
            f"memory of the nodes of {partition.name} (they report RealMemory={mem_mb}, Slurm's default where "
            "slurm.conf gives none): mem_per_cpu not set, the partition's default applies"
        )
        return []
    per_cpu = mem_mb // cpus
    max_per_cpu = _limit(partition.settings.get("MaxMemPerCPU"))
    why = f"{mem_mb} MB / {cpus} CPUs a node"
    if max_per_cpu is not None and max_per_cpu < per_cpu:
        per_cpu, why = max_per_cpu, f"the MaxMemPerCPU of {partition.name}"
    return [
        Entry("mem_per_cpu", format_mem(per_cpu), [f"{why}: memory grows with cpus_per_task x tasks"]),
        Entry("mem", format_mem(mem_mb), ["or the whole node's memory, instead of mem_per_cpu"], commented=True),
    ]


def _gpu_entries(partition: Partition, accelerator: str) -> list[Entry]:
    types = sorted({t for n in partition.nodes for t in gpu_types(n)})
    gpus = sorted({n.gpus() for n in partition.nodes})
    if not gpus or gpus == [0] or accelerator != "gpu":
        return []
    comment = f"GPUs a node on {partition.name}: {', '.join(map(str, gpus))} (Gres)"
    if len(types) == 1:
        return [Entry("gpu_type", types[0], [comment])]
    if types:
        return [Entry("gpu_type", types[0], [f"{comment}; types: {', '.join(types)}; empty: any"], commented=True)]
    return [Entry("gpu_type", "TYPE", [f"{comment}; the Gres names no GPU type: any GPU"], commented=True)]


def _mine(facts: Facts, partition: Partition) -> list[Association]:
    assert facts.accounting is not None
    return [a for a in facts.accounting.associations if not a.partition or a.partition == partition.name]


def _chosen_account(facts: Facts, partition: Partition) -> str | None:
    if facts.accounting is None:
        return None
    accounts = sorted({a.account for a in _mine(facts, partition)})
    if facts.accounting.default_account in accounts:
        return facts.accounting.default_account
    return accounts[0] if len(accounts) == 1 else None


def _chosen_qos(facts: Facts, partition: Partition, account: str | None) -> str | None:
    if facts.accounting is None or account is None:
        return None
    allowed = sorted({q for a in _mine(facts, partition) if a.account == account for q in a.qos})
    default = facts.accounting.default_qos.get(account)
    if default and (not allowed or default in allowed):
        return default
    return allowed[0] if len(allowed) == 1 else None


def _account_entries(facts: Facts, partition: Partition) -> list[Entry]:
    if facts.accounting is None:
        return []
    accounts = sorted({a.account for a in _mine(facts, partition)})
    account = _chosen_account(facts, partition)
    entries = []
    if account:
        why = "your default account" if account == facts.accounting.default_account else "your one account"
        rest = [a for a in accounts if a != account]
        entries.append(Entry("account", account, [why + (f"; yours too: {', '.join(rest)}" if rest else "")]))
    elif accounts:
        entries.append(Entry("account", accounts[0], [f"your accounts: {', '.join(accounts)}"], commented=True))
    qos = _chosen_qos(facts, partition, account)
    allowed = sorted({q for a in _mine(facts, partition) if a.account == account for q in a.qos})
    if qos:
        why = "the default QOS of the account" if qos == facts.accounting.default_qos.get(account or "") else "the QOS"
        rest = [q for q in allowed if q != qos]
        entries.append(Entry("qos", qos, [why + (f"; allowed too: {', '.join(rest)}" if rest else "")]))
    elif allowed:
        entries.append(Entry("qos", allowed[0], [f"allowed: {', '.join(allowed)}"], commented=True))
    return entries


def _environment_entries(env: Environment) -> list[Entry]:
    setup = [f"module load {' '.join(env.modules)}"] if env.modules else []
    comment = [f"modules loaded here: {', '.join(env.modules)}"] if env.modules else []
    if env.venv:
        setup.append(f"source {env.venv}/bin/activate")
        comment.append("the venv `train` runs from; the job runs the `python` it puts on PATH")
    entries = [Entry("setup", setup, comment)] if setup else []
    if env.conda:
        prefix, exe = env.conda
        entries.append(
            Entry(
                "setup_raw",
                f'eval "$({exe} shell.bash hook)"\nconda activate {prefix}',
                ["the conda environment `train` runs from (CONDA_PREFIX)"],
            )
        )
    elif not env.venv:
        entries.append(
            Entry(
                "python",
                env.python,
                ["no venv or conda env here: the job runs this interpreter (it must exist on the nodes)"],
            )
        )
    return entries


def _requeue_entries(facts: Facts, partition: Partition) -> list[Entry]:
    config, settings = facts.config, partition.settings
    if not config:
        return []
    notes = []
    preempt_type = config.get("PreemptType", "preempt/none")
    mode = settings.get("PreemptMode", config.get("PreemptMode", "OFF"))
    grace = settings.get("GraceTime", "0")
    if preempt_type == "preempt/none" or mode.upper().startswith("OFF"):
        notes.append(f"preemption: off for {partition.name} (PreemptType={preempt_type}, PreemptMode={mode})")
    else:
        tier = int(settings.get("PriorityTier", "1") or 1)
        shared = {n.name for n in partition.nodes}
        over = [
            p.name
            for p in facts.partitions
            if int(p.settings.get("PriorityTier", "1") or 1) > tier and shared & {n.name for n in p.nodes}
        ]
        by = f", by jobs of {', '.join(over)}" if over else ""
        notes.append(f"preemption: {preempt_type}, PreemptMode={mode}{by}; GraceTime={grace} s")
        signal = "preempt_send_user_signal" in config.get("SlurmctldParameters", "")
        signal = signal or "send_user_signal" in config.get("PreemptParameters", "")
        if signal:
            notes.append(f"a preempted job gets SIGUSR1 at once and {grace} s to save its checkpoint and requeue")
        else:
            notes.append("a preempted job gets SIGTERM, not SIGUSR1: it resumes from its last saved checkpoint")
        if mode.upper().startswith("CANCEL"):
            notes.append("PreemptMode=CANCEL: where a preempted job does not come back, use requeue_mode: resubmit")
    requeue = config.get("JobRequeue")
    if requeue is not None:
        notes.append(f"JobRequeue={requeue}: the launcher's script asks for --requeue itself")
    hold = next(
        (p.split("=", 1)[1] for p in config.get("AuthInfo", "").split(",") if p.startswith("cred_expire=")), "120"
    )
    notes.append(f"a requeued job waits {hold} s before it may start again (AuthInfo cred_expire)")
    mode_entry = Entry("requeue_mode", "resubmit", notes, commented=True)
    return [mode_entry]


def render(facts: Facts, partition: Partition, accelerator: str, written_on: str) -> str:
    """The profile's text: a header naming the cluster and its partitions, the ``slurm:`` options
    and the trainer's accelerator and strategy."""
    entries = slurm_entries(facts, partition, accelerator)
    lines = [
        "# @package _global_",
        f"# Site profile of Slurm cluster {facts.cluster_name}, written by `train init` on {written_on}",
        f"# for user {facts.user} from scontrol, sacctmgr and the shell it ran in. Use it with:",
        "#   train submit --config experiment/digits --config THIS_FILE --check",
        "# Partitions (* default): nodes, time limit, per node: CPUs, memory MB, GPUs",
    ]
    for p in facts.partitions:
        nodes = p.nodes
        gres = sorted({n.gres for n in nodes if n.gres not in {"(null)", ""}})
        limit = time_text(p.max_time_s) if p.max_time_s is not None else "UNLIMITED"
        cpus = sorted({n.cpus for n in nodes})
        mem = sorted({n.mem_mb for n in nodes})
        lines.append(
            f"#   {p.name}{'*' if p.default else ''}: {p.total_nodes} node(s), MaxTime {limit}, "
            f"CPUs {'/'.join(map(str, cpus)) or '?'}, memory {'/'.join(map(str, mem)) or '?'}, "
            f"GPUs {', '.join(gres) or 'none'}"
        )
    if facts.unread:
        lines.append("# Could not read:")
        lines += [line for unread in facts.unread for line in _comment(f"- {unread}", "#   ", "#     ")]
    lines.append("slurm:")
    for entry in entries:
        lines += [line for c in entry.comment for line in _comment(c, "  # ")]
        prefix = "  # " if entry.commented else "  "
        value = _yaml(entry.value)
        lines += [
            prefix + line for line in f"{entry.key}:{'' if value.startswith(chr(10)) else ' '}{value}".split("\n")
        ]
    lines += _trainer_lines(partition, accelerator)
    return "\n".join(lines) + "\n"


def _comment(text: str, prefix: str, later: str | None = None) -> list[str]:
    return textwrap.wrap(text, WIDTH, initial_indent=prefix, subsequent_indent=later or prefix, break_on_hyphens=False)


def _trainer_lines(partition: Partition, accelerator: str) -> list[str]:
    gpus = min((n.gpus() for n in partition.nodes), default=0)
    if accelerator == "gpu":
        why = f"the nodes of {partition.name} have {gpus} GPUs each; set trainer.devices to use more than one"
    elif gpus:
        why = f"asked for (the nodes of {partition.name} list {gpus} GPUs in their Gres)"
    else:
        why = f"the nodes of {partition.name} have no GPU"
    return [
        "trainer:",
        f"  # {why}",
        f"  accelerator: {accelerator}",
        "  # Lightning's choice: DDP over the processes srun starts, one per device, where a job has several;",
        "  # none for a one-process job (ddp there only adds sync_dist warnings)",
        "  strategy: auto",
    ]
