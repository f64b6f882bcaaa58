"""Run directories: ``<default_root_dir>/<name>/version_<N>``, created atomically, never reused.

Every rank of a run must agree on one directory: the process that allocates it exports
``TRAINER_CLI_RUN_DIR`` so DDP processes Lightning launches from it use the same one, and ranks
started together by ``srun`` (several Slurm tasks, no explicit ``run_dir``) share
``job_<SLURM_JOB_ID>``.
"""

from __future__ import annotations

import fnmatch
import os
import re
import subprocess
from pathlib import Path

from trainer_cli.errors import UserError
from trainer_cli.run_files import CONFIG_FILE as CONFIG_FILE
from trainer_cli.run_files import ENV_RUN_DIR as ENV_RUN_DIR
from trainer_cli.run_files import GIT_FILE as GIT_FILE
from trainer_cli.run_files import HPC_PATTERN as HPC_PATTERN
from trainer_cli.run_files import LAST_CKPT as LAST_CKPT
from trainer_cli.run_files import USED_SUFFIX as USED_SUFFIX
from trainer_cli.run_files import VERSION_PREFIX as VERSION_PREFIX
from trainer_cli.run_files import BestScore as BestScore
from trainer_cli.run_files import RunCheckpoint as RunCheckpoint
from trainer_cli.run_files import best_checkpoint as best_checkpoint
from trainer_cli.run_files import best_score as best_score
from trainer_cli.run_files import newest_checkpoint as newest_checkpoint
from trainer_cli.run_files import read_checkpoint_progress as read_checkpoint_progress
from trainer_cli.run_files import run_checkpoints as run_checkpoints


def experiment_dir(root: Path, name: str) -> Path:
    """``root/name``, the folder of an experiment's runs.

    Raises:
        UserError: for a name that would leave ``root`` (absolute, or a ``..`` part) or is empty.
    """
    parts = Path(name).parts
    if not name.strip() or Path(name).is_absolute() or ".." in parts or any(c in name for c in "\0\n\r"):
        raise UserError(
            f"--name {name!r}: an experiment name is a folder inside --trainer.default_root_dir {root}: "
            "no absolute path, no '..', not empty (e.g. --name cifar10_sweep)"
        )
    return root / name


def _versions(parent: Path, prefix: str = VERSION_PREFIX) -> list[tuple[int, Path]]:
    found = []
    if parent.is_dir():
        for child in parent.iterdir():
            match = re.fullmatch(rf"{prefix}(\d+)", child.name)
            if match and child.is_dir():
                found.append((int(match.group(1)), child))
    return sorted(found)


def next_dir(root: Path, name: str, prefix: str = VERSION_PREFIX) -> Path:
    """The directory :func:`allocate` would create next, without creating it (for a dry run)."""
    versions = _versions(experiment_dir(root, name), prefix)
    return root / name / f"{prefix}{versions[-1][0] + 1 if versions else 0}"


def allocate(root: Path, name: str, prefix: str = VERSION_PREFIX) -> Path:
    """Create and return a new ``root/name/<prefix>N`` (N one past the highest; ``version_N`` by
    default, ``sweep_N`` for a sweep); race-free (mkdir is atomic)."""
    parent = experiment_dir(root, name)
    try:
        parent.mkdir(parents=True, exist_ok=True)
    except OSError as err:  # read-only, a file in the way, a full disk
        raise UserError(
            f"cannot create the run directory under --trainer.default_root_dir {root}: {parent}: {err.strerror or err}; "
            "choose a writable folder with --trainer.default_root_dir DIR"
        ) from None
    versions = _versions(parent, prefix)
    n = versions[-1][0] + 1 if versions else 0
    while True:
        candidate = parent / f"{prefix}{n}"
        try:
            candidate.mkdir()
            return candidate
        except FileExistsError:
            n += 1
        except OSError as err:
            raise UserError(
                f"cannot create the run directory {candidate}: {err.strerror or err}; "
                "choose a writable folder with --trainer.default_root_dir DIR"
            ) from None


def slurm_shared_run_dir(root: Path, name: str) -> Path | None:
    """``root/name/job_<id>`` when this process is one of several tasks ``srun`` started together."""
    job = os.environ.get("SLURM_JOB_ID")
    if job and int(os.environ.get("SLURM_NTASKS", "1")) > 1 and "SLURM_PROCID" in os.environ:
        return experiment_dir(root, name) / f"job_{job}"
    return None


def git_description(path: Path) -> str | None:
    """``<commit>`` (plus `` (dirty)``) of the git checkout holding ``path``, or None outside one."""
    try:
        commit = subprocess.run(
            ["git", "-C", str(path), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(path), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True, text=True, timeout=10, check=True,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return commit + (" (dirty)" if dirty else "")


def write_git_info(run_dir: Path) -> None:
    """Record the git commit of the project code and of the working directory in ``run_dir/git.txt``."""
    lines = []
    seen = set()
    for label, where in (("trainer_cli", Path(__file__).resolve().parent), ("cwd", Path.cwd())):
        desc = git_description(where)
        if desc and desc not in seen:
            seen.add(desc)
            lines.append(f"{label}: {desc}")
    if lines:
        (run_dir / GIT_FILE).write_text("\n".join(lines) + "\n")


def retire_hpc_checkpoints(run_dir: Path, chosen: RunCheckpoint, rename: bool = True) -> RunCheckpoint:
    """Rename every ``hpc_ckpt_N.ckpt`` of ``run_dir`` to ``hpc_ckpt_N.ckpt.used``; delete the
    ``.used`` ones older than ``chosen`` (superseded: no resume takes them again).

    Called once the resume checkpoint is chosen (and passed to Lightning explicitly): a later
    Lightning hpc lookup (``ckpt_path=None`` under Slurm) can then never load a stale one. The
    numbering of new hpc checkpoints keeps counting up (Lightning counts the ``.used`` names too).

    Args:
        run_dir: The run directory.
        chosen: The checkpoint the resume takes (:func:`newest_checkpoint`).
        rename: False on the other ranks of a job: global rank 0 renames, before the ranks meet
            to load the checkpoint; they only take the new name.

    Returns:
        ``chosen``, with its new path when it is one of the renamed files.
    """
    if rename:
        for file in run_dir.glob(HPC_PATTERN):
            os.replace(file, file.with_name(file.name + USED_SUFFIX))
        for older in run_checkpoints(run_dir):  # consumed before and superseded: never chosen again
            if older.path.name.endswith(USED_SUFFIX) and older.global_step < chosen.global_step:
                older.path.unlink(missing_ok=True)
    if fnmatch.fnmatch(chosen.path.name, HPC_PATTERN):
        chosen = RunCheckpoint(chosen.path.with_name(chosen.path.name + USED_SUFFIX), chosen.global_step, chosen.epochs_done)
    return chosen


def newest_resumable(root: Path, name: str) -> Path | None:
    """The newest ``root/name/version_N`` holding a complete resumable checkpoint, if any."""
    for _, run in reversed(_versions(experiment_dir(root, name))):
        if newest_checkpoint(run) is not None:
            return run
    return None


