"""Helpers for the Slurm tests: a real local cluster (scripts/local-slurm), in-process `train submit`.

The ``slurm_cluster`` session fixture starts the cluster when it is not up. The cluster has its own
config file (never /etc/slurm/slurm.conf): the fixture sets ``SLURM_CONF`` to it for this process
and its children (sbatch, squeue, the jobs), as ``scripts/local-slurm env`` prints it. Where it cannot start
(no root, no Debian packages) the tests that need it skip with the reason, except under
``CI=true``, where that is a failure: CI always runs them.
"""

from __future__ import annotations

import contextlib
import io
import os
import subprocess
import time
from pathlib import Path

import pytest

from trainer_cli.launch import submit as submit_mod

REPO = Path(__file__).resolve().parents[1]
LOCAL_SLURM = REPO / "scripts" / "local-slurm"
LOCAL_PROFILE = str(REPO / "configs" / "slurm" / "local.yaml")
FINAL_STATES = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "BOOT_FAIL", "DEADLINE", "PREEMPTED"}


def _cluster_up() -> bool:
    try:
        out = subprocess.run(["sinfo", "-h", "-N", "-t", "idle,mix,alloc", "-o", "%N"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return False
    return out.returncode == 0 and len(set(out.stdout.split())) >= 2


@pytest.fixture(scope="session")
def slurm_cluster() -> None:
    """A running local Slurm cluster (node1..node4, partition debug); stopped at the end if started here."""
    started = False
    env_line = subprocess.run([str(LOCAL_SLURM), "env"], capture_output=True, text=True, timeout=30).stdout.strip()
    os.environ["SLURM_CONF"] = env_line.split("=", 1)[1]  # "export SLURM_CONF=<path>"
    if not _cluster_up():
        proc = subprocess.run([str(LOCAL_SLURM), "start"], capture_output=True, text=True, timeout=900)
        if proc.returncode != 0:
            last = (proc.stderr.strip() or proc.stdout.strip() or "no output").splitlines()[-1]
            reason = f"no local Slurm cluster: `scripts/local-slurm start` exited {proc.returncode}: {last}"
            if os.environ.get("CI", "").lower() == "true":
                pytest.fail(f"{reason} (CI=true: the Slurm tests must run)")
            pytest.skip(reason)
        started = True
    yield
    if started:
        subprocess.run([str(LOCAL_SLURM), "stop"], capture_output=True, timeout=60)


def train_submit(*args: str) -> tuple[int, str]:
    """Run ``train submit ARGS`` in this process; returns (exit code, stdout)."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = submit_mod.main(list(args))
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


def wait_for_state(job_id: str, states: set[str] = FINAL_STATES, timeout_s: float = 300) -> str:
    """Poll until the job reaches one of ``states``; returns it (fails the test on timeout)."""
    deadline = time.monotonic() + timeout_s
    state = ""
    while time.monotonic() < deadline:
        state = scontrol_job(job_id).get("JobState", "")
        if state in states:
            return state
        time.sleep(1)
    subprocess.run(["scancel", job_id], timeout=30)
    raise AssertionError(f"job {job_id} still {state or 'unknown'} after {timeout_s} s")


def wait_for_file(path: Path, timeout_s: float = 300) -> None:
    """Poll until ``path`` exists (fails the test on timeout)."""
    deadline = time.monotonic() + timeout_s
    while not path.exists():
        if time.monotonic() > deadline:
            raise AssertionError(f"{path} did not appear in {timeout_s} s")
        time.sleep(0.25)
