"""What the launcher reads of Slurm's commands' output, and how: every command and field in one
catalogue (:data:`READS`), and the parsers of their output.

Two shapes of output, each read by one function and always by field name, never by column position
of a human-readable table:

- ``key=value`` (:func:`key_values`): one record per line of ``scontrol show job|node|partition|
  reservation -o``, or the ``Key = Value`` lines of ``scontrol show config`` as one record; every key
  is kept (``UnavailableNodes`` of a ``Reason=ReqNodeNotAvail, UnavailableNodes:node3`` too);
- ``|``-separated fields the launcher names itself (:func:`parsable`): ``sacct -P -o``, ``sacctmgr -P
  format=``, ``squeue -O Name:|``; the command runs with exactly the fields of its :class:`Read`
  (:mod:`trainer_cli.schedulers.slurm.commands` asks again without a field a version refuses).

A field a Slurm version lacks is absent from the record: ``record.get(name)`` is None, shown as
``unknown`` or ``-``, never a crash or another field's value. The catalogue is the source of the
reference table ``docs/reference/slurm-fields.md`` (:func:`reference_table`), tested to match it.

Standard library only: the batch script imports it (:mod:`trainer_cli.job.jobstate`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

VERSIONS = {"22.05": "yes", "24.11": "core"}
"""The Slurm versions the reads are tested on (the cluster tests' ``scripts/local-slurm``): ``yes`` (every
cluster test), ``core`` (the cluster's core, tests/test_slurm_versions.py), or ``not yet``."""


@dataclass(frozen=True)
class Read:
    """One Slurm command the launcher runs, the fields it reads of its output and why.

    Attributes:
        argv: The command's words; ``{name}`` stands for what the query fills in (:meth:`words`):
            ``{fields}`` the field names joined by commas, ``{fields_bar}`` as ``squeue -O`` takes them
            (``Name:|``, each ended by ``|``), others the query's values.
        fields: ``(field name, what the launcher reads it for)``; for a command given a field list
            (``-o``, ``format=``, ``-O``) exactly the list it gets, in that order.
        unanswered: What the launcher does when the command is missing, fails or hangs (the end of the
            warning line of a query that can do without it:
            :func:`trainer_cli.schedulers.slurm.commands.warn_unanswered`).
    """

    argv: tuple[str, ...]
    fields: tuple[tuple[str, str], ...]
    unanswered: str

    @property
    def names(self) -> tuple[str, ...]:
        """The field names, in order."""
        return tuple(name for name, _ in self.fields)

    @property
    def command(self) -> str:
        """The command as the reference table shows it: ``sacct ... -j IDS -o FIELDS``."""
        shown = [re.sub(r"\{(\w+)\}", lambda m: m.group(1).upper().removesuffix("_BAR"), w) for w in self.argv]
        return " ".join(shown)

    def words(self, names: tuple[str, ...] | None = None, **values: str | list[str] | None) -> list[str]:
        """The command line with ``values`` filled in (a word that is one ``{name}`` alone: dropped for
        None, spread for a list) and the fields ``names`` (default: all of :attr:`names`)."""
        names = self.names if names is None else names
        values = {"fields": ",".join(names), "fields_bar": ",".join(f"{n}:|" for n in names), **values}
        out: list[str] = []
        for word in self.argv:
            alone = re.fullmatch(r"\{(\w+)\}", word)
            value = values.get(alone.group(1)) if alone else None
            if alone and (value is None or isinstance(value, list)):
                out += [str(v) for v in value or []]
            else:
                out.append(word.format(**values))
        return out


_JOB_FIELDS = (
    ("JobId", "the job's id (one record per job, or per array task)"),
    ("ArrayJobId", "the array a task belongs to (a sweep's trial or worker)"),
    ("ArrayTaskId", "the task's index, or the pending range of an array (0-3%2)"),
    ("Command", "the script the job runs: a reused job id is told apart by it"),
    ("JobState", "the STATE column of train jobs; whether a sweep's worker or the doctor's job still runs"),
    ("Reason", "why a pending job waits, in words (train jobs DETAIL); the doctor's job"),
    ("UnavailableNodes", "the nodes named in Reason=ReqNodeNotAvail, UnavailableNodes:..."),
    ("Dependency", "the job a pending job waits for"),
    ("StartTime", "Slurm's estimated start of a pending job"),
    ("Restarts", "the RESTARTS column; a requeue Slurm made itself (a node failure)"),
    ("RunTime", "the ELAPSED column; seconds left before the time limit when SIGUSR1 came"),
    ("TimeLimit", "the cause of a SIGUSR1 (time limit or preemption); the cause of a TIMEOUT"),
    ("PreemptTime", "a SIGUSR1 or an end caused by preemption"),
    ("NodeList", "where a job runs or ran; the node of each rank of the doctor's job"),
    ("ExitCode", "the cause of a FAILED job"),
)

READS = {
    "show_job": Read(
        ("scontrol", "show", "job", "-o", "{job}"),
        _JOB_FIELDS,
        "the states of jobs are their runs' job.json; a SIGUSR1's cause is unknown (its restart counts against "
        "--slurm.max_restarts)",
    ),
    "show_config": Read(
        ("scontrol", "show", "config"),
        (
            ("ClusterName", "train jobs lists this cluster's jobs; the registry records it"),
            ("MaxArraySize", "the most trials one sweep array may have"),
            ("PreemptType", "train init: whether preemption is on"),
            ("PreemptMode", "train init: what a preemption does (REQUEUE, CANCEL)"),
            ("PreemptParameters", "train init: the preemption's settings"),
            ("JobRequeue", "train init: whether jobs requeue by default"),
            ("SlurmctldParameters", "train init: the controller's settings"),
            ("AuthInfo", "train init: the credential's lifetime"),
            ("MaxMemPerCPU", "train init: the memory limit per CPU"),
        ),
        "ClusterName unknown: train jobs lists the jobs of every cluster; train init lists what it could not read",
    ),
    "show_partition": Read(
        ("scontrol", "show", "partition", "-o"),
        (
            ("PartitionName", "the partitions submit checks a job against; train init's choice"),
            ("Default", "the partition a job without --slurm.partition runs in"),
            ("TotalNodes", "the most nodes a job can have"),
            ("MaxNodes", "the most nodes a job may ask for"),
            ("MaxTime", "the longest --slurm.time the partition allows"),
            ("DefaultTime", "train init: the time limit without --slurm.time"),
            ("GraceTime", "train init: the seconds between SIGTERM and SIGKILL on preemption"),
            ("PreemptMode", "train init: what a preemption does in this partition"),
            ("PriorityTier", "train init: which partitions preempt which"),
        ),
        "submit skips the checks against the cluster (one warning line); train init stops (one error line)",
    ),
    "show_node": Read(
        ("scontrol", "show", "node", "-o"),
        (
            ("NodeName", "the node"),
            ("CPUTot", "the most CPUs per node a job can get"),
            ("RealMemory", "the most --slurm.mem a job can get"),
            ("Gres", "the GPUs (and their type) per node"),
            ("Partitions", "the partitions the node is in"),
            ("State", "train doctor: nodes down, drained or failing"),
        ),
        "as scontrol show partition",
    ),
    "show_reservation": Read(
        ("scontrol", "show", "reservation", "-o"),
        (
            ("ReservationName", "the maintenance named in submit's refusal"),
            ("StartTime", "when a maintenance starts"),
            ("EndTime", "when it is over"),
            ("Nodes", "its nodes"),
            ("Flags", "MAINT: a maintenance"),
        ),
        "submit skips the maintenance check",
    ),
    "hostnames": Read(
        ("scontrol", "show", "hostnames", "{nodelist}"),
        (("(one name a line)", "train doctor: the node of each rank"),),
        "train doctor names each rank's node ?",
    ),
    "sacct": Read(
        ("sacct", "-D", "-X", "-P", "-n", "-j", "{ids}", "-o", "{fields}"),
        (
            ("JobID", "the job (array tasks as ARRAY_TASK)"),
            ("JobIDRaw", "one job across its attempts (each requeue is a row)"),
            ("State", "the state of a job the controller has forgotten; each attempt's end"),
            ("Submit", "each attempt's queue wait (from its submission)"),
            ("Start", "when each attempt started: cost, goodput"),
            ("End", "when it ended: goodput, the wait of the next attempt"),
            ("ElapsedRaw", "seconds each attempt held its allocation: cost"),
            ("AllocTRES", "what each attempt held (cpu, gres/gpu, node): cost"),
            ("Elapsed", "the ELAPSED column of a forgotten job"),
            ("ExitCode", "the cause of a forgotten FAILED job"),
            ("NodeList", "the nodes of a forgotten job"),
        ),
        "the states of jobs Slurm has forgotten are their runs' job.json, and costs are estimated from the runs' "
        "records (a site without accounting: the same, without a warning)",
    ),
    "sacctmgr_assoc": Read(
        ("sacctmgr", "-P", "-n", "show", "assoc", "where", "user={user}", "format={fields}"),
        (
            ("Account", "the accounts the user may charge (submit's check, train init)"),
            ("Partition", "the partition an association is limited to"),
            ("QOS", "the QOS an association may use"),
            ("DefaultQOS", "the QOS a job runs in without --slurm.qos"),
        ),
        "submit skips the account and QOS checks (one warning line); train init leaves account and qos unset",
    ),
    "sacctmgr_qos": Read(
        ("sacctmgr", "-P", "-n", "show", "qos", "format={fields}"),
        (("Name", "the QOS"), ("MaxWall", "the longest --slurm.time the QOS allows")),
        "as sacctmgr show assoc",
    ),
    "sacctmgr_user": Read(
        ("sacctmgr", "-P", "-n", "show", "user", "{user}", "format={fields}"),
        (("DefaultAccount", "the account a job is charged to without --slurm.account"),),
        "as sacctmgr show assoc",
    ),
    "squeue_state": Read(
        ("squeue", "-h", "-j", "{job}", "-O", "{fields_bar}"),
        (("State", "whether a sweep's worker still holds its trial"),),
        "the worker's trial is left as it is, decided at the next look",
    ),
    "squeue_steps": Read(
        ("squeue", "-h", "-s", "-j", "{job}", "-O", "{fields_bar}"),
        (("StepId", "the stall watchdog ends the training step (JOB.N)"),),
        "the stall watchdog ends no step (the job's own end follows)",
    ),
    "sbatch": Read(
        ("sbatch", "--parsable", "{options}", "{script}"),
        (("JOBID[;CLUSTER]", "the job id recorded for the run"),),
        "submit stops with one error line, the run's new folder removed; a resubmission records the job FAILED "
        "with how to resume",
    ),
}
"""Every Slurm command whose output the launcher reads, by the name its query in
:mod:`trainer_cli.schedulers.slurm.commands` uses. The commands run for their effect alone (``scancel``,
``scontrol requeue|update``, ``srun --overlap``) are :data:`ACTIONS`."""

ACTIONS = {
    "scancel ID...": "train cancel; the doctor's job past its timeout",
    "scancel -s SIGNAL ID": "the stall watchdog: stacks of every rank (SIGWINCH by number), the step killed",
    "scontrol requeue ID": "a job requeues itself after SIGUSR1 (--slurm.requeue_mode requeue)",
    "scontrol update JobId=ID ExcNodeList=NODES": "a requeued job avoids the node a rank stalled on",
    "scontrol update JobId=ID Dependency=afterok:NEW": "the test job waits for a resubmitted fit job",
    "srun --overlap --jobid=ID --nodelist=NODE -N1 -n1 py-spy dump ...": "the stall watchdog's native stacks",
}
"""The Slurm commands the launcher runs for their effect (their output is not read), and why."""

_CONFIG_LINE = re.compile(r"^\s*([^\s=]+)\s+= ?(.*)$")
_KEY_START = re.compile(r"\s+(?=[^\s=]+=)")
_UNAVAILABLE = re.compile(r"^(\S*?),?\s+UnavailableNodes:(\S*)$")


def _line_fields(line: str) -> dict[str, str]:
    fields: dict[str, str] = {}
    for word in _KEY_START.split(line.strip()):
        key, sep, value = word.partition("=")
        if sep and key not in fields:
            fields[key] = value.strip()
    reason = _UNAVAILABLE.match(fields.get("Reason", ""))
    if reason:  # Reason=ReqNodeNotAvail, UnavailableNodes:node3 (a value with a space in it)
        fields["Reason"] = reason.group(1)
        if reason.group(2):
            fields.setdefault("UnavailableNodes", reason.group(2))
    return fields


def job_state(record: dict[str, str]) -> str:
    """The state of the job one ``scontrol show job`` record (or one ``sacct`` row given as
    ``JobState``/``ExitCode``/``Restarts``) describes, as the launcher reads it.

    Slurm's ``JobState`` as printed, except one case: Slurm 24.11 leaves ``JobState=PREEMPTED`` on a
    job that was preempted, requeued and then ran to its end (``ExitCode=0:0``, ``Restarts`` >= 1:
    tests/fixtures/slurm-24.11/NOTES.md), where 22.05 says ``COMPLETED``; that job completed. A
    preemption that ended the job (never requeued, or killed: an exit code or a signal) stays ``PREEMPTED``.
    """
    state = record.get("JobState") or "UNKNOWN"
    restarts = record.get("Restarts") or "0"
    if state == "PREEMPTED" and record.get("ExitCode") == "0:0" and restarts.isdigit() and int(restarts) > 0:
        return "COMPLETED"
    return state


def key_values(text: str) -> list[dict[str, str]]:
    """Slurm's ``key=value`` output as records, every key kept (the first of a repeated key wins).

    Each line of ``scontrol show job|node|partition|reservation -o`` is one record (a value may hold
    spaces: ``OS=Linux 6.1 #1 SMP``; ``Reason=ReqNodeNotAvail, UnavailableNodes:node3`` gives ``Reason``
    and ``UnavailableNodes``); the ``Key = Value`` lines of ``scontrol show config`` are one record,
    after the others. Lines without a key (``No reservations in the system``) are skipped.
    """
    records: list[dict[str, str]] = []
    config: dict[str, str] = {}
    for line in text.splitlines():
        found = _CONFIG_LINE.match(line)
        if found:
            config.setdefault(found.group(1), found.group(2).strip())
        elif "=" in line:
            records.append(_line_fields(line))
    return records + ([config] if config else [])


def parsable(text: str, names: tuple[str, ...] | list[str]) -> list[dict[str, str]]:
    """The rows of ``|``-separated output asked for with exactly the fields ``names`` (``sacct -P -n
    -o``, ``sacctmgr -P -n format=``, ``squeue -h -O Name:|``, which ends each field with ``|``), each as
    ``{name: value}``. A row with another number of fields (a value holding ``|``) is skipped: no
    value is ever read into another field's name."""
    rows = []
    for line in text.splitlines():
        if not line.strip():
            continue
        parts = line.split("|")
        if len(parts) == len(names) + 1 and parts[-1] == "":  # squeue -O Name:| ends every field with |
            parts = parts[:-1]
        if len(parts) == len(names):
            rows.append(dict(zip(names, parts)))
    return rows


def array_task_ids(text: str) -> list[int]:
    """The task ids of an ``ArrayTaskId`` as ``scontrol`` shows a pending range of an array:
    ``0-3``, ``4,6-7``, ``0-9%2`` (the ``%`` limit dropped); empty for anything else."""
    ids: list[int] = []
    for part in text.split("%")[0].split(","):
        low, sep, high = part.partition("-")
        if not low.isdigit() or (sep and not high.isdigit()):
            return []
        ids += range(int(low), int(high if sep else low) + 1)
    return ids


def time_text(seconds: int) -> str:
    """``seconds`` as sbatch's ``--time`` takes it (``HH:MM:SS``, ``D-HH:MM:SS`` from a day): the inverse
    of :func:`time_limit_s`."""
    days, rest = divmod(int(seconds), 86400)
    text = f"{rest // 3600:02d}:{rest % 3600 // 60:02d}:{rest % 60:02d}"
    return f"{days}-{text}" if days else text


def time_limit_s(text: str) -> int | None:
    """Seconds of an sbatch ``--time`` value (one of :data:`trainer_cli.schedulers.slurm.options.TIME_FORMATS`, minutes
    and seconds below 60, hours below 24 after a day count) or of a ``RunTime``/``TimeLimit``/``MaxTime``
    as Slurm prints them; None for anything else, ``INFINITE``, ``UNLIMITED`` and an absent field included."""
    days, sep, rest = str(text).strip().rpartition("-")
    parts = rest.split(":")
    if (sep and not days.isdigit()) or not 1 <= len(parts) <= 3 or not all(p.isdigit() for p in parts):
        return None
    numbers = [int(p) for p in parts]
    if days:  # D-HH, D-HH:MM, D-HH:MM:SS
        hours, minutes, seconds = (numbers + [0, 0])[:3]
        if hours >= 24 or minutes >= 60 or seconds >= 60:
            return None
        return ((int(days) * 24 + hours) * 60 + minutes) * 60 + seconds
    if any(n >= 60 for n in numbers[1:]):  # MM:SS, HH:MM:SS: the later fields are below 60
        return None
    if len(numbers) == 1:
        return numbers[0] * 60
    if len(numbers) == 2:
        return numbers[0] * 60 + numbers[1]
    return (numbers[0] * 60 + numbers[1]) * 60 + numbers[2]


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def reference_table() -> str:
    """The catalogue as the Markdown tables of ``docs/reference/slurm-fields.md``: each command, each
    field read and what for, what happens when the command cannot answer, the versions tested."""
    versions = list(VERSIONS)
    lines = [
        "| command | field | read for | " + " | ".join(f"Slurm {v}" for v in versions) + " |",
        "|---|---|---|" + "---|" * len(versions),
    ]
    for read in READS.values():
        for i, (name, why) in enumerate(read.fields):
            command = f"`{_cell(read.command)}`" if i == 0 else ""
            lines.append(f"| {command} | `{_cell(name)}` | {_cell(why)} | " + " | ".join(VERSIONS.values()) + " |")
    lines += ["", "| command | when it cannot answer (missing, failing, or past its timeout) |", "|---|---|"]
    lines += [f"| `{_cell(read.command)}` | {_cell(read.unanswered)} |" for read in READS.values()]
    lines += ["", "| command run for its effect (output not read) | what for |", "|---|---|"]
    lines += [f"| `{_cell(command)}` | {_cell(why)} |" for command, why in ACTIONS.items()]
    return "\n".join(lines) + "\n"
