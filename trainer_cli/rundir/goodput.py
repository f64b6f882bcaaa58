"""A run's measured time split into goodput and badput buckets, from its attempts' records.

:func:`buckets` reads what the ranks measured (:mod:`trainer_cli.rundir.attempts`) and the stall
records the batch script's watchdog wrote (:mod:`trainer_cli.job.progress`: ``stall`` in
``job.json``, and each stall's event in ``restarts.jsonl``), and gives, per attempt of global rank 0
and over the run, seconds of:

- ``goodput_s``: training steps the final model keeps;
- ``startup_s``: process start to the end of the first step (imports, building, data set-up,
  checkpoint load, the first batch and compile);
- ``checkpoint_s``: the training thread's part of checkpoint saves;
- ``validation_s``: validation, the sanity check included;
- ``redone_s``: training steps a later attempt did again (``redone_steps``: this attempt's last
  completed step less the step the next attempts started from; the time of that stretch is the
  training time after the save of that step, exact where this attempt saved it, else interpolated:
  ``redone_estimated``);
- ``stall_s``: from the last step until the watchdog ended the step (an attempt it stalled);
- ``tail_s``: after the last step until the process ended (epoch end, teardown, exit, a stop signal).

They add up to ``wall_s`` of each attempt: process start to its end (for an attempt the watchdog
ended, to the watchdog's decision). Allocation outside the processes (queue, the batch script before
``srun`` and after it) is not here: it is the job's (``job.json``, ``sacct``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from trainer_cli.job import jobstate
from trainer_cli.job import restarts as restarts_log
from trainer_cli.rundir import attempts as attempts_mod

BUCKETS = ("startup_s", "checkpoint_s", "validation_s", "redone_s", "stall_s", "tail_s")


def stall_records(run_dir: Path) -> list[dict[str, Any]]:
    """The stalls the watchdog recorded for the run: ``job.json``'s latest and each stall event of
    ``restarts.jsonl`` (``job_id``, ``restart``, ``step``, ``idle_s``, ``time`` where known)."""
    found: list[dict[str, Any]] = []
    latest = jobstate.read(run_dir).get("stall")
    if isinstance(latest, dict):
        found.append(latest)
    for event in restarts_log.read(run_dir):
        if event.get("cause") == restarts_log.STALL and isinstance(event.get("stall"), dict):
            found.append(event["stall"])
    return found


def _stall_of(attempt: dict[str, Any], stalls: list[dict[str, Any]]) -> dict[str, Any] | None:
    slurm = attempt.get("slurm") or {}
    if not slurm.get("job_id"):
        return None
    key = (str(slurm.get("job_id")), slurm.get("restart"))
    return next((s for s in stalls if (str(s.get("job_id")), s.get("restart")) == key), None)


def _train_at(attempt: dict[str, Any], step: int) -> tuple[float, bool]:
    """Training seconds of ``attempt`` when it stood at global step ``step`` (its saves exact, else
    interpolated between its first and last steps); and whether it was interpolated."""
    for saved, train in attempt.get("checkpoints") or []:
        if saved == step:
            return float(train), False
    start, last = attempt.get("start_step") or 0, attempt.get("last_step")
    total = float(attempt["seconds"]["train"])
    if step <= start or last is None:
        return 0.0, False
    points = [(start, 0.0), *((s, float(t)) for s, t in attempt.get("checkpoints") or []), (last, total)]
    below = max((p for p in points if p[0] <= step), default=(start, 0.0))
    above = min((p for p in points if p[0] >= step), default=(last, total))
    if above[0] == below[0]:
        return below[1], True
    return below[1] + (above[1] - below[1]) * (step - below[0]) / (above[0] - below[0]), True


def _script_to_first_step(attempt: dict[str, Any]) -> float | None:
    """Seconds from the batch script's start of this restart to the end of the first step (a Slurm
    attempt's restart cost, allocation side included); None outside Slurm or before a step."""
    began = (attempt.get("slurm") or {}).get("script_started")
    first = (attempt.get("marks") or {}).get("first_step")
    return round(first - began, 3) if isinstance(began, (int, float)) and isinstance(first, (int, float)) else None


def attempt_buckets(attempt: dict[str, Any], kept_upto: int | None, stall: dict[str, Any] | None) -> dict[str, Any]:
    """The buckets of one settled attempt (:func:`trainer_cli.rundir.attempts.read`).

    Args:
        attempt: The attempt.
        kept_upto: The lowest step a later attempt started from (None: none did; all its steps are kept).
        stall: The watchdog's record of a stall of this attempt, if any.
    """
    seconds = attempt["seconds"]
    start, last = attempt.get("start_step") or 0, attempt.get("last_step")
    redone_steps, redone_s, estimated = 0, 0.0, False
    if last is not None and kept_upto is not None and last > kept_upto:
        base = max(kept_upto, start)
        redone_steps = last - base
        at, estimated = _train_at(attempt, base)
        redone_s = max(float(seconds["train"]) - at, 0.0)
    stall_s, wall, end = 0.0, float(attempt["wall_s"]), float(attempt["end"])
    tail = float(seconds["tail"])
    if stall is not None and attempt.get("open"):  # killed by the watchdog: from its last step to the decision
        last_at = float(attempt.get("last_step_at") or end)
        decided = stall.get("time")
        seen = decided - last_at if isinstance(decided, (int, float)) else float(stall.get("idle_s") or 0)
        stall_s = max(seen, tail)  # the time seen after its last step is part of the stall
        wall += stall_s - tail
        end += stall_s - tail
        tail = 0.0
    row = {
        "attempt": attempt.get("attempt"),
        "rank": attempt.get("rank"),
        "slurm": attempt.get("slurm"),
        "started": attempt["started"],
        "end": end,
        "open": attempt.get("open"),
        "ended_by": attempt.get("ended_by") or ("stall" if stall is not None else None),
        "start_step": start,
        "last_step": last,
        "redone_steps": redone_steps,
        "redone_estimated": estimated,
        "wall_s": wall,
        "goodput_s": max(float(seconds["train"]) - redone_s, 0.0),
        "startup_s": float(seconds["startup"]),
        "checkpoint_s": float(seconds["checkpoint"]),
        "validation_s": float(seconds["validation"]),
        "redone_s": redone_s,
        "stall_s": stall_s,
        "tail_s": tail,
        "memory": attempt.get("memory") or {},
        "script_to_first_step_s": _script_to_first_step(attempt),
    }
    return row


def buckets(run_dir: Path, rank: int = 0) -> dict[str, Any]:
    """The run's goodput and badput in seconds, measured (see the module's description).

    Args:
        run_dir: The run directory.
        rank: Whose account (global rank 0 by default: every rank waits for the slowest at each step).

    Returns:
        ``{"attempts": [per attempt: attempt, slurm, started, end, open, ended_by, start_step,
        last_step, redone_steps, redone_estimated, wall_s, goodput_s, the BUCKETS, memory,
        script_to_first_step_s], "total":
        {wall_s, goodput_s, the BUCKETS, redone_steps, attempts}, "memory": {the peaks over every
        rank and attempt}}``; empty attempts where nothing was measured.
    """
    everyone = attempts_mod.read(run_dir)
    mine = [a for a in everyone if a.get("rank") == rank]
    stalls = stall_records(run_dir)
    rows = []
    for index, attempt in enumerate(mine):
        later = [int(a["start_step"]) for a in mine[index + 1 :] if a.get("start_step") is not None]
        rows.append(attempt_buckets(attempt, min(later) if later else None, _stall_of(attempt, stalls)))
    total: dict[str, Any] = {key: sum(r[key] for r in rows) for key in ("wall_s", "goodput_s", *BUCKETS)}
    total["redone_steps"] = sum(r["redone_steps"] for r in rows)
    total["attempts"] = len(rows)
    memory: dict[str, Any] = {}
    for attempt in everyone:
        for key, value in (attempt.get("memory") or {}).items():
            if isinstance(value, (int, float)) and key != "gpu_util_mean":
                memory[key] = max(memory.get(key, value), value)
    return {"attempts": rows, "total": total, "memory": memory}
