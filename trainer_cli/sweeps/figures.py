"""The figures of ``train sweep-results`` (the parameter importances, Optuna's plots and the sweep's own), each
computed once per state of the study and the table, kept in the sweep directory
(:data:`CACHE_FILE`): the parameter importances (Optuna's evaluator imports scikit-learn: about 1.5 s of CPU) and
which plots were drawn from what (matplotlib: 1-2 s for four PNGs), so a sweep listed again without a trial told
since opens no plotting or importance library (``benchmarks/scale.py``).

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


def told_key(study: Any) -> str | None:
    """The key of ``study``'s told trials (number, state, value of each finished one, and how many there are in
    all); None without a study."""
    if study is None:
        return None
    trials = study.get_trials(deepcopy=False)
    return key_of(len(trials), [(t.number, t.state.name, t.value) for t in trials if t.state.is_finished()])


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
    pictures = write_study_plots(results.get("_study"), sweep_dir, bool(results.get("importances")))
    files = [p.name for p in (*([png] if png else []), *pictures)]
    kept.put("plots", key, {"png": png is not None, "pictures": [p.name for p in pictures], "files": files})
    kept.save()
    return png, pictures
