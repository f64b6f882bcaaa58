"""The one way the package runs Slurm's commands (``sbatch``, ``squeue``, ``scontrol``, ``sacct``,
``sacctmgr``, ``scancel``): always with a timeout, failures raised as one typed error.

A slow or unreachable controller must not hold ``train jobs``, a submission or a batch script
forever, and a caller must tell "Slurm is not installed here" from "Slurm refused" without parsing
messages: :class:`SlurmCommandError` carries the command and the reason. :func:`output_or_empty`
is for read-only queries whose failure only means "nothing known".

Standard library only: the batch script imports it (:mod:`trainer_cli.job.jobstate`).
"""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path

DEFAULT_TIMEOUT_S = 30.0
SBATCH_TIMEOUT_S = 120.0


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


def run(command: Sequence[str], timeout_s: float = DEFAULT_TIMEOUT_S, env: Mapping[str, str] | None = None) -> str:
    """Run a Slurm command; returns its stdout.

    Raises:
        SlurmCommandError: when the command is missing, runs past ``timeout_s`` or exits non-zero.
    """
    command = [str(part) for part in command]
    if shutil.which(command[0]) is None:
        raise SlurmCommandError(command, f"{command[0]} not found", missing=True)
    try:
        proc = subprocess.run(
            command, capture_output=True, text=True, timeout=timeout_s, env=None if env is None else dict(env)
        )
    except subprocess.TimeoutExpired:
        raise SlurmCommandError(
            command, f"{command[0]} did not answer within {timeout_s:g} s", timed_out=True
        ) from None
    except OSError as err:
        raise SlurmCommandError(command, str(err) or type(err).__name__) from None
    if proc.returncode != 0:
        raise SlurmCommandError(command, proc.stderr.strip() or proc.stdout.strip() or f"exit {proc.returncode}")
    return proc.stdout


def output_or_empty(command: Sequence[str], timeout_s: float = DEFAULT_TIMEOUT_S) -> str:
    """stdout of a read-only query; empty when the command is missing, fails or hangs."""
    try:
        return run(command, timeout_s)
    except SlurmCommandError:
        return ""


def config_fields(text: str) -> dict[str, str]:
    """``scontrol show config`` output as ``{key: value}`` (its ``Key = Value`` lines)."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition(" = ")
        if sep and key.strip() and " " not in key.strip():
            out[key.strip()] = value.strip()
    return out


def show_config(timeout_s: float = 20.0) -> dict[str, str]:
    """The controller's configuration (``scontrol show config``) as ``{key: value}``: the one reader of it.

    Raises:
        SlurmCommandError: when scontrol is missing, hangs or fails.
    """
    return config_fields(run(["scontrol", "show", "config"], timeout_s))


def cluster_name(timeout_s: float = 20.0) -> str | None:
    """This cluster's ``ClusterName``; None when Slurm cannot be asked (no scontrol, no controller)."""
    try:
        return show_config(timeout_s).get("ClusterName") or None
    except SlurmCommandError:
        return None


def sbatch(
    script: Path, *options: str, env: Mapping[str, str] | None = None, timeout_s: float = SBATCH_TIMEOUT_S
) -> str:
    """Queue ``script`` with ``sbatch --parsable`` (and extra ``options``); returns the job id.

    Raises:
        SlurmCommandError: when sbatch is missing, hangs or refuses the job.
    """
    return run(["sbatch", "--parsable", *options, str(script)], timeout_s, env).strip().split(";")[0]


def scontrol_fields(line: str) -> dict[str, str]:
    """One line of ``scontrol show ... -o`` as ``{key: value}`` (the first of a repeated key wins)."""
    out: dict[str, str] = {}
    for word in line.split():
        key, sep, value = word.partition("=")
        if sep and key not in out:
            out[key] = value
    return out


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


def job_fields(line: str) -> dict[str, str]:
    """One line of ``scontrol show job -o`` as ``{key: value}``, with the nodes Slurm names in a
    ``Reason=ReqNodeNotAvail, UnavailableNodes:node3`` (a value with a space in it) as ``UnavailableNodes``."""
    fields = scontrol_fields(line)
    found = re.search(r"UnavailableNodes:(\S*)", line)
    if found and found.group(1):
        fields["UnavailableNodes"] = found.group(1)
    return fields


def time_text(seconds: int) -> str:
    """``seconds`` as sbatch's ``--time`` takes it (``HH:MM:SS``, ``D-HH:MM:SS`` from a day): the inverse
    of :func:`time_limit_s`."""
    days, rest = divmod(int(seconds), 86400)
    text = f"{rest // 3600:02d}:{rest % 3600 // 60:02d}:{rest % 60:02d}"
    return f"{days}-{text}" if days else text


def time_limit_s(text: str) -> int | None:
    """Seconds of an sbatch ``--time`` value (one of :data:`trainer_cli.launch.options.TIME_FORMATS`, minutes and
    seconds below
    60, hours below 24 after a day count); None for anything else, ``INFINITE`` included."""
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
