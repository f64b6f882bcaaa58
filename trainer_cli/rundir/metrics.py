"""What a run logged, read back from its directory whatever the logger: each metric's values by
step, the epochs and steps done, the wall times of the first and last record.

One reader for every verb that needs a run's metrics: the sweep's metric (a trial's value told to
the study), ``train sweep-results`` and ``train runs``. The sources, the first that a run has:

1. TensorBoard event files (``events.out.tfevents.*`` in the run directory): every step logged;
2. the run's own record, ``metrics.jsonl`` (:data:`trainer_cli.rundir.layout.METRICS_FILE`): the
   launcher's :class:`~trainer_cli.callbacks.run_summary.RunSummary` appends the Trainer's
   ``callback_metrics`` with the epoch and global step at the start of training, at each
   validation end, at each training epoch end and where a stop or crash ended the fit, whatever
   the logger (CSV, W&B, MLflow, none);
3. for a run written before that record existed: CSVLogger's ``metrics.csv``, the MLflow run that
   ``run.json`` names (its SQLite store or ``mlruns`` folder), W&B's ``wandb-summary.json`` under
   ``<run>/wandb/`` (the last value of each metric only).

The epochs and steps done are the higher of the source's and the run's own record's (its stop
record has the step a SIGTERM or Ctrl-C ended the fit at, where the loggers may have logged none).

Reading is cheap and imports no torch (TensorBoard's event reader only when event files exist).
"""

from __future__ import annotations

import csv
import fnmatch
import json
import math
import sqlite3
from collections.abc import Iterator
from contextlib import closing
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

from trainer_cli.atomic import read_json, read_json_lines
from trainer_cli.rundir.layout import METRICS_FILE, RUN_FILE
from trainer_cli.rundir.summary import Summary

EVENTS_GLOB = "events.out.tfevents.*"
CSV_FILE = "metrics.csv"  # CSVLogger's
WANDB_SUMMARY_GLOB = "wandb/*/files/wandb-summary.json"
MLFLOW_KEY = "mlflow"  # in run.json: {tracking_uri: MLflow run id}
EPOCH_STAGE = "epoch"
"""A record of :data:`METRICS_FILE` written at a training epoch's end (its ``epoch`` is then done)."""
STOP_STAGE = "stop"
"""A record of :data:`METRICS_FILE` written where a stop or crash ended the fit (its ``epoch`` not done)."""

Scalars = dict[str, list[tuple[int, float]]]


@dataclass(frozen=True)
class Logged:
    """What a run logged (:func:`read`)."""

    scalars: Scalars = field(default_factory=dict)
    """``{metric: [(step, value), ...]}`` in the order logged; NaN values left out."""
    epochs: int = 0
    """Epochs logged (the highest ``epoch`` + 1; 0 before the first)."""
    steps: int = 0
    """The highest step logged."""
    first_time: float | None = None
    """Wall time (seconds since the epoch) of the first record, None when the source has none."""
    last_time: float | None = None
    """Wall time of the last record."""
    source: str = ""
    """The files read, e.g. ``metrics.jsonl`` or ``TensorBoard event files``; empty when none was found."""
    extremes: dict[str, tuple[float, float]] = field(default_factory=dict)
    """``{metric: (lowest, highest)}`` of a summary (:func:`summary`), which has no :attr:`scalars`."""

    def best(self, metric: str | None, mode: str) -> float | None:
        """The best value of ``metric`` (``mode`` ``max``: highest; else lowest); None when it was never logged."""
        values = [value for _, value in self.scalars.get(metric or "", [])]
        if not values:
            low_high = self.extremes.get(metric or "")
            return None if low_high is None else low_high[1 if mode == "max" else 0]
        return max(values) if mode == "max" else min(values)

    def summarized(self) -> Logged:
        """The same without the curves: each metric's lowest and highest value (:attr:`extremes`)."""
        extremes = {tag: (min(v for _, v in points), max(v for _, v in points)) for tag, points in self.scalars.items()}
        return replace(self, scalars={}, extremes={**self.extremes, **extremes})

    def as_json(self) -> dict[str, Any]:
        """A summary (:meth:`summarized`) as JSON (:meth:`from_json` reads it back)."""
        return {
            "extremes": {tag: list(low_high) for tag, low_high in self.summarized().extremes.items()},
            **{k: getattr(self, k) for k in ("epochs", "steps", "first_time", "last_time", "source")},
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Logged:
        """The summary that :meth:`as_json` wrote."""
        extremes = {str(tag): (float(low), float(high)) for tag, (low, high) in data["extremes"].items()}
        return cls(extremes=extremes, **{k: data[k] for k in ("epochs", "steps", "first_time", "last_time", "source")})


SOURCES = ("TensorBoard event files", METRICS_FILE, CSV_FILE, "MLflow's store (run.json)", "wandb-summary.json")
"""What :func:`read` looks for, in its order, as :func:`why_missing` names it."""


def read(run_dir: Path) -> Logged:
    """What ``run_dir``'s run logged, from the first source it has (see the module's docstring); an
    empty :class:`Logged` without any. A file being written counts as far as it can be read."""
    run_dir = Path(run_dir)
    own = _own_record(run_dir)
    for reader in (_tensorboard, _own_record, _csv, _mlflow, _wandb_summary):
        found = own if reader is _own_record else reader(run_dir)
        if found is not None:
            if own is not None and found is not own:  # the steps past the last one logged (a stop's record)
                found = replace(found, epochs=max(found.epochs, own.epochs), steps=max(found.steps, own.steps))
            return found
    return Logged()


SUMMARIZED = ("TensorBoard event files", METRICS_FILE, CSV_FILE)
"""The sources read from the run directory's own files: their summary is kept (:func:`summary`); MLflow's
store and W&B's files live elsewhere or deeper and are read each time."""
SUMMARY_PART = "metrics"


def _source_file(name: str) -> bool:
    """Whether :func:`read` may read the run directory's file ``name``."""
    return name in (METRICS_FILE, CSV_FILE, RUN_FILE) or fnmatch.fnmatch(name, EVENTS_GLOB)


def summary(run_dir: Path, kept: Summary | None = None) -> Logged:
    """What :func:`read` gives, summarized (:meth:`Logged.summarized`: each metric's lowest and highest
    value, no curves), from the run's summary (:mod:`trainer_cli.rundir.summary`) when the files it came
    from are unchanged, else read and kept there: a listing decodes no logger's file twice.

    Args:
        run_dir: The run directory.
        kept: Its summary, read already (the caller saves it); default: read here and saved.
    """
    own = kept or Summary(Path(run_dir))
    key = own.key(names=_source_file, inodes=False)
    found = own.get(SUMMARY_PART, key)
    if isinstance(found, dict):
        return Logged.from_json(found)
    logged = read(run_dir).summarized()
    if logged.source in SUMMARIZED:
        own.put(SUMMARY_PART, key, logged.as_json())
        if kept is None:
            own.save()
    return logged


def why_missing(run_dir: Path, metric: str) -> str:
    """Why ``run_dir`` has no logged value of ``metric``: the files read and the metrics they hold, or
    the files looked for (a sweep trial's failure says it)."""
    logged = read(run_dir)
    if not logged.source:
        return f"no {metric}: nothing logged in {run_dir} (looked for {', '.join(SOURCES)})"
    names = sorted(k for k in logged.scalars if k != "epoch")
    where = run_dir / logged.source if (run_dir / logged.source).is_file() else f"{logged.source} of {run_dir}"
    return f"no {metric} in {where}; " + (f"it logged: {', '.join(names)}" if names else "no metric")


def best_value(run_dir: Path, metric: str | None, mode: str, kept: Summary | None = None) -> float | None:
    """The best value of ``metric`` a run reached: its newest checkpoint's ``ModelCheckpoint`` score when
    that monitors ``metric`` (:func:`trainer_cli.rundir.layout.best_score`), else the best value it
    logged (:func:`read`; with the run's summary ``kept``, :func:`summary`: the same value); None without
    one. Loads the checkpoint's callback states (imports torch)."""
    from trainer_cli.rundir.layout import best_score

    if metric is None:
        return None
    best = best_score(Path(run_dir), metric)
    if best is not None and best.score is not None and not math.isnan(best.score):
        return best.score
    return (read(run_dir) if kept is None else summary(run_dir, kept)).best(metric, mode)


def recorded(run_dir: Path) -> Logged:
    """The run's own record (:data:`METRICS_FILE`) alone, cheap whatever the size of the loggers' files (a
    resume's check of the step the run reached); an empty :class:`Logged` without one."""
    return _own_record(Path(run_dir)) or Logged()


def record(run_dir: Path, stage: str, epoch: int, step: int, time: float, metrics: dict[str, float]) -> None:
    """Append one record to ``run_dir``'s :data:`METRICS_FILE` (global rank 0 only: one writer)."""
    from trainer_cli.atomic import append_line

    line = {"stage": stage, "epoch": epoch, "step": step, "time": round(time, 3), "metrics": metrics}
    append_line(Path(run_dir) / METRICS_FILE, json.dumps(line))


def _collected(
    points: Iterator[tuple[str, int, float]], source: str, first: float | None = None, last: float | None = None
) -> Logged:
    """A :class:`Logged` of ``(metric, step, value)`` points: epochs from the ``epoch`` metric, steps the highest."""
    scalars: Scalars = {}
    for tag, step, value in points:
        if not math.isnan(value):
            scalars.setdefault(tag, []).append((step, value))
    epochs = [v for _, v in scalars.get("epoch", [])]
    return Logged(
        scalars=scalars,
        epochs=int(max(epochs)) + 1 if epochs else 0,
        steps=max((step for values in scalars.values() for step, _ in values), default=0),
        first_time=first,
        last_time=last,
        source=source,
    )


def _own_record(run_dir: Path) -> Logged | None:
    """The launcher's record (:data:`METRICS_FILE`); a value repeated at the same step (a validation's
    metrics again at the epoch's end) counts once."""
    file = run_dir / METRICS_FILE
    if not file.is_file():
        return None
    lines = [r for r in read_json_lines(file) if isinstance(r, dict)]
    scalars: Scalars = {}
    epochs = steps = 0
    times = [float(r["time"]) for r in lines if isinstance(r.get("time"), (int, float))]
    for line in lines:
        step, epoch = int(line.get("step") or 0), int(line.get("epoch") or 0)
        steps = max(steps, step)
        epochs = max(epochs, epoch + 1 if line.get("stage") == EPOCH_STAGE else epoch)
        for tag, value in (line.get("metrics") or {}).items():
            if not isinstance(value, (int, float)) or math.isnan(value):
                continue
            points = scalars.setdefault(tag, [])
            if not points or points[-1] != (step, float(value)):
                points.append((step, float(value)))
    return Logged(scalars, epochs, steps, min(times, default=None), max(times, default=None), METRICS_FILE)


def _tensorboard(run_dir: Path) -> Logged | None:
    files = sorted(run_dir.glob(EVENTS_GLOB))
    if not files:
        return None
    from tensorboard.backend.event_processing.event_file_loader import EventFileLoader

    points: list[tuple[str, int, float]] = []
    times: list[float] = []
    for events in files:
        try:
            for event in EventFileLoader(str(events)).Load():
                times.append(event.wall_time)
                for value in event.summary.value:
                    number = value.simple_value if value.HasField("simple_value") else _tensor_value(value)
                    points.append((value.tag, int(event.step), number))
        except Exception:  # a file being written: what was read so far counts
            continue
    return _collected(iter(points), "TensorBoard event files", min(times, default=None), max(times, default=None))


def _tensor_value(value: Any) -> float:
    """A scalar summary's number; NaN for any other (the hparams plugin's summaries, which
    TensorBoardLogger writes for a run that logs its hyperparameters, hold no number)."""
    from tensorboard.util import tensor_util

    if not value.HasField("tensor"):
        return math.nan
    try:
        return float(tensor_util.make_ndarray(value.tensor))
    except (TypeError, ValueError):
        return math.nan


def _csv(run_dir: Path) -> Logged | None:
    """CSVLogger's ``metrics.csv``: a row per logging call, its metrics in columns (empty where not logged)."""
    file = run_dir / CSV_FILE
    if not file.is_file():
        return None

    def points() -> Iterator[tuple[str, int, float]]:
        with file.open(newline="") as f:
            for row in csv.DictReader(f):
                step = _number(row.get("step"))
                for tag, text in row.items():
                    value = _number(text)
                    if tag and tag != "step" and value is not None:
                        yield tag, int(step or 0), value

    return _collected(points(), CSV_FILE)


def _number(text: Any) -> float | None:
    try:
        return float(text)
    except (TypeError, ValueError):
        return None


def _mlflow(run_dir: Path) -> Logged | None:
    """The MLflow run ``run.json`` names: its SQLite store's ``metrics`` table, or a file store's
    ``<experiment>/<run id>/metrics/<metric>`` files (``time value step`` lines)."""
    runs = read_json(run_dir / RUN_FILE).get(MLFLOW_KEY)
    if not isinstance(runs, dict):
        return None
    for uri, run_id in runs.items():
        parsed = urlparse(str(uri))
        if parsed.scheme == "sqlite":
            found = _mlflow_sqlite(Path(unquote(parsed.path[1:])), str(run_id))  # sqlite:///<path>
        elif parsed.scheme in ("", "file"):
            found = _mlflow_files(Path(unquote(parsed.path)), str(run_id))
        else:
            continue  # a tracking server: not read from files
        if found is not None:
            return found
    return None


def _mlflow_sqlite(database: Path, run_id: str) -> Logged | None:
    if not database.is_file():
        return None
    try:
        with closing(sqlite3.connect(f"file:{database}?mode=ro", uri=True)) as db:
            query = "SELECT key, step, value, timestamp FROM metrics WHERE run_uuid = ?"
            rows = db.execute(query, (run_id,)).fetchall()
    except sqlite3.Error:
        return None
    if not rows:
        return None
    rows.sort(key=lambda r: (r[3], r[1]))
    times = [r[3] / 1000 for r in rows]
    return _collected(((k, int(s), float(v)) for k, s, v, _ in rows), "MLflow's store", min(times), max(times))


def _mlflow_files(store: Path, run_id: str) -> Logged | None:
    folders = list(store.glob(f"*/{run_id}/metrics")) if store.is_dir() else []
    if not folders:
        return None
    points: list[tuple[str, int, float]] = []
    times: list[float] = []
    for file in sorted(f for f in folders[0].rglob("*") if f.is_file()):
        for line in file.read_text().splitlines():
            parts = line.split()
            if len(parts) >= 3 and _number(parts[1]) is not None:
                times.append(int(parts[0]) / 1000)
                points.append((file.relative_to(folders[0]).as_posix(), int(parts[2]), float(parts[1])))
    return _collected(iter(points), "MLflow's store", min(times, default=None), max(times, default=None))


def _wandb_summary(run_dir: Path) -> Logged | None:
    """W&B's ``wandb-summary.json`` (an offline run's, when W&B wrote one): each metric's last value."""
    files = sorted(run_dir.glob(WANDB_SUMMARY_GLOB), key=lambda f: f.stat().st_mtime)
    if not files:
        return None
    summary = read_json(files[-1])
    step = int(_number(summary.get("trainer/global_step")) or _number(summary.get("_step")) or 0)
    points = [
        (k, step, v) for k, v in ((k, _number(v)) for k, v in summary.items() if not k.startswith("_")) if v is not None
    ]
    last = _number(summary.get("_timestamp"))
    return _collected(iter([p for p in points if p[0] != "trainer/global_step"]), "wandb-summary.json", last, last)
