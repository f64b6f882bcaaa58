"""Runs the docs' commands as a pip user would: ``trainer_cli`` imported from the installed wheel alone
(``tests/test_readme_commands.py`` starts this with the wheel's folder on ``PYTHONPATH`` and the
script copied to a folder of its own), in an empty working folder.

It imports what ``train fit`` imports once, then reads one JSON request per line on stdin: ``{"cwd",
"steps", "snippets", "result"}``. For each it forks a process that runs the steps in order in ``cwd``
(``["train", ARGV]``: ``trainer_cli.__main__.main(ARGV)`` in that process, as the test ran them in its
own; ``["python", ARGV]``: a user's script, in a process forked for it, as ``python SCRIPT ARGS``;
``["cp", ARGV]`` and other shell steps: ``subprocess``; ``["file", NAME, TEXT]``: a file the page shows
written where it says), then execs the page's Python snippets, stops at the first failure and writes
``{"failed": STEP or null, "code", "output"}`` to ``result``. It answers ``done`` on stdout.

The first line it prints says where ``trainer_cli`` came from, so the test can check that no other
copy (the repository, an editable install) shadows the wheel.
"""

from __future__ import annotations

import json
import os
import runpy
import signal
import subprocess
import sys
import traceback
from typing import Any

SITE = os.environ["TRAINER_CLI_DOCS_SITE"]
# an editable install's path entry (its folder holds trainer_cli/) would serve the repository's code
# if the wheel's were missing: off the path, so only the wheel's can be imported
sys.path[:] = [p for p in sys.path if p == SITE or not os.path.isfile(os.path.join(p or ".", "trainer_cli", "__init__.py"))]

import lightning.pytorch  # noqa: E402,F401 - once here, not in every page's process
import trainer_cli  # noqa: E402
from trainer_cli.__main__ import main  # noqa: E402
from trainer_cli.runtime import cli, verbs  # noqa: E402,F401


def _call(run: Any) -> int:
    """``run()``'s exit code, as a process running it would end with (a traceback printed for an
    exception); its output flushed."""
    try:
        code = int(run() or 0)
    except SystemExit as stop:  # --print_config and --help exit through argparse
        code = stop.code if isinstance(stop.code, int) else (0 if stop.code is None else 1)
    except BaseException:
        traceback.print_exc()
        code = 1
    sys.stdout.flush()
    sys.stderr.flush()
    return code


def _script(argv: list[str]) -> int:
    """``python SCRIPT ARGS`` in a forked process (``sys.argv`` and ``sys.path[0]`` as python sets them)."""
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        for sig in (signal.SIGTERM, signal.SIGUSR1, signal.SIGUSR2, signal.SIGHUP, signal.SIGCHLD):
            signal.signal(sig, signal.SIG_DFL)
        sys.argv = list(argv)
        sys.path[0] = os.path.dirname(os.path.abspath(argv[0]))
        os._exit(_call(lambda: runpy.run_path(argv[0], run_name="__main__") and None))
    _, status = os.waitpid(pid, 0)
    return -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)


def _step(step: list[Any]) -> int:
    kind = step[0]
    if kind == "file":
        os.makedirs(os.path.dirname(step[1]) or ".", exist_ok=True)
        with open(step[1], "w") as f:
            f.write(step[2])
        return 0
    if kind == "train":
        return _call(lambda: main(step[1]))
    if kind == "python":
        return _script(step[1][1:])
    return subprocess.run(step[1], stdout=sys.stdout, stderr=sys.stderr).returncode


def _group(request: dict[str, Any]) -> None:
    """One page's steps and snippets in this (forked) process; the result to ``request["result"]``."""
    os.chdir(request["cwd"])
    log_path = request["result"] + ".log"
    log = open(log_path, "w")
    os.dup2(log.fileno(), 1)
    os.dup2(log.fileno(), 2)
    result: dict[str, Any] = {"failed": None, "code": 0, "output": ""}
    for step in request["steps"]:
        sys.stdout.flush()
        sys.stderr.flush()
        start = os.lseek(1, 0, os.SEEK_CUR)
        code = _call(lambda: _step(step))
        if code != 0:
            with open(log_path, errors="replace") as f:
                f.seek(start)
                result = {"failed": step[:2], "code": code, "output": f.read()[-6000:]}
            break
    else:
        for snippet in request["snippets"]:
            import torch

            try:
                exec(compile(snippet, request["source"], "exec"), {"images": torch.zeros(2, 1, 8, 8)})
            except BaseException:
                result = {"failed": ["snippet", snippet], "code": 1, "output": traceback.format_exc()[-6000:]}
                break
    with open(request["result"], "w") as f:
        json.dump(result, f)


def serve() -> None:
    print(json.dumps({"trainer_cli": trainer_cli.__file__}), flush=True)
    for line in sys.stdin:
        request = json.loads(line)
        pid = os.fork()
        if pid == 0:
            try:
                _group(request)
            finally:
                os._exit(0)
        os.waitpid(pid, 0)
        print("done", flush=True)


if __name__ == "__main__":
    serve()
