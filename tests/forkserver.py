"""A fork server for the suite's ``train`` processes: ``python -m trainer_cli ARGS`` without paying
Python's, torch's and Lightning's imports (3.5-5 s on this machine, twice that while the other
worker trains) at every start.

One server per pytest process imports what ``train fit`` imports, then waits on a Unix socket. For
each :func:`run` it forks a process that becomes that command: the request's working directory,
environment, ``sys.argv`` and ``sys.path`` (the working directory first, as ``python -m`` puts it),
stdout and stderr on the caller's files, stdin on ``/dev/null``; it runs the module
``trainer_cli`` as ``__main__`` (``runpy``, as ``-m`` does), or a script as ``python SCRIPT`` does
(``sys.argv[0]`` as given, ``__file__`` absolute, ``__main__`` its own module), and leaves the way any Python process
leaves (``SystemExit`` to the top: non-daemon threads joined, ``atexit`` run, streams flushed). Its
children (DDP ranks, sweep trials) are ordinary new processes. The exit status comes back as
``subprocess`` reports it (``-N`` for a signal).

What a fork cannot give is a different interpreter start: :func:`usable` sends a command to a
fresh process instead when a variable read at start-up (``PYTHON*``, thread counts, ``LD_*``, ...)
differs from the server's, and tests of start-up itself (the fast-error path that must not import
torch, the help cache, a signal in the first instant) start their processes themselves.
``TRAINER_CLI_TESTS_FORK=0`` turns the server off; ``TRAINER_CLI_TESTS_FORK_WHY=FILE`` logs each command it
does not fork, and why (:func:`_log_refusal`).

Protocol: the client sends one JSON line (``argv``, ``cwd``, ``env``) with its stdout and stderr
descriptors (``SCM_RIGHTS``); the server answers ``{"pid": N}`` once the process runs and
``{"status": N}`` when it ended.
"""

from __future__ import annotations

import atexit
import gc
import json
import os
import random
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Optional

# variables a process reads while it starts (the interpreter, torch's and OpenMP's thread pools, the
# dynamic loader, Lightning's rank_zero_only.rank set at import from RANK/LOCAL_RANK/SLURM_PROCID/...):
# a command whose values differ from the server's gets a process of its own
STARTUP_PREFIXES = (
    "PYTHON", "OMP_", "MKL_", "OPENBLAS_", "LD_", "TORCH", "CUDA", "NCCL", "MALLOC", "KMP_",
    "RANK", "LOCAL_RANK", "NODE_RANK", "GROUP_RANK", "WORLD_SIZE", "MASTER_", "SLURM_", "JSM_", "PL_", "LIGHTNING_",
)
# applied to the forked process: its streams, its sys.path (a PYTHONPATH entry that would shadow an
# import the server made is refused by the server, _shadows); and variables under those prefixes that
# are read only when used, never at start-up, which a test's own process comes to hold: the local
# cluster's config (the slurm_cluster fixture), Lightning's seed (`seed_everything` in an in-process
# test; read by `reset_seed` and the workers' init). Compared, every command after them would start a
# new interpreter. (What imports set themselves, torch's TORCHINDUCTOR_CACHE_DIR and scikit-learn's
# KMP_*, is matched against the server's own imports instead: `set_by_imports` in _serve.)
NOT_STARTUP = {"PYTHONUNBUFFERED", "PYTHONPATH", "SLURM_CONF", "PL_GLOBAL_SEED", "PL_SEED_WORKERS"}
# not trainer_cli.__main__: runpy runs it. After the big ones (and the verb runner), what a `train fit` imports on its
# way (Hydra's compose, the digits data, the TensorBoard writer, ...): 0.3 s of every command otherwise
PRELOAD = (
    "lightning.pytorch", "torchvision", "trainer_cli.runtime.cli", "trainer_cli.runtime.verbs",
    "hydra", "hydra.compose", "hydra.initialize", "omegaconf", "sklearn.datasets", "torch.utils.tensorboard", "psutil",
    "trainer_cli.config.before_parse", "trainer_cli.sweeps", "trainer_cli.models.backbones",
)


def startup_env(env: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in env.items() if k.startswith(STARTUP_PREFIXES) and k not in NOT_STARTUP}


# ---------------------------------------------------------------- server


def _pythonpath(env: dict[str, str], cwd: str) -> list[str]:
    """The entries ``PYTHONPATH`` puts after ``sys.path[0]`` (absolute, as ``site`` makes them)."""
    entries: list[str] = []
    for entry in env.get("PYTHONPATH", "").split(os.pathsep) if env.get("PYTHONPATH") else []:
        full = os.path.normpath(os.path.join(cwd, entry))
        if full not in entries:
            entries.append(full)
    return entries


def _shadows(folder: str) -> bool:
    """Whether ``folder`` on the path would change an import the server already made (a module
    loaded from elsewhere that it also holds, or a ``sitecustomize`` a fresh start would run)."""
    try:
        names = os.listdir(folder)
    except OSError:
        return False
    for name in names:
        top = name.split(".", 1)[0]
        if top in ("sitecustomize", "usercustomize"):
            return True
        module = sys.modules.get(top)
        origin = getattr(module, "__file__", None) or ""
        if module is not None and not os.path.realpath(origin).startswith(os.path.realpath(folder) + os.sep):
            return True
    return False


def _serve(path: str) -> None:
    started_with = startup_env(dict(os.environ))  # before the imports set their own (set_by_imports below)
    global _BASE_PATH
    _BASE_PATH = sys.path[1 + len(_pythonpath(dict(os.environ), os.getcwd())):]
    for name in PRELOAD:
        __import__(name)
    # what the server imported stays out of the collector's sight in every fork (the gc module's
    # advice for a server that forks): no collection touches, and so copies, those pages
    gc.collect()
    gc.freeze()
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(16)
    parent = os.getppid()
    # what the imports set themselves (torch's TORCHINDUCTOR_CACHE_DIR, scikit-learn's os.environ.setdefault
    # of KMP_*): a command whose environment holds the same values starts as the server did (a new
    # process's imports set them the same way)
    set_by_imports = {k: v for k, v in startup_env(dict(os.environ)).items() if started_with.get(k) != v}
    print(json.dumps({"ready": True, "env": started_with, "set_by_imports": set_by_imports}), flush=True)
    while True:
        ready, _, _ = select.select([listener], [], [], 1.0)
        _reap()
        if os.getppid() != parent:  # the pytest process is gone
            os._exit(0)
        if not ready:
            continue
        conn, _ = listener.accept()
        if os.fork() == 0:  # one waiter per command; the server stays single-threaded for its forks
            listener.close()
            _wait_for(conn)  # returns only in the command's own process
            return
        conn.close()


def _reap() -> None:
    try:
        while os.waitpid(-1, os.WNOHANG)[0]:
            pass
    except ChildProcessError:
        pass


def _wait_for(conn: socket.socket) -> None:
    msg, fds, _, _ = socket.recv_fds(conn, 1 << 20, 2)
    request = json.loads(msg)
    extra = _pythonpath(request["env"], request["cwd"])
    if any(entry not in sys.path and _shadows(entry) for entry in extra):
        conn.sendall(json.dumps({"refused": "PYTHONPATH changes what is imported"}).encode() + b"\n")
        os._exit(0)
    # Popen(start_new_session=True): its own session and process group, made before its pid is
    # answered (a killpg right after the answer must find the group)
    session_made = os.pipe() if request.get("new_session") else None
    pid = os.fork()
    if pid == 0:
        conn.close()
        if session_made is not None:
            os.setsid()
            os.close(session_made[0])
            os.write(session_made[1], b"1")
            os.close(session_made[1])
        _become(request, fds)
        return
    if session_made is not None:
        os.close(session_made[1])
        os.read(session_made[0], 1)
        os.close(session_made[0])
    for fd in fds:
        os.close(fd)
    conn.sendall(json.dumps({"pid": pid}).encode() + b"\n")
    _, status = os.waitpid(pid, 0)
    code = -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)
    try:
        conn.sendall(json.dumps({"status": code}).encode() + b"\n")
    finally:
        os._exit(0)


def _become(request: dict[str, Any], fds: list[int]) -> None:
    """Turn this forked process into ``python -m trainer_cli ARGV`` (see the module docstring)."""
    import builtins
    import importlib.machinery
    import io
    import runpy
    import types

    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.dup2(fds[0], 1)
    os.dup2(fds[1], 2)
    for fd in (devnull, *fds):
        os.close(fd)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    unbuffered = bool(os.environ.get("PYTHONUNBUFFERED"))
    sys.stdin = io.TextIOWrapper(io.FileIO(0, "r", closefd=False), encoding="utf-8")
    sys.stdout = io.TextIOWrapper(io.FileIO(1, "w", closefd=False), encoding="utf-8", errors="strict", write_through=unbuffered)
    sys.stderr = io.TextIOWrapper(io.FileIO(2, "w", closefd=False), encoding="utf-8", errors="backslashreplace", write_through=True)
    sys.__stdout__, sys.__stderr__, sys.__stdin__ = sys.stdout, sys.stderr, sys.stdin  # type: ignore[misc]
    for sig in (signal.SIGINT,):
        signal.signal(sig, signal.default_int_handler)
    for sig in (signal.SIGTERM, signal.SIGUSR1, signal.SIGUSR2, signal.SIGHUP, signal.SIGCHLD):
        signal.signal(sig, signal.SIG_DFL)
    argv = request["argv"]
    script = argv[0] != "-m"
    first = os.path.dirname(os.path.realpath(argv[0])) if script else os.getcwd()
    sys.path[:] = [first, *_pythonpath(request["env"], os.getcwd()), *_BASE_PATH]
    importlib.invalidate_caches()
    random.seed()  # a new process's own seeds, not the server's
    if "numpy" in sys.modules:
        sys.modules["numpy"].random.seed()
    if script:  # python SCRIPT ARGS: sys.argv[0] as given, __file__ and the code's file name absolute (3.9+)
        path = os.path.abspath(argv[0])
        sys.argv = list(argv)
        main = types.ModuleType("__main__")
        main.__dict__.update(__file__=path, __cached__=None, __builtins__=builtins,
                             __loader__=importlib.machinery.SourceFileLoader("__main__", path))
        sys.modules["__main__"] = main
        with open(path, "rb") as source:
            exec(compile(source.read(), path, "exec", dont_inherit=True), main.__dict__)
    else:  # python -m MODULE ARGS
        sys.modules.pop(f"{argv[1]}.__main__", None)
        sys.argv = ["-m", *argv[2:]]
        runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
    raise SystemExit(0)  # ran to its end, as a script does


# ---------------------------------------------------------------- client

_BASE_PATH: list[str] = []  # the server's sys.path after sys.path[0] and its PYTHONPATH
_server: Optional[subprocess.Popen[str]] = None
_server_env: dict[str, str] = {}
_set_by_imports: dict[str, str] = {}
_socket_path = ""
_lock = threading.Lock()


def _start() -> bool:
    global _server, _server_env, _set_by_imports, _socket_path
    if os.environ.get("TRAINER_CLI_TESTS_FORK", "1") == "0":
        return False
    if _server is not None:
        return _server.poll() is None
    folder = tempfile.mkdtemp(prefix="trainer-cli-fork-")
    _socket_path = os.path.join(folder, "s")
    env = {k: v for k, v in os.environ.items() if k != "TRAINER_CLI_RUN_DIR"}
    _server = subprocess.Popen(
        [sys.executable, str(Path(__file__).resolve()), _socket_path], cwd=str(Path(__file__).resolve().parent.parent),
        env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=None, text=True,
    )
    atexit.register(_stop)
    line = _server.stdout.readline() if _server.stdout else ""
    if not line:
        return False
    ready = json.loads(line)
    _server_env, _set_by_imports = ready["env"], ready["set_by_imports"]
    return True


def _stop() -> None:
    if _server is not None and _server.poll() is None:
        _server.kill()
        _server.wait()
    if _socket_path:
        shutil.rmtree(os.path.dirname(_socket_path), ignore_errors=True)


def usable(env: dict[str, str]) -> bool:
    """Whether a command with environment ``env`` can be forked (the server started, the same
    start-up variables)."""
    with _lock:
        if not _start():
            return False
        wanted = startup_env(env)
        differ = {
            k: [wanted.get(k), _server_env.get(k)] for k in sorted(set(wanted) | set(_server_env))
            if wanted.get(k) != _server_env.get(k) and not (k in _set_by_imports and wanted.get(k) == _set_by_imports[k])
        }
        if differ:
            _log_refusal({"startup_env_differs": differ})
        return not differ


def _log_refusal(why: dict[str, Any]) -> None:
    """One JSON line for a command started as a new interpreter instead of forked (the test, why) in the file
    ``TRAINER_CLI_TESTS_FORK_WHY`` names, if set: what keeps a test's processes fresh, found by running it."""
    path = os.environ.get("TRAINER_CLI_TESTS_FORK_WHY")
    if path:
        with open(path, "a") as f:
            f.write(json.dumps({"test": os.environ.get("PYTEST_CURRENT_TEST", ""), **why}) + "\n")


def _fork(argv: list[str], cwd: str | os.PathLike[str], env: dict[str, str], fds: list[int], new_session: bool = False) -> Optional["Forked"]:
    """Ask the server to fork ``python ARGV`` with stdout and stderr on ``fds`` (the caller keeps and
    closes its own); its :class:`Forked` once it runs, or None when the server cannot start it (its
    ``PYTHONPATH`` would change what the server imported, or the server has ended)."""
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        conn.connect(_socket_path)
        request = {"argv": list(argv), "cwd": str(cwd), "env": env, "new_session": new_session}
        socket.send_fds(conn, [json.dumps(request).encode()], fds)
        answer = b""
        while not answer.endswith(b"\n"):  # byte by byte: the exit status that follows is Forked's to read
            chunk = conn.recv(1)
            if not chunk:
                break
            answer += chunk
        started = json.loads(answer or b'{"refused": "the server ended"}')
    except OSError:
        started = {"refused": "the server ended"}
    if "pid" not in started:
        _log_refusal({"argv": list(argv[:4]), "refused": started.get("refused"), "PYTHONPATH": env.get("PYTHONPATH")})
        conn.close()
        return None
    return Forked([sys.executable, *argv], started["pid"], conn, None)


def python(argv: list[str], cwd: str, env: dict[str, str], timeout: float) -> Optional[subprocess.CompletedProcess[str]]:
    """``subprocess.run([python, *argv], capture_output=True, text=True, ...)`` through the server,
    ``argv`` being ``["-m", MODULE, ARGS...]`` or ``[SCRIPT, ARGS...]``; raises
    ``subprocess.TimeoutExpired`` (the process killed) as that does. ``None`` when the server
    cannot start this command (:func:`_fork`): start it yourself."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        proc = _fork(argv, cwd, env, [out.fileno(), err.fileno()])
        if proc is None:
            return None
        try:
            code = proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            raise
        text = []
        for f in (out, err):
            f.seek(0)
            text.append(f.read().decode("utf-8", errors="strict").replace("\r\n", "\n").replace("\r", "\n"))
    return subprocess.CompletedProcess(proc.args, code, text[0], text[1])


class Forked:
    """The part of :class:`subprocess.Popen` that the tests use (``pid``, ``stdout``, ``stderr``, ``returncode``,
    ``poll``, ``wait``, ``communicate``, ``send_signal``, ``kill``) for a command the server forked
    (:func:`_fork`); from :func:`popen_python`, stdout and stderr together on one pipe, as
    ``Popen(..., stdout=PIPE, stderr=STDOUT, text=True)``, or each on its own (``stderr=PIPE``). The
    process is the server's grandchild: its exit status comes on the server's connection."""

    def __init__(self, args: list[str], pid: int, conn: socket.socket, stdout: Any) -> None:
        self.args, self.pid, self.stdout = args, pid, stdout
        self.stderr: Any = None
        self.returncode: Optional[int] = None
        self._conn, self._pending = conn, b""

    def _status(self, timeout: Optional[float]) -> Optional[int]:
        """The exit status, waiting up to ``timeout`` seconds for it (None: as long as it takes)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.returncode is None:
            if b"\n" in self._pending:
                self.returncode = json.loads(self._pending.split(b"\n", 1)[0])["status"]
                self._conn.close()
                break
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            if not select.select([self._conn], [], [], left)[0]:
                return None
            chunk = self._conn.recv(4096)
            if not chunk:  # the server's waiter is gone: the command is gone with its status
                self.returncode = -signal.SIGKILL
                self._conn.close()
                break
            self._pending += chunk
        return self.returncode

    def poll(self) -> Optional[int]:
        return self._status(0)

    def wait(self, timeout: Optional[float] = None) -> int:
        code = self._status(timeout)
        if code is None:
            raise subprocess.TimeoutExpired(self.args, timeout or 0)
        return code

    def communicate(self, timeout: Optional[float] = None) -> tuple[str, Optional[str]]:
        streams = [f for f in (self.stdout, self.stderr) if f is not None]
        text: dict[int, str] = {}
        readers = [threading.Thread(target=lambda i=i, f=f: text.__setitem__(i, f.read()), daemon=True) for i, f in enumerate(streams)]
        deadline = None if timeout is None else time.monotonic() + timeout
        for reader in readers:
            reader.start()
        for reader in readers:
            reader.join(None if deadline is None else max(0.0, deadline - time.monotonic()))
            if reader.is_alive():
                raise subprocess.TimeoutExpired(self.args, timeout or 0)
        for f in streams:
            f.close()
        self.wait(timeout)
        return text[0], text.get(1)

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:
            os.kill(self.pid, sig)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


def popen_python(argv: list[str], cwd: str | os.PathLike[str], env: dict[str, str], new_session: bool = False,
                 stderr: int = subprocess.STDOUT) -> Any:
    """``subprocess.Popen([sys.executable, *argv], cwd=cwd, env=env, stdout=PIPE, stderr=stderr,
    text=True, start_new_session=new_session)`` (``stderr``: ``STDOUT``, both on one pipe, or ``PIPE``,
    each on its own), forked by the server where it can be (a :class:`Forked`); a ``Popen`` where it cannot."""
    if usable(env):
        pipes = [os.pipe(), os.pipe() if stderr == subprocess.PIPE else None]
        out, err = pipes[0], pipes[1] or pipes[0]
        try:
            proc = _fork(argv, cwd, env, [out[1], err[1]], new_session)
        finally:
            for pipe in filter(None, pipes):
                os.close(pipe[1])
        if proc is not None:
            proc.stdout = open(out[0], encoding="utf-8", errors="strict")
            if pipes[1] is not None:
                proc.stderr = open(err[0], encoding="utf-8", errors="strict")
            return proc
        for pipe in filter(None, pipes):
            os.close(pipe[0])
    return subprocess.Popen([sys.executable, *argv], cwd=cwd, env=env, text=True, stdout=subprocess.PIPE,
                            stderr=stderr, start_new_session=new_session)


def run_python(argv: list[str], cwd: str | os.PathLike[str], env: dict[str, str], timeout: float) -> subprocess.CompletedProcess[str]:
    """``subprocess.run([sys.executable, *argv], cwd=cwd, env=env, capture_output=True, text=True,
    timeout=timeout)``, forked by the server where it can be (:func:`usable`, :func:`python`)."""
    if usable(env):
        done = python(list(argv), str(cwd), env, timeout)
        if done is not None:
            return done
    return subprocess.run([sys.executable, *argv], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


def run_python_to(argv: list[str], cwd: str | os.PathLike[str], env: dict[str, str], stdout: int, stderr: int, timeout: float) -> int:
    """``subprocess.run([sys.executable, *argv], cwd=cwd, env=env, stdout=stdout, stderr=stderr,
    timeout=timeout).returncode`` with the caller's own descriptors (a log file, a pipe whose reader is
    gone; the caller keeps and closes them), forked by the server where it can be (:func:`usable`)."""
    if usable(env):
        proc = _fork(list(argv), cwd, env, [stdout, stderr])
        if proc is not None:
            try:
                return proc.wait(timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
                raise
    return subprocess.run([sys.executable, *argv], cwd=cwd, env=env, stdout=stdout, stderr=stderr, timeout=timeout).returncode


if __name__ == "__main__":
    sys.path[0] = os.getcwd()  # as `python -m` from the repository (not this file's folder)
    _serve(sys.argv[1])
