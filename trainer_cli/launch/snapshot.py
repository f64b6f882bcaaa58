"""The code a Slurm job runs is the code that was submitted: a snapshot of the git work tree.

Without it, editing the code after ``train submit`` silently changes what a queued job, or a
requeued one, imports. At submit, when the working directory is inside a git work tree, its files
(tracked and untracked-but-not-ignored, as they are on disk: uncommitted changes included) are
copied to ``<run>/code/``; ``<run>/code.json`` records the commit, whether the tree was dirty, and
the file count, and ``<run>/code.diff`` the uncommitted changes (``git diff HEAD``). The job starts
in the snapshot (``#SBATCH --chdir``), so ``python -m trainer_cli`` puts the snapshot first on
``sys.path`` and the user's modules (and a trainer-cli checkout itself) are imported from there, on
every start and requeue; it then changes to the submitting directory (:data:`WORKDIR_ENV`,
:func:`trainer_cli.job.workdir.enter`), so relative paths in the config (data folders) mean what
they meant at submit. A user's script (``python main.py submit``) inside the work tree runs from
its copy in the snapshot (:func:`planned_file`), so its folder, first on ``sys.path``, is the
snapshot's too. Installed packages still come from the environment. ``--slurm.snapshot false``
turns it off.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from dataclasses import asdict, dataclass
from pathlib import Path

from trainer_cli.job.workdir import WORKDIR_ENV as WORKDIR_ENV  # re-exported: what the batch script exports

CODE_DIR = "code"
RECORD = "code.json"
DIFF = "code.diff"


@dataclass(frozen=True)
class Snapshot:
    """Where a run's code snapshot is and what it holds."""

    root: str
    """The snapshot folder (``<run>/code``), a copy of the git work tree's top level."""
    workdir: str
    """The submitting directory's place inside the snapshot: where the job starts."""
    source: str
    """The git work tree copied."""
    commit: str
    dirty: bool
    files: int


def _git(where: Path, *args: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(["git", "-C", str(where), *args], capture_output=True, timeout=60)


def work_tree(where: Path) -> Path | None:
    """The top of the git work tree holding ``where``, or None outside one (or without git)."""
    if shutil.which("git") is None:
        return None
    proc = _git(where, "rev-parse", "--show-toplevel")
    return Path(proc.stdout.decode().strip()) if proc.returncode == 0 and proc.stdout.strip() else None


def planned(where: Path, run_dir: Path) -> Path | None:
    """Where the job would start with a snapshot of ``where`` in ``run_dir`` (None outside a work tree)."""
    top = work_tree(where)
    return None if top is None else run_dir / CODE_DIR / where.resolve().relative_to(top.resolve())


def planned_file(path: Path, where: Path, run_dir: Path) -> Path | None:
    """Where the copy of the file ``path`` will be in the snapshot of the work tree holding ``where``
    taken into ``run_dir`` (absolute); None when there is no work tree, ``path`` lies outside it, or
    git ignores it (:func:`take` copies only what ``git ls-files`` lists)."""
    top = work_tree(where)
    if top is None:
        return None
    try:
        relative = (path.absolute().parent.resolve() / path.name).relative_to(top.resolve())
    except ValueError:  # outside the work tree
        return None
    listed = _git(top, "ls-files", "-z", "--cached", "--others", "--exclude-standard", "--", relative.as_posix())
    names = {n for n in listed.stdout.decode(errors="surrogateescape").split("\0") if n}
    if listed.returncode != 0 or relative.as_posix() not in names:
        return None
    return run_dir / CODE_DIR / relative


def take(where: Path, run_dir: Path) -> Snapshot | None:
    """Copy the git work tree holding ``where`` into ``run_dir/code`` (replacing an older snapshot of
    a resubmitted run); None outside a work tree.

    Raises:
        OSError: when a file cannot be copied (the caller removes what it made).
    """
    top = work_tree(where)
    if top is None:
        return None
    listed = _git(top, "ls-files", "-z", "--cached", "--others", "--exclude-standard")
    if listed.returncode != 0:
        return None
    dest = run_dir / CODE_DIR
    if dest.exists():
        shutil.rmtree(dest)
    count = 0
    for name in sorted({n for n in listed.stdout.decode(errors="surrogateescape").split("\0") if n}):
        source = top / name
        if not source.exists() and not source.is_symlink():  # deleted in the work tree, not yet committed
            continue
        if source.is_dir() and not source.is_symlink():  # a submodule: not copied
            continue
        target = dest / name
        target.parent.mkdir(parents=True, exist_ok=True)
        if source.is_symlink():
            os.symlink(os.readlink(source), target)
        else:
            shutil.copy2(source, target)
        count += 1
    commit = _git(top, "rev-parse", "HEAD").stdout.decode().strip() or "(no commit)"
    diff = _git(top, "diff", "HEAD", "--binary").stdout
    status = _git(top, "status", "--porcelain").stdout
    (run_dir / DIFF).write_bytes(diff)
    workdir = dest / where.resolve().relative_to(top.resolve())
    workdir.mkdir(parents=True, exist_ok=True)
    snap = Snapshot(str(dest), str(workdir), str(top), commit, bool(status.strip()), count)
    (run_dir / RECORD).write_text(json.dumps(asdict(snap), indent=2) + "\n")
    return snap
