"""The stall watchdog of Slurm's batch script: ``python -m trainer_cli.schedulers.slurm.watchdog RUN_DIR watch``,
started in the background while ``srun`` runs (a process of its own on the batch node: a thread inside a
stuck process could not be trusted to act).

It polls the ranks' notes (:mod:`trainer_cli.job.progress`, which says what counts as a stall) and, on
a stall (:func:`act`), asks every task of the job for its stacks (``scancel -s 28``: SIGWINCH), names the
rank that did not answer and its node in the job's log, records the stall in ``<run>/job.json`` for the
batch script's ``batch end`` (a requeue without that node) and kills the step. Standard library only:
the batch script runs it on a host without the launcher's packages (a container job's ``<run>/.launcher``).
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from trainer_cli.job import context, jobstate
from trainer_cli.job.progress import (
    DUMP_SIGNAL,
    ENV_PROGRESS,
    ENV_STALL_TIMEOUT_S,
    FLOOR_S,
    Stall,
    judge,
    node_name,
    read_beats,
)
from trainer_cli.schedulers.slurm import commands

DUMP_WAIT_S = 5.0
"""Seconds a rank has to write its stacks once asked (:func:`collect_stacks`)."""
STALLS_DIR = "stalls"
"""The run's folder of the stacks of each stall: ``<run>/stalls/<job>-restart<K>/rank<N>.txt``."""


def _slurm(action: Callable[..., Any], *args: str, **kwargs: Any) -> Any:
    """A Slurm query or action of :mod:`~trainer_cli.schedulers.slurm.commands`; None (its error logged) if it fails."""
    try:
        return action(*args, **kwargs)
    except commands.SlurmCommandError as err:
        print(f"trainer-cli: stall watchdog: {err.message}", file=sys.stderr, flush=True)
        return None


def _steps_of(job_id: str) -> list[str]:
    """The job's running steps started by srun (``<job>.<n>``; not the batch or extern steps)."""
    steps = _slurm(commands.squeue, "steps", job_id) or []
    return [s["StepId"] for s in steps if str(s.get("StepId")).partition(".")[2].isdigit()]


def collect_stacks(folder: Path, beats: list[dict[str, Any]], job_id: str, into: Path) -> set[int]:
    """Ask every task of the job for its stacks (:data:`DUMP_SIGNAL`), copy what each rank wrote
    within :data:`DUMP_WAIT_S` into ``into/rank<N>.txt``; returns the ranks that answered."""
    sizes = {b["rank"]: _size(folder / f"stack.rank{b['rank']}") for b in beats}
    # by number: Slurm 22.05 knows no WINCH by name
    _slurm(commands.scancel, job_id, signal=str(int(DUMP_SIGNAL)), timeout=30)
    answered: set[int] = set()
    deadline = time.monotonic() + DUMP_WAIT_S
    while time.monotonic() < deadline and len(answered) < len(sizes):
        time.sleep(0.25)
        answered = {rank for rank, size in sizes.items() if _size(folder / f"stack.rank{rank}") > size}
    time.sleep(0.5)  # a rank that answered may still be writing its other threads
    into.mkdir(parents=True, exist_ok=True)
    for rank, size in sizes.items():
        text = (
            f"(rank {rank} did not answer {DUMP_SIGNAL.name} in {DUMP_WAIT_S:.0f} s: stopped or stuck in the kernel)\n"
        )
        if rank in answered:
            with open(folder / f"stack.rank{rank}", errors="replace") as dump:
                dump.seek(size)
                text = dump.read()
        beat = next(b for b in beats if b["rank"] == rank)
        native = pyspy_dump(beat, job_id)
        if native:
            text += f"\n--- py-spy dump --nonblocking (pid {beat.get('pid')} on {beat.get('node')}) ---\n{native}"
        (into / f"rank{rank}.txt").write_text(text)
    return answered


def pyspy_dump(beat: dict[str, Any], job_id: str, timeout_s: float = 30) -> str | None:
    """``py-spy dump`` of a rank's process where py-spy is installed (it reads a stopped process too),
    on another node through ``srun --overlap`` in the job; None without
    py-spy, or when it cannot read the process (ptrace not allowed)."""
    import shutil
    import subprocess

    if not shutil.which("py-spy") or not beat.get("pid"):
        return None
    command = ["py-spy", "dump", "--nonblocking", "--pid", str(beat["pid"])]  # (--native needs to pause it)
    if beat.get("node") != node_name():
        out = commands.srun_overlap(job_id, str(beat["node"]), command, timeout_s)
        return out if out and out.strip() else None
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout if done.returncode == 0 and done.stdout.strip() else None


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def act(run_dir: Path, folder: Path, stall: Stall, beats: list[dict[str, Any]], now: float) -> dict[str, Any]:
    """Dump the stacks, name the stalled rank and its node in the log, record the stall for the
    batch script's ``batch end`` and kill the step; returns the record."""
    job_id = context.current().job_id or "0"
    restart = jobstate.policy().count
    stacks = Path(run_dir) / STALLS_DIR / f"{job_id}-restart{restart}"
    answered = collect_stacks(folder, beats, job_id, stacks)
    silent = [b for b in stall.late if b["rank"] not in answered]
    named = silent or stall.late[:1]
    exclude = sorted({str(b["node"]) for b in silent})
    who = ", ".join(f"rank {b['rank']} on {b['node']}" for b in named)
    idle = max(now - b["time"] for b in named)
    steps = ", ".join(str(b.get("step")) for b in named)
    what = "did not answer for its stacks" if silent else "answered for its stacks (all did: a hang in the program?)"
    then = f"requeueing without {','.join(exclude)}" if exclude else "requeueing on the same nodes"
    print(
        f"trainer-cli: stall: {who} made no step for {idle:.0f} s (timeout {stall.timeout_s:.0f} s, last step "
        f"{steps}) and {what}; stacks of every rank in {stacks}; ending the step, {then}",
        flush=True,
    )
    record = {
        "job_id": jobstate.this_job_id(),
        "restart": restart,
        "ranks": [b["rank"] for b in named],
        "nodes": [str(b["node"]) for b in named],
        "step": named[0].get("step"),
        "idle_s": round(idle),
        "time": now,  # when the watchdog decided
        "ended": time.time(),  # the step ended, stacks collected: the stall's end in trainer_cli.rundir.goodput
        "timeout_s": round(stall.timeout_s),
        "stacks": str(stacks),
        "exclude": exclude,
    }
    jobstate.update(run_dir, stall=record)
    for step in _steps_of(job_id):
        _slurm(commands.scancel, step, signal="KILL", timeout=30)
    return record


def watch(run_dir: Path, folder: Path, timeout_s: float | None, poll_s: float | None = None) -> int:
    """Poll the ranks' notes until a stall (acted on: 1) or until the batch script ends this process."""
    poll = poll_s or min(5.0, max((timeout_s or FLOOR_S) / 4, 0.5))
    while True:
        time.sleep(poll)
        beats = read_beats(folder)
        now = time.time()
        stall = judge(beats, now, timeout_s) if beats else None
        if stall is not None:
            act(run_dir, folder, stall, beats, now)
            return 1


def main(argv: list[str]) -> int:
    """``python -m trainer_cli.schedulers.slurm.watchdog RUN_DIR watch``: the stall watchdog of the batch script."""
    if len(argv) != 2 or argv[1] != "watch":
        print("usage: python -m trainer_cli.schedulers.slurm.watchdog RUN_DIR watch", file=sys.stderr)
        return 2
    folder = os.environ.get(ENV_PROGRESS)
    setting = (os.environ.get(ENV_STALL_TIMEOUT_S) or "").strip()
    if not folder or setting == "0":
        return 0
    try:
        timeout = float(setting) if setting else None
    except ValueError:
        print(f"trainer-cli: {ENV_STALL_TIMEOUT_S}={setting!r}: not a number of seconds", file=sys.stderr)
        return 2
    return watch(Path(argv[0]), Path(folder), timeout)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
