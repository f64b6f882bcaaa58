"""``train runs [ROOT...]``: the runs under one or more roots, with only the config keys that differ
between them and the best value of each run's monitored metric (as ``dvc exp show --only-changed``).

A run is a folder holding a ``config.yaml`` (a ``train fit`` run directory, a sweep's ``trial_<n>``,
a cv fold). Without a root, the launcher's runs under the current folder, a few levels deep (those
of ``train fit`` under ``runs/``, a user's script's where its logger writes). Each config is
flattened to dotted keys (list items by index, ``trainer.callbacks.1.init_args.monitor``); a value
naming the run's own folder reads ``<run>``, so paths that only follow the run directory do not
count as a difference. Keys with one value across every run listed are left out (``--all`` keeps
them). The metric is the monitor of the run's ``ModelCheckpoint`` and its best value in what the
run logged, whatever the logger (:func:`trainer_cli.rundir.metrics.read`: TensorBoard event files,
else the run's own ``metrics.jsonl``, else a CSV, MLflow or W&B logger's files), which also give the
epochs and steps logged. A metric's column is named by its mode, ``val/acc (max)``, ``val/loss (min)``:
it holds the highest (``max``) or lowest (``min``) value each run logged of it, whatever the run
monitors (two runs monitoring one metric with two modes give two columns). The start is the run's
first ``history.jsonl`` record; the duration the sum of its attempts' own wall times (rank 0's
``attempts/`` records: :func:`trainer_cli.rundir.attempts.read`), so the idle time between a stop and
its resume does not count (a run without attempt records: its first to last logged record). The cost
is what the run's Slurm jobs were allocated over every attempt
(GPU-hours, else CPU-hours; ``~`` before an estimate made without accounting;
:mod:`trainer_cli.rundir.run_cost`), ``-`` for a run no Slurm job ran; the goodput is the share of
that allocated time (of the processes' time for a local run) spent in training steps the final
model keeps (:func:`trainer_cli.rundir.goodput.allocated`; ``--format json`` gives each badput
bucket too). A resume that replayed and skipped data (``history.jsonl``'s ``inexact``: a plain DataLoader
stopped mid-epoch) is an ``inexact resume`` column, shown where a run listed has one. ``--plot METRIC`` draws that
metric's curves of the runs listed into a PNG. A sweep trial's
pruning callback (its trial number) is not counted as a setting. The state is the run's
``job.json`` (a submitted run or a sweep trial), else that of its last start's attempt records (a local
run: ``COMPLETED``, ``RUNNING``, ``CANCELLED`` or ``FAILED``: :func:`trainer_cli.rundir.attempts.last_state`),
else ``-``.

Read from the run directories (no checkpoint loaded: no torch import), and one ``sacct`` call for the
runs that ran in Slurm jobs (none for local runs).
"""

from __future__ import annotations

import argparse
import csv
import fnmatch
import json
import os
import re
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trainer_cli.errors import UserError, close_matches
from trainer_cli.job import cost as job_cost
from trainer_cli.rundir import goodput, layout, live, metrics, summary
from trainer_cli.rundir import index as runs_index
from trainer_cli.sweeps import costs as sweep_costs
from trainer_cli.tables import print_table
from trainer_cli.tools.run_row import read_run, run_state

if TYPE_CHECKING:
    from trainer_cli.job.scheduler import Scheduler

CONFIG_FILE = layout.CONFIG_FILE
"""Beside ``config.yaml``, what makes a folder found from the current folder a launcher's run
(a stock LightningCLI script saves a ``config.yaml`` too)."""
SKIPPED_DIRS = {"checkpoints", "code", "__pycache__", "data", "wandb", "mlruns", "mlartifacts", "node_modules"}
DISCOVERY_DEPTH = 6
"""How deep ``train runs`` without a root looks under the current folder (``runs/<name>/sweep_<N>/trial_<n>``: 4)."""
MAX_WIDTH = 40  # a value wider than this is cut in the table (CSV and JSON keep it whole)

HELP_EPILOG = """\
examples:
  train runs runs --plot val/acc              the curves of val/acc of every run, in runs_val_acc.png
  train runs                                  every run found under this folder, only the keys that differ
  train runs runs/digits/sweep_0              a sweep's trials
  train runs runs --name 'digits/version_*'   runs whose path (under the root) matches
  train runs runs --all --format csv > runs.csv
"""


def find_runs(root: Path, discover: bool = False) -> list[Path]:
    """Every folder under ``root`` (``root`` included) holding a ``config.yaml``, in natural order;
    ``checkpoints``, code snapshots, data, W&B and MLflow folders, hidden ones and a run's
    ``attempts/`` are not looked into.

    Args:
        root: The folder to look under.
        discover: Look at most :data:`DISCOVERY_DEPTH` levels deep, and count only the launcher's runs (a
            ``config.yaml`` in a run directory: :func:`trainer_cli.rundir.layout.is_run_dir`): ``train runs``
            without a root, from a project's folder (a script's runs sit where its logger writes, e.g.
            ``lightning_logs/version_0``).
    """
    return [Path(run_dir) for run_dir, *_ in _scan(root, discover)]


Found = tuple[str, list[tuple[str, int, int, int]], str, bool]
"""A run found by :func:`_scan`: its folder, its files, its path under the root, whether the index's row holds."""


def _scan(root: Path, discover: bool, index: runs_index.RunsIndex | None = None) -> list[Found]:
    """:func:`find_runs`, each run with its files as :class:`trainer_cli.rundir.summary.Summary` keys them, its path
    under ``root`` and whether ``index`` (:mod:`trainer_cli.rundir.index`) holds its row as it is now, from one pass
    over the folders (a listing of 10,000 runs lists each folder once; with an index, only those changed since)."""
    found: list[Found] = []
    level = [(str(root), ".")]
    depth = 0
    while level:
        pending = []
        for (folder, rel), (known, listed) in zip(level, runs_index.looked(level, index)):
            if known is not None and index is not None:
                is_run, subdirs = known.is_run, known.subdirs
                index.found(rel, None, {}, is_run, subdirs, None if known.unchanged else known.files)
                if is_run:
                    found.append((folder, known.files, rel, known.unchanged))
            elif listed is not None:
                entries, mtime, dirs = listed
                names = {e.name for e in entries}
                is_run = CONFIG_FILE in names and any(e.name == CONFIG_FILE and not e.is_dir() for e in entries)
                if is_run and discover:
                    is_run = any(name in names for name in layout.RUN_MARKERS) and layout.is_run_dir(Path(folder))
                files = summary.files_of(entries) if is_run else []
                if is_run:
                    found.append((folder, files, rel, False))
                subdirs = [
                    e.name
                    for e in entries
                    if not (
                        e.name in SKIPPED_DIRS or e.name.startswith(".") or (is_run and e.name in summary.SCANNED_DIRS)
                    )
                    and e.is_dir(follow_symlinks=False)  # as os.walk: a link to a folder is not followed
                ]
                if index is not None:
                    index.found(rel, mtime, dirs, is_run, subdirs, files, is_run and runs_index.settled(folder, names))
            else:
                continue
            if not (discover and depth >= DISCOVERY_DEPTH):
                pending += [(os.path.join(folder, name), name if rel == "." else f"{rel}/{name}") for name in subdirs]
        level, depth = pending, depth + 1
    return sorted(found, key=lambda f: _natural(f[0]))


def _natural(path: Path | str) -> list[Any]:
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", str(path))]


def column(metric: str, mode: str) -> str:
    """A metric's column: ``val/acc (max)``: the highest value each run logged of it (``min``: the lowest)."""
    return f"{metric} ({mode})"


def compare(runs: list[dict[str, Any]], every_key: bool = False) -> list[str]:
    """The config keys to show: those whose value differs between ``runs`` (all with ``every_key``),
    in the order they first appear."""
    keys: dict[str, None] = {}
    for run in runs:
        keys |= dict.fromkeys(run["config"])
    if every_key or not runs:
        return list(keys)
    first = runs[0]["config"].items()
    differ: set[str] = set()  # a key in no run's difference from the first has one value in every run
    for run in runs[1:]:
        differ.update(k for k, _ in first ^ run["config"].items())
    return [k for k in keys if k in differ and len({run["config"].get(k, "-") for run in runs}) > 1]


def collect(
    roots: list[Path],
    pattern: str | None = None,
    every_key: bool = False,
    discover: bool = False,
    curves: bool = False,
    engines: Mapping[str, Scheduler] | None = None,
) -> dict[str, Any]:
    """The runs under ``roots`` (their paths under the root matching ``pattern``: a glob, or a part of
    the path when it has no ``*?[``; a glob may match the last part alone), the keys shown and the metric columns.

    Args:
        roots: The folders to look under.
        pattern: Only the runs whose path under the root matches.
        every_key: Every config key, not only those that differ.
        discover: Look for the launcher's runs only, a few levels deep (:func:`find_runs`).
        curves: Each run's scalars (``--plot``), read from the logger's files; without, each metric's
            extremes, from the run's summary where it is up to date (:func:`_rows`).
        engines: The scheduler engines by name (:func:`trainer_cli.schedulers.engines`) whose accounting
            prices the runs their jobs ran (:func:`trainer_cli.rundir.run_cost.costs`); None: estimated.

    Raises:
        UserError: for a root that is not a folder.
    """
    found = []
    indexes = []
    for root in roots:
        if not root.is_dir():
            raise UserError(f"{root}: no such folder (train runs ROOT: a folder of runs, e.g. runs/)")
        resolved = root.resolve()  # the folders under it are found without following a link
        index = runs_index.RunsIndex(root) if not (discover or curves) else None
        indexes.append(index)
        for folder, files, rel, unchanged in _scan(root, discover, index):
            label = rel if rel != "." else Path(folder).name
            if pattern and not (_globbed(label, pattern) if any(c in pattern for c in "*?[") else pattern in label):
                continue
            listed = str(root / label) if rel != "." else folder  # runs/x, not ./runs/x (as Path joins)
            held = index.row(rel) if index is not None and unchanged else None
            own = os.path.join(resolved, rel) if rel != "." else str(resolved)
            found.append((listed, Path(folder), own, files, held, (index, rel)))
    rows, parts = _rows([(run_dir, own, files, held) for _, run_dir, own, files, held, _ in found], curves, engines)
    for (*_, held, (index, rel)), part in zip(found, parts):
        if index is not None:
            index.keep(rel, part, fresh=held is None)
    for index in indexes:
        if index is not None:
            index.save()
    runs = [{"run": label, "run_dir": str(run_dir), **row} for (label, run_dir, *_), row in zip(found, rows)]
    shown = list(dict.fromkeys((r["monitor"], r["mode"]) for r in runs if r["monitor"]))
    for run in runs:  # each column its own mode's extreme, whatever the run monitors
        logged = metrics.Logged(scalars=run.get("scalars") or {}, extremes=run.get("extremes") or {})
        run["columns"] = {column(m, mode): logged.best(m, mode) for m, mode in shown}
    return {"keys": compare(runs, every_key), "metrics": shown, "runs": runs}


ROW_PART = "row"


def _rows(
    found: list[tuple[Path, str, list[tuple[str, int, int, int]], dict[str, Any] | None]],
    curves: bool,
    engines: Mapping[str, Scheduler] | None = None,
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The row of each run (:func:`read_run` without ``run_dir``, its cost and goodput), in one ``accounting``
    call of each engine of ``engines`` for the runs that ran in its jobs (Slurm's: one ``sacct``), and the
    ``row`` part of each run's summary. Without ``curves``, a
    row the runs index holds as the run is now (``found``'s fourth item: :mod:`trainer_cli.rundir.index`), else
    one whose run's files are unchanged since a listing kept it in the run's summary
    (:mod:`trainer_cli.rundir.summary`), is read from there (its cost and goodput too when no Slurm job ran it:
    they depend on its files alone); the rows read from the files are kept there. ``found``: each run's folder,
    its path with no link, its files (:func:`_scan`), its row in the index. A row read from the index or a summary
    is its part itself (``row is part``)."""
    run_dirs = [run_dir for run_dir, *_ in found]
    kept: list[summary.Summary | None] = [
        summary.Summary(run_dir, files) if not curves and held is None else None for run_dir, _, files, held in found
    ]
    keys = [kept_i.key(own) if kept_i is not None else [] for kept_i, (_, own, _, _) in zip(kept, found)]
    parts: list[dict[str, Any] | None] = [
        held if held is not None else (own.get(ROW_PART, key) if own is not None else None)
        for (*_, held), own, key in zip(found, kept, keys)
    ]
    rows: list[dict[str, Any]] = []
    for i, run_dir in enumerate(run_dirs):
        part = parts[i]
        if part is not None:
            rows.append(part if "cost" in part else dict(part))
            if part.get("state") == "RUNNING" and not live.alive(run_dir):  # its process gone since (killed: no file
                rows[-1] = {**rows[-1], "state": run_state(run_dir)}  # changed); as its files say now, not kept
        else:
            read = read_run(run_dir, curves, kept[i])
            rows.append({k: v for k, v in read.items() if k != "run_dir"})
    todo = [i for i, row in enumerate(rows) if "cost" not in row]
    for i, spent in zip(todo, sweep_costs.of_runs([run_dirs[i] for i in todo], engines)):
        row = rows[i]
        measured = goodput.allocated(run_dirs[i], spent)
        row.update(
            cost=spent.as_json(),
            cost_cell=spent.cell(),
            goodput=goodput.as_json(measured),
            goodput_cell=goodput.cell(measured),
        )
        if parts[i] is not None:
            continue
        if spent.source == job_cost.NONE:  # no Slurm job: nothing outside the run's files
            parts[i] = json.loads(json.dumps(row, default=str))
        else:
            parts[i] = {k: v for k, v in row.items() if not k.startswith(("cost", "goodput"))}
        own = kept[i]
        if own is not None:
            own.put(ROW_PART, keys[i], parts[i])
    for own in kept:
        if own is not None:
            own.save()
    return rows, [part if part is not None else row for part, row in zip(parts, rows)]


def _globbed(label: str, pattern: str) -> bool:
    """Whether the path ``label`` or its last part matches the glob ``pattern``."""
    return fnmatch.fnmatch(label, pattern) or fnmatch.fnmatch(Path(label).name, pattern)


def _cut(text: str) -> str:
    return text if len(text) <= MAX_WIDTH else text[: MAX_WIDTH - 3] + "..."


def _duration(seconds: int | None) -> str:
    if seconds is None:
        return "-"
    return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"


def table_rows(found: dict[str, Any], cut: bool = True) -> tuple[list[str], list[list[str]]]:
    """``(header, rows)``: run, state, epochs, steps, each metric's column (:func:`column`), start, duration,
    cost, goodput, the resumes that replayed and skipped data (where a run listed has one), each key shown."""
    inexact = any(run["inexact_resumes"] for run in found["runs"])
    header = [
        "run",
        "state",
        "epochs",
        "steps",
        *(column(m, mode) for m, mode in found["metrics"]),
        "start",
        "duration",
        "cost",
        "goodput",
        *(["inexact resume"] if inexact else []),
        *found["keys"],
    ]
    rows = []
    for run in found["runs"]:
        values_of = [run["columns"].get(column(m, mode)) for m, mode in found["metrics"]]
        scores = ["-" if value is None else f"{value:.4f}" for value in values_of]
        values = [run["config"].get(k, "-") for k in found["keys"]]
        start = run["start"].replace("T", " ")[:16]
        rows.append(
            [
                run["run"],
                run["state"],
                str(run["epochs"]),
                str(run["steps"]),
                *scores,
                start,
                _duration(run["duration_s"]),
                run["cost_cell"],
                run["goodput_cell"],
                *(["; ".join(run["inexact_resumes"]) or "-"] if inexact else []),
                *(_cut(v) if cut else v for v in values),
            ]
        )
    return header, rows


def plot(found: dict[str, Any], metric: str, path: Path) -> Path | None:
    """Draw ``metric`` against the step for every run listed that logged it (matplotlib's Agg
    canvas, object API); None when none did."""
    curves = [(run["run"], sorted(run["scalars"][metric])) for run in found["runs"] if run["scalars"].get(metric)]
    if not curves:
        return None
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=(9, 5))
    FigureCanvasAgg(figure)
    axes = figure.add_subplot()
    for label, points in curves:
        axes.plot([s for s, _ in points], [v for _, v in points], marker="." if len(points) < 30 else None, label=label)
    axes.set_xlabel("step")
    axes.set_ylabel(metric)
    axes.grid(alpha=0.3)
    if len(curves) <= 12:
        axes.legend(fontsize="small")
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    return path


def main(args: Sequence[str], engines: Mapping[str, Scheduler] | None = None) -> int:
    """``train runs [ROOT...] [--name PATTERN] [--all] [--format table|csv|json]``; returns 0. ``engines``: the
    scheduler engines by name (the entry point gives every one it can ask: the runs' costs from their accounting).

    Raises:
        UserError: for a root that is not a folder.
    """
    parser = argparse.ArgumentParser(
        prog="train runs",
        description="The runs under ROOT (default: found under this folder): state, best monitored metric, "
        "epochs and steps, and the config keys "
        "that differ between them.",
        epilog=HELP_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "roots", nargs="*", type=Path, help="folders of runs (default: the launcher's runs found under this folder)"
    )
    parser.add_argument("--name", help="only runs whose path under the root matches (a glob, or a part of it)")
    parser.add_argument("--all", action="store_true", help="every config key, not only those that differ")
    parser.add_argument("--diff", action="store_true", help="only the keys that differ (the default)")
    parser.add_argument("--format", choices=("table", "csv", "json"), default="table")
    parser.add_argument("--plot", metavar="METRIC", help="write METRIC's curves of the runs listed to a PNG")
    parser.add_argument("--plot_file", type=Path, help="the PNG of --plot (default: runs_<METRIC>.png here)")
    opts = parser.parse_args(list(args))
    found = collect(
        opts.roots or [Path(".")], opts.name, opts.all, discover=not opts.roots, curves=bool(opts.plot), engines=engines
    )
    if opts.plot:
        path = opts.plot_file or Path(f"runs_{re.sub(r'[^A-Za-z0-9_.-]+', '_', opts.plot)}.png")
        if plot(found, opts.plot, path) is None:
            logged = sorted({tag for run in found["runs"] for tag in run["scalars"]})
            close = close_matches(opts.plot, logged)
            listed = ", ".join(logged) or "nothing"
            hint = f"; did you mean: {', '.join(close)}?" if close else f" (they logged: {listed})"
            raise UserError(f"--plot {opts.plot}: no run listed logged it{hint}")
        print(f"written: {path}", file=sys.stderr if opts.format != "table" else sys.stdout)
    if opts.format == "json":
        hidden = ("scalars", "extremes", "cost_cell", "goodput_cell")
        public = {**found, "runs": [{k: v for k, v in r.items() if k not in hidden} for r in found["runs"]]}
        print(json.dumps(public, indent=2, default=str))
        return 0
    header, rows = table_rows(found, cut=opts.format == "table")
    if opts.format == "csv":
        writer = csv.writer(sys.stdout)
        writer.writerow(header)
        writer.writerows(rows)
        return 0
    if not rows:
        print(
            f"no runs under {', '.join(map(str, opts.roots or ['this folder']))}"
            + (f" matching {opts.name}" if opts.name else "")
            + ("" if opts.roots else f" ({DISCOVERY_DEPTH} levels deep; give the folder of your runs: train runs ROOT)")
        )
        return 0
    print_table(rows, header)
    shown = "every key" if opts.all else f"{len(found['keys'])} key(s) that differ"
    print(f"{len(rows)} run(s); {shown}")
    return 0
