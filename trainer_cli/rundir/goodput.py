"""A run's measured time split into goodput and badput buckets, from its attempts' records.

:func:`buckets` reads what the ranks measured (:mod:`trainer_cli.rundir.attempts`) and the stall
records the batch script's watchdog wrote (:mod:`trainer_cli.schedulers.slurm.watchdog`: ``stall`` in
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
- ``stall_s``: from the last step until the watchdog ended the step, its wait for the ranks' stacks
  included (an attempt it stalled; a record written before that wait was recorded: until its decision);
- ``tail_s``: after the last step until the process ended (epoch end, teardown, exit, a stop signal).

They add up to ``wall_s`` of each attempt: process start to its end (for an attempt the watchdog
ended, to the watchdog's decision). Allocation outside the processes (the batch script before
``srun`` and after it) is not in :func:`buckets`: it is the job's (``job.json``, ``sacct``).

:func:`allocated` gives the same as shares of the ALLOCATED time (what the run's cost counts,
:mod:`trainer_cli.rundir.run_cost`: each attempt's allocation from ``sacct``'s Start and End where
there is accounting, else from the batch script's start of each attempt in ``job.json`` to its
requeue or the job's end; on a scheduler without accounting, the Ray engine, each start of the
worker group from its first rank's start to its last rank's end), so that ``goodput_s`` and the
badput buckets add up to 100% of it, with two buckets more (:data:`ALLOCATION_BUCKETS`):

- ``launch_s``: the allocation outside the ranks' processes: from the allocation's start to the
  process start (the batch script before ``srun``: its set-up, environment, code snapshot checks,
  ``srun``'s launch) and from the process end to the allocation's end (the batch script after
  ``srun``: the requeue or resubmission, the job's end);
- ``failed_s``: the whole allocation of an attempt that ended (``FAILED``, ``NODE_FAIL``, a
  requeue...) before its ranks completed a training step (a crash in start-up, ranks that never
  started): nothing of it can be kept. An attempt that failed after training steps is counted by
  the buckets above: its steps a later attempt kept are goodput, those it did again ``redone_s``.

Queue wait is not allocated time: it is beside the cost, not in it. Time is rank 0's (every rank
waits for the slowest at each step).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from trainer_cli.job import cost as job_cost
from trainer_cli.job import jobstate
from trainer_cli.job import restarts as restarts_log
from trainer_cli.job.scheduler import JOB_FIELD, recorded_job
from trainer_cli.rundir import attempts as attempts_mod
from trainer_cli.rundir import history

BUCKETS = ("startup_s", "checkpoint_s", "validation_s", "redone_s", "stall_s", "tail_s")
ALLOCATION_BUCKETS = ("launch_s", "failed_s")
"""The badput :func:`allocated` adds to :data:`BUCKETS`: allocated time outside the ranks' processes."""
BADPUT = (*BUCKETS, *ALLOCATION_BUCKETS)
CLOCK_SLACK_S = 1.0
"""sacct's times are whole seconds (Start rounded down): a process started up to this before its
allocation's Start is that allocation's."""


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
    job = recorded_job(attempt)
    if job is None:
        return None
    key = (str(job.get("job_id")), job.get("restart"))
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
    """Seconds from the batch script's start of this restart to the end of the first step (a job's
    attempt's restart cost, allocation side included); None where no batch script's start is recorded
    (outside a job, a Ray job) or before a step."""
    began = (recorded_job(attempt) or {}).get("script_started")
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
        decided = stall.get("ended", stall.get("time"))  # the step's end, its stack dump included (else the decision)
        seen = decided - last_at if isinstance(decided, (int, float)) else float(stall.get("idle_s") or 0)
        stall_s = max(seen, tail)  # the time seen after its last step is part of the stall
        wall += stall_s - tail
        end += stall_s - tail
        tail = 0.0
    row = {
        "attempt": attempt.get("attempt"),
        "rank": attempt.get("rank"),
        JOB_FIELD: recorded_job(attempt),
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


def _allocation_row(alloc: job_cost.Attempt | None, inside: list[dict[str, Any]]) -> dict[str, Any]:
    """One allocation (None: processes outside any Slurm allocation known) with the rank's processes
    that ran in it: the process buckets summed, ``launch_s`` the rest of the allocation, ``failed_s``
    all of it where no process completed a step."""
    walls = sum(p["wall_s"] for p in inside)
    row: dict[str, Any] = {
        "job_id": alloc.job_id if alloc else None,
        "state": alloc.state if alloc else None,
        "start": alloc.start if alloc else min(p["started"] for p in inside),
        "processes": len(inside),
        "redone_steps": sum(p["redone_steps"] for p in inside),
        "redone_estimated": any(p["redone_estimated"] for p in inside),
        "goodput_s": sum(p["goodput_s"] for p in inside),
        **{k: sum(p[k] for p in inside) for k in BUCKETS},
        "launch_s": 0.0,
        "failed_s": 0.0,
        "launch_before_s": 0.0,
        "ended_by": next((p["ended_by"] for p in reversed(inside) if p.get("ended_by")), None),
        "last_step": max((p["last_step"] for p in inside if p["last_step"] is not None), default=None),
    }
    if alloc is None:
        row["allocated_s"] = walls
        return row
    held = float(alloc.elapsed_s)
    if alloc.state == "RUNNING" and inside:  # counted to the ranks' last record, not to now
        held = min(held, max(p["end"] for p in inside) - float(alloc.start or 0.0))
    row["allocated_s"] = max(held, walls)
    if row["last_step"] is None and alloc.state != "RUNNING":  # no step completed: nothing of it can be kept
        for key in ("goodput_s", *BUCKETS):
            row[key] = 0.0
        row["failed_s"] = row["allocated_s"]
        return row
    row["launch_s"] = row["allocated_s"] - walls
    if inside:
        row["launch_before_s"] = min(max(inside[0]["started"] - float(alloc.start or 0.0), 0.0), row["launch_s"])
    return row


def allocated(run_dir: Path, spent: job_cost.Cost, rank: int = 0) -> dict[str, Any]:
    """The run's goodput and badput as shares of its allocated time (see the module's description).

    Args:
        run_dir: The run directory.
        spent: The run's allocations (:func:`trainer_cli.rundir.run_cost.cost`).
        rank: Whose account (global rank 0 by default).

    Returns:
        ``{"source": where the allocations came from (sacct, estimated; none: the processes alone),
        "attempts": [per allocation: job_id, state, start, allocated_s, goodput_s, the BADPUT,
        launch_before_s, redone_steps, redone_estimated, ended_by, last_step, processes], "total":
        {allocated_s, goodput_s, the BADPUT, redone_steps, redone_estimated, attempts}, "percent":
        {goodput and each badput bucket, without ``_s``: percent of allocated_s}, "memory": peaks}``.
    """
    measured = buckets(run_dir, rank)
    processes = list(measured["attempts"])
    allocations = sorted(spent.started, key=lambda a: a.start or 0.0)
    rows = []
    for index, alloc in enumerate(allocations):
        start = float(alloc.start or 0.0)
        following = allocations[index + 1].start if index + 1 < len(allocations) else None
        inside = [
            p
            for p in processes
            if p["started"] >= start - CLOCK_SLACK_S and (following is None or p["started"] < following - CLOCK_SLACK_S)
        ]
        processes = [p for p in processes if not any(p is q for q in inside)]
        rows.append(_allocation_row(alloc, inside))
    rows += [_allocation_row(None, [p]) for p in processes]  # outside any allocation known (a local fit)
    rows.sort(key=lambda r: r["start"])
    keys = ("allocated_s", "goodput_s", *BADPUT)
    total: dict[str, Any] = {k: sum(r[k] for r in rows) for k in keys}
    total |= {
        "redone_steps": sum(r["redone_steps"] for r in rows),
        "redone_estimated": any(r["redone_estimated"] for r in rows),
        "attempts": len(rows),
    }
    whole = total["allocated_s"]
    percent = {k.removesuffix("_s"): (100.0 * total[k] / whole if whole > 0 else None) for k in keys[1:]}
    source = spent.source if allocations else job_cost.NONE
    inexact = history.inexact_starts(history.read(run_dir))
    return {
        "source": source,
        "attempts": rows,
        "total": total,
        "percent": percent,
        "memory": measured["memory"],
        "inexact_resumes": inexact,
    }


def as_json(figures: dict[str, Any]) -> dict[str, Any]:
    """:func:`allocated`'s figures as ``train jobs RUN --json`` gives them (``goodput`` beside ``cost``):
    seconds and percents to a tenth (the figures :func:`block` prints), times as ISO text."""
    total, percent = figures["total"], figures["percent"]

    def pct(key: str) -> float | None:
        value = percent.get(key.removesuffix("_s"))
        return None if value is None else round(value, 1)

    return {
        "source": figures["source"],
        "allocated_s": round(total["allocated_s"], 1),
        "goodput_s": round(total["goodput_s"], 1),
        "goodput_pct": pct("goodput_s"),
        "badput": {k: {"seconds": round(total[k], 1), "percent": pct(k)} for k in BADPUT},
        "redone_steps": total["redone_steps"],
        "redone_estimated": total["redone_estimated"],
        "inexact_resumes": figures.get("inexact_resumes", []),
        "attempts": [
            {
                "job_id": r["job_id"],
                "state": r["state"],
                "start": job_cost.iso_time(r["start"]),
                "allocated_s": round(r["allocated_s"], 1),
                "goodput_s": round(r["goodput_s"], 1),
                **{k: round(r[k], 1) for k in BADPUT},
                "redone_steps": r["redone_steps"],
                "last_step": r["last_step"],
                "ended_by": r["ended_by"],
            }
            for r in figures["attempts"]
        ],
        "memory": figures["memory"],
    }


def cell(figures: dict[str, Any]) -> str:
    """Goodput in one cell (``train runs``): ``87.3%``; ``-`` where nothing was measured."""
    share = figures["percent"].get("goodput")
    return "-" if share is None else f"{round(share, 1):.1f}%"  # as the JSON gives it


def _size(count: float) -> str:
    return f"{count / 2**30:.2f} GiB" if count >= 2**30 else f"{count / 2**20:.0f} MiB"


def memory_line(memory: dict[str, Any]) -> str:
    """The peaks in words: host RSS of the largest rank, CUDA's allocated and reserved, NVML's use."""
    parts = []
    if memory.get("rss_peak_bytes"):
        parts.append(f"host RSS {_size(memory['rss_peak_bytes'])} (the largest rank)")
    if memory.get("cuda_max_allocated_bytes"):
        reserved = memory.get("cuda_max_reserved_bytes") or 0
        parts.append(f"GPU {_size(memory['cuda_max_allocated_bytes'])} allocated, {_size(reserved)} reserved")
    if memory.get("gpu_memory_used_peak_bytes"):
        parts.append(f"{_size(memory['gpu_memory_used_peak_bytes'])} in use (NVML)")
    if memory.get("gpu_util_max") is not None:
        parts.append(f"GPU utilisation up to {memory['gpu_util_max']:.0f}%")
    return "peak memory: " + ("; ".join(parts) if parts else "- (not measured)")


def block(figures: dict[str, Any]) -> list[str]:
    """The goodput in lines, for ``train jobs RUN``: the share of the allocated time the final model's
    training steps took, then each badput bucket in seconds and percent, the steps lost, the peaks."""
    shown = as_json(figures)
    if not figures["attempts"] or shown["goodput_pct"] is None:
        return ["goodput: - (no attempt of this run was measured)"]
    where = {
        job_cost.SACCT: "allocations from sacct",
        job_cost.ESTIMATED: "allocations estimated from the run's own timestamps",
        job_cost.RECORDS: "each worker group's span from the run's attempt records",
    }.get(figures["source"], "the processes alone: no allocation of a job known")
    lines = [
        f"goodput: {shown['goodput_pct']:.1f}% of {shown['allocated_s']:.1f} s allocated over "
        f"{len(shown['attempts'])} attempt(s) ({shown['goodput_s']:.1f} s of training steps the final model keeps; "
        f"rank 0's records, {where})"
    ]
    for key, bucket in shown["badput"].items():
        note = ""
        if key == "redone_s":
            guessed = ", interpolated" if shown["redone_estimated"] else ""
            note = f"  lost progress: {shown['redone_steps']} step(s) redone{guessed}"
            if shown["inexact_resumes"]:  # no step redone, but data replayed and skipped
                note += "; inexact resume (not resumable DataLoader): " + "; ".join(shown["inexact_resumes"])
        lines.append(f"  {key.removesuffix('_s'):<11}{bucket['seconds']:>9.1f} s {bucket['percent']:>6.1f}%{note}")
    lines.append("  " + memory_line(figures["memory"]))
    return lines


def timeline_rows(figures: dict[str, Any]) -> list[dict[str, Any]]:
    """What :func:`trainer_cli.plots.plot_timeline` draws: per attempt its label (``job 12 attempt 2
    (REQUEUED)``, ``local`` for a process outside any allocation), its start (seconds
    after the first attempt's) and its segments ``(bucket, seconds)`` in the order they happen (launch
    before the process, start-up, the kept steps, validation and checkpoints as one block each,
    the redone steps, the stall, the tail, launch after the process; a failed attempt one block)."""
    rows = figures["attempts"]
    if not rows:
        return []
    origin = min(r["start"] for r in rows)
    out: list[dict[str, Any]] = []
    seen: dict[str | None, int] = {}
    for r in rows:
        seen[r["job_id"]] = seen.get(r["job_id"], 0) + 1
        label = f"job {r['job_id']} attempt {seen[r['job_id']]} ({r['state']})" if r["job_id"] else "local"
        if r["failed_s"]:
            segments = [("failed_s", r["failed_s"])]
        else:
            after = r["launch_s"] - r["launch_before_s"]
            order = [("launch_s", r["launch_before_s"]), ("startup_s", r["startup_s"]), ("goodput_s", r["goodput_s"])]
            order += [(k, r[k]) for k in ("validation_s", "checkpoint_s", "redone_s", "stall_s", "tail_s")]
            segments = [*order, ("launch_s", after)]
        out.append({"label": label, "start_s": r["start"] - origin, "segments": [(k, s) for k, s in segments if s > 0]})
    return out
