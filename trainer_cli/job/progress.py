"""Every rank notes its progress; a rank that stopped is judged a stall (the watchdog acts on it).

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
- the batch script starts ``python -m trainer_cli.schedulers.slurm.watchdog RUN_DIR watch`` in the background
  while ``srun`` runs (a process of its own on the batch node: a thread inside a stuck process
  could not be trusted to act). :func:`judge` finds a rank in its training phase whose last step
  is older than the stall timeout (``--slurm.stall_timeout_s``; by default :func:`default_timeout_s`:
  :data:`FACTOR` times the slowest rank's median step time, at least :data:`FLOOR_S`). A rank is
  judged only once it has made its first step (start-up, data set-up and the first compile are not
  stalls); a rank in a phase that is no training step (validation, a checkpoint write, an epoch
  end) counts only after :func:`pause_limit_s`, and only when every rank is late;
- on a stall, the watchdog (:mod:`trainer_cli.schedulers.slurm.watchdog`) asks every task for its
  stacks (:data:`DUMP_SIGNAL`), names the rank that did not answer (else the one whose last step is
  the oldest) and its node, records the stall for the batch script's requeue without that node
  (cause :data:`trainer_cli.job.restarts.STALL`) and kills the step.

Standard library only: the batch script's watchdog imports this module.
"""

from __future__ import annotations

import faulthandler
import json
import os
import signal
import socket
import statistics
import time
from collections import deque
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
TRAIN = "train"
DONE = "done"


def node_name() -> str:
    """The scheduler's name of the node this process runs on (Slurm's ``SLURMD_NODENAME``); the host name where none."""
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
