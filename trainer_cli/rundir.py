"""Run directories: ``<default_root_dir>/<name>/version_<N>``, created atomically, never reused.

Every rank of a run must agree on one directory: the process that allocates it exports
``TRAINER_CLI_RUN_DIR`` so DDP processes Lightning launches from it use the same one, and ranks
started together by ``srun`` (several Slurm tasks, no explicit ``run_dir``) share
``job_<SLURM_JOB_ID>``.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

ENV_RUN_DIR = "TRAINER_CLI_RUN_DIR"
VERSION_PREFIX = "version_"
LAST_CKPT = Path("checkpoints") / "last.ckpt"


def _versions(parent: Path) -> list[tuple[int, Path]]:
    found = []
    if parent.is_dir():
        for child in parent.iterdir():
            match = re.fullmatch(rf"{VERSION_PREFIX}(\d+)", child.name)
            if match and child.is_dir():
                found.append((int(match.group(1)), child))
    return sorted(found)


def allocate(root: Path, name: str) -> Path:
    """Create and return a new ``root/name/version_N`` (N one past the highest); race-free (mkdir is atomic)."""
    parent = root / name
    parent.mkdir(parents=True, exist_ok=True)
    versions = _versions(parent)
    n = versions[-1][0] + 1 if versions else 0
    while True:
        candidate = parent / f"{VERSION_PREFIX}{n}"
        try:
            candidate.mkdir()
            return candidate
        except FileExistsError:
            n += 1


def newest_resumable(root: Path, name: str) -> Path | None:
    """The newest ``root/name/version_N`` that holds ``checkpoints/last.ckpt``, if any."""
    for _, run in reversed(_versions(root / name)):
        if (run / LAST_CKPT).is_file():
            return run
    return None


def slurm_shared_run_dir(root: Path, name: str) -> Path | None:
    """``root/name/job_<id>`` when this process is one of several tasks ``srun`` started together."""
    job = os.environ.get("SLURM_JOB_ID")
    if job and int(os.environ.get("SLURM_NTASKS", "1")) > 1 and "SLURM_PROCID" in os.environ:
        return root / name / f"job_{job}"
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
        (run_dir / "git.txt").write_text("\n".join(lines) + "\n")
