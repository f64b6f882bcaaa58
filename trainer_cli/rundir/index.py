"""The runs index of a folder of runs (:data:`INDEX_FILE` at the root ``train runs ROOT`` was given): for each
folder the listing looked into, its modification time, the folders it holds and, for a run, its files
(:func:`trainer_cli.rundir.summary.files_of`) and the row the listing showed (the ``row`` part of the run's
summary, :mod:`trainer_cli.rundir.summary`). A listing of 10,000 runs then opens one file and stats each run's
folder and files, instead of listing every folder and opening every run's summary (``benchmarks/scale.py``).

The index is a cache of the summaries, checked against the folders as they are now: a folder whose modification
time differs (an entry added, removed or renamed in it) is listed again; a run whose files' sizes, modification
times or inodes differ (a file appended or rewritten in place) is read from its summary, else from its files, as
without an index. A folder changed less than :data:`RACY_NS` before the index was written is always listed again
(its modification time, from a coarse clock, may not tell a change made in the same tick). Written by the listing
(atomically; nothing where the root cannot be written), read as none when unreadable or of another version.

A run listed with no writer (:func:`settled`: no writer's marker, its last start made by a launcher that keeps them,
:mod:`trainer_cli.rundir.live`) is held as settled, with its folder's inode: the next listings trust its row from one
``stat`` of its folder (its time and inode as held), neither its ``attempts/`` nor its files stated. Every way its row
can change then changes its folder's time first: a new writer makes its marker before writing (a resume, a test, a
new attempt: in place or in ``attempts/``), ``metrics.jsonl`` and ``history.jsonl`` are appended under a lease file
removed after the write, the other records are replaced by a rename, a file added or removed by hand shows as such.
A file edited in place by hand is not seen (its folder's time unchanged): touch the folder, or remove the index.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from pathlib import Path
from typing import Any

from trainer_cli.atomic import read_json, write_atomic
from trainer_cli.rundir import live, summary

INDEX_FILE = summary.INDEX_FILE
VERSION = 2
RACY_NS = 2_000_000_000
"""A folder changed this close to the index's writing is listed again by the next listing."""

Files = list[tuple[str, int, int, int]]


def _held(files: Files) -> dict[str, Any]:
    """A run's files as the index holds them: their names joined by NUL and their :func:`_stamp`."""
    return {"names": "\0".join(name for name, *_ in files), "stamp": _stamp(files)}


class Folder:
    """What the index knows of one folder, checked against it now (:meth:`RunsIndex.folder`).

    Args:
        is_run: Whether it is a run (holds a ``config.yaml``).
        subdirs: The folders under it the listing looks into.
        files: A run's files as they are now (:func:`trainer_cli.rundir.summary.files_of`).
        unchanged: Whether those files are the ones the index's row was read from.
    """

    __slots__ = ("files", "is_run", "subdirs", "unchanged")

    def __init__(self, is_run: bool, subdirs: list[str], files: Files, unchanged: bool) -> None:
        self.is_run, self.subdirs, self.files, self.unchanged = is_run, subdirs, files, unchanged


def _stamp(files: Files) -> int:
    """One number for the files' sizes, modification times and inodes (Python's hash of integers: the same in
    every process)."""
    return hash(tuple(x for _, *numbers in files for x in numbers))


def settled(folder: str, names: set[str]) -> bool:
    """Whether the run ``folder`` (its entries ``names``, listed now) has no writer, and each of its next writers
    changes its folder's modification time before writing (:mod:`trainer_cli.rundir.live`): no writer's marker, and
    its last start made by a launcher that keeps them. Its files' sizes, times and inodes then change only with its
    folder's time (appends to ``metrics.jsonl`` and ``history.jsonl`` remove their lease file after writing)."""
    return not live.writing(names) and live.keeps_markers(folder)


def _inode(folder: str, mtime: int) -> int | None:
    """``folder``'s inode when its modification time is still ``mtime`` (as listed); else None."""
    try:
        stat = os.stat(folder)
    except OSError:
        return None
    return stat.st_ino if stat.st_mtime_ns == mtime else None


def _stat_files(folder: str, names: str) -> Files | None:
    """The files ``names`` (joined by NUL) of ``folder`` stated now; None when one is gone."""
    files: Files = []
    for name in names.split("\0") if names else ():
        try:
            st = os.stat(f"{folder}/{name}", follow_symlinks=False)
        except OSError:
            return None
        files.append((name, st.st_size, st.st_mtime_ns, st.st_ino))
    return files


Listed = tuple[list[os.DirEntry[str]], int, dict[str, int]]
"""A folder's entries, its modification time and its scanned folders' (:func:`list_folder`)."""


def list_folder(folder: str, dirs: tuple[str, ...] = summary.SCANNED_DIRS) -> Listed | None:
    """``folder``'s entries, its modification time and its folders ``dirs``' (default
    :data:`trainer_cli.rundir.summary.SCANNED_DIRS`; stated before listing: a change made meanwhile shows as a
    changed folder next time); None when it cannot be listed."""
    try:
        mtime = os.stat(folder).st_mtime_ns
        times = {}
        for name in dirs:
            with contextlib.suppress(OSError):
                times[name] = os.stat(f"{folder}/{name}").st_mtime_ns
        with os.scandir(folder) as listed:
            return list(listed), mtime, times
    except OSError:
        return None


def _diff(base: dict[str, Any], value: dict[str, Any]) -> dict[str, Any]:
    """``value`` as held in the index: the items that differ from ``base`` and the keys it lacks (``drop``), or
    whole (``all``) where ``base``'s order would not give its keys' order back (:func:`_apply`)."""
    changed = {k: v for k, v in value.items() if k not in base or base[k] != v}
    drop = [k for k in base if k not in value]
    if [k for k in base if k in value] + [k for k in changed if k not in base] != list(value):
        return {"all": value}
    return {"set": changed, **({"drop": drop} if drop else {})}


def _apply(base: dict[str, Any], held: dict[str, Any]) -> dict[str, Any]:
    """The value :func:`_diff` held."""
    if "all" in held:
        return dict(held["all"])
    value = dict(base)
    for key in held.get("drop", ()):
        del value[key]
    value.update(held["set"])
    return value


class RunsIndex:
    """The index of ``root`` as stored (:meth:`folder`, :meth:`row`) and as this listing found it (:meth:`keep`,
    :meth:`save`).

    Args:
        root: The folder of runs the listing was given.
        name: The index's file in ``root``: :data:`INDEX_FILE`, or ``sweep-results``' own.
        extra: What else its rows depend on (an index kept with another reads as none).
    """

    def __init__(self, root: Path, name: str = INDEX_FILE, extra: Any = None) -> None:
        self.root = Path(root)
        self.own = str(self.root.resolve())
        self.file, self.extra = self.root / name, extra
        stored = read_json(self.file)
        valid = stored.get("version") == VERSION and stored.get("root") == self.own and stored.get("extra") == extra
        self._folders: dict[str, Any] = stored.get("folders", {}) if valid else {}
        self._rows: dict[str, Any] = stored.get("rows", {}) if valid else {}
        self._base: dict[str, Any] = stored.get("base", {}) if valid else {}
        self._found: dict[str, Any] = {}
        self._kept: dict[str, Any] = {}
        self.changed = not valid

    def folder(self, folder: str, rel: str) -> Folder | None:
        """What the index knows of ``folder`` (``rel``: its path under the root, ``.`` for the root) when its
        modification time (and its ``attempts/``'s) is as recorded; None when it must be listed again."""
        recorded = self._folders.get(rel)
        if recorded is None or recorded.get("mtime") is None:
            return None
        try:
            stat = os.stat(folder)
            if stat.st_mtime_ns != recorded["mtime"]:
                return None
            if recorded.get("settled") == stat.st_ino and isinstance(self._rows.get(rel), dict):
                return Folder(True, list(recorded.get("sub", [])), [], True)  # no writer since: trusted as held
            for name, mtime in recorded.get("dirs", {}).items():
                if os.stat(f"{folder}/{name}").st_mtime_ns != mtime:
                    return None
        except OSError:
            return None
        files: Files = []
        same = True
        if recorded.get("run"):
            stated = _stat_files(folder, recorded.get("names", ""))
            if stated is None:
                return None
            files, same = stated, _stamp(stated) == recorded.get("stamp")
        return Folder(bool(recorded.get("run")), list(recorded.get("sub", [])), files, same)

    def found(
        self,
        rel: str,
        mtime: int | None,
        dirs: dict[str, int],
        is_run: bool,
        subdirs: list[str],
        files: Files | None,
        settled: bool = False,
    ) -> None:
        """Record the folder ``rel`` (as in :meth:`folder`) as this listing found it: its modification time and
        its ``dirs``' (:func:`list_folder`; None: as the index holds them), the folders under it looked into, a
        run's files, and whether the run was settled when listed (:func:`settled`): the next listings then trust
        it from one ``stat`` of its folder while its time and inode are as now."""
        if mtime is None:  # as the index holds it, its files stated now (None: as held)
            entry = self._folders[rel]
            if is_run and files is not None:
                entry = {**entry, **_held(files)}
        else:
            racy = max([mtime, *dirs.values()]) > time.time_ns() - RACY_NS
            entry = {"mtime": None if racy else mtime, "dirs": dirs, "run": is_run, "sub": subdirs}
            if is_run:
                entry |= _held(files or [])
                inode = _inode(os.path.join(self.root, rel), mtime) if settled and not racy else None
                if inode is not None:
                    entry["settled"] = inode
        before = self._folders.get(rel)
        if rel == "." and before is not None:  # the root: changed by writing the index itself
            before = {**before, "mtime": entry["mtime"], "dirs": entry["dirs"]}
        if entry != before:
            self.changed = True
        self._found[rel] = entry

    def row(self, rel: str) -> dict[str, Any] | None:
        """The row the index keeps for the run ``rel`` (the ``row`` part of its summary); call only for a run whose
        files are unchanged (:attr:`Folder.unchanged`)."""
        entry = self._rows.get(rel)
        if not isinstance(entry, dict):
            return None
        row = _apply(self._base.get("row", {}), entry["row"])
        if "config" in entry:
            row["config"] = _apply(self._base.get("config", {}), entry["config"])
        return row

    def keep(self, rel: str, row: dict[str, Any], fresh: bool) -> None:
        """Keep ``row`` (the ``row`` part as its summary holds it) for the run ``rel``; ``fresh``: read from
        anywhere but this index (the index then is written)."""
        self._kept[rel] = row
        self.changed = self.changed or fresh

    def save(self) -> None:
        """Write the index as this listing found the folders, when anything differs from the index read; nothing
        where the root is not writable."""
        if not self.changed and self._found.keys() == self._folders.keys():
            return
        first: dict[str, Any] = next(iter(self._kept.values()), {})
        config = first.get("config")
        base: dict[str, Any] = {
            "row": {k: v for k, v in first.items() if k != "config"},
            "config": config if isinstance(config, dict) else {},
        }
        rows = {}
        for rel, row in self._kept.items():
            config = row.get("config")
            if isinstance(config, dict):
                rows[rel] = {
                    "row": _diff(base["row"], {k: v for k, v in row.items() if k != "config"}),
                    "config": _diff(base["config"], config),
                }
            else:
                rows[rel] = {"row": _diff(base["row"], row)}
        held = {"version": VERSION, "root": self.own, "extra": self.extra, "base": base}
        text = json.dumps(held | {"folders": self._found, "rows": rows})
        try:
            write_atomic(self.file, text, durable=False)
        except OSError:
            pass


LOOKERS = 8
"""Threads that state and list the folders of one level at once where the disk is the bottleneck (a cold page
cache: the disk's queue kept full); with the page cache warm, one thread (threads would contend for the GIL)."""
CHUNK = 256
COLD_S = 0.0005
"""Seconds a folder of the first chunk took above which the page cache counts as cold (warm: about 0.1 ms)."""


def looked(level: list[tuple[str, str]], index: RunsIndex | None) -> list[tuple[Folder | None, Listed | None]]:
    """Each folder of ``level`` (its path, and its path under the root) as ``index`` holds it where unchanged
    (:meth:`RunsIndex.folder`), else listed (:func:`list_folder`);
    the first :data:`CHUNK` folders here, the rest in :data:`LOOKERS` threads over chunks when those took more than
    :data:`COLD_S` each (the disk, not the interpreter, then sets the pace)."""

    def look(chunk: list[tuple[str, str]]) -> list[tuple[Folder | None, Listed | None]]:
        out = []
        for folder, rel in chunk:
            known = index.folder(folder, rel) if index is not None else None
            out.append((known, None if known is not None else list_folder(folder)))
        return out

    start = time.perf_counter()
    first = look(level[:CHUNK])
    rest = level[CHUNK:]
    if not rest or time.perf_counter() - start < COLD_S * CHUNK:
        return first + look(rest)
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(LOOKERS) as pool:
        parts = pool.map(look, [rest[i : i + CHUNK] for i in range(0, len(rest), CHUNK)])
        return first + [x for part in parts for x in part]
