"""Goodput and restart cost of a 2-node DDP job on the local Slurm cluster (issue 38).

The job: ``train submit`` of the digits CNN (``configs/experiment/digits.yaml`` with
``configs/slurm/local.yaml``: CPU, DDP over gloo) on 2 nodes x 1 task, ``last.ckpt`` at every epoch end,
the stall watchdog at ``--slurm.stall_timeout_s`` :data:`STALL_TIMEOUT_S`. Each round runs, one after
the other (the order reversed every round, as :func:`benchmarks.common.alternate` does):

- **alone**: the job, left alone until it completes;
- **interrupted**: the same job preempted (``scancel -s USR1``) at :data:`PREEMPT_AT` [0] of its steps,
  one of its ranks stopped (SIGSTOP of rank 1's training process, as ``tests/test_slurm_stall.py`` does)
  at :data:`STALL_AT` so that the watchdog ends it and requeues the job without that node, preempted
  again at :data:`PREEMPT_AT` [1], then left to complete: four attempts.

A requeued job is held by Slurm for a while before it may start again; as the cluster tests do, the
benchmark lets it start at once (``scontrol update StartTime=now``): the queue wait is not in any figure.

From each job's measured records (:func:`trainer_cli.rundir.goodput.buckets`, rank 0) and ``sacct``:

- goodput: the training steps the final model keeps, as a share of the allocation (``sacct``'s
  ElapsedRaw of every attempt) and of the training processes' own time (``buckets``' ``wall_s``);
- steps lost (``redone_steps``) of each attempt, by how it ended: a preemption (goal 0), the stall;
- restart cost: ``script_to_first_step_s`` (the batch script's start of a restart to the end of the
  first training step; the batch script's start is recorded to the second) of each resume after a
  preemption, against that of the fresh starts (the first attempt of both jobs); the moments between
  (``srun`` to the process start, imports and set-up, checkpoint load, DDP, first step) from the
  attempts' marks, to see where a resume spends its time.

Needs the local cluster (``scripts/local-slurm``; started here when it is not up, with the
``LOCAL_SLURM_*`` variables of the environment) and accounting (``sacct``). ``python -m benchmarks goodput``.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from tests.support import DIGITS, REPO, every_epoch_last_checkpoint, quiet_args

NODES, EPOCHS, VAL_BATCHES = 2, 30, 2
STEPS_PER_EPOCH = 10  # 1,257 training digits / (batch 64 x 2 ranks)
STALL_TIMEOUT_S = 6
PREEMPT_AT, STALL_AT = (0.25, 0.75), 0.5  # of the job's steps
REPEATS = 3
RESTART_GOAL, LOST_GOAL = 1.5, 0
MOMENTS = (  # (name, from, to): the start-up of an attempt, split at its marks
    ("script to process start", "script_started", "started"),
    ("process start to setup (imports, config, data set-up)", "started", "setup"),
    ("setup to fit start (checkpoint load, DDP)", "setup", "fit_start"),
    ("fit start to train start (sanity check)", "fit_start", "train_start"),
    ("train start to the end of the first step", "train_start", "first_step"),
)


def _support() -> Any:
    """``tests/slurm_support`` (the cluster tests' own waits and queries), importable as the tests import it."""
    tests = str(REPO / "tests")
    if tests not in sys.path:
        sys.path.insert(0, tests)
    import slurm_support

    return slurm_support


def _cluster() -> None:
    """Start the local cluster when it is not up (the instance the ``LOCAL_SLURM_*`` variables name)
    and point this process and its children at it (``SLURM_CONF``)."""
    local = str(REPO / "scripts" / "local-slurm")
    lines = subprocess.run([local, "env"], capture_output=True, text=True, timeout=30, check=True).stdout.splitlines()
    os.environ["SLURM_CONF"] = next(line for line in lines if line.startswith("export SLURM_CONF=")).split("=", 1)[1]
    if not _support()._cluster_up():
        subprocess.run([local, "start"], capture_output=True, text=True, timeout=900, check=True)


def _submit(root: Path, epochs: int) -> tuple[str, Path]:
    cmd = [
        sys.executable, "-m", "trainer_cli", "submit", "--config", DIGITS, "--config", str(REPO / "configs" / "slurm" / "local.yaml"),
        *every_epoch_last_checkpoint(root), *quiet_args(root, epochs=epochs),
        "--trainer.num_nodes", str(NODES), "--trainer.devices", "1", "--trainer.limit_val_batches", str(VAL_BATCHES),
        "--slurm.stall_timeout_s", str(STALL_TIMEOUT_S), "--slurm.time", "00:20:00",
        "--slurm.env", json.dumps({"MASTER_PORT": str(_free_port())}),
    ]
    out = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=300, check=True).stdout
    run_dir = Path(next(line.split(":", 1)[1].strip() for line in out.splitlines() if line.startswith("Run directory:")))
    return _support().job_id_from(out), run_dir


def _free_port() -> int:
    """A TCP port free on this host now. Lightning's SLURMEnvironment takes ``MASTER_PORT`` from the
    job's id (10000 + its last 4 digits) where it is not set: the several local clusters on this one
    host number their jobs from 1 alike, and two jobs of the same id running at once collide
    (``EADDRINUSE``), as the first run of this benchmark did."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _wait_step(run_dir: Path, restart: int, step: int, timeout_s: float = 600) -> int:
    """Until rank 0's attempt of restart ``restart`` has completed global step ``step``; returns its step."""
    from trainer_cli.rundir import attempts

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        mine = [a for a in attempts.read(run_dir) if a.get("rank") == 0 and (a.get("slurm") or {}).get("restart") == restart]
        if mine and (mine[-1].get("last_step") or 0) >= step:
            return int(mine[-1]["last_step"])
        time.sleep(0.05)
    raise RuntimeError(f"{run_dir}: restart {restart} did not reach step {step} in {timeout_s} s")


def _note(run_dir: Path, rank: int) -> dict[str, Any]:
    """The rank's progress note (``<run>/.progress/rank<N>``: step, phase), or {}."""
    try:
        return dict(json.loads((run_dir / ".progress" / f"rank{rank}").read_text()))
    except (OSError, ValueError):
        return {}


def _stall_rank1(job_id: str, run_dir: Path, timeout_s: float = 300) -> int:
    """SIGSTOP rank 1's training process in the middle of an epoch, so that rank 0 waits for it inside a
    training step (the watchdog judges a rank in validation or at an epoch end only after an hour:
    :func:`trainer_cli.job.progress.pause_limit_s`); where rank 0 was not training half a second
    later, SIGCONT and try again at a later epoch. SIGKILL it once the watchdog requeued the job.
    Returns the tries it took."""
    sup = _support()
    from test_slurm_stall import _rank_process

    pid, _node = _rank_process(job_id, 1)
    deadline, tries = time.monotonic() + timeout_s, 0
    while time.monotonic() < deadline:
        note = _note(run_dir, 1)
        step = int(note.get("step") or 0)
        if note.get("phase") != "train" or not 1 <= step % STEPS_PER_EPOCH <= STEPS_PER_EPOCH - 3:
            time.sleep(0.01)
            continue
        os.kill(pid, signal.SIGSTOP)
        tries += 1
        time.sleep(0.5)
        if _note(run_dir, 0).get("phase") == "train" and _note(run_dir, 1).get("phase") == "train":
            break
        os.kill(pid, signal.SIGCONT)
        time.sleep(1.5)  # into a later epoch
    else:
        raise RuntimeError(f"job {job_id}: rank 1 never stopped in the middle of an epoch")
    try:
        sup.wait_for_requeue(job_id, timeout_s=STALL_TIMEOUT_S + 90)
    finally:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return tries


def _job(root: Path, epochs: int, interrupt: bool) -> dict[str, Any]:
    """Run one job to completion (interrupted or not) and read back what it measured."""
    sup = _support()
    steps = epochs * STEPS_PER_EPOCH
    t0 = time.time()
    job_id, run_dir = _submit(root, epochs)
    events: list[dict[str, Any]] = []
    if interrupt:
        plan = [("preempt", PREEMPT_AT[0]), ("stall", STALL_AT), ("preempt", PREEMPT_AT[1])]
        for restart, (what, share) in enumerate(plan):
            at = _wait_step(run_dir, restart, int(share * steps))
            if what == "preempt":
                subprocess.run(["scancel", "-s", "USR1", job_id], check=True, timeout=30)
                sup.wait_for_requeue(job_id)
                events.append({"restart": restart, "what": what, "seen_at_step": at})
            else:
                tries = _stall_rank1(job_id, run_dir)
                events.append({"restart": restart, "what": what, "seen_at_step": at, "stop_tries": tries})
    state = sup.wait_for_state(job_id, timeout_s=900)
    wall = time.time() - t0
    if state != "COMPLETED":
        raise RuntimeError(f"job {job_id} ended {state}: {(run_dir / f'slurm-{job_id}.log').read_text()[-3000:]}")
    rows = sup.sacct_attempts(job_id, 1 + len(events), timeout_s=60)
    return _measured(run_dir, job_id, rows, steps, events, wall)


def _measured(run_dir: Path, job_id: str, rows: list[dict[str, str]], steps: int, events: list[dict[str, Any]], wall: float) -> dict[str, Any]:
    from trainer_cli.rundir import attempts as attempts_mod
    from trainer_cli.rundir import goodput

    measured = goodput.buckets(run_dir)
    marks = {a["attempt"]: a for a in attempts_mod.read(run_dir) if a.get("rank") == 0}
    allocated = sum(int(r["ElapsedRaw"]) for r in rows)
    total = measured["total"]
    per_attempt = []
    for index, row in enumerate(measured["attempts"]):
        cause = next((e["what"] for e in events if e["restart"] == index), "completed")
        mine = marks.get(row["attempt"], {})
        at = {"script_started": (row["slurm"] or {}).get("script_started"), "started": mine.get("started"), **(mine.get("marks") or {})}
        moments = {name: round(at[b] - at[a], 3) for name, a, b in MOMENTS if isinstance(at.get(a), (int, float)) and isinstance(at.get(b), (int, float))}
        per_attempt.append({
            "restart": index, "ended_by": cause, "after": per_attempt[-1]["ended_by"] if per_attempt else None, "start_step": row["start_step"], "last_step": row["last_step"],
            "redone_steps": row["redone_steps"], "script_to_first_step_s": row["script_to_first_step_s"],
            "sacct_elapsed_s": int(rows[index]["ElapsedRaw"]) if index < len(rows) else None, "moments_s": moments,
            **{key: round(row[key], 3) for key in ("wall_s", "goodput_s", *goodput.BUCKETS)},
        })
    return {
        "job_id": job_id, "steps": steps, "events": events, "submit_to_end_s": round(wall, 1),
        "allocated_s": allocated, "attempts": per_attempt,
        "total": {key: round(total[key], 3) for key in ("wall_s", "goodput_s", *goodput.BUCKETS)} | {"redone_steps": total["redone_steps"]},
        "goodput_of_allocation": total["goodput_s"] / allocated if allocated else None,
        "goodput_of_processes": total["goodput_s"] / total["wall_s"] if total["wall_s"] else None,
        "final_step": max((a["last_step"] or 0) for a in per_attempt),
    }


def summarize(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    """Medians over the rounds: goodput of each side, steps lost per preemption and to the stall, the
    restart cost of a resume after a preemption against a fresh start (each round's jobs' first attempts)."""
    def med(values: list[float]) -> float | None:
        return statistics.median(values) if values else None

    out: dict[str, Any] = {}
    for side in ("alone", "interrupted"):
        jobs = [r[side] for r in rounds]
        out[side] = {
            "goodput_of_allocation": med([j["goodput_of_allocation"] for j in jobs]),
            "goodput_of_processes": med([j["goodput_of_processes"] for j in jobs]),
            "allocated_s": med([j["allocated_s"] for j in jobs]),
            "goodput_s": med([j["total"]["goodput_s"] for j in jobs]),
            "buckets_s": {k: med([j["total"][k] for j in jobs]) for k in jobs[0]["total"] if k.endswith("_s")},
        }
    interrupted = [a for r in rounds for a in r["interrupted"]["attempts"]]
    lost = [a["redone_steps"] for a in interrupted if a["ended_by"] == "preempt"]
    fresh = [r[side]["attempts"][0]["script_to_first_step_s"] for r in rounds for side in ("alone", "interrupted")]
    resumed = [a["script_to_first_step_s"] for a in interrupted if a["after"] == "preempt"]
    after_stall = [a["script_to_first_step_s"] for a in interrupted if a["after"] == "stall"]
    fresh_f = [x for x in fresh if x is not None]
    resumed_f = [x for x in resumed if x is not None]

    def moments(select: Any) -> dict[str, float | None]:
        chosen = [a for r in rounds for side in ("alone", "interrupted") for a in r[side]["attempts"] if select(a, side)]
        return {name: med([a["moments_s"][name] for a in chosen if name in a["moments_s"]]) for name, _, _ in MOMENTS}

    out.update(
        steps_lost_per_preemption=lost,
        steps_lost_per_preemption_max=max(lost) if lost else None,
        steps_lost_to_the_stall=[a["redone_steps"] for a in interrupted if a["ended_by"] == "stall"],
        fresh_start_s=fresh_f, resume_after_preemption_s=resumed_f, resume_after_stall_s=[x for x in after_stall if x is not None],
        fresh_start_median_s=med(fresh_f), resume_after_preemption_median_s=med(resumed_f),
        restart_cost_ratio=(med(resumed_f) / med(fresh_f)) if fresh_f and resumed_f else None,
        fresh_start_moments_s=moments(lambda a, side: a["restart"] == 0),
        resume_after_preemption_moments_s=moments(lambda a, side: a["after"] == "preempt"),
        all_completed=all(r[s]["final_step"] == r[s]["steps"] for r in rounds for s in ("alone", "interrupted")),
    )
    out["goodput_ratio"] = (
        out["interrupted"]["goodput_of_allocation"] / out["alone"]["goodput_of_allocation"] if out["alone"]["goodput_of_allocation"] else None
    )
    return out


def run(smoke: bool = False) -> dict[str, Any]:
    epochs, repeats = (8, 1) if smoke else (EPOCHS, REPEATS)
    _cluster()
    rounds: list[dict[str, Any]] = []
    tmp = Path(tempfile.mkdtemp(prefix="bench-goodput-"))  # left in place when a job fails: its run directories and logs
    for index in range(repeats):
        order = ("alone", "interrupted") if index % 2 == 0 else ("interrupted", "alone")
        result: dict[str, Any] = {}
        for side in order:
            print(f"   round {index + 1}/{repeats}: {side} ...", flush=True)
            result[side] = _job(tmp / f"r{index}-{side}", epochs, interrupt=side == "interrupted")
        rounds.append(result)
        s = summarize([result])
        print(
            f"   round {index + 1}: goodput {s['interrupted']['goodput_of_allocation']:.0%} vs {s['alone']['goodput_of_allocation']:.0%} alone; "
            f"steps lost per preemption {s['steps_lost_per_preemption']}; restart cost {s['restart_cost_ratio']:.2f}x",
            flush=True,
        )
    shutil.rmtree(tmp, ignore_errors=True)
    return {
        "settings": {
            "nodes": NODES, "tasks_per_node": 1, "epochs": epochs, "steps": epochs * STEPS_PER_EPOCH, "steps_per_epoch": STEPS_PER_EPOCH,
            "batch_size_per_rank": 64, "limit_val_batches": VAL_BATCHES, "last_ckpt": "every epoch end",
            "stall_timeout_s": STALL_TIMEOUT_S, "preempt_at": PREEMPT_AT, "stall_at": STALL_AT, "repeats": repeats,
            "slurm": _slurm_version(),
        },
        "goals": {"steps_lost_per_preemption": LOST_GOAL, "restart_cost_ratio": RESTART_GOAL},
        "summary": summarize(rounds),
        "rounds": rounds,
    }


def _slurm_version() -> str:
    try:
        return subprocess.run(["sinfo", "--version"], capture_output=True, text=True, timeout=30).stdout.strip()
    except OSError:
        return "?"
