"""The code a Slurm job runs is the code that was submitted: a snapshot of the git work tree.

Without it, editing the code after ``train submit`` silently changes what a queued job, or a
requeued one, imports. At submit, when the working directory is inside a git work tree, the
snapshot freezes its code, not its data and not its outputs (:func:`take`):

- its files, tracked and untracked-but-not-ignored, as they are on disk (uncommitted changes
  included), are copied to ``<run>/code/``, except outputs: checkpoints (``*.ckpt``), byte code, the
  run root, the launcher's run folders (:func:`trainer_cli.rundir.layout.is_run_dir`), earlier
  snapshots and the registries an earlier version kept in the tree (:data:`LEGACY_OUTPUTS`);
- its git-ignored entries (a data folder) are linked, not copied, at the same place, so a path the
  user's code derives from its own file (``Path(__file__).parents[2] / "data"``) finds the same data
  as in the live tree; outputs are never linked: a folder holding the run itself or a run folder
  (two levels down), Python's ``__pycache__``, the loggers' default folders (:data:`OUTPUT_DIRS`),
  checkpoints;
- a tracked checkpoint is linked too (it is not code);
- over its :class:`Limit` of copies (100 MB; Slurm's ``--slurm.snapshot_max_mb``) it refuses, naming the
  largest files and how to leave them out.

``<run>/code.json`` records the commit, whether the code has uncommitted changes (tracked files
changed, or untracked files copied: run outputs do not count), the files copied and linked, and
``<run>/code.diff`` the changes to tracked files (``git diff HEAD``). The job starts in the snapshot
(``#SBATCH --chdir``), so ``python -m trainer_cli`` puts the snapshot first on ``sys.path`` and the
user's modules (and a trainer-cli checkout itself) are imported from there, on every start and
requeue; it then changes to the submitting directory (:data:`WORKDIR_ENV`,
:func:`trainer_cli.job.workdir.enter`), so relative paths in the config (data folders) mean what
they meant at submit. A user's script (``python main.py submit``) inside the work tree runs from
its copy in the snapshot (:func:`planned_file`), so its folder, first on ``sys.path``, is the
snapshot's too. The other folders of the work tree that were on ``sys.path`` at submit (:func:`import_paths`:
the ``src/`` of a project installed editable, ``pip install -e .``, whose ``.pth`` names the live folder; a
``PYTHONPATH`` into the tree) are put first on the job's ``PYTHONPATH`` as their copies, so those modules too
are imported as submitted. Installed packages still come from the environment. A Slurm job can go
without one (``--slurm.snapshot false``); a Ray job ships it as its working directory.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path

from trainer_cli.errors import UserError
from trainer_cli.job.workdir import WORKDIR_ENV as WORKDIR_ENV  # re-exported: what the batch script exports
from trainer_cli.rundir.layout import is_run_dir

SNAPSHOT_MAX_MB = 100
"""The most a code snapshot may copy, in MB, unless the engine's option says otherwise (:class:`Limit`)."""

CODE_DIR = "code"
RECORD = "code.json"
DIFF = "code.diff"
CHECKPOINT_SUFFIX = ".ckpt"
OUTPUT_DIRS = frozenset({"__pycache__", "lightning_logs", "wandb", "mlruns"})
"""Git-ignored folders never linked: Python's byte code (a job would rewrite the live tree's) and the
loggers' default output folders."""
LEGACY_OUTPUTS = frozenset({"submissions.jsonl", ".submissions.jsonl.lock"})
"""The registry (and its lock) an earlier version wrote into the run root, a script's project root."""
WRITE_ERRORS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EROFS})
"""Errors of writing the snapshot itself (the run's disk), not of reading the work tree."""
SCAN_DIRS = 2000
"""At most this many folders of a git-ignored entry are looked at for a run folder (a data folder
of many subfolders is not walked)."""


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
    """Whether the code has uncommitted changes: tracked files changed, or untracked files copied."""
    files: int
    """Files copied."""
    linked: list[str] = field(default_factory=list)
    """Git-ignored entries (data) and tracked checkpoints linked to the live tree, not copied
    (relative to its top)."""
    left_out: int = 0
    """Untracked outputs left out: checkpoints, byte code, run folders, earlier snapshots."""


@dataclass
class _Selection:
    """What :func:`take` copies and links, relative to the work tree's top."""

    copy: list[str]
    link: list[str]
    untracked: list[str]
    """Untracked files among ``copy``: code not yet committed."""
    left_out: int


def _git(where: Path, *args: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(["git", "-C", str(where), *args], capture_output=True, timeout=60)


def _names(proc: subprocess.CompletedProcess[bytes]) -> list[str]:
    return [n for n in proc.stdout.decode(errors="surrogateescape").split("\0") if n]


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
    if listed.returncode != 0 or relative.as_posix() not in set(_names(listed)):
        return None
    return run_dir / CODE_DIR / relative


def import_paths(where: Path, paths: Iterable[str] | None = None) -> list[str]:
    """The folders of ``paths`` (default ``sys.path``) inside the git work tree holding ``where`` whose code
    the snapshot copies, relative to the tree's top (POSIX, ``.`` for the top), in their order: e.g. ``src``
    of a src layout installed editable. Folders git ignores (a virtual environment inside the tree) and
    ``where`` itself (the job starts in its copy) are left out; none without a work tree."""
    top = work_tree(where)
    if top is None:
        return []
    resolved, here = top.resolve(), where.resolve()
    found: list[str] = []
    for entry in sys.path if paths is None else paths:
        path = Path(entry or ".").resolve()
        if path == here or not path.is_dir():
            continue
        try:
            relative = path.relative_to(resolved).as_posix()
        except ValueError:  # outside the work tree
            continue
        listed = _git(top, "ls-files", "-z", "--cached", "--others", "--exclude-standard", "--", relative)
        if listed.returncode == 0 and _names(listed) and relative not in found:
            found.append(relative)
    return found


class _Outputs:
    """Which paths of the work tree ``top`` are outputs (never copied, never linked): the run
    ``run_dir`` itself, the run roots ``roots`` below the top, the launcher's run folders and earlier
    snapshots, at any depth below the top."""

    def __init__(self, top: Path, run_dir: Path, roots: Iterable[Path] = ()) -> None:
        self.top, self.run_dir = top.resolve(), run_dir.resolve()
        self.roots = {r.resolve() for r in roots}
        self._folders: dict[Path, bool] = {}

    def _output_folder(self, folder: Path) -> bool:
        if folder not in self._folders:
            self._folders[folder] = (
                folder == self.run_dir
                or folder in self.roots
                or is_run_dir(folder)
                or (folder.name == CODE_DIR and (folder.parent / RECORD).is_file())  # an earlier snapshot
            )
        return self._folders[folder]

    def inside(self, name: str) -> bool:
        """Whether ``name`` (relative to the top) lies in an output folder below the top, or is one."""
        path = self.top / name
        if path.is_dir() and not path.is_symlink() and self._output_folder(path):
            return True
        return any(self._output_folder(p) for p in path.parents if p != self.top and self.top in p.parents)

    def holds(self, name: str) -> bool:
        """Whether the folder ``name`` holds the run or a run folder in it or two levels down (a run
        root, a logger's folder of runs); at most :data:`SCAN_DIRS` folders are looked at."""
        path = self.top / name
        if path == self.run_dir or path in self.run_dir.parents:
            return True
        level, seen = [path], 0
        for _ in range(3):
            below: list[Path] = []
            for folder in level:
                if self._output_folder(folder):
                    return True
                try:
                    below += [Path(e.path) for e in os.scandir(folder) if e.is_dir(follow_symlinks=False)]
                except OSError:
                    continue
            seen += len(below)
            if seen > SCAN_DIRS:
                return False
            level = below
        return False


def _output_name(name: str) -> bool:
    """Whether the file ``name`` is an output by its name: a checkpoint, Python's byte code."""
    return name.endswith((CHECKPOINT_SUFFIX, ".pyc")) or "__pycache__" in Path(name).parts


def _select(top: Path, run_dir: Path, roots: Iterable[Path]) -> _Selection:
    """Sort the work tree's entries into copied (code), linked (git-ignored data, tracked
    checkpoints) and left out (outputs)."""
    tracked = set(_names(_git(top, "ls-files", "-z", "--cached")))
    listed = _names(_git(top, "ls-files", "-z", "--cached", "--others", "--exclude-standard"))
    ignored = _names(_git(top, "ls-files", "-z", "--others", "--ignored", "--exclude-standard", "--directory"))
    outputs = _Outputs(top, run_dir, roots)
    chosen = _Selection([], [], [], 0)
    for name in sorted(set(listed)):
        source = top / name
        if not source.exists() and not source.is_symlink():  # deleted in the work tree, not yet committed
            continue
        if source.is_dir() and not source.is_symlink():  # a submodule: not copied
            continue
        if name in tracked:
            (chosen.link if name.endswith(CHECKPOINT_SUFFIX) else chosen.copy).append(name)
        elif _output_name(name) or Path(name).name in LEGACY_OUTPUTS or outputs.inside(name):
            chosen.left_out += 1
        else:
            chosen.copy.append(name)
            chosen.untracked.append(name)
    linked: set[str] = set()
    for entry in sorted(n.rstrip("/") for n in ignored):
        if any(p.as_posix() in linked for p in Path(entry).parents):  # inside a folder linked already (git lists
            continue  # `data/` and `data/raw/` for a .gitignore of `data/raw` and `data/processed`): the link holds it
        if Path(entry).name in OUTPUT_DIRS or _output_name(entry) or outputs.inside(entry):
            continue
        if (top / entry).is_dir() and not (top / entry).is_symlink() and outputs.holds(entry):
            continue
        chosen.link.append(entry)
        linked.add(entry)
    return chosen


@dataclass(frozen=True)
class Limit:
    """How much a snapshot may copy, and the options of the submitting engine a refusal names.

    Attributes:
        max_mb: The most the copies may take, in MB.
        set_with: The option that sets ``max_mb`` (Slurm's ``--slurm.snapshot_max_mb``); None where none does.
        off_with: The option that turns the snapshot off (Slurm's ``--slurm.snapshot false``); None where a job
            always takes one (Ray's ships it as its working directory).
    """

    max_mb: float = SNAPSHOT_MAX_MB
    set_with: str | None = None
    off_with: str | None = None

    def ways_out(self, *first: str) -> str:
        """``first``, then turning the snapshot off where the engine can, as one ``, or``-joined phrase."""
        ways = [*first, *([f"submit with {self.off_with}"] if self.off_with else [])]
        return ", or ".join(ways)


def _check_size(top: Path, names: Iterable[str], limit: Limit) -> None:
    """Refuse a snapshot that would copy more than ``limit.max_mb`` MB, naming its largest files.

    Raises:
        UserError: over the limit.
    """
    sizes = sorted(((top / n).lstat().st_size, n) for n in names if (top / n).exists())
    total = sum(s for s, _ in sizes)
    if total <= limit.max_mb * 1e6:
        return
    largest = ", ".join(f"{n} ({s / 1e6:.1f} MB)" for s, n in reversed(sizes[-5:]) if s * 100 >= total)
    over = f"{limit.set_with} {limit.max_mb:g}" if limit.set_with else f"the limit of {limit.max_mb:g} MB"
    raise UserError(
        f"the code snapshot of {top} would copy {total / 1e6:.0f} MB, over {over}; largest: {largest}. "
        + limit.ways_out(
            "Leave data and outputs out by git-ignoring them (they are linked, not copied)",
            *([f"raise {limit.set_with}"] if limit.set_with else []),
        )
    )


def _write_error(path: Path, err: OSError, limit: Limit) -> UserError:
    """The one line for a snapshot file that cannot be written at ``path`` (the run's side)."""
    return UserError(
        f"the code snapshot cannot write {path}: {err.strerror or err}; "
        + limit.ways_out("free space there or choose another --trainer.default_root_dir")
    )


def _read_error(path: Path, verb: str, why: str, limit: Limit) -> UserError:
    """The one line for a piece of the work tree the snapshot cannot ``verb`` (copy, link)."""
    return UserError(
        f"the code snapshot cannot {verb} {path}: {why}; "
        + limit.ways_out("make it readable or git-ignore it (ignored entries are linked, not copied)")
    )


def _write(top: Path, dest: Path, chosen: _Selection, limit: Limit) -> None:
    """Copy and link ``chosen`` from the work tree ``top`` into the snapshot ``dest``.

    Raises:
        UserError: for a piece that cannot be read, copied or linked (gone since git listed it, unreadable,
            the run's disk full), naming it and what to do.
    """
    verb, name = "copy", ""
    try:
        for name in chosen.copy:
            source, target = top / name, dest / name
            target.parent.mkdir(parents=True, exist_ok=True)
            if source.is_symlink():
                os.symlink(os.readlink(source), target)
            else:
                shutil.copy2(source, target)
        verb = "link"
        for name in chosen.link:  # the live entry itself: paths derived from the code's own file find it
            target = dest / name
            target.parent.mkdir(parents=True, exist_ok=True)
            os.symlink(top.absolute() / name, target)
    except OSError as err:
        why = err.strerror or str(err)
        failed = Path(err.filename) if err.filename else None
        if err.errno in WRITE_ERRORS or (failed is not None and (failed == dest or dest in failed.parents)):
            raise _write_error(failed or dest / name, err, limit) from None
        raise _read_error(top / name, verb, why, limit) from None


def _chosen(where: Path, run_dir: Path, limit: Limit, roots: Iterable[Path]) -> tuple[Path, _Selection] | None:
    """The work tree holding ``where`` and what a snapshot of it into ``run_dir`` copies and links (the
    arguments of :func:`take`); None outside a work tree.

    Raises:
        UserError: when the copies would exceed ``limit``.
    """
    top = work_tree(where)
    if top is None or _git(top, "ls-files", "-z").returncode != 0:
        return None
    here = where.resolve()
    roots = [r for r in roots if r.resolve() != here and r.resolve() not in here.parents]  # a script's logger at "."
    chosen = _select(top, run_dir, roots)
    _check_size(top, chosen.copy, limit)
    return top, chosen


def _described(where: Path, top: Path, dest: Path, chosen: _Selection) -> tuple[Snapshot, bytes]:
    """The :class:`Snapshot` of ``chosen`` copied into ``dest``, and the diff of the tracked files."""
    commit = _git(top, "rev-parse", "HEAD").stdout.decode().strip() or "(no commit)"
    diff = _git(top, "diff", "HEAD", "--binary").stdout
    changed = _git(top, "status", "--porcelain", "--untracked-files=no").stdout
    workdir = dest / where.resolve().relative_to(top.resolve())
    dirty = bool(changed.strip()) or bool(chosen.untracked)
    snap = Snapshot(str(dest), str(workdir), str(top), commit, dirty, len(chosen.copy), chosen.link, chosen.left_out)
    return snap, diff


def preview(where: Path, run_dir: Path, limit: Limit = Limit(), roots: Iterable[Path] = ()) -> Snapshot | None:
    """The snapshot :func:`take` would take, checked as it checks it (its size, every copied file
    readable) but nothing written: what ``train submit --dry-run`` shows; None outside a work tree.

    Raises:
        UserError: where :func:`take` would refuse: over ``limit``, or a file it cannot read.
    """
    found = _chosen(where, run_dir, limit, roots)
    if found is None:
        return None
    top, chosen = found
    for name in chosen.copy:
        source = top / name
        if not source.is_symlink() and not os.access(source, os.R_OK):
            raise _read_error(source, "copy", "Permission denied", limit)
    return _described(where, top, run_dir / CODE_DIR, chosen)[0]


def take(where: Path, run_dir: Path, limit: Limit = Limit(), roots: Iterable[Path] = ()) -> Snapshot | None:
    """Copy the code of the git work tree holding ``where`` into ``run_dir/code`` and link its
    git-ignored data there (replacing an older snapshot of a resubmitted run); None outside a work
    tree. What is copied, linked and left out: the module's docstring; ``roots``: the run roots
    (``trainer.default_root_dir``), left out too unless they hold ``where`` (a script's logger
    folder may be the project itself). ``limit``: how much it may copy, and the options a refusal names.

    Raises:
        UserError: when the copies would exceed ``limit`` (nothing written), or a piece cannot be
            copied or linked (:func:`_write`; the caller removes what it made).
    """
    found = _chosen(where, run_dir, limit, roots)
    if found is None:
        return None
    top, chosen = found
    dest = run_dir / CODE_DIR
    if dest.exists():
        shutil.rmtree(dest)
    _write(top, dest, chosen, limit)
    snap, diff = _described(where, top, dest, chosen)
    writing = run_dir / DIFF
    try:
        writing.write_bytes(diff)
        writing = Path(snap.workdir)
        writing.mkdir(parents=True, exist_ok=True)
        writing = run_dir / RECORD
        writing.write_text(json.dumps(asdict(snap), indent=2) + "\n")
    except OSError as err:
        raise _write_error(writing, err, limit) from None
    return snap
