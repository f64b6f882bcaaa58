"""What a sweep's trials cost, and any listed run (``train runs``, ``train sweep-results``): each trial's
allocation over every attempt from its engine's accounting (:mod:`trainer_cli.rundir.run_cost`), a trial of
a sweep's array workers its share of its worker's task (:func:`trainer_cli.rundir.run_cost.worker_trial_costs`),
the sweep's total and its line under the table.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trainer_cli.errors import UserError
from trainer_cli.job.cost import Cost, duration_text, hours_text
from trainer_cli.rundir import run_cost
from trainer_cli.sweeps.plan import SWEEP_FILE, read_record

if TYPE_CHECKING:
    from trainer_cli.job.scheduler import Scheduler


def trial_costs(record: dict[str, Any], engines: Mapping[str, Scheduler] | None = None) -> list[Cost]:
    """What each trial's attempts were allocated (:mod:`trainer_cli.rundir.run_cost`: one ``accounting`` call of
    the engine of ``engines`` for all, for Slurm one ``sacct``; a submitted sweep's trial is its task
    ``<array id>_<i>``; without the engine, estimated). A sweep of workers, whose
    tasks train several trials each: each trial's share of its task, estimated from the time of its
    processes (:func:`trainer_cli.rundir.run_cost.worker_trial_costs`)."""
    trials = record["trials"]
    job_id = str(record.get("job_id") or "")
    if record.get("workers"):
        dirs = [Path(t["run_dir"]) for t in trials]
        if not job_id:
            return [Cost() for _ in trials]
        return run_cost.worker_trial_costs(dirs, job_id, int(record["workers"]), engines)
    extra = [[f"{job_id}_{t['index']}"] if job_id else [] for t in trials]
    return run_cost.costs([Path(t["run_dir"]) for t in trials], extra, engines=engines)


def total_cost(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The sweep's cost: GPU-, CPU- and node-hours over every trial's attempts, and those of the trials
    the study pruned apart (``pruned``); ``source``: sacct, estimated, or both (``mixed``)."""

    def summed(chosen: list[dict[str, Any]]) -> dict[str, Any]:
        figures = [r["cost"] for r in chosen if r["cost"]["cpu_hours"] is not None]
        return {
            "trials": len(figures),
            **{k: round(sum(f[k] or 0.0 for f in figures), 6) for k in ("gpu_hours", "cpu_hours", "node_hours")},
            "queue_wait_s": sum(r["cost"]["queue_wait_s"] for r in chosen),
        }

    sources = sorted({r["cost"]["source"] for r in rows if r["cost"]["source"] != "none"})
    return {
        "source": sources[0] if len(sources) == 1 else ("mixed" if sources else "none"),
        **summed(rows),
        "pruned": summed([r for r in rows if r.get("study") == "PRUNED"]),
    }


def cost_line(results: dict[str, Any]) -> str | None:
    """The sweep's cost in one line: ``cost: 0.12 CPU-h over 8 trial(s) (sacct), 0.03 CPU-h of it in 3
    pruned trial(s); queue wait 0:01:10, not in it``; None when no trial's cost is known."""
    total = results.get("cost") or {}
    if not total.get("trials"):
        return None
    kind = "gpu" if total["gpu_hours"] else "cpu"
    unit = f"{kind.upper()}-h"
    line = f"cost: {hours_text(total[kind + '_hours'])} {unit} over {total['trials']} trial(s) ({total['source']})"
    pruned = total["pruned"]
    if pruned["trials"]:
        line += f", {hours_text(pruned[kind + '_hours'])} {unit} of it in {pruned['trials']} pruned trial(s)"
    return line + f"; queue wait {duration_text(total['queue_wait_s'])}, not in it"


def of_runs(run_dirs: Sequence[Path], engines: Mapping[str, Scheduler] | None = None) -> list[Cost]:
    """Each run's cost (:func:`trainer_cli.rundir.run_cost.costs`), but a trial of a sweep's array workers
    (``--slurm.array_workers``: each task trains several trials) is priced as ``train sweep-results`` prices it,
    its share of its task (:func:`trial_costs`), not its task's whole allocation."""
    out: list[Cost | None] = [None] * len(run_dirs)
    by_sweep: dict[Path, list[int]] = {}
    for i, run_dir in enumerate(run_dirs):
        if (run_dir.parent / SWEEP_FILE).is_file():
            by_sweep.setdefault(run_dir.parent, []).append(i)
    for sweep_dir, members in by_sweep.items():
        try:
            record = read_record(sweep_dir)
        except UserError:  # not readable: priced as any run
            continue
        if not record.get("workers"):
            continue
        trials = {Path(t["run_dir"]).resolve(): t for t in record.get("trials") or []}
        chosen = [(i, trials[run_dirs[i].resolve()]) for i in members if run_dirs[i].resolve() in trials]
        for (i, _), spent in zip(chosen, trial_costs({**record, "trials": [t for _, t in chosen]}, engines)):
            out[i] = spent
    rest = [i for i, spent in enumerate(out) if spent is None]
    for i, spent in zip(rest, run_cost.costs([run_dirs[i] for i in rest], engines=engines)):
        out[i] = spent
    return [spent if spent is not None else Cost() for spent in out]
