"""The figures of ``train sweep-results`` (the parameter importances, Optuna's plots and the sweep's own), each
computed once per state of the study and the table, kept in the sweep directory
(:data:`CACHE_FILE`): the parameter importances (Optuna's evaluator imports scikit-learn: about 1.5 s of CPU) and
which plots were drawn from what (matplotlib: 1-2 s for four PNGs), so a sweep listed again without a trial told
since opens no plotting or importance library (``benchmarks/scale.py``).

The study's trials (each one's state and value, :class:`StudyTrials`) are kept too, under the stamp of its journal
file: listed again with the journal unchanged, Optuna is not imported nor the journal replayed (1-3 s at 10,000
trials, more with a cold page cache).

Each value is kept under a key: the importances under the study's told trials (number, state and value of each
finished trial: a told trial does not change), the plots under that and the table's rows they draw (each trial's
values and score); a plot file missing is drawn again. A cache of another version, or unreadable, reads as none;
nothing is written where the sweep directory cannot be written.
"""

from __future__ import annotations

import hashlib
import json
import warnings
from pathlib import Path
from typing import Any

from trainer_cli.atomic import read_json, write_atomic
from trainer_cli.sweeps import study as study_of_sweep

CACHE_FILE = ".sweep-results-cache.json"
VERSION = 1


def key_of(*parts: Any) -> str:
    """A key for ``parts`` (JSON values): the SHA-1 of their JSON text."""
    return hashlib.sha1(json.dumps(parts, default=str, sort_keys=True).encode()).hexdigest()


def stamps(*paths: Path) -> list[list[int] | None]:
    """Each file's size and modification time (None for one missing): what a kept key was written with."""
    out: list[list[int] | None] = []
    for path in paths:
        try:
            st = path.stat()
        except OSError:
            out.append(None)
            continue
        out.append([st.st_size, st.st_mtime_ns])
    return out


def told_key(trials: list[tuple[int, str, float | None]]) -> str:
    """The key of a study's told trials: number, state and value of each finished one (``trials``: every trial's
    ``(number, state name, value)`` in the study's order), and how many there are in all."""
    finished = [(number, state, value) for number, state, value in trials if state in study_of_sweep.FINISHED]
    return key_of(len(trials), finished)


class Cache:
    """The cache of ``sweep_dir`` (:meth:`get`, :meth:`put`, :meth:`save`).

    Args:
        sweep_dir: The sweep directory.
    """

    def __init__(self, sweep_dir: Path) -> None:
        self.path = Path(sweep_dir) / CACHE_FILE
        stored = read_json(self.path)
        self._values: dict[str, Any] = stored if stored.get("version") == VERSION else {"version": VERSION}
        self._changed = False

    def get(self, name: str, key: str | None) -> Any:
        """The value kept as ``name`` under ``key``; None when there is none, or under another key."""
        found = self._values.get(name)
        if key is None or not isinstance(found, dict) or found.get("key") != key:
            return None
        return found.get("value")

    def put(self, name: str, key: str | None, value: Any) -> None:
        """Keep ``value`` as ``name`` under ``key`` (written by :meth:`save`; nothing for a None key)."""
        if key is not None:
            self._values[name] = {"key": key, "value": value}
            self._changed = True

    def save(self) -> None:
        """Write what was put (atomically; nothing where the sweep directory cannot be written)."""
        if self._changed:
            try:
                write_atomic(self.path, json.dumps(self._values, default=str), durable=False)
            except OSError:
                pass
            self._changed = False


STUDY_TRIALS = "study_trials"
"""The study's trials in the sweep's cache (:class:`Cache`): each one's ``[number, state, value]``, kept under the
journal file's stamp (:func:`trainer_cli.sweeps.study.journal_stamp`)."""


class StudyTrials:
    """A sweep's study as the listing reads it: each trial's state and value (:attr:`trials`), the key of its told
    trials (:attr:`told`), and the study itself (:meth:`load`) only when a figure must be computed again.

    A study in its journal file unchanged since a listing kept its trials in ``kept`` is not opened: neither Optuna
    imported nor the journal replayed (a journal is only appended to: a trial asked or told, by any worker, changes
    its size). A database study (``--sweep_storage URL``) is opened each time.

    Args:
        study: ``sweep.json``'s ``study`` field.
        kept: The sweep's cache; the trials are put in it when the study was opened (saved by the caller).

    Raises:
        UserError: when the study cannot be opened.
    """

    def __init__(self, study: dict[str, Any], kept: Cache) -> None:
        self._spec = study
        self._study: Any = None
        stamp = study_of_sweep.journal_stamp(study["storage"])  # before the journal is read: a later write reloads
        key = key_of(study["name"], study["storage"], stamp) if stamp is not None else None
        held = kept.get(STUDY_TRIALS, key)
        if isinstance(held, list):
            found = [(int(number), str(state), value) for number, state, value in held]
        else:
            found = [(t.number, t.state.name, t.value) for t in self.load().get_trials(deepcopy=False)]
            kept.put(STUDY_TRIALS, key, found)
        self.trials: dict[int, tuple[str, float | None]] = {number: (state, value) for number, state, value in found}
        self.told = told_key(found)

    def load(self) -> Any:
        """The Optuna study (opened once)."""
        if self._study is None:
            self._study = study_of_sweep.load(self._spec)
        return self._study


PLOTS = {
    "history": "sweep_history.png",
    "importance": "sweep_importance.png",
    "parallel": "sweep_parallel.png",
}


def importances(study: Any) -> dict[str, float]:
    """Optuna's parameter importances (default evaluator), most important first; empty with fewer
    than two complete trials or nothing that varies."""
    from optuna.trial import TrialState

    if study is None or len(study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))) < 2:
        return {}
    import optuna

    try:
        with warnings.catch_warnings():  # with few trials Optuna says the importances are all equal: they show it
            warnings.simplefilter("ignore", UserWarning)
            found = optuna.importance.get_param_importances(study)
        return {key: float(value) for key, value in found.items()}
    except (ValueError, RuntimeError, ZeroDivisionError):  # one value per parameter, or no spread
        return {}


def write_study_plots(study: Any, sweep_dir: Path, with_importance: bool) -> list[Path]:
    """Optuna's optimization history, importance and parallel-coordinate plots as PNG (Agg)."""
    from optuna.trial import TrialState

    if study is None or not study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)):
        return []
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from optuna.visualization import matplotlib as optuna_plots

    drawers = {
        "history": optuna_plots.plot_optimization_history,
        "importance": optuna_plots.plot_param_importances if with_importance else None,
        "parallel": optuna_plots.plot_parallel_coordinate,
    }
    written = []
    for kind, draw in drawers.items():
        if draw is None:
            continue
        try:
            with warnings.catch_warnings():  # a parameter with one value: matplotlib widens its axis itself
                warnings.simplefilter("ignore", UserWarning)
                axes = draw(study)
        except (ValueError, RuntimeError):  # nothing to draw (e.g. one parameter value)
            continue
        shown: Any = axes
        figure: Any = shown.figure if hasattr(shown, "figure") else shown.flat[0].figure
        figure.set_size_inches(9, 5)
        figure.tight_layout()
        figure.savefig(sweep_dir / PLOTS[kind], dpi=100)
        plt.close(figure)
        written.append(sweep_dir / PLOTS[kind])
    return written


def draw(results: dict[str, Any], kinds: dict[str, str]) -> tuple[Path | None, list[Path]]:
    """The sweep's plot (:func:`trainer_cli.plots.plot_sweep`) and the study's (:func:`write_study_plots`), drawn
    where what they show changed since they were drawn (:class:`Cache`), else as they are."""
    from trainer_cli.plots import SWEEP_PNG, plot_sweep

    sweep_dir = Path(results["sweep_dir"])
    shown = [(r["trial"], r["values"], r["score"], r["state"]) for r in results["rows"]]
    key = key_of(
        results.get("_told"), results["monitor"], results["mode"], kinds, shown, bool(results.get("importances"))
    )
    kept = results.get("_cache") or Cache(sweep_dir)
    drawn = kept.get("plots", key)
    if isinstance(drawn, dict) and all((sweep_dir / name).is_file() for name in drawn["files"]):
        return (sweep_dir / SWEEP_PNG if drawn["png"] else None), [sweep_dir / name for name in drawn["pictures"]]
    png = plot_sweep(results, kinds, sweep_dir / SWEEP_PNG)
    study = results["_study"]() if results.get("_study") else None  # opened only when its plots are drawn again
    pictures = write_study_plots(study, sweep_dir, bool(results.get("importances")))
    files = [p.name for p in (*([png] if png else []), *pictures)]
    kept.put("plots", key, {"png": png is not None, "pictures": [p.name for p in pictures], "files": files})
    kept.save()
    return png, pictures
