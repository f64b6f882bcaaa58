"""A run's summary for the listings: what a listing computed from the run's files, kept in the run
directory (:data:`SUMMARY_FILE`) with the size and modification time of every file it came from, so the
next listing opens one small file a run instead of decoding a logger's files (``train runs`` over
10,000 runs: ``benchmarks/scale.py``).

The summary is a cache: each part (``metrics``: :func:`trainer_cli.rundir.metrics.summary`; ``row``:
a ``train runs`` row, :mod:`trainer_cli.tools.runs`) holds the key it was computed under (the files'
sizes and modification times, and what else its value depends on); a part whose key no longer matches
(a file appended, added or removed since) is computed again from the files, as without a summary. The
launcher writes it at the end of a fit (the ``metrics`` part, once the loggers are closed) and a listing
writes the parts it had to compute (where the run directory is writable; nothing else is changed). A
summary lost in a crash (not flushed to disk: it is only a cache) reads as none.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from trainer_cli.atomic import read_json, write_atomic
from trainer_cli.rundir import live

SUMMARY_FILE = "summary.json"
INDEX_FILE = ".runs-index.json"
"""The runs index a listing keeps at its root (:mod:`trainer_cli.rundir.index`): like this summary, not a run's file."""
VERSION = 2
"""Changes when what a part holds changes: a summary of another version reads as none."""
SCANNED_DIRS = ("attempts",)
"""The run directory's folders whose files the listings read (besides the run directory's own files)."""

Key = list[Any]


def files_of(
    entries: Iterable[os.DirEntry[str]], prefix: str = "", dirs: tuple[str, ...] = SCANNED_DIRS
) -> list[tuple[str, int, int, int]]:
    """``(name, size, mtime_ns, inode)`` of the files among a run directory's ``entries`` (``os.scandir``)
    and those of its folders ``dirs`` (default :data:`SCANNED_DIRS`), in name order; this summary, the runs
    index, their temporary files, locks and writers' markers (:mod:`trainer_cli.rundir.live`) left out."""
    found = []
    for entry in entries:
        name = entry.name
        if (
            name in (SUMMARY_FILE, INDEX_FILE)
            or name.startswith((f".{SUMMARY_FILE}.", f".{INDEX_FILE}.", live.PREFIX))
            or name.endswith(".lock")
        ):
            continue
        try:
            if entry.is_file(follow_symlinks=False):
                stat = entry.stat(follow_symlinks=False)
                found.append((prefix + name, stat.st_size, stat.st_mtime_ns, stat.st_ino))
            elif not prefix and name in dirs and entry.is_dir(follow_symlinks=False):
                with os.scandir(entry.path) as inner:
                    found += files_of(inner, f"{name}/", dirs)
        except OSError:
            continue
    return sorted(found)


def _files(folder: Path, dirs: tuple[str, ...] = SCANNED_DIRS) -> list[tuple[str, int, int, int]]:
    try:
        with os.scandir(folder) as entries:
            return files_of(entries, dirs=dirs)
    except OSError:
        return []


class Summary:
    """The summary of ``run_dir`` as stored, the run's files as they are now, and the parts computed
    since (:meth:`put`), written by :meth:`save`.

    Args:
        run_dir: The run directory.
        files: Its files (:func:`files_of`), when the caller listed them already.
        dirs: The folders whose files are listed with the run directory's own (when ``files`` is None):
            :data:`SCANNED_DIRS`, and ``checkpoints`` for a part read from the checkpoints.
    """

    def __init__(
        self, run_dir: Path, files: list[tuple[str, int, int, int]] | None = None, dirs: tuple[str, ...] = SCANNED_DIRS
    ) -> None:
        self.run_dir = Path(run_dir)
        self.files = _files(self.run_dir, dirs) if files is None else files
        """``(name, size, mtime_ns, inode)`` of every file of the run directory and of its :data:`SCANNED_DIRS`
        (a file replaced by a rename has a new inode, whatever its size and time)."""
        stored = read_json(self.run_dir / SUMMARY_FILE)
        self._stored: dict[str, Any] = stored if stored.get("version") == VERSION else {}
        self._changed: dict[str, Any] = {}

    def key(self, *extra: Any, names: Callable[[str], bool] | None = None, inodes: bool = True) -> Key:
        """A part's key: the files (those ``names(name)`` keeps, default all) with their sizes,
        modification times and (``inodes``) inodes, and ``extra`` (what else the value depends on)."""
        size = 4 if inodes else 3
        return [*extra, [list(f[:size]) for f in self.files if names is None or names(f[0])]]

    def get(self, part: str, key: Key) -> Any:
        """The value of ``part`` stored under ``key``; None when there is none or its key differs."""
        found = self._stored.get(part)
        if isinstance(found, dict) and found.get("key") == key:
            return found.get("value")
        return None

    def put(self, part: str, key: Key, value: Any) -> None:
        """Keep ``value`` as ``part`` under ``key`` (written by :meth:`save`)."""
        self._changed[part] = {"key": key, "value": value}

    def save(self) -> None:
        """Write the parts put since reading, beside those stored (nothing when none was put; nothing
        where the run directory cannot be written: the summary is only a cache)."""
        if not self._changed:
            return
        self._stored = {**self._stored, **self._changed, "version": VERSION}
        self._changed = {}
        try:
            write_atomic(self.run_dir / SUMMARY_FILE, json.dumps(self._stored), durable=False)
        except OSError:
            pass
