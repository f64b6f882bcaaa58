"""Files a reader never sees half-written, and JSON records changed under a lock.

- :func:`write_atomic`: the text goes to a temporary file in the same folder, is flushed to disk
  (``fsync``) and renamed over the target (``os.replace`` is atomic on POSIX): a concurrent reader
  sees the old file or the whole new one, and a crash leaves one of the two.
- :func:`update_json`: a read-modify-write of a JSON object under a file lock (:mod:`filelock`,
  ``.<name>.lock`` beside the record), so writers in several processes and on several nodes
  (``train submit``, the batch script, rank 0 of the job) never lose each other's changes.
- :func:`append_line`: one line appended under the same lock.

Readers take no lock: every change is one rename. Standard library and :mod:`filelock` only (the
batch script imports it through :mod:`trainer_cli.job.jobstate`).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

LOCK_TIMEOUT_S = 60.0
"""How long a writer waits for the lock of a record before giving up (``filelock.Timeout``, an
``OSError``); the lock is the kernel's (``flock``), so a writer that died holds none."""


def write_atomic(path: Path, text: str, durable: bool = True) -> None:
    """Replace ``path`` by ``text`` atomically (see the module docstring); ``durable=False`` skips the
    ``fsync`` (a cache that a crash may leave empty: a reader treats it as missing)."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)
            if durable:
                f.flush()
                os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


@contextmanager
def locked(path: Path, timeout_s: float = LOCK_TIMEOUT_S) -> Iterator[None]:
    """Hold the lock of the record ``path`` (``.<name>.lock`` in its folder) for the ``with`` block."""
    from filelock import FileLock  # 30 ms to import: not on the paths that only read (`train --help`)

    path = Path(path)
    with FileLock(path.with_name(f".{path.name}.lock"), timeout=timeout_s):
        yield


def read_json(path: Path) -> dict[str, Any]:
    """The JSON object in ``path``; empty when there is none or it cannot be read."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def update_json(path: Path, change: Callable[[dict[str, Any]], dict[str, Any]]) -> dict[str, Any]:
    """Read the JSON object in ``path``, apply ``change`` to it and write the result atomically, all
    under the record's lock; returns the record written. ``change`` gets ``{}`` for a missing record."""
    with locked(path):
        record = change(read_json(path))
        write_atomic(path, json.dumps(record, indent=2) + "\n")
    return record


def append_line(path: Path, line: str) -> None:
    """Append ``line`` (a newline added) to ``path`` under its lock, flushed to disk."""
    path = Path(path)
    with locked(path), open(path, "a", encoding="utf-8") as f:
        f.write(line.rstrip("\n") + "\n")
        f.flush()
        os.fsync(f.fileno())


def read_json_lines(file: Path) -> list[dict[str, Any]]:
    """The records of an append-only JSON-lines file, oldest first ([] without one; an unreadable
    line, cut by a crash mid-write, is skipped)."""
    if not file.is_file():
        return []
    records = []
    for line in file.read_text().splitlines():
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return records
