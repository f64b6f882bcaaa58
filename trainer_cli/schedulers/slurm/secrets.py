"""Secrets a job gets (an API key, a token, a password): in its environment, never in a file.

A variable of the job's environment is a secret when its name looks like a credential
(:data:`SECRET_PATTERNS`) or is named in ``--slurm.secrets``; it may come from ``--slurm.env``,
``--slurm.container.env`` or, named in ``--slurm.secrets`` alone, from the environment of ``train
submit``. A secret's value reaches the job through sbatch's own environment: ``sbatch`` runs with the
value in its process environment and passes it to the job (``--export=ALL``, sbatch's default), so
Slurm keeps it with the job in the controller, for every start of the job, requeues included. The
batch script, ``job.json``, the registry of ``train jobs``, ``sweep.json`` and ``--dry-run`` show the
name with the value masked (``NAME=***``); a run directory can be shared and copied without its keys.

Since the value is in the job's environment from its first line, it is there before the setup
commands (``--slurm.setup``, ``setup_raw``: a ``wandb login`` finds it) and in every task ``srun``
starts; a resubmission from inside the job (``--slurm.requeue_mode resubmit``) passes the job's
environment on to its ``sbatch``, so the new job has it too.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import asdict
from fnmatch import fnmatchcase
from typing import TYPE_CHECKING, Any

from trainer_cli.errors import UserError

if TYPE_CHECKING:
    from trainer_cli.schedulers.slurm.options import SlurmOptions

SECRET_PATTERNS = ("*_KEY", "*TOKEN*", "*SECRET*", "*PASSWORD*", "*PASSWD*", "*CREDENTIAL*", "*_PASS")
"""Names (matched without regard to case) that are secrets without being named in ``--slurm.secrets``:
``WANDB_API_KEY``, ``HF_TOKEN``, ``MLFLOW_TRACKING_PASSWORD``, ``AWS_SECRET_ACCESS_KEY``, ... The one list."""
MASK = "***"
"""What the run's files and the dry run show instead of a secret's value."""
_EXPORT = re.compile(r"--export(?:=|\s+)(\S*)")


def looks_secret(name: str) -> bool:
    """Whether the environment variable ``name`` looks like a credential (:data:`SECRET_PATTERNS`)."""
    return any(fnmatchcase(name.upper(), pattern) for pattern in SECRET_PATTERNS)


def names(slurm: SlurmOptions) -> list[str]:
    """The secrets of a job, in order: ``--slurm.secrets``, then the secret-looking names of
    ``--slurm.env`` and ``--slurm.container.env``."""
    found = [*slurm.secrets, *slurm.env, *slurm.container.env]
    return list(dict.fromkeys(str(n) for n in found if n in slurm.secrets or looks_secret(str(n))))


def values(slurm: SlurmOptions, environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """``{name: value}`` of the job's secrets: from ``--slurm.env`` or ``--slurm.container.env``, else
    from ``environ`` (this process's environment).

    Raises:
        UserError: for a secret given nowhere, one given two values, or an sbatch ``--export`` that
            would not pass them to the job.
    """
    environ = os.environ if environ is None else environ
    found: dict[str, str] = {}
    for name in names(slurm):
        given = {str(v) for v in (slurm.env.get(name), slurm.container.env.get(name)) if v is not None}
        if len(given) > 1:
            raise UserError(
                f"secret {name}: --slurm.env and --slurm.container.env give it different values, and the job has one "
                "environment: give it once"
            )
        value = next(iter(given), environ.get(name))
        if value is None:
            raise UserError(
                f"--slurm.secrets {name}: not set in this shell and not given in --slurm.env: `export {name}=...` "
                "before `train submit` (the job gets it from sbatch's environment, never from a file)"
            )
        found[name] = value
    _check_export(list(found), slurm.extra_sbatch, environ)
    return found


def _check_export(secret: Sequence[str], extra_sbatch: Sequence[str], environ: Mapping[str, str]) -> None:
    """Refuse an sbatch ``--export`` mode (``SBATCH_EXPORT``, else ``--slurm.extra_sbatch``'s, as sbatch
    ranks them) that does not pass the secrets from sbatch's environment to the job."""
    mode, where = environ.get("SBATCH_EXPORT"), "SBATCH_EXPORT in this shell"
    if not mode:
        given = [m.group(1) for m in (_EXPORT.match(str(o).strip()) for o in extra_sbatch) if m]
        mode, where = (given[-1], "--slurm.extra_sbatch") if given else (None, "")
    if not secret or not mode or mode.split(",")[0].upper() == "ALL":
        return
    listed = {item.split("=")[0] for item in mode.split(",")}
    missing = [n for n in secret if n not in listed]
    if missing:
        raise UserError(
            f"sbatch --export={mode} ({where}) does not pass {', '.join(missing)} to the job, and a secret reaches "
            f"it only from sbatch's environment (never a file): use --export=ALL (sbatch's default) or add "
            f"{','.join(missing)} to the list"
        )


def sbatch_environment(slurm: SlurmOptions | None) -> dict[str, str] | None:
    """The environment ``sbatch`` runs with for a job of ``slurm``: this process's with the secrets'
    values; None (this process's own) when the job has none.

    Raises:
        UserError: as :func:`values`.
    """
    secret = values(slurm) if slurm is not None and names(slurm) else {}
    return {**os.environ, **secret} if secret else None


def masked(slurm: SlurmOptions) -> dict[str, Any]:
    """``slurm`` as a record (``job.json``) with each secret's value shown as :data:`MASK`."""
    secret = set(names(slurm))
    record = asdict(slurm)
    for env in (record["env"], record["container"]["env"]):
        env.update({k: MASK for k in env if k in secret})
    return record


def masked_words(words: Sequence[str], slurm: SlurmOptions) -> list[str]:
    """``words`` (a command line, for a record) with every secret's value in them masked."""
    secret = [v for v in values(slurm).values() if v] if names(slurm) else []
    out = []
    for word in words:
        for value in sorted(secret, key=len, reverse=True):
            word = word.replace(value, MASK)
        out.append(word)
    return out


def shown_command(words: Sequence[str], slurm: SlurmOptions) -> str:
    """The sbatch command line as ``--dry-run`` prints it: each secret as ``NAME=***`` before it (the
    environment sbatch gets them in)."""
    import shlex

    return " ".join([*(f"{name}={MASK}" for name in names(slurm)), shlex.join(words)])
