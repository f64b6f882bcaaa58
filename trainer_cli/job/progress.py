"""The stall watchdog: every rank notes its progress, the batch script's side notices a rank that stopped.

A rank stuck in a collective (a dead NIC, a node that stops answering, a filesystem that blocks)
would otherwise hold the whole allocation until its time limit: no checkpoint, no message, no
requeue. So, in a job of the bundled template (``TRAINER_CLI_PROGRESS`` set):

- every rank (:class:`Beacon`, driven by :class:`trainer_cli.runtime.checkpointing.InterruptCheckpoint`)
  writes ``<run>/.progress/rank<N>`` at its training steps (at most once a :data:`WRITE_EVERY_S`,
  one small JSON line replaced atomically: step, time, phase, its median step time, pid, node) and,
  at once, when it enters a phase that is not a training step: ``validation``, ``checkpoint``,
  ``epoch end`` (data loaders restarting included), ``done``. At its start it registers
  :mod:`faulthandler` on :data:`DUMP_SIGNAL` (SIGWINCH: Slurm does not use it, and its default
  action is to ignore it, so a process that has not registered yet is not killed by it), writing
  the Python stacks of all its threads to ``<run>/.progress/stack.rank<N>``;
- the batch script starts ``python -m trainer_cli.job.progress RUN_DIR watch`` in the background
  while ``srun`` runs (a process of its own on the batch node: a thread inside a stuck process
  could not be trusted to act). :func:`judge` finds a rank in its training phase whose last step
  is older than the stall timeout (``--slurm.stall_timeout_s``; by default :func:`default_timeout_s`:
  :data:`FACTOR` times the slowest rank's median step time, at least :data:`FLOOR_S`). A rank is
  judged only once it has made its first step (start-up, data set-up and the first compile are not
  stalls); a rank in a phase that is no training step (validation, a checkpoint write, an epoch
  end) counts only after :func:`pause_limit_s`, and only when every rank is late;
- on a stall (:func:`act`): ``scancel -s 28 <job>`` (SIGWINCH) asks every task for its stacks (and
  ``py-spy dump`` reads each rank's process too where py-spy is installed); a rank that does not
  answer within :data:`DUMP_WAIT_S` is stopped or stuck in the kernel: that rank is the one
  named (else the rank whose last step is the oldest). The stacks go to
  ``<run>/stalls/<job>-restart<K>/rank<N>.txt``; one line in the job log names the rank, its node
  and where the stacks are; the record (``stall`` in ``<run>/job.json``) tells the batch script's
  ``batch end`` to requeue without the node of an unanswering rank, within ``--slurm.max_restarts``
  (cause :data:`trainer_cli.job.restarts.STALL`); then the step is killed (``scancel -s KILL <job>.<step>``).

Standard library only: the batch script runs this module.
"""

from __future__ import annotations

import faulthandler
import json
import os
import signal
import socket
import statistics
import sys
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from trainer_cli.job import context

ENV_PROGRESS = "TRAINER_CLI_PROGRESS"
"""Exported by the sbatch template: ``<run>/.progress``, where the ranks note their progress."""
ENV_STALL_TIMEOUT_S = "TRAINER_CLI_STALL_TIMEOUT_S"
"""Exported by the sbatch template: ``--slurm.stall_timeout_s`` (empty: derived; 0: no watchdog)."""
DUMP_SIGNAL = signal.SIGWINCH
FLOOR_S = 300.0
"""The least default stall timeout: no step for 5 minutes."""
FACTOR = 20.0
"""The default stall timeout in median step times of the slowest rank (above :data:`FLOOR_S`)."""
WRITE_EVERY_S = 1.0
DUMP_WAIT_S = 5.0
TRAIN = "train"
DONE = "done"
STALLS_DIR = "stalls"


def node_name() -> str:
    """The Slurm node this process runs on (``SLURMD_NODENAME``; the host name outside Slurm)."""
    return context.current().node_name or socket.gethostname()


class Beacon:
    """The progress of one rank, written to ``<folder>/rank<N>``."""

    def __init__(self, folder: Path, rank: int) -> None:
        self.folder, self.rank = Path(folder), rank
        self.path = self.folder / f"rank{rank}"
        self._last_write = 0.0
        self._last_step_at: float | None = None
        self._phase = "start"
        self._intervals: deque[float] = deque(maxlen=64)
        self._stacks: IO[str] | None = None

    def register_dump(self) -> None:
        """Python stacks of every thread to ``<folder>/stack.rank<N>`` on :data:`DUMP_SIGNAL` (once)."""
        if self._stacks is not None:
            return
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            self._stacks = open(self.folder / f"stack.rank{self.rank}", "w")  # noqa: SIM115 - open while the process lives
            faulthandler.register(DUMP_SIGNAL, file=self._stacks, all_threads=True, chain=False)
        except (OSError, ValueError, RuntimeError):
            self._stacks = None

    def step(self, step: int) -> None:
        """A training step (batch) ended: note it, at most once a :data:`WRITE_EVERY_S` while training."""
        now = time.time()
        if self._phase == TRAIN and self._last_step_at is not None:
            self._intervals.append(now - self._last_step_at)
        self._last_step_at = now
        if self._phase != TRAIN or now - self._last_write >= WRITE_EVERY_S:
            self._phase = TRAIN
            self._write(step, now)

    def pause(self, phase: str, step: int) -> None:
        """The rank enters ``phase``, no training step (validation, a checkpoint, an epoch end, done)."""
        if phase != self._phase:
            self._phase = phase
            self._last_step_at = None
            self._write(step, time.time())

    def _write(self, step: int, now: float) -> None:
        median = statistics.median(self._intervals) if self._intervals else None
        line = {
            "rank": self.rank,
            "step": step,
            "time": now,
            "phase": self._phase,
            "step_s": median,
            "pid": os.getpid(),
            "node": node_name(),
        }
        tmp = self.path.with_name(f".{self.path.name}.tmp")
        try:
            tmp.write_text(json.dumps(line) + "\n")
            os.replace(tmp, self.path)
        except OSError:
            return  # progress is advice: a full disk must not fail the training
        self._last_write = now


_BEACON: list[Beacon] = []


def beacon() -> Beacon | None:
    """This rank's :class:`Beacon` in a job of the bundled template (``TRAINER_CLI_PROGRESS``), else None."""
    folder = os.environ.get(ENV_PROGRESS)
    if not folder:
        return None
    if not _BEACON:
        job = context.current()
        rank = str(job.rank) if job.step_rank_given else os.environ.get("RANK") or "0"
        _BEACON.append(Beacon(Path(folder), int(rank) if rank.isdigit() else 0))
    return _BEACON[0]


def read_beats(folder: Path) -> list[dict[str, Any]]:
    """The ranks' latest notes (unreadable ones skipped)."""
    beats = []
    for path in sorted(Path(folder).glob("rank*")):
        try:
            beat = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if isinstance(beat, dict) and isinstance(beat.get("time"), (int, float)):
            beats.append(beat)
    return beats


def default_timeout_s(beats: list[dict[str, Any]]) -> float:
    """:data:`FACTOR` times the slowest rank's median step time, at least :data:`FLOOR_S`."""
    steps = [float(b["step_s"]) for b in beats if isinstance(b.get("step_s"), (int, float))]
    return max(FLOOR_S, FACTOR * max(steps, default=0.0))


def pause_limit_s(timeout_s: float) -> float:
    """How long a phase that is no training step (validation, a checkpoint write) may last before the
    ranks are judged again: ten stall timeouts, at least an hour."""
    return max(10 * timeout_s, 3600.0)


@dataclass(frozen=True)
class Stall:
    timeout_s: float
    late: list[dict[str, Any]]
    """The notes of the ranks in training whose last step is older than the timeout, oldest first."""


def judge(beats: list[dict[str, Any]], now: float, timeout_s: float | None) -> Stall | None:
    """Whether the ranks' notes ``beats`` show a stall at ``now`` (see the module's docstring).

    Args:
        beats: The ranks' notes (:func:`read_beats`).
        now: ``time.time()``.
        timeout_s: ``--slurm.stall_timeout_s``; None: :func:`default_timeout_s`.
    """
    timeout = timeout_s if timeout_s else default_timeout_s(beats)
    active = [b for b in beats if b.get("phase") != DONE]
    limit = {TRAIN: timeout}
    late = sorted(
        (b for b in active if now - b["time"] > limit.get(str(b.get("phase")), pause_limit_s(timeout))),
        key=lambda b: b["time"],
    )
    if not any(b.get("phase") == TRAIN for b in late) and len(late) < len(active):
        return None  # a long validation or checkpoint write of some rank, the others waiting for it
    return Stall(timeout, late) if late else None


def _slurm(action: Callable[..., Any], *args: str, **kwargs: Any) -> Any:
    """A Slurm query or action of :mod:`trainer_cli.job.slurm_commands`; None (its error in the log) when it fails."""
    from trainer_cli.job import slurm_commands

    try:
        return action(*args, **kwargs)
    except slurm_commands.SlurmCommandError as err:
        print(f"trainer-cli: stall watchdog: {err.message}", file=sys.stderr, flush=True)
        return None


def _steps_of(job_id: str) -> list[str]:
    """The job's running steps started by srun (``<job>.<n>``; not the batch or extern steps)."""
    from trainer_cli.job import slurm_commands

    steps = _slurm(slurm_commands.squeue, "steps", job_id) or []
    return [s["StepId"] for s in steps if str(s.get("StepId")).partition(".")[2].isdigit()]


def collect_stacks(folder: Path, beats: list[dict[str, Any]], job_id: str, into: Path) -> set[int]:
    """Ask every task of the job for its stacks (:data:`DUMP_SIGNAL`), copy what each rank wrote
    within :data:`DUMP_WAIT_S` into ``into/rank<N>.txt``; returns the ranks that answered."""
    sizes = {b["rank"]: _size(folder / f"stack.rank{b['rank']}") for b in beats}
    from trainer_cli.job import slurm_commands

    # by number: Slurm 22.05 knows no WINCH by name
    _slurm(slurm_commands.scancel, job_id, signal=str(int(DUMP_SIGNAL)), timeout=30)
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

    from trainer_cli.job import slurm_commands

    if not shutil.which("py-spy") or not beat.get("pid"):
        return None
    command = ["py-spy", "dump", "--nonblocking", "--pid", str(beat["pid"])]  # (--native needs to pause it)
    if beat.get("node") != node_name():
        out = slurm_commands.srun_overlap(job_id, str(beat["node"]), command, timeout_s)
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
    from trainer_cli.job import jobstate, slurm_commands

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
        _slurm(slurm_commands.scancel, step, signal="KILL", timeout=30)
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
    """``python -m trainer_cli.job.progress RUN_DIR watch``: the stall watchdog of the batch script."""
    if len(argv) != 2 or argv[1] != "watch":
        print("usage: python -m trainer_cli.job.progress RUN_DIR watch", file=sys.stderr)
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
