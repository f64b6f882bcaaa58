"""One run's row of ``train runs``, read from its files: its flattened config (a sweep's pruning callback left out),
state (its job's, else its last start's attempts'), monitor and best value, epochs, steps, start, duration and
inexact resumes. :mod:`trainer_cli.tools.runs` finds the runs, keeps their rows (the runs index, each run's
summary), prices them and prints the table.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from trainer_cli.job import jobstate
from trainer_cli.rundir import attempts, history, layout, metrics, record, summary
from trainer_cli.rundir.history import inexact_starts

PRUNING = "trainer_cli.callbacks.optuna_pruning.OptunaPruning"


def flatten(value: Any, prefix: str = "") -> dict[str, Any]:
    """``{dotted key: scalar}`` of a parsed YAML value; list items by index; empty containers as they are."""
    if isinstance(value, dict) and value:
        out: dict[str, Any] = {}
        for key, item in value.items():
            out |= flatten(item, f"{prefix}.{key}" if prefix else str(key))
        return out
    if isinstance(value, list) and value:
        out = {}
        for index, item in enumerate(value):
            out |= flatten(item, f"{prefix}.{index}" if prefix else str(index))
        return out
    return {prefix: value}


def _text(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, (dict, list)):
        return json.dumps(value)
    return str(value)


def read_run(run_dir: Path, curves: bool = True, kept: summary.Summary | None = None) -> dict[str, Any]:
    """A run's flattened config (its own folder as ``<run>``), state, monitor and best value, epochs,
    steps, start and duration, and (``curves``) its scalars (for ``--plot``); without ``curves`` each
    metric's lowest and highest value (``extremes``), from the run's summary where it has one (``kept``:
    :func:`trainer_cli.rundir.metrics.summary`)."""

    from trainer_cli.sweeps.study import monitor_of

    try:
        # the one reader of a run's record; the loggers' places as configured, not as pointed at the run
        config = record.read(run_dir / layout.CONFIG_FILE, launcher=False, configured=True) or {}
    except OSError:
        config = {}
    callbacks = (config.get("trainer") or {}).get("callbacks")
    if isinstance(callbacks, list):  # a sweep's pruning callback differs by trial number only: not a setting
        config["trainer"]["callbacks"] = [
            c for c in callbacks if not (isinstance(c, dict) and c.get("class_path") == PRUNING)
        ]
    own = str(run_dir.resolve())
    values = {k: _text(v).replace(own, "<run>") for k, v in flatten(config).items() if k != "run_dir"}
    found = monitor_of(config)
    monitor, mode = found or (None, "min")
    recorded = jobstate.read(run_dir)
    logged = metrics.read(run_dir) if curves else metrics.summary(run_dir, kept)
    starts = history.read(run_dir)
    made = attempts.read(run_dir)
    return {
        "run_dir": str(run_dir),
        "state": run_state(run_dir, recorded, made),
        "config": values,
        "monitor": monitor,
        "mode": mode,
        "best": logged.best(monitor, mode),
        "epochs": logged.epochs,
        "steps": logged.steps,
        "start": str(starts[0].get("time") or "-") if starts else "-",
        "duration_s": duration_s(run_dir, logged, made),
        "logged_from": logged.source or "-",
        "inexact_resumes": inexact_starts(starts),
        **({"scalars": logged.scalars} if curves else {"extremes": logged.summarized().extremes}),
    }


def run_state(run_dir: Path, recorded: dict[str, Any] | None = None, made: list[dict[str, Any]] | None = None) -> str:
    """The run's state: its job's (``job.json``, ``recorded`` where read), else its last start's attempts' (a local
    run: :func:`trainer_cli.rundir.attempts.last_state`; ``made``: its attempt lines where read), else ``-``."""
    recorded = jobstate.read(run_dir) if recorded is None else recorded
    return str(recorded.get("state") or attempts.last_state(run_dir, made) or "-")


def duration_s(run_dir: Path, logged: metrics.Logged, found: list[dict[str, Any]] | None = None) -> int | None:
    """The seconds a run's attempts lasted, summed (rank 0's, :func:`trainer_cli.rundir.attempts.read`:
    process start to end each), without the time between them; a run without attempt records: its first
    to last logged record (``logged``); None without either."""
    found = attempts.read(run_dir) if found is None else found  # (read_run's)
    walls = [float(a["wall_s"]) for a in found if a.get("rank", 0) == 0]
    if walls:
        return round(sum(walls))
    first, last = logged.first_time, logged.last_time
    return round(last - first) if first is not None and last is not None else None
