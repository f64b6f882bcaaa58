"""The one way the package runs Slurm's commands and reads what they say: every query and action
the launcher makes, each with a timeout, its output read by field name
(:mod:`trainer_cli.schedulers.slurm.output`: which fields, and how).

A slow or unreachable controller must not hold ``train jobs``, a submission or a batch script
forever, and a caller must tell "Slurm is not installed here" from "Slurm refused" without parsing
messages: :class:`SlurmCommandError` carries the command and the reason. The read-only queries a view
can do without (``train jobs``: the jobs' states, sacct's attempts) return None instead, with one
``warning:`` line on stderr per command and process saying what is shown instead (:data:`trainer_cli.job.
slurm_output.READS`' ``unanswered``); Slurm not installed is said by nobody (a laptop lists its runs
from their folders). A field a Slurm version refuses (``sacct``: ``Invalid field requested``) is asked
for no more: the records lack it, and the readers show it as unknown.

Timeouts: :data:`DEFAULT_TIMEOUT_S` (``TRAINER_CLI_SLURM_TIMEOUT_S`` where set: a site with a slow
controller or accounting database), ``sbatch`` :data:`SBATCH_TIMEOUT_S`.

Standard library only: the batch script imports it (:mod:`trainer_cli.job.jobstate`).
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

from trainer_cli.schedulers.slurm.output import READS, Read, key_values, parsable

DEFAULT_TIMEOUT_S = 30.0
SBATCH_TIMEOUT_S = 120.0
TIMEOUT_ENV = "TRAINER_CLI_SLURM_TIMEOUT_S"
NO_ACCOUNTING = "accounting storage is disabled"
"""sacct's answer where the site keeps no accounting database: an answer (nothing known), not a failure."""
_NOT_KNOWN = ("invalid job id", "invalid reservation")
"""Slurm's answers for a job (or reservation) it does not know: an answer (none), not a failure."""
_LACKING = (
    re.compile(r'Invalid field requested: "([^"]+)"'),  # sacct
    re.compile(r"Unknown field '([^']+)'"),  # sacctmgr (lowercased)
    re.compile(r"Invalid job format specification: (\S+)"),  # squeue -O (exit 0, the field left out)
)
_warned: set[str] = set()


class SlurmCommandError(RuntimeError):
    """A Slurm command that is missing, timed out or exited non-zero.

    Attributes:
        command: The command line run.
        message: Slurm's own message (stderr, else stdout, else the exit code), "``<cmd>`` not
            found", or the timeout.
        missing: The command is not installed here.
        timed_out: It ran past its timeout (and was killed).
    """

    def __init__(self, command: Sequence[str], message: str, missing: bool = False, timed_out: bool = False) -> None:
        super().__init__(message)
        self.command = list(command)
        self.message = message
        self.missing = missing
        self.timed_out = timed_out


def timeout_s(default: float = DEFAULT_TIMEOUT_S) -> float:
    """The timeout of a Slurm command: ``TRAINER_CLI_SLURM_TIMEOUT_S`` where set to a positive number, else
    ``default``."""
    try:
        value = float(os.environ.get(TIMEOUT_ENV, ""))
    except ValueError:
        return default
    return value if value > 0 else default


def installed(command: str = "sinfo") -> bool:
    """Whether Slurm's ``command`` is on ``PATH`` here (``sinfo``: Slurm's clients are)."""
    return shutil.which(command) is not None


def _run(
    command: Sequence[str], timeout: float | None = None, env: Mapping[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    command = [str(part) for part in command]
    limit = timeout_s() if timeout is None else timeout
    if shutil.which(command[0]) is None:
        raise SlurmCommandError(command, f"{command[0]} not found", missing=True)
    try:
        proc = subprocess.run(
            command, capture_output=True, text=True, timeout=limit, env=None if env is None else dict(env)
        )
    except subprocess.TimeoutExpired:
        raise SlurmCommandError(command, f"{command[0]} did not answer within {limit:g} s", timed_out=True) from None
    except OSError as err:
        raise SlurmCommandError(command, str(err) or type(err).__name__) from None
    if proc.returncode != 0:
        raise SlurmCommandError(command, proc.stderr.strip() or proc.stdout.strip() or f"exit {proc.returncode}")
    return proc


def _stdout(command: Sequence[str], timeout: float | None = None, env: Mapping[str, str] | None = None) -> str:
    return _run(command, timeout, env).stdout


def _lacking(message: str, names: Sequence[str]) -> str | None:
    """The field of ``names`` that Slurm's ``message`` says this version does not have."""
    for pattern in _LACKING:
        found = pattern.search(message)
        if found:
            return next((n for n in names if n.lower() == found.group(1).lower()), None)
    return None


def _fields(read: Read, timeout: float | None = None, **values: str | list[str] | None) -> list[dict[str, str]]:
    """The rows of a command given a field list (``read``'s), by name; a field this Slurm refuses is
    asked for no more, and is absent from the rows.

    Raises:
        SlurmCommandError: when the command is missing, hangs or fails.
    """
    names = list(read.names)
    while True:
        try:
            proc = _run(read.words(tuple(names), **values), timeout)
        except SlurmCommandError as err:
            lacking = _lacking(err.message, names)
            if lacking is None or len(names) == 1:
                raise
            names.remove(lacking)
            continue
        lacking = _lacking(proc.stderr, names)
        if lacking is None:
            return parsable(proc.stdout, names)
        if len(names) == 1:
            raise SlurmCommandError(proc.args, f"this {proc.args[0]} has no field {lacking}")
        names.remove(lacking)


def warn_unanswered(err: SlurmCommandError, read: Read) -> None:
    """One ``warning:`` line on stderr (once per command and process) for a query that could not be
    answered, with what is shown instead; nothing for a command not installed here."""
    if err.missing:
        return
    if err.timed_out:
        what = f"{err.message} (raise {TIMEOUT_ENV} to wait longer)"
    else:
        what = f"{err.command[0]} failed: {(err.message.strip().splitlines() or ['?'])[-1]}"
    if what in _warned:
        return
    _warned.add(what)
    sys.stderr.write(f"warning: {what}; {read.unanswered}\n")  # one write: one line
    sys.stderr.flush()


def _not_known(err: SlurmCommandError) -> bool:
    return any(words in err.message.lower() for words in _NOT_KNOWN)


def show_jobs(job: str | None = None) -> list[dict[str, str]] | None:
    """``scontrol show job -o [JOB]``: every job the controller knows (or ``job`` alone: one record, or one
    per task of an array) as key=value records; empty when it does not know ``job``; None (with one
    warning line) when it cannot be asked."""
    read = READS["show_job"]
    try:
        return key_values(_stdout(read.words(job=job)))
    except SlurmCommandError as err:
        if _not_known(err):
            return []
        warn_unanswered(err, read)
        return None


def show_job(job: str) -> dict[str, str]:
    """The first record of ``scontrol show job -o JOB``; empty when Slurm does not know the job or cannot
    be asked (a field a version lacks is absent: ``.get`` gives None)."""
    return next(iter(show_jobs(job) or []), {})


@functools.cache
def _config() -> dict[str, str]:
    found = key_values(_stdout(READS["show_config"].words()))
    return found[-1] if found else {}


def show_config() -> dict[str, str]:
    """The controller's configuration (``scontrol show config``) as ``{key: value}``, asked once per process.

    Raises:
        SlurmCommandError: when scontrol is missing, hangs or fails (asked again next time).
    """
    return dict(_config())


def cluster_name() -> str | None:
    """This cluster's ``ClusterName``; None when Slurm cannot be asked (no scontrol: silently; a
    controller that fails or hangs: one warning line)."""
    try:
        return show_config().get("ClusterName") or None
    except SlurmCommandError as err:
        warn_unanswered(err, READS["show_config"])
        return None


def show(kind: str) -> list[dict[str, str]]:
    """``scontrol show KIND -o`` (``partition``, ``node``, ``reservation``) as key=value records.

    Raises:
        SlurmCommandError: when scontrol is missing, hangs or fails.
    """
    return key_values(_stdout(READS[f"show_{kind}"].words()))


def hostnames(nodelist: str) -> list[str] | None:
    """Slurm's host list (``node[1-2]``) as names (``scontrol show hostnames``); None when it cannot be asked."""
    read = READS["hostnames"]
    try:
        return _stdout(read.words(nodelist=nodelist)).split()
    except SlurmCommandError as err:
        warn_unanswered(err, read)
        return None


def sacct_attempts(job_ids: Iterable[str]) -> list[dict[str, str]] | None:
    """Every attempt of ``job_ids`` in the accounting database (``sacct -D -X``, one call), one record
    each by the field names of ``READS["sacct"]`` (a field this Slurm lacks is absent); None where
    sacct is missing, has no accounting (silently), or fails or hangs (one warning line)."""
    ids = sorted({str(j) for j in job_ids if j})
    if not ids:
        return []
    read = READS["sacct"]
    try:
        return _fields(read, ids=",".join(ids))
    except SlurmCommandError as err:
        if NO_ACCOUNTING not in err.message.lower():
            warn_unanswered(err, read)
        return None


def sacctmgr(what: str, user: str = "") -> list[dict[str, str]]:
    """``sacctmgr show`` ``assoc`` (of ``user``), ``qos`` or ``user`` (``user``), by the field names of
    ``READS["sacctmgr_<what>"]``.

    Raises:
        SlurmCommandError: when sacctmgr is missing, hangs or fails (no accounting).
    """
    return _fields(READS[f"sacctmgr_{what}"], user=user)


def squeue(what: str, job: str) -> list[dict[str, str]]:
    """``squeue`` of ``job``: ``state`` (the job's, or its tasks', ``State``) or ``steps`` (its steps'
    ``StepId``), by field name.

    Raises:
        SlurmCommandError: when squeue is missing, hangs or fails (``Invalid job id``: Slurm has forgotten it).
    """
    return _fields(READS[f"squeue_{what}"], job=job)


def sbatch_words(script: Path, *options: str) -> list[str]:
    """The ``sbatch`` command line that queues ``script`` (what ``--dry-run`` shows and :func:`sbatch` runs)."""
    return READS["sbatch"].words(options=list(options), script=str(script))


def sbatch(script: Path, *options: str, env: Mapping[str, str] | None = None, timeout: float = SBATCH_TIMEOUT_S) -> str:
    """Queue ``script`` with ``sbatch --parsable`` (and extra ``options``); returns the job id.

    Raises:
        SlurmCommandError: when sbatch is missing, hangs or refuses the job.
    """
    return _stdout(sbatch_words(script, *options), timeout, env).strip().split(";")[0]


def scancel(*job_ids: str, signal: str | None = None, timeout: float | None = None) -> None:
    """``scancel [-s SIGNAL] ID...``: cancel (or signal) jobs or steps.

    Raises:
        SlurmCommandError: when scancel is missing, hangs or refuses.
    """
    _stdout(["scancel", *(["-s", signal] if signal else []), *job_ids], timeout)


def requeue(job: str, timeout: float | None = None) -> None:
    """``scontrol requeue JOB`` (an array task alone as ``ARRAY_TASK``).

    Raises:
        SlurmCommandError: when scontrol is missing, hangs or refuses.
    """
    _stdout(["scontrol", "requeue", job], timeout)


def update_job(job: str, env: Mapping[str, str] | None = None, timeout: float | None = None, **settings: str) -> None:
    """``scontrol update JobId=JOB Key=Value...`` (``ExcNodeList``, ``Dependency``).

    Raises:
        SlurmCommandError: when scontrol is missing, hangs or refuses.
    """
    _stdout(["scontrol", "update", f"JobId={job}", *(f"{k}={v}" for k, v in settings.items())], timeout, env)


def srun_overlap(job: str, node: str, command: Sequence[str], timeout: float) -> str | None:
    """stdout of ``command`` run on ``node`` inside ``job`` (``srun --overlap``, one task); None when it fails."""
    try:
        return _stdout(["srun", "--overlap", f"--jobid={job}", f"--nodelist={node}", "-N1", "-n1", *command], timeout)
    except SlurmCommandError:
        return None
