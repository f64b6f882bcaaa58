"""Files a reader never sees half-written, and JSON records changed under a lock.

- :func:`write_atomic`: the text goes to a temporary file in the same folder, is flushed to disk
  (``fsync``) and renamed over the target (``os.replace`` is atomic on POSIX): a concurrent reader
  sees the old file or the whole new one, and a crash leaves one of the two.
- :func:`update_json`: a read-modify-write of a JSON object under the record's lock (:func:`locked`),
  so writers in several processes and on several nodes (``train submit``, the batch script, rank 0
  of the job) never lose each other's changes.
- :func:`append_line`: one line appended under the same lock.

The lock of a record is two: the kernel's ``flock`` on ``.<name>.lock`` (:mod:`filelock`) where the
file system has it, and always a lease file ``.<name>.lease`` made with ``O_EXCL`` (host, boot id,
pid and time in it; its holder refreshes its time while it holds it). A file system without
``flock`` (Lustre mounted without ``-o flock``: ``ENOSYS``; ``EOPNOTSUPP``, ``ENOLCK``) has the lease
alone, and one line per process says so; a login node with ``flock`` and compute nodes without it
still exclude each other through the lease. A lease whose holder is gone never blocks: it is stale
when its pid is gone on the same host, or when its time was not refreshed for :data:`LEASE_S` (a
node killed, whose host cannot be probed). Readers take no lock: every change is one rename.
Standard library and :mod:`filelock` only (the batch script imports it through
:mod:`trainer_cli.job.jobstate`).
"""

from __future__ import annotations

import errno
import functools
import json
import os
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

LOCK_TIMEOUT_S = 60.0
"""How long a writer waits for the lock of a record before giving up (:class:`LockTimeout`), unless
the environment's ``TRAINER_CLI_LOCK_TIMEOUT_S`` says otherwise."""
ENV_LOCK_TIMEOUT_S = "TRAINER_CLI_LOCK_TIMEOUT_S"
LEASE_S = 30.0
"""A lease file whose time its holder did not refresh for this long is stale (its holder refreshes
it every quarter of it while it holds the lock)."""
NO_FLOCK = {errno.ENOSYS: "ENOSYS", errno.EOPNOTSUPP: "EOPNOTSUPP", errno.ENOLCK: "ENOLCK"}
"""What ``flock`` answers on a file system without it."""
_flock_by_device: dict[int, bool] = {}
_HOST = os.uname().nodename  # socket.gethostname()'s answer, without importing socket
_said: list[str] = []


class LockTimeout(TimeoutError):
    """A record's lock not taken within its timeout; the message is the one line the user sees
    (``train`` prints it as an ``error:``, :mod:`trainer_cli.errors`)."""


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
def locked(path: Path, timeout_s: float | None = None) -> Iterator[None]:
    """Hold the lock of the record ``path`` for the ``with`` block: ``flock`` on ``.<name>.lock`` where
    the file system has it, then the lease ``.<name>.lease`` (see the module docstring).

    Raises:
        LockTimeout: when the lock is not taken within ``timeout_s`` seconds (None: :data:`LOCK_TIMEOUT_S`).
    """
    path = Path(path)
    if timeout_s is None:
        timeout_s = float(os.environ.get(ENV_LOCK_TIMEOUT_S) or LOCK_TIMEOUT_S)
    deadline = time.monotonic() + timeout_s
    kernel_lock = path.with_name(f".{path.name}.lock")
    if not _has_flock(kernel_lock):
        with _lease(path.with_name(f".{path.name}.lease"), deadline, timeout_s):
            yield
        return
    from filelock import FileLock, Timeout  # 30 ms to import: not on the paths that only read (`train --help`)

    try:
        mode = _lock_mode(FileLock)
        kernel = (
            FileLock(kernel_lock, timeout=timeout_s)
            if mode is None
            else FileLock(kernel_lock, timeout=timeout_s, mode=mode)
        )
        kernel.acquire()
    except Timeout:
        raise _timeout(kernel_lock, timeout_s, "another process holds its flock") from None
    try:
        with _lease(path.with_name(f".{path.name}.lease"), deadline, timeout_s):
            yield
    finally:
        kernel.release()


@functools.cache
def _fixes_mode(lock_class: type) -> bool:
    """Whether ``lock_class`` sets its lock file's mode itself (a ``mode`` default >= 0): asked once."""
    import inspect

    default = inspect.signature(lock_class).parameters.get("mode")
    return default is not None and isinstance(default.default, int) and default.default >= 0


def _lock_mode(lock_class: type) -> int | None:
    """The ``mode`` to give ``lock_class`` (filelock's ``FileLock``) where it would fix the lock file's mode
    itself: an older filelock (the floor, 3.12, among them) makes every lock file ``0o644`` whatever the
    umask (an ``fchmod``), so in a group's shared folder (``umask 002``) another member of the group can
    never take a lock one has made (``PermissionError``). Given ``0o666`` less the umask, the lock file
    is as ``open`` makes the record beside it. A newer filelock, whose default (-1, tox-dev/filelock#483)
    leaves the mode to the umask and the folder's default ACL, and a system that does not say its umask
    (``/proc/self/status``), get None: filelock's own default."""
    if not _fixes_mode(lock_class):
        return None
    try:
        status = Path("/proc/self/status").read_text()
    except OSError:
        return None
    umask = next((int(line.split()[1], 8) for line in status.splitlines() if line.startswith("Umask:")), None)
    return None if umask is None else 0o666 & ~umask


def _has_flock(lock_file: Path) -> bool:
    """Whether the file system of ``lock_file`` has ``flock`` (asked once per file system and process:
    the lock file is opened and locked without waiting); says once per process when it has not."""
    import fcntl

    try:
        device = lock_file.parent.stat().st_dev
    except OSError:
        return True  # no folder: the lock's own open says so
    if device not in _flock_by_device:
        fd = os.open(lock_file, os.O_RDWR | os.O_CREAT, 0o666)  # the umask decides, as for the records
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            fcntl.flock(fd, fcntl.LOCK_UN)
            _flock_by_device[device] = True
        except OSError as err:
            _flock_by_device[device] = err.errno not in NO_FLOCK  # EAGAIN: held, so it has flock
            if err.errno in NO_FLOCK and not _said:
                _said.append(str(lock_file.parent))
                sys.stderr.write(
                    f"trainer-cli: no flock under {lock_file.parent} ({NO_FLOCK[err.errno]}): its records are "
                    f"locked by lease files (.<record>.lease: host, pid, time; stale when the pid is gone or "
                    f"after {LEASE_S:.0f} s without renewal)\n"
                )
                sys.stderr.flush()
        finally:
            os.close(fd)
    return _flock_by_device[device]


@functools.cache
def _boot_id() -> str:
    """This host's boot id (Linux), so that a pid is compared on the host and boot that wrote it."""
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return ""


@contextmanager
def _lease(lease: Path, deadline: float, timeout_s: float) -> Iterator[None]:
    """Hold the lease file ``lease`` (created with ``O_EXCL``; a stale one is taken over) for the block,
    renewed by :class:`_Renewer`, and remove it after."""
    holder = {"host": _HOST, "boot_id": _boot_id(), "pid": os.getpid(), "since": time.time()}
    pause = 0.002
    while True:
        try:
            fd = os.open(lease, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
            break
        except FileExistsError:
            found = _stale(lease, holder)
            if found is None:
                continue  # gone, or stale and removed: try again at once
            if time.monotonic() >= deadline:
                raise _timeout(lease, timeout_s, found) from None
            time.sleep(pause)
            pause = min(pause * 2, 0.1)
    try:
        os.write(fd, (json.dumps(holder) + "\n").encode())
        held = os.fstat(fd)
        _Renewer.hold(fd)
        try:
            yield
        finally:
            _Renewer.drop(fd)
            try:
                if os.path.samestat(os.stat(lease), held):  # ours still (not taken over as stale)
                    os.unlink(lease)
            except FileNotFoundError:
                pass
    finally:
        os.close(fd)


class _Renewer:
    """One thread per process that sets the time of every lease the process holds to now, every
    ``LEASE_S / 4`` seconds (through their open descriptors: a lease taken over as stale is not the
    one renewed); started with the first lease."""

    held: set[int] = set()
    guard: Any = None  # threading.Lock: a descriptor is renewed only while it is held (not closed and reused)
    started_in: int | None = None  # the pid whose thread runs (a forked child starts its own)

    @classmethod
    def hold(cls, fd: int) -> None:
        import threading

        if cls.started_in != os.getpid():
            cls.guard, cls.held, cls.started_in = threading.Lock(), set(), os.getpid()
            threading.Thread(target=cls._run, name="trainer-cli-lease", daemon=True).start()
        with cls.guard:
            cls.held.add(fd)

    @classmethod
    def drop(cls, fd: int) -> None:
        with cls.guard:
            cls.held.discard(fd)

    @classmethod
    def _run(cls) -> None:
        while True:
            time.sleep(LEASE_S / 4)
            with cls.guard:
                for fd in cls.held:
                    try:
                        os.utime(fd)
                    except OSError:
                        pass


def _stale(lease: Path, me: dict[str, Any]) -> str | None:
    """None when ``lease`` is gone, or was stale and is removed now; else who holds it, in words."""
    try:
        with open(lease, "rb") as f:
            found = os.fstat(f.fileno())
            text = f.read(4096)
    except FileNotFoundError:
        return None
    try:
        holder = json.loads(text)
    except ValueError:
        holder = {}  # being written, or cut by a kill: its age decides
    holder = holder if isinstance(holder, dict) else {}
    pid, host = holder.get("pid"), holder.get("host")
    age = time.time() - found.st_mtime
    same_host = host == me["host"] and holder.get("boot_id") == me["boot_id"]
    if not (same_host and isinstance(pid, int) and not _alive(pid)) and age <= LEASE_S:
        since = holder.get("since")
        when = f" since {time.strftime('%H:%M:%S', time.localtime(since))}" if isinstance(since, float) else ""
        return f"held by pid {pid} on {host}{when}" if pid else "held by a process that has not written its name yet"
    # stale: moved aside under a name of ours, removed only if it is still the one judged
    aside = lease.with_name(f"{lease.name}.stale.{me['host']}.{me['pid']}")
    try:
        os.rename(lease, aside)
    except FileNotFoundError:
        return None
    try:
        if not os.path.samestat(os.stat(aside), found):  # a new holder's lease, made since: give it back
            try:
                os.link(aside, lease)
            except FileExistsError:
                pass
    finally:
        aside.unlink(missing_ok=True)
    return None


def _alive(pid: int) -> bool:
    """Whether process ``pid`` exists on this host."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # another user's
    return True


def _timeout(lock_file: Path, timeout_s: float, holder: str) -> LockTimeout:
    return LockTimeout(
        f"{lock_file}: lock not taken within {timeout_s:.0f} s ({holder}): another train command or job is "
        f"writing this run's records; let it finish and run again (if none is running, remove {lock_file.name})"
    )


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
