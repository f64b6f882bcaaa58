"""Who is writing into a run directory: each ``train`` process that writes into it (global rank 0 of every verb
when it starts, :meth:`trainer_cli.runtime.run.Run.freeze`; every rank of a fit when its attempt is recorded,
:class:`trainer_cli.rundir.attempts.Recorder`) holds a marker file there, ``.live.<host>.<pid>``, made before its
first write and removed at its exit, after its last one (the exit handler registered first of the run's).

Most of a run's files change by a new file or a rename (its folder's modification time changes then), but some grow
in place: TensorBoard's event files, the CSV logger's, ``attempts/`` (its own folder's time only). A run without a
marker whose last start (``history.jsonl``) was made by a launcher that keeps markers (:data:`FIELD`) has no writer:
its next writer makes its marker first, which changes the folder's time. The runs index then trusts such a folder
from one ``stat`` of it (:mod:`trainer_cli.rundir.index`). A process killed without its exit (SIGKILL) leaves its
marker: the run counts as written until the next start on that host removes it (its pid gone).
Standard library only.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
from collections.abc import Iterable
from pathlib import Path

PREFIX = ".live."
HISTORY_FILE = "history.jsonl"  # trainer_cli.rundir.layout.HISTORY_FILE (this module imports nothing of ours)
FIELD = "live"
"""The key of a ``history.jsonl`` record whose start kept a marker (absent in the records of earlier launchers)."""
_HOST = os.uname().nodename.replace("/", "_")
_held: list[tuple[int, str]] = []  # (pid, marker path): a forked child's exit leaves its parent's


def _marker(run_dir: Path) -> str:
    return os.path.join(run_dir, f"{PREFIX}{_HOST}.{os.getpid()}")


def enter(run_dir: Path | str) -> bool:
    """This process writes into ``run_dir`` from now until its exit: its marker made there (once), and those of
    this host's processes that are gone removed; whether it holds its marker. Never raises."""
    path = _marker(Path(run_dir))
    if (os.getpid(), path) in _held:
        return True
    try:
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT, 0o666))
    except OSError:
        return False
    if not _held:
        atexit.register(leave)
    _held.append((os.getpid(), path))
    with contextlib.suppress(OSError), os.scandir(run_dir) as entries:
        for entry in entries:
            host, _, pid = entry.name[len(PREFIX) :].rpartition(".") if entry.name.startswith(PREFIX) else ("", "", "")
            if host == _HOST and pid.isdigit() and not _alive(int(pid)):
                with contextlib.suppress(OSError):
                    os.unlink(entry.path)
    return True


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True
    return True


def leave() -> None:
    """The process exits: its markers removed (the last of its writes into its runs); run at exit, and by hand
    before ``os._exit``."""
    for pid, path in _held:
        if pid == os.getpid():
            with contextlib.suppress(OSError):
                os.unlink(path)


def writing(names: Iterable[str]) -> bool:
    """Whether a run directory with the entries ``names`` has a writer's marker."""
    return any(name.startswith(PREFIX) for name in names)


def alive(run_dir: Path | str) -> bool:
    """Whether a process holds its marker in ``run_dir``: one of another host's, or of this host's whose pid is
    still there (a process killed without its exit leaves its marker)."""
    try:
        names = os.listdir(run_dir)
    except OSError:
        return False
    for name in names:
        if not name.startswith(PREFIX):
            continue
        host, _, pid = name[len(PREFIX) :].rpartition(".")
        if host != _HOST or not pid.isdigit() or _alive(int(pid)):
            return True
    return False


def keeps_markers(run_dir: Path | str) -> bool:
    """Whether the last start of ``run_dir`` (``history.jsonl``'s last record, read from its end) was made by a
    launcher that keeps markers, so that every later writer makes one."""
    try:
        with open(os.path.join(run_dir, HISTORY_FILE), "rb") as f:
            size = f.seek(0, os.SEEK_END)
            f.seek(max(0, size - 65536))
            lines = f.read().splitlines()
    except OSError:
        return False
    last = next((line for line in reversed(lines) if line.strip()), b"")
    try:
        record = json.loads(last)
    except ValueError:
        return False
    return isinstance(record, dict) and record.get(FIELD) is True
