"""The suite's fork server (:mod:`forkserver`) stands in for ``subprocess``: a background process it
forks behaves as ``Popen`` does for the tests that signal and kill training runs."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
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
    proc = forkserver.popen_python([_script(tmp_path, "import sys\nprint('out')\nprint('err', file=sys.stderr)\nsys.exit(5)\n")], REPO, env,
                                   stderr=subprocess.PIPE)  # each on its own, as Popen(stdout=PIPE, stderr=PIPE)
    assert isinstance(proc, forkserver.Forked) or not forkserver.usable(env)
    assert (proc.communicate(timeout=60), proc.returncode) == (("out\n", "err\n"), 5)

    proc = forkserver.popen_python([_script(tmp_path, "import time\nprint('ready', flush=True)\ntime.sleep(60)\n")], REPO, env)
    assert proc.stdout.readline() == "ready\n"
    assert proc.poll() is None
    started = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == -signal.SIGTERM and time.monotonic() - started < 30
    assert sys.executable in proc.args[0]


def test_a_script_by_relative_path_and_descriptors_of_the_callers_own_are_as_python_gives_them(tmp_path: Path) -> None:
    """``python main.py`` from its folder: ``sys.argv[0]`` as given, ``__file__`` and ``sys.path[0]`` absolute
    (what a script that prints its own command reads); :func:`forkserver.run_python_to` writes on the caller's
    own descriptors (a log file on both, as a batch job's) and gives the exit status; each answer the same
    forked and from a fresh interpreter."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    (tmp_path / "main.py").write_text("import sys\nprint(sys.argv[0], __file__, sys.path[0])\nprint('err', file=sys.stderr)\nsys.exit(4)\n")
    fresh = subprocess.run([sys.executable, "main.py"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
    assert fresh.stdout == f"main.py {tmp_path / 'main.py'} {tmp_path}\n"
    if not forkserver.usable(env):
        pytest.skip("the fork server is off (TRAINER_CLI_TESTS_FORK=0)")
    forked = forkserver.python(["main.py"], str(tmp_path), env, 60)
    assert forked is not None and (forked.stdout, forked.stderr, forked.returncode) == (fresh.stdout, fresh.stderr, 4)

    for log in (tmp_path / "forked.log", tmp_path / "fresh.log"):
        with log.open("w") as out:
            if log.stem == "forked":
                code = forkserver.run_python_to(["main.py"], tmp_path, env, out.fileno(), out.fileno(), 60)
            else:
                code = subprocess.run([sys.executable, "main.py"], cwd=tmp_path, env=env, stdout=out, stderr=subprocess.STDOUT, timeout=60).returncode
        assert code == 4
    assert (tmp_path / "forked.log").read_text() == (tmp_path / "fresh.log").read_text() == fresh.stdout + "err\n"


def test_a_command_started_fresh_says_why_in_the_log_the_suite_names(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``TRAINER_CLI_TESTS_FORK_WHY=FILE``: a command whose start-up variables differ from the server's runs in a
    new interpreter (the same answers) and leaves one line naming the test and the variable."""
    log = tmp_path / "why.jsonl"
    monkeypatch.setenv("TRAINER_CLI_TESTS_FORK_WHY", str(log))
    env = {**os.environ, "OMP_NUM_THREADS": str(int(os.environ.get("OMP_NUM_THREADS", "1")) + 1)}
    done = forkserver.run_python([_script(tmp_path, "import os\nprint(os.environ['OMP_NUM_THREADS'])\n")], REPO, env, 60)
    assert (done.returncode, done.stdout) == (0, env["OMP_NUM_THREADS"] + "\n")
    if forkserver.usable(dict(os.environ)):
        (line,) = log.read_text().splitlines()
        why = json.loads(line)
        assert why["test"].startswith("tests/test_fork_server.py::test_a_command_started_fresh") and list(why["startup_env_differs"]) == ["OMP_NUM_THREADS"]
