"""Helpers for the Slurm tests: a real local cluster (scripts/local-slurm), in-process `train submit`.

The ``slurm_cluster`` session fixture starts the cluster when it is not up. The cluster has its own
config file (never /etc/slurm/slurm.conf): the fixture sets ``SLURM_CONF`` to it for this process
and its children (sbatch, squeue, the jobs), as ``scripts/local-slurm env`` prints it. Where it cannot start
(no root, no Debian packages) the tests that need it skip with the reason, except under
``CI=true``, where that is a failure: CI always runs them.
"""

from __future__ import annotations

import contextlib
import fcntl
import io
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from support import REPO

from trainer_cli.config.request import Request
from trainer_cli.schedulers.slurm.output import job_state
from trainer_cli.schedulers.slurm import submit as submit_mod

LOCAL_SLURM = REPO / "scripts" / "local-slurm"
LOCAL_SLURM_VERSION = os.environ.get("LOCAL_SLURM_VERSION", "")
"""The Slurm the cluster tests run on: the host's packages when unset (22.05 on Debian 12), else the
version scripts/local-slurm runs from a Debian root of its own (``24.11``: ``make test-long``)."""
LOCAL_PROFILE = str(REPO / "configs" / "slurm" / "local.yaml")
FINAL_STATES = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "BOOT_FAIL", "DEADLINE", "PREEMPTED"}


def _cluster_up() -> bool:
    try:
        out = subprocess.run(["sinfo", "-h", "-N", "-t", "idle,mix,alloc", "-o", "%N"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return False
    return out.returncode == 0 and len(set(out.stdout.split())) >= 2


_VERSION_SUFFIX = f"-{LOCAL_SLURM_VERSION}" if LOCAL_SLURM_VERSION else ""
START_LOCK = Path(tempfile.gettempdir()) / f"trainer-cli-local-slurm{_VERSION_SUFFIX}-start.lock"
STARTED_MARK_ENV = "TRAINER_CLI_TESTS_CLUSTER_MARK"
"""Set by tests/conftest.py in the pytest process that runs the session (the xdist controller, or
pytest itself without workers): a file that :func:`slurm_cluster` writes when it starts the
cluster, so that the session stops it once every worker is done (:func:`stop_if_started`)."""


@pytest.fixture(scope="session")
def slurm_cluster() -> Iterator[None]:
    """A running local Slurm cluster (node1..node4, partition debug); stopped at the end of the
    session if a test started it.

    Two xdist workers may ask at once (the cluster group and the query group): the start is made
    under a file lock, once. The stop is left to the session's end (:func:`stop_if_started`, from
    tests/conftest.py): a worker that runs out of tests ends while the other still uses the cluster."""
    use_local_slurm_env()
    with open(START_LOCK, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not _cluster_up():
            # LOCAL_SLURM_PYTHON: the Python whose libraries a version's Debian root must offer to the jobs
            env = {**os.environ, "LOCAL_SLURM_PYTHON": sys.executable}
            proc = subprocess.run([str(LOCAL_SLURM), "start"], capture_output=True, text=True, timeout=900, env=env)
            if proc.returncode != 0:
                last = (proc.stderr.strip() or proc.stdout.strip() or "no output").splitlines()[-1]
                reason = f"no local Slurm cluster: `scripts/local-slurm start` exited {proc.returncode}: {last}"
                if os.environ.get("CI", "").lower() == "true":
                    pytest.fail(f"{reason} (CI=true: the Slurm tests must run)")
                pytest.skip(reason)
            mark = os.environ.get(STARTED_MARK_ENV)
            if mark:
                Path(mark).write_text("started by the tests\n")
    yield


def use_local_slurm_env() -> None:
    """Set in this process (and so its children: sbatch, squeue, the jobs) what ``scripts/local-slurm env``
    prints for :data:`LOCAL_SLURM_VERSION`: ``SLURM_CONF``, and for a version of its own ``PATH`` with its
    clients' wrappers first (``export PATH=<bin>:$PATH``)."""
    proc = subprocess.run([str(LOCAL_SLURM), "env"], capture_output=True, text=True, timeout=30)
    if proc.returncode != 0:
        pytest.fail(f"scripts/local-slurm env exited {proc.returncode}: {proc.stderr.strip()}")
    for line in proc.stdout.splitlines():
        if line.startswith("export "):
            name, _, value = line.removeprefix("export ").partition("=")
            if name == "PATH" and value.endswith(":$PATH"):
                first = value.removesuffix(":$PATH")
                path = os.environ.get("PATH", "")
                value = path if path.split(os.pathsep)[0] == first else f"{first}{os.pathsep}{path}"
            os.environ[name] = value


@pytest.fixture
def slurm_queries(slurm_cluster: None) -> None:  # noqa: F811
    """The local cluster, for a test that only asks it (``scontrol show``, ``train submit --check``,
    a submission refused before sbatch) and never queues a job, holds a node or changes the
    cluster's state. Such tests run in their own xdist group (tests/conftest.py), beside the
    cluster group: nothing the cluster group does changes what they read (``sbatch --test-only`` is not such a
    test: it answers from the nodes' state, which the cluster group's tests set DOWN or DRAIN)."""


def stop_if_started(mark: str | None) -> None:
    """Stop the local cluster if :func:`slurm_cluster` started it in this session (``mark`` exists)."""
    if mark and Path(mark).is_file():
        subprocess.run([str(LOCAL_SLURM), "stop"], capture_output=True, timeout=60)
        Path(mark).unlink(missing_ok=True)


@contextlib.contextmanager
def console_sys_path() -> Iterator[None]:
    """``sys.path`` as ``train submit`` run from a shell has it, for a render compared with a golden script:
    without pytest's ``tests/`` folder, which is in this work tree and would go on the job's PYTHONPATH as its
    snapshot copy (the work tree's folders on ``sys.path`` do: tests/test_script_submit_slurm.py)."""
    tests = Path(__file__).parent.resolve()
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(sys, "path", [p for p in sys.path if Path(p or ".").resolve() != tests])
        yield


def train_submit(*args: str) -> tuple[int, str]:
    """Run ``train submit ARGS`` in this process; returns (exit code, stdout)."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = submit_mod.main(Request.of(list(args), "submit"))  # the test's command line, read once
    return code, out.getvalue()


def job_id_from(stdout: str, label: str = "Job id:") -> str:
    """The job id printed by ``train submit`` after ``label``."""
    for line in stdout.splitlines():
        if line.startswith(label):
            return line.split(":", 1)[1].split()[0]
    raise AssertionError(f"no {label!r} in output:\n{stdout}")


def scontrol_job(job_id: str) -> dict[str, str]:
    """``scontrol show job`` as a dict (JobState, Restarts, ...)."""
    out = subprocess.run(["scontrol", "show", "job", "-o", job_id], capture_output=True, text=True, timeout=30).stdout
    fields = {}
    for word in out.split():
        key, _, value = word.partition("=")
        fields[key] = value
    return fields


def cluster_name() -> str:
    """The running cluster's ``ClusterName`` as ``scontrol show config`` prints it (``localci``, or
    ``localci2411`` for LOCAL_SLURM_VERSION=24.11: scripts/local-slurm gives each version its own)."""
    out = subprocess.run(["scontrol", "show", "config"], capture_output=True, text=True, timeout=30).stdout
    return next(line.split("=", 1)[1].strip() for line in out.splitlines() if line.startswith("ClusterName "))


def counting_slurm_path(tmp_path: Path, commands: tuple[str, ...] = ("scontrol", "sacct", "squeue")) -> tuple[dict[str, str], Path]:
    """A PATH that runs ``commands`` through wrappers noting each call (a line with the command's
    name in the returned file) before they exec the real binary: real calls counted, not mocked.

    Returns:
        ``({"PATH": ...}, calls_file)``, the environment to run ``train`` with and where calls are noted.
    """
    import shutil

    bin_dir, calls = tmp_path / "counting_bin", tmp_path / "slurm_calls.txt"
    bin_dir.mkdir(exist_ok=True)
    for command in commands:
        real = shutil.which(command)
        assert real is not None, f"{command} not on PATH"
        (bin_dir / command).write_text(f'#!/bin/sh\necho {command} >> "{calls}"\nexec "{real}" "$@"\n')
        (bin_dir / command).chmod(0o755)
    return {"PATH": f"{bin_dir}:{os.environ['PATH']}"}, calls


def wait_for_state(job_id: str, states: set[str] = FINAL_STATES, timeout_s: float = 300) -> str:
    """Poll until the job reaches one of ``states``; returns it (fails the test on timeout)."""
    deadline = time.monotonic() + timeout_s
    state = ""
    while time.monotonic() < deadline:
        record = scontrol_job(job_id)
        state = job_state(record) if record.get("JobState") else ""  # 24.11's PREEMPTED end of a completed requeue: COMPLETED
        if state in states:
            return state
        time.sleep(0.25)  # a job's state is one scontrol call: looked at often, a test goes on as the job does
    subprocess.run(["scancel", job_id], timeout=30)
    raise AssertionError(f"job {job_id} still {state or 'unknown'} after {timeout_s} s")


def wait_for_file(path: Path, timeout_s: float = 300) -> None:
    """Poll until ``path`` exists (fails the test on timeout)."""
    deadline = time.monotonic() + timeout_s
    while not path.exists():
        if time.monotonic() > deadline:
            raise AssertionError(f"{path} did not appear in {timeout_s} s")
        time.sleep(0.25)


def wait_for_requeue(job_id: str, timeout_s: float = 180) -> None:
    """Wait until the job is back in the queue after requeueing itself, then let it start at once
    (Slurm holds a requeued job for its credential lifetime otherwise: 30 s on scripts/local-slurm)."""
    state = wait_for_state(job_id, {"PENDING"} | FINAL_STATES, timeout_s=timeout_s)
    assert state == "PENDING", f"job {job_id} ended {state} instead of requeueing"
    deadline = time.monotonic() + 60
    while _job_processes(job_id) and time.monotonic() < deadline:  # the old run's processes are gone
        time.sleep(0.25)
    # slurmd refuses a start in the same second as the requeue revoked the job's credential
    time.sleep(2)
    subprocess.run(["scontrol", "update", f"JobId={job_id}", "StartTime=now"], check=True, timeout=30)


def _job_processes(job_id: str) -> list[int]:
    """PIDs of the job's `python -m trainer_cli fit` tasks on this host (the local cluster's nodes are all here)."""
    pids = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes().split(b"\0")
            if b"trainer_cli" not in cmdline or b"fit" not in cmdline or cmdline[0].endswith(b"srun"):
                continue
            if f"SLURM_JOB_ID={job_id}".encode() in (proc / "environ").read_bytes().split(b"\0"):
                pids.append(int(proc.name))
        except OSError:
            continue
    return pids


def _catches_usr1(pid: int) -> bool:
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    caught = int(next(line.split()[1] for line in status.splitlines() if line.startswith("SigCgt:")), 16)
    return bool(caught & (1 << (signal.SIGUSR1 - 1)))


def usr1_at_start(job_id: str, tasks: int, timeout_s: float = 180) -> float:
    """Send SIGUSR1 to the job as soon as all its ``tasks`` training processes exist and catch it
    (the handler `train` installs first thing, long before Lightning's); returns the seconds
    between the processes appearing and the signal."""
    deadline = time.monotonic() + timeout_s
    first_seen = None
    while time.monotonic() < deadline:
        pids = _job_processes(job_id)
        if pids and first_seen is None:
            first_seen = time.monotonic()
        if len(pids) >= tasks and all(_catches_usr1(pid) for pid in pids):
            subprocess.run(["scancel", "-s", "USR1", job_id], check=True, timeout=30)
            return time.monotonic() - (first_seen or time.monotonic())
        time.sleep(0.02)
    raise AssertionError(f"job {job_id}: {tasks} training processes catching SIGUSR1 did not appear in {timeout_s} s")


def newest_step(run_dir: Path) -> int:
    """Global step of the run's newest complete checkpoint (-1 when it has none)."""
    from trainer_cli.rundir.layout import newest_checkpoint

    newest = newest_checkpoint(run_dir)
    return newest.global_step if newest is not None else -1


def wait_for_step(run_dir: Path, step: int, timeout_s: float = 300, job_id: str | None = None) -> int:
    """Poll until the run's newest checkpoint is at ``step`` or later; returns its step. On a
    timeout the message carries the job's Slurm record, the nodes and the end of its log."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = newest_step(run_dir)
        if found >= step:
            return found
        time.sleep(0.5)
    details = ""
    if job_id is not None:
        job = scontrol_job(job_id)
        nodes = subprocess.run(["sinfo", "-N", "-o", "%N %T %E"], capture_output=True, text=True, timeout=30).stdout
        log = run_dir / f"slurm-{job_id}.log"
        tail = log.read_text()[-3000:] if log.is_file() else "(no log)"
        details = f"\njob {job_id}: {' '.join(f'{k}={job.get(k)}' for k in ('JobState', 'Reason', 'Restarts', 'NodeList'))}\n{nodes}\n{tail}"
    raise AssertionError(f"{run_dir}: no checkpoint at step {step} or later after {timeout_s} s (newest: {newest_step(run_dir)}){details}")


def resume_node(node: str, timeout_s: float = 60) -> None:
    """Bring a node set DOWN back (``State=RESUME``), retrying while Slurm still finishes the jobs it
    killed there (a COMPLETING node refuses RESUME), until it is no longer down."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        subprocess.run(["scontrol", "update", f"NodeName={node}", "State=RESUME"], capture_output=True, timeout=30)
        state = subprocess.run(["sinfo", "-h", "-N", "-n", node, "-o", "%T"], capture_output=True, text=True, timeout=30).stdout
        if state.strip() and not any(word in state.lower() for word in ("down", "drain", "fail")):
            return
        time.sleep(1)
    raise AssertionError(f"node {node} still down after {timeout_s} s: {state.strip()}")


def sacct_attempts(job_id: str, attempts: int, timeout_s: float = 20) -> list[dict[str, str]]:
    """The job's rows in the accounting database, one per attempt (``sacct -D -X``), once all
    ``attempts`` are there and the last has ended with its record complete: slurmctld sends a job's
    records to slurmdbd a moment after scontrol shows its end, its QOS ``Unknown`` for a moment after
    that (Slurm 22.05). Fails the test on timeout."""
    fields = ["JobID", "State", "QOS", "Submit", "Start", "End", "ElapsedRaw", "AllocTRES"]
    deadline, rows = time.monotonic() + timeout_s, []
    while time.monotonic() < deadline:
        out = subprocess.run(["sacct", "-D", "-X", "-P", "-n", "-j", job_id, "-o", ",".join(fields)],
                             capture_output=True, text=True, timeout=30).stdout
        rows = [dict(zip(fields, line.split("|"))) for line in out.splitlines()]
        if len(rows) == attempts and rows[-1]["State"] in FINAL_STATES and all(r["QOS"] != "Unknown" for r in rows):
            return rows
        time.sleep(0.25)
    raise AssertionError(f"sacct -D -j {job_id}: {len(rows)} complete row(s) of {attempts} after {timeout_s} s: {rows}")


def sacct_hours(rows: list[dict[str, str]], kind: str = "cpu") -> float:
    """``kind``-hours (``cpu``, ``node``, ``gres/gpu``) of sacct rows: the sum of AllocTRES x ElapsedRaw."""
    total = 0.0
    for row in rows:
        tres = dict(part.split("=", 1) for part in row["AllocTRES"].split(",") if "=" in part)
        total += float(tres.get(kind, 0)) * int(row["ElapsedRaw"]) / 3600
    return total
