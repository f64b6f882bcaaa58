"""``train sweep-results SWEEP_DIR``: one row per trial, best first, also while trials still run.

Read from what is on disk, nothing is loaded into a model: each trial's best score of the study's
metric (``--sweep_metric``, by default the checkpoint's monitor) from its newest checkpoint's
``ModelCheckpoint`` state (:func:`trainer_cli.rundir.layout.best_score`; before its first such
checkpoint, or when no ``ModelCheckpoint`` monitors that metric, from what it logged, whatever the
logger: :func:`trainer_cli.rundir.metrics.read`), its
state from the sweep's engine for a submitted sweep (one ``describe`` of the scheduler seam for all its
tasks, as ``train jobs`` asks: for Slurm one ``scontrol`` call) completed by the trial's ``job.json``,
and its progress from the last epoch line of its log. Rows
are sorted by the score (``mode`` max: highest first; min: lowest first; trials without a score
last) and written as ``sweep_results.csv`` and ``sweep_results.json`` in the sweep directory, with
``sweep_results.png`` (:mod:`trainer_cli.plots`: the metric against each swept axis).

A sweep with an Optuna study (every ``train fit --sweep`` since the study became its engine,
:mod:`trainer_cli.sweeps.study`) adds each trial's state in the study (``study``: COMPLETE, PRUNED,
FAIL, RUNNING, WAITING) and the value it was told, the parameter importances (Optuna's default
evaluator, once two trials or more are complete), Optuna's plots beside the table
(``sweep_history.png``: optimization history, ``sweep_importance.png``, ``sweep_parallel.png``:
parallel coordinate; matplotlib's Agg canvas) and the ``optuna-dashboard`` command for the study.

Each trial's cost is what its attempts were allocated (GPU-hours, else CPU-hours, from ``sacct`` where
there is accounting, else estimated: :mod:`trainer_cli.rundir.run_cost`) and its goodput the share of
that time spent in training steps the trial's final model keeps (:func:`trainer_cli.rundir.goodput.allocated`);
the line under the table is the sweep's total cost, the pruned trials' share apart.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trainer_cli.job import jobstate
from trainer_cli.job.cost import NONE as NO_COST
from trainer_cli.job.cost import Cost
from trainer_cli.rundir import goodput, layout, metrics, summary
from trainer_cli.rundir import index as runs_index
from trainer_cli.rundir.layout import LAST_CKPT
from trainer_cli.sweeps import figures
from trainer_cli.sweeps import study as study_of_sweep
from trainer_cli.sweeps.costs import cost_line, total_cost, trial_costs
from trainer_cli.sweeps.plan import read_record
from trainer_cli.tables import print_table

if TYPE_CHECKING:
    from trainer_cli.job.scheduler import Scheduler

RESULTS_CSV = "sweep_results.csv"
RESULTS_JSON = "sweep_results.json"
NOT_STARTED = "PENDING"
CHECKPOINTS_DIR = LAST_CKPT.parent.name

HELP_EPILOG = """\
examples:
  train fit --config configs/experiment/digits.yaml \\
      --sweep optimizer.init_args.lr=1e-3,1e-2 --sweep data.init_args.batch_size=32,64
  train submit --config configs/experiment/digits.yaml --config configs/slurm/local.yaml \\
      --sweep optimizer.init_args.lr=loguniform(1e-4,1e-1) --sweep_trials 8 --sweep_seed 0 --slurm.array_parallelism 2
  train sweep-results runs/digits/sweep_0

--sweep KEY=VALUES (repeatable; KEY is any `train fit` option, dotted), VALUES one of:
  v1,v2,...              a grid axis; each value as after --KEY (a YAML scalar or [..]/{..})
  range(start,stop[,step])  a grid axis of integers, stop excluded (Python's range)
  uniform(low,high)      random: a float drawn uniformly
  loguniform(low,high)   random: a float drawn uniformly in log space (learning rates)
  randint(low,high)      random: an integer low..high-1
  choice(v1,v2,...)      random: one of the values
Grid axes are crossed; each grid point gets --sweep_trials N trials (default 1) drawing the random
axes from --sweep_seed S (default 0): the same command gives the same trials. Every trial is
composed and type-checked (as if each value were given as --KEY VALUE) before anything is written
or queued. `train fit --sweep` runs the trials one after another here; `train submit --sweep`
queues one Slurm job array, one task per trial (--slurm.array_parallelism N: at most N at once).

The search is an Optuna study (study.journal in the sweep directory, or --sweep_storage URL):
  --sweep_sampler grid|random|tpe|cmaes   grid (default): the trials above; else the study asks
                                          --sweep_trials N (default 10), seeded by --sweep_seed
  --sweep_pruner none|median|hyperband|successive_halving   optionally 'median(n_startup_trials=2)'
  --sweep_metric NAME --sweep_direction maximize|minimize   default: the checkpoint's monitor and mode
`train fit` runs an Optuna-driven sweep; `train runs` compares the trials' configs.
"""


def monitor_of(config_file: Path) -> tuple[str, str] | None:
    """``(monitor, mode)`` of the first ``ModelCheckpoint`` with a monitor in a run's config.yaml."""
    from trainer_cli.rundir import record

    try:
        config = record.read(config_file, launcher=False)  # the one reader of a run's record
    except OSError:
        return None
    return study_of_sweep.monitor_of(config) if config is not None else None


def dashboard_command(record: dict[str, Any]) -> str | None:
    """``optuna-dashboard <storage>``: the command that serves the study in a browser."""
    if not record.get("study"):
        return None
    import shlex

    return f"optuna-dashboard {shlex.quote(record['study']['storage'])}"


def logged_best(run_dir: Path, monitor: str | None, mode: str) -> float | None:
    """The best value of ``monitor`` the run logged, whatever the logger
    (:func:`trainer_cli.rundir.metrics.read`: a trial that has logged it but saved no checkpoint with a
    score yet); None without one."""
    return metrics.read(run_dir).best(monitor, mode) if monitor else None


def trial_states(record: dict[str, Any], engines: Mapping[str, Scheduler] | None = None) -> list[tuple[str, int]]:
    """``(state, restarts)`` per trial: for a submitted sweep, what its engine (of ``engines``, by the
    sweep's ``scheduler``, Slurm's by default) says of each trial's array task (one ``describe`` for all),
    completed from each trial's ``job.json`` (:func:`trainer_cli.job.status.with_run_record`); a local
    sweep's, a sweep of workers' and one whose engine is not in ``engines`` from ``job.json`` alone
    (PENDING before the trial starts). A task whose job runs another folder's script (a reused id) is not
    the trial's."""
    from trainer_cli.job.scheduler import DEFAULT_SCHEDULER
    from trainer_cli.job.status import with_run_record

    trials = record["trials"]
    job_id = str(record.get("job_id") or "")
    engine = (engines or {}).get(str(record.get("scheduler") or DEFAULT_SCHEDULER))
    if not job_id or record.get("workers") or engine is None:  # (workers: their array tasks are not trials)
        out = []
        for trial in trials:
            recorded = jobstate.read(Path(trial["run_dir"]))
            out.append((str(recorded.get("state") or NOT_STARTED), jobstate.run_restarts(recorded)))
        return out
    tasks = [f"{job_id}_{t['index']}" for t in trials]
    said = engine.describe(tasks)
    own = Path(record["sweep_dir"])
    statuses = [
        with_run_record(s if s is not None and s.is_of(own) else None, job_id, Path(t["run_dir"]))
        for s, t in ((said.get(task), t) for task, t in zip(tasks, trials))
    ]
    return [(s.state, s.restarts) for s in statuses]


def _goodput(run_dir: Path, spent: Cost) -> dict[str, Any]:
    """A trial's goodput (:func:`trainer_cli.rundir.goodput.allocated`): ``goodput`` (JSON) and its cell."""
    measured = goodput.allocated(run_dir, spent)
    return {"goodput": goodput.as_json(measured), "goodput_cell": goodput.cell(measured)}


TRIAL_PART = "sweep_trial"
"""A trial's row in its run's summary (:mod:`trainer_cli.rundir.summary`), keyed by its files (its checkpoints
included), the metric and its mode: score, epochs and progress; in a sweep run here (no Slurm job) also its
state, restarts, cost and goodput, which then come from the trial's files alone."""
TRIALS_INDEX = ".trials-index.json"
"""The sweep directory's index of its trials' rows (:mod:`trainer_cli.rundir.index`, under the metric and its mode)."""
_FROM_ENGINE = ("state", "restarts", "cost", "cost_cell", "goodput", "goodput_cell")


def _rows(
    record: dict[str, Any], monitor: str | None, mode: str, engines: Mapping[str, Scheduler] | None = None
) -> list[dict[str, Any]]:
    """Each trial's row (without its study state), in the record's order: read from the trial's summary where its
    files are unchanged since a listing kept it there, else from its files (and its engine: one ``describe`` and
    one ``accounting`` call for the sweep) and kept. A sweep listed again opens one small file a trial and no
    checkpoint."""
    from trainer_cli.job.status import last_epoch_line

    trials = record["trials"]
    submitted = bool(record.get("job_id"))
    sweep_dir = Path(record["sweep_dir"])
    dirs = (*summary.SCANNED_DIRS, CHECKPOINTS_DIR)
    index = runs_index.RunsIndex(sweep_dir, TRIALS_INDEX, extra=[monitor, mode])
    kept: list[summary.Summary | None] = []
    keys: list[Any] = []
    parts: list[dict[str, Any] | None] = []
    rels: list[str | None] = []
    rows: list[dict[str, Any]] = []
    for trial in trials:
        run_dir = Path(trial["run_dir"])
        rel = run_dir.name if run_dir.parent == sweep_dir else None
        known = index.folder(str(run_dir), rel) if rel else None
        row = index.row(rel) if rel and known is not None and known.unchanged else None
        own = None
        if row is not None and rel:
            index.found(rel, None, {}, True, [], None)
        else:
            listed = runs_index.list_folder(str(run_dir), dirs)
            files = summary.files_of(listed[0], dirs=dirs) if listed else None
            if rel and listed:  # a trial with no writer is trusted from its folder's stat next (runs_index.settled)
                names = {entry.name for entry in listed[0]}
                index.found(rel, listed[1], listed[2], True, [], files or [], runs_index.settled(str(run_dir), names))
            own = summary.Summary(run_dir, files, dirs=dirs)
            row = own.get(TRIAL_PART, own.key(monitor, mode))
        kept.append(own)
        keys.append(own.key(monitor, mode) if own is not None else [])
        parts.append(row if isinstance(row, dict) else None)
        rels.append(rel)
        if not isinstance(row, dict):
            newest = layout.newest_checkpoint(run_dir)  # epochs done; before the first checkpoint, as logged
            log = jobstate.read(run_dir).get("log")  # its job's output, as the engine's submission named it
            row = {
                "score": metrics.best_value(run_dir, monitor, mode, own),
                "epochs": newest.epochs_done if newest else metrics.summary(run_dir, own).epochs,
                "progress": last_epoch_line(Path(log)) if log else "-",
            }
        rows.append({"trial": trial["index"], "values": trial.get("values", {}), **row, "run_dir": str(run_dir)})
    todo = [i for i, row in enumerate(rows) if submitted or "cost" not in row]
    chosen = {**record, "trials": [trials[i] for i in todo]}
    for i, (state, restarts), cost in zip(todo, trial_states(chosen, engines), trial_costs(chosen, engines)):
        rows[i] |= {"state": state, "restarts": restarts, "cost": cost.as_json(), "cost_cell": cost.cell()}
        rows[i] |= _goodput(Path(rows[i]["run_dir"]), cost)
        files_only = not submitted and cost.source == NO_COST  # nothing outside the trial's files
        part = {k: rows[i][k] for k in ("score", "epochs", "progress", *(_FROM_ENGINE if files_only else ()))}
        part = json.loads(json.dumps(part, default=str))
        own = kept[i]
        if own is not None and part != parts[i]:
            own.put(TRIAL_PART, keys[i], part)
        parts[i] = part
    for own in kept:
        if own is not None:
            own.save()
    for rel, own, held in zip(rels, kept, parts):
        if rel and held is not None:
            index.keep(rel, held, fresh=own is not None)
    index.save()
    order = ("trial", "values", "score", "state", "restarts", "epochs", "progress", "run_dir")
    return [{k: row[k] for k in order} | {k: v for k, v in row.items() if k not in order} for row in rows]


def collect(sweep_dir: Path, engines: Mapping[str, Scheduler] | None = None) -> dict[str, Any]:
    """Every trial's values, best score, state and progress, best first.

    Args:
        sweep_dir: The sweep directory (``sweep.json``).
        engines: The scheduler engines by name (:func:`trainer_cli.schedulers.engines`) asked for the
            state of a submitted sweep's trials; None: each trial's ``job.json`` alone.

    Returns:
        ``{"sweep_dir", "monitor", "mode", "keys", "rows"}``; each row ``{"trial", "values", "score",
        "state", "restarts", "epochs", "progress", "run_dir", "cost"}`` (``score`` None without a checkpoint
        yet; ``cost``: :meth:`trainer_cli.job.cost.Cost.as_json`), and ``cost``: the sweep's (:func:`total_cost`).

    Raises:
        UserError: when ``sweep_dir`` is not a sweep directory.
    """
    record = read_record(sweep_dir)
    trials = record["trials"]
    keys = [axis["key"] for axis in record.get("axes", [])]
    kept = figures.Cache(sweep_dir)  # read once: write() and figures.draw() keep theirs in it too
    study = figures.StudyTrials(record["study"], kept) if record.get("study") else None
    objective = record.get("study") or {}
    monitor: str | None
    if objective.get("metric"):  # the study's metric (--sweep_metric, or the checkpoint's monitor it defaulted to)
        monitor, mode = str(objective["metric"]), "max" if objective.get("direction") == "maximize" else "min"
    else:
        found = monitor_of(Path(trials[0]["run_dir"]) / "config.yaml") if trials else None
        monitor, mode = found or (None, "min")
    rows = _rows(record, monitor, mode, engines)
    for trial, row in zip(trials, rows):
        if study is not None:
            state, value = study.trials.get(trial["index"], ("-", None))
            row["study"], row["value"] = state, value
    sign = -1.0 if mode == "max" else 1.0
    rows.sort(key=lambda r: (r["score"] is None or math.isnan(r["score"]), sign * (r["score"] or 0.0), r["trial"]))
    out: dict[str, Any] = {
        "sweep_dir": str(Path(sweep_dir).absolute()),
        "monitor": monitor,
        "mode": mode,
        "keys": keys,
        "rows": rows,
        "cost": total_cost(rows),
        "_cache": kept,
        "_record": record,  # sweep.json read once (1.9 MB at 10,000 trials: 0.1 s a read)
    }
    if study is not None:  # the importances computed once per state of the study's told trials
        ranked = kept.get("importances", study.told)
        if not isinstance(ranked, dict):
            ranked = figures.importances(study.load())
            kept.put("importances", study.told, ranked)
        out |= {"study": record["study"], "importances": ranked, "_study": study.load, "_told": study.told}
    kept.save()
    return out


def write(results: dict[str, Any]) -> tuple[Path, Path]:
    """Write ``sweep_results.csv`` (one row per trial, best first) and ``sweep_results.json``; returns both paths.
    Both are left as they are when they hold these results already (:mod:`trainer_cli.sweeps.figures`: the
    results' key, and the files' sizes and times as written)."""
    sweep_dir = Path(results["sweep_dir"])
    json_path, csv_path = sweep_dir / RESULTS_JSON, sweep_dir / RESULTS_CSV
    public = {k: v for k, v in results.items() if not k.startswith("_")}
    public["rows"] = [{k: v for k, v in row.items() if not k.endswith("_cell")} for row in results["rows"]]
    kept, key = results.get("_cache") or figures.Cache(sweep_dir), figures.key_of(json.dumps(public, default=str))
    if kept.get("written", key) == figures.stamps(json_path, csv_path):
        return csv_path, json_path
    json_path.write_text(json.dumps(public, indent=2, default=str) + "\n")
    metric = results["monitor"] or "score"
    with csv_path.open("w", newline="") as f:
        writer = csv.writer(f)
        studied = "study" in results
        writer.writerow(
            [
                "trial",
                *results["keys"],
                metric,
                "state",
                *(["study"] if studied else []),
                "restarts",
                "epochs",
                "gpu_hours",
                "cpu_hours",
                "node_hours",
                "cost_source",
                "goodput_pct",
                "run_dir",
            ]
        )
        for row in results["rows"]:
            values = [row["values"].get(k, "") for k in results["keys"]]
            writer.writerow(
                [
                    row["trial"],
                    *values,
                    "" if row["score"] is None else row["score"],
                    row["state"],
                    *([row["study"]] if studied else []),
                    row["restarts"],
                    row["epochs"],
                    *(
                        "" if row["cost"][k] is None else row["cost"][k]
                        for k in ("gpu_hours", "cpu_hours", "node_hours")
                    ),
                    row["cost"]["source"],
                    "" if row["goodput"]["goodput_pct"] is None else row["goodput"]["goodput_pct"],
                    row["run_dir"],
                ]
            )
    kept.put("written", key, figures.stamps(json_path, csv_path))
    kept.save()
    return csv_path, json_path


def table_rows(results: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
    """``(header, rows)`` of the results table, best first (for :func:`trainer_cli.tables.print_table`)."""
    metric = results["monitor"] or "score"
    studied = "study" in results
    header = [
        "trial",
        *results["keys"],
        f"{metric} ({results['mode']})",
        "state",
        *(["study"] if studied else []),
        "restarts",
        "epochs",
        "cost",
        "goodput",
        "progress",
    ]
    rows = []
    for row in results["rows"]:
        score = "-" if row["score"] is None else f"{row['score']:.4f}"
        values = [str(row["values"].get(k, "")) for k in results["keys"]]
        study = [row["study"]] if studied else []
        rows.append(
            [
                str(row["trial"]),
                *values,
                score,
                row["state"],
                *study,
                str(row["restarts"]),
                str(row["epochs"]),
                row["cost_cell"],
                row["goodput_cell"],
                row["progress"],
            ]
        )
    return header, rows


def report(sweep_dir: Path, engines: Mapping[str, Scheduler] | None = None) -> dict[str, Any]:
    """Print the table of ``sweep_dir`` and write its CSV and JSON; returns the results (``engines``: as
    :func:`collect` takes them).

    Raises:
        UserError: when ``sweep_dir`` is not a sweep directory.
    """
    results = collect(sweep_dir, engines)
    print(
        f"sweep {results['sweep_dir']}: {len(results['rows'])} trial(s), best "
        f"{results['monitor'] or '(no monitored metric)'} first"
    )
    header, rows = table_rows(results)
    print_table(rows, header)
    spent = cost_line(results)
    if spent:
        print(spent)
    csv_path, json_path = write(results)
    kinds = {axis["key"]: axis.get("kind", "") for axis in results["_record"].get("axes", [])}
    png, pictures = figures.draw(results, kinds)
    if results.get("importances"):
        ranked = ", ".join(f"{key} {value:.2f}" for key, value in results["importances"].items())
        print(f"parameter importance: {ranked}")
    written = ", ".join(str(p) for p in (csv_path, json_path, *([png] if png else []), *pictures))
    print(f"written: {written}" + ("" if png else " (no plot: no trial has a score yet)"), flush=True)
    command = dashboard_command(results["_record"])
    if command:
        import shutil

        missing = "" if shutil.which("optuna-dashboard") else "  (not installed here: pip install optuna-dashboard)"
        print(f"dashboard: {command}{missing}", flush=True)
    return results


def main(args: Sequence[str], engines: Mapping[str, Scheduler] | None = None) -> int:
    """``train sweep-results SWEEP_DIR``: print and write the table of a sweep; returns 0. ``engines``: the
    scheduler engines by name (the entry point gives every one it can ask: a submitted sweep's states).

    Raises:
        UserError: when SWEEP_DIR is not a sweep directory.
    """
    parser = argparse.ArgumentParser(
        prog="train sweep-results",
        description="The table of a sweep's trials: swept values, best monitored metric, state; best first.",
        epilog=HELP_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("sweep_dir", help="the sweep directory, <trainer.default_root_dir>/<name>/sweep_<N>")
    opts = parser.parse_args(list(args))
    report(Path(opts.sweep_dir), engines)
    return 0
