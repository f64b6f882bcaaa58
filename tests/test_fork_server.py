"""The suite's fork server (:mod:`forkserver`) stands in for ``subprocess``: a background process it
forks behaves as ``Popen`` does for the tests that signal and kill training runs."""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

from support import REPO, forkserver


def _script(folder: Path, text: str) -> str:
    path = folder / f"script{len(list(folder.glob('*.py')))}.py"
    path.write_text(text)
    return str(path)


def test_a_new_session_exists_when_its_pid_is_answered_and_its_group_can_be_killed(tmp_path: Path) -> None:
    env = dict(os.environ)
    sleeper = _script(tmp_path, "import time\ntime.sleep(60)\n")
    for _ in range(10):  # it used to answer before the child's setsid: a killpg found no group then
        proc = forkserver.popen_python([sleeper], REPO, env, new_session=True)
        assert isinstance(proc, forkserver.Forked) or not forkserver.usable(env)
        assert os.getpgid(proc.pid) == proc.pid
        os.killpg(proc.pid, signal.SIGKILL)
        assert proc.wait(timeout=30) == -signal.SIGKILL


def test_output_exit_status_and_signals_come_back_as_popen_gives_them(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = forkserver.popen_python([_script(tmp_path, "import sys\nprint('out')\nprint('err', file=sys.stderr)\nsys.exit(3)\n")], REPO, env)
    assert isinstance(proc, forkserver.Forked) or not forkserver.usable(env)
    out, _ = proc.communicate(timeout=60)
    assert (out.splitlines(), proc.returncode) == (["out", "err"], 3)

    proc = forkserver.popen_python([_script(tmp_path, "import time\nprint('ready', flush=True)\ntime.sleep(60)\n")], REPO, env)
    assert proc.stdout.readline() == "ready\n"
    assert proc.poll() is None
    started = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == -signal.SIGTERM and time.monotonic() - started < 30
    assert sys.executable in proc.args[0]
