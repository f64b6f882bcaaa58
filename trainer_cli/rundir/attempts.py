"""What each start (attempt) of a run's training spent its time on, measured by its ranks where it happened.

Every ``fit`` process of a run (a new run, a resume, a Slurm requeue or resubmission; each DDP rank)
keeps one JSON line per attempt in ``<run>/attempts/rank<N>.jsonl`` (one writer per file: the rank;
the whole file rewritten atomically, :func:`trainer_cli.atomic.write_atomic`, at the boundaries below),
written by :class:`trainer_cli.callbacks.attempt_clock.AttemptClock` through a :class:`Recorder`.
Its time is split into phases, each second in exactly one: ``startup`` (process start to the end of
the first training step: imports, config, building, data set-up, checkpoint load, the first batch
and compile), ``train``, ``validation`` (the sanity check included) and ``checkpoint`` (the training
thread's part of a save: Lightning's ``on_save_checkpoint`` until the checkpoint plugin returns).
``train`` after the last step (epoch end, teardown, exit) is the attempt's ``tail`` (:func:`read`).
Timestamps are taken at those boundaries only; per training step one ``os.pwrite`` of 32 bytes to
``<run>/attempts/.rank<N>.step`` (sequence, step, time, training seconds; no GPU sync) keeps
the last step an attempt completed when it is killed (SIGKILL, a stall) before it can write again.

Fields of a line (times: seconds since the epoch, ``time.time()``):

- ``attempt``: the id the ranks of one start share (``<job>.<restart>`` in Slurm, else
  ``<time>-<pid>`` of the launching rank); ``seq``: the line's index in the rank's file; ``rank``,
  ``node``, ``pid``; ``job`` (:data:`trainer_cli.job.scheduler.JOB_FIELD`, null outside a job): ``scheduler``,
  ``job_id`` and ``restart`` as the stall record names them (the array's id for an array task), ``task``: the
  id naming this task alone to the scheduler's accounting (``<array>_<task>``, else the job id), and
  ``script_started``: when the batch script started this restart (``job.json``, to the second), or null;
- ``started``: process start; ``marks``: ``setup`` (Lightning's ``setup``: after imports, building and
  the data module's ``setup``), ``checkpoint_loaded`` (a resume's checkpoint read and restored),
  ``fit_start`` (model on its device, DDP wrapped), ``train_start``, ``first_step`` (its end);
  ``sanity_s``: validation seconds of the sanity check;
- ``batches_per_epoch``: the training batches of an epoch (``limit_train_batches`` applied; absent where
  unknown: an iterable without a length);
- ``start_step``: the global step training started from (the checkpoint's); ``last_step``,
  ``last_step_at``: the last step completed and when; ``train_at_step``: ``train`` seconds then;
- ``seconds``: the closed segments per phase; ``stack``: the open phases (bottom first) and ``since``:
  when the open one began; ``checkpoints``: ``[step, train seconds]`` at the last saves;
- ``memory``: peaks of this process (``rss_peak_bytes``: ``ru_maxrss``; on CUDA ``cuda_max_allocated_bytes``,
  ``cuda_max_reserved_bytes``; where NVML answers ``gpu_util_mean``/``gpu_util_max`` (percent, sampled)
  and ``gpu_memory_used_peak_bytes``);
- ``written``: when the line was written; ``ended``: when the attempt ended (teardown; then the
  process exit), with ``ended_by`` (``completed``, ``requeue``, ``stopped``, ``error: <type>``);
  absent for an attempt killed before it could say.

Standard library only: ``train jobs`` and ``train runs`` read it without torch.
"""

from __future__ import annotations

import json
import os
import struct
import time
from pathlib import Path
from typing import Any

from trainer_cli.atomic import write_atomic
from trainer_cli.rundir import live

ATTEMPTS_DIR = "attempts"
STARTUP, TRAIN, VALIDATION, CHECKPOINT = "startup", "train", "validation", "checkpoint"
PHASES = (STARTUP, TRAIN, VALIDATION, CHECKPOINT)
KEPT_CHECKPOINTS = 16
"""The last saves whose ``[step, train seconds]`` a line keeps (to split a redone stretch exactly)."""
_NOTE = struct.Struct("<qqdd")  # sequence, step, time, training seconds: 32 bytes, written in place


def rank_file(run_dir: Path, rank: int) -> Path:
    """``<run>/attempts/rank<N>.jsonl``."""
    return Path(run_dir) / ATTEMPTS_DIR / f"rank{rank}.jsonl"


def note_file(run_dir: Path, rank: int) -> Path:
    """``<run>/attempts/.rank<N>.step``: the rank's last completed step, rewritten in place at every step."""
    return Path(run_dir) / ATTEMPTS_DIR / f".rank{rank}.step"


class Recorder:
    """One rank's account of one attempt (see the module's description).

    Args:
        run_dir: The run directory.
        rank: The global rank.
        attempt: The id the ranks of this start share.
        started: When the process started (``time.time()`` clock).
        info: Further fields of the line (``node``, ``pid``, ``job``).
    """

    def __init__(self, run_dir: Path, rank: int, attempt: str, started: float, info: dict[str, Any]) -> None:
        self.path, self.note_path = rank_file(run_dir, rank), note_file(run_dir, rank)
        live.enter(run_dir)  # its writes in attempts/ show in the run directory's time (trainer_cli.rundir.live)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._earlier = self._earlier_lines()
        self.line: dict[str, Any] = {
            "attempt": attempt,
            "seq": len(self._earlier),
            "rank": rank,
            **info,
            "started": started,
            "marks": {},
            "sanity_s": 0.0,
            "start_step": None,
            "last_step": None,
            "last_step_at": None,
            "train_at_step": 0.0,
            "checkpoints": [],
            "memory": {},
        }
        self.seconds = dict.fromkeys(PHASES, 0.0)
        self.stack = [STARTUP]
        self.since = started
        self.last_step: int | None = None
        self._fd: int | None = None
        self._seq = self.line["seq"]
        self.checkpoint_thread: int | None = None
        try:  # 0o666: the umask decides, as for every file of the run (a group's shared folder under umask 002)
            self._fd = os.open(self.note_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o666)
        except OSError:
            self._fd = None  # the note is advice: the boundaries still count

    def _earlier_lines(self) -> list[str]:
        """The rank's earlier lines; the last one, when its attempt was killed, with the step it noted
        after its last write folded in (the note is this attempt's from now on)."""
        try:
            lines = [line for line in self.path.read_text().splitlines() if line.strip()]
        except OSError:
            return []
        try:
            last = json.loads(lines[-1]) if lines else None
        except json.JSONDecodeError:
            return lines
        if isinstance(last, dict) and "ended" not in last:
            folded = _with_note(last, _read_note(self.note_path))
            if folded is not last:
                lines[-1] = json.dumps(folded)
        return lines

    # -- phases -----------------------------------------------------------------------------------
    def _close(self, now: float) -> None:
        self.seconds[self.stack[-1]] += max(now - self.since, 0.0)
        self.since = now

    def enter(self, phase: str, now: float | None = None) -> None:
        """A nested phase begins (``validation``, ``checkpoint``); entering the open one again is nothing."""
        if self.stack[-1] == phase:
            return
        self._close(time.time() if now is None else now)
        self.stack.append(phase)

    def leave(self, phase: str, now: float | None = None) -> bool:
        """The open phase ``phase`` ends (nothing when it is not the open one); returns whether it did."""
        if len(self.stack) < 2 or self.stack[-1] != phase:
            return False
        self._close(time.time() if now is None else now)
        self.stack.pop()
        return True

    def mark(self, name: str, now: float | None = None) -> None:
        """A moment of the start-up (``setup``, ``checkpoint_loaded``, ``fit_start``, ``train_start``)."""
        self.line["marks"].setdefault(name, time.time() if now is None else now)

    def train_started(self, step: int) -> None:
        """Training begins at global step ``step`` (the checkpoint's on a resume)."""
        self.mark("train_start")
        if self.line["start_step"] is None:
            self.line["start_step"] = step

    def step(self, step: int, now: float | None = None) -> None:
        """A training batch ended at global step ``step``: the first one ends the start-up; noted in place."""
        now = time.time() if now is None else now
        if self.last_step is None:
            self.line["marks"]["first_step"] = now
            self._close(now)
            self.stack[0] = TRAIN
        self.last_step = step
        train = self.seconds[TRAIN] + (now - self.since if self.stack[-1] == TRAIN else 0.0)
        self.line["last_step_at"], self.line["train_at_step"] = now, train
        if self._fd is not None:
            try:
                os.pwrite(self._fd, _NOTE.pack(self._seq, step, now, train), 0)
            except OSError:
                self._fd = None

    def checkpoint_saved(self, step: int) -> None:
        """A checkpoint of global step ``step`` is being saved: where training stood, kept for a later attempt."""
        train = self.seconds[TRAIN]
        kept = [c for c in self.line["checkpoints"] if c[0] != step][-(KEPT_CHECKPOINTS - 1) :]
        self.line["checkpoints"] = [*kept, [step, round(train, 6)]]

    # -- the line ---------------------------------------------------------------------------------
    def write(
        self,
        memory: dict[str, Any] | None = None,
        ended_by: str | None = None,
        now: float | None = None,
        leaving: str | None = None,
    ) -> None:
        """Rewrite the rank's file with this attempt's line as it stands (``ended_by``: the attempt ended;
        ``leaving``: the open phase, left right after, is written as left: the write itself counts in it)."""
        now = time.time() if now is None else now
        self._close(now)
        line, stack = self.line, self.stack
        if leaving is not None and len(stack) > 1 and stack[-1] == leaving:
            stack = stack[:-1]
        line["last_step"] = self.last_step
        line["seconds"] = {k: round(v, 6) for k, v in self.seconds.items()}
        line["stack"], line["since"], line["written"] = list(stack), now, now
        if memory:
            line["memory"] = memory
        if ended_by is not None:
            line["ended"] = now
            line.setdefault("ended_by", ended_by)
        text = "\n".join([*self._earlier, json.dumps(line)]) + "\n"
        try:
            write_atomic(self.path, text)
        except OSError:
            pass  # an account of time: a full disk must not fail the training

    def close_note(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def _read_note(path: Path) -> tuple[int, int, float, float] | None:
    try:
        seq, step, at, train = _NOTE.unpack(path.read_bytes()[: _NOTE.size])
    except (OSError, struct.error):
        return None
    return int(seq), int(step), float(at), float(train)


def _with_note(line: dict[str, Any], note: tuple[int, int, float, float] | None) -> dict[str, Any]:
    """``line`` with the step its rank noted after writing it (the same ``seq``, later), else ``line``."""
    if note is None or note[0] != line.get("seq") or note[2] <= (line.get("last_step_at") or 0.0):
        return line
    out = dict(line, last_step=note[1], last_step_at=note[2], train_at_step=note[3])
    if (line.get("stack") or [STARTUP])[0] == STARTUP:  # killed after its first step, before it wrote again
        out["stack"], out["since"] = [TRAIN], note[2]
        seconds = dict(line.get("seconds") or {})
        seconds[STARTUP] = float(seconds.get(STARTUP) or 0.0) + max(note[2] - float(line.get("since") or note[2]), 0.0)
        out["seconds"], out["train_at_step"] = seconds, 0.0
        out.setdefault("marks", {})["first_step"] = note[2]
    return out


def _settled(line: dict[str, Any]) -> dict[str, Any]:
    """``line`` with its open segment closed at its end and ``tail`` split off ``train``."""
    out = dict(line)
    seconds = {p: float((line.get("seconds") or {}).get(p) or 0.0) for p in PHASES}
    last_step, last_at, train_at = line.get("last_step"), line.get("last_step_at"), line.get("train_at_step") or 0.0
    stack = list(line.get("stack") or [STARTUP])
    end = line.get("ended") or max(float(line.get("written") or 0.0), last_at or 0.0)
    since = float(line.get("since") or end)
    seconds[stack[-1]] += max(end - since, 0.0)
    tail = max(seconds[TRAIN] - train_at, 0.0) if last_step is not None else 0.0
    seconds[TRAIN] -= tail
    out.update(
        end=end,
        open="ended" not in line,
        seconds={**{p: round(v, 6) for p, v in seconds.items()}, "tail": round(tail, 6)},
        wall_s=round(end - float(line["started"]), 6),
    )
    return out


def read(run_dir: Path) -> list[dict[str, Any]]:
    """Every attempt of every rank of the run, by process start then rank: the lines of
    ``attempts/rank<N>.jsonl`` with, added, ``end`` (``ended``; for an open or killed attempt its
    last sign: the line written or the last step noted), ``open`` (no ``ended``: running, or killed),
    ``wall_s`` (``started`` to ``end``) and ``seconds`` closed at ``end`` and split into ``startup``,
    ``train`` (up to the last step), ``validation``, ``checkpoint`` and ``tail`` (``train`` after the
    last step), which add up to ``wall_s``."""
    folder = Path(run_dir) / ATTEMPTS_DIR
    found = []
    for path in sorted(folder.glob("rank*.jsonl")):
        rank = path.stem.removeprefix("rank")
        if not rank.isdigit():
            continue
        lines = []
        for text in path.read_text().splitlines():
            try:
                line = json.loads(text)
            except json.JSONDecodeError:
                continue
            if isinstance(line, dict) and isinstance(line.get("started"), (int, float)):
                lines.append(line)
        if lines:
            lines[-1] = _with_note(lines[-1], _read_note(note_file(run_dir, int(rank))))
        found += [_settled(line) for line in lines]
    return sorted(found, key=lambda a: (a["started"], a.get("rank", 0)))


def state(lines: list[dict[str, Any]], running: bool) -> str:
    """The state of one attempt from its ranks' lines (:func:`read`), in Slurm's words: ``COMPLETED`` when every
    rank completed, ``RUNNING`` when one is open and ``running`` (its process is still there), else
    ``CANCELLED`` (stopped: Ctrl-C, SIGTERM) or ``FAILED`` (an error, an exit, a killed process)."""
    ended = [str(a.get("ended_by") or "") for a in lines]
    if ended and all(e == "completed" for e in ended):
        return "COMPLETED"
    if running and any(a.get("open") for a in lines):
        return "RUNNING"
    return "CANCELLED" if "stopped" in ended else "FAILED"


def last_state(run_dir: Path, found: list[dict[str, Any]] | None = None) -> str | None:
    """The state (:func:`state`) of the run's last attempt, the one of the newest start (``found``: :func:`read`'s
    lines, read here when not given); running while a process writing into the run is alive
    (:func:`trainer_cli.rundir.live.alive`); None for a run without attempt records."""
    found = read(run_dir) if found is None else found
    if not found:
        return None
    newest = found[-1].get("attempt")
    lines = [a for a in found if a.get("attempt") == newest] if newest is not None else [found[-1]]
    return state(lines, live.alive(run_dir))
