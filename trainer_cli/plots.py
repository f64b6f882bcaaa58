"""Pictures beside the tables: a sweep's metric against each swept axis, a cross-validation's folds.

``train sweep-results`` writes ``sweep_results.png`` beside its CSV: one panel per swept key, the
best monitored metric of each trial against the trial's value (log scale for a ``loguniform`` axis
or positive numbers spanning two decades or more; values that are not numbers placed side by side),
trials coloured by state, the best one ringed and labelled. ``train cv`` writes ``cv_results.png``:
one bar per fold for each metric, the mean as a dashed line. ``train jobs RUN`` writes
``<run>/timeline.svg`` (:func:`plot_timeline`): one row per attempt, its time coloured by goodput and
badput bucket (:mod:`trainer_cli.rundir.goodput`). matplotlib (installed with
``lightning[extra]``) is imported only here, with its object API and the Agg canvas: no window, no
pyplot state.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

SWEEP_PNG = "sweep_results.png"
CV_PNG = "cv_results.png"
STATE_COLOURS = {"COMPLETED": "tab:green", "RUNNING": "tab:blue", "PENDING": "tab:gray", "FAILED": "tab:red"}
OTHER_COLOUR = "tab:orange"
TIMELINE_SVG = "timeline.svg"
TIMELINE_COLOURS = {
    "launch_s": ("tab:gray", "launch (batch script outside the ranks)"),
    "startup_s": ("tab:orange", "start-up"),
    "goodput_s": ("tab:green", "training kept (goodput)"),
    "validation_s": ("tab:blue", "validation"),
    "checkpoint_s": ("tab:purple", "checkpoint"),
    "redone_s": ("tab:pink", "redone (lost progress)"),
    "stall_s": ("tab:red", "stall"),
    "tail_s": ("tab:olive", "tail"),
    "failed_s": ("black", "failed attempt"),
}
"""Each bucket's colour and legend text in :func:`plot_timeline`."""
LOG_SPAN = 100.0  # positive numeric values spanning this factor or more are drawn on a log axis


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


def sweep_points(results: dict[str, Any]) -> dict[str, list[tuple[Any, float, str, bool]]]:
    """What :func:`plot_sweep` draws: per swept key, ``(value, score, state, is_best)`` for each
    trial with a score (:func:`trainer_cli.sweeps.results.collect`'s rows are best first)."""
    scored = [r for r in results["rows"] if r["score"] is not None and not math.isnan(r["score"])]
    best = scored[0]["trial"] if scored else None
    return {
        key: [(r["values"].get(key), float(r["score"]), r["state"], r["trial"] == best) for r in scored]
        for key in results["keys"]
    }


def _log_axis(kind: str, values: list[float | None]) -> bool:
    if kind == "loguniform":
        return True
    numbers = [v for v in values if v is not None]
    return (
        len(numbers) == len(values) and bool(numbers) and min(numbers) > 0 and max(numbers) / min(numbers) >= LOG_SPAN
    )


def plot_sweep(results: dict[str, Any], kinds: dict[str, str], path: Path) -> Path | None:
    """Draw the sweep (see the module docstring) into ``path``; None when no trial has a score yet.

    Args:
        results: :func:`trainer_cli.sweeps.results.collect`'s results.
        kinds: Each swept key's kind (``loguniform``, ``uniform``, ``grid``...), from ``sweep.json``.
        path: The PNG to write.
    """
    points = sweep_points(results)
    if not points or not any(points.values()):
        return None
    from matplotlib.figure import Figure
    from matplotlib.lines import Line2D

    metric = f"{results['monitor'] or 'score'} ({results['mode']})"
    fig = Figure(figsize=(4.5 * len(points), 3.8), layout="constrained")
    axes = fig.subplots(1, len(points), squeeze=False, sharey=True)[0]
    for ax, (key, trials) in zip(axes, points.items()):
        numbers = [_number(v) for v, _, _, _ in trials]
        if all(n is not None for n in numbers):
            xs: list[float] = [n for n in numbers if n is not None]
            if _log_axis(kinds.get(key, ""), numbers):
                ax.set_xscale("log")
        else:  # categories: one position each, in order of first appearance
            labels = list(dict.fromkeys(str(v) for v, _, _, _ in trials))
            xs = [float(labels.index(str(v))) for v, _, _, _ in trials]
            ax.set_xticks(range(len(labels)), labels, rotation=30)
        ys = [score for _, score, _, _ in trials]
        ax.scatter(xs, ys, c=[STATE_COLOURS.get(state, OTHER_COLOUR) for _, _, state, _ in trials], s=40, zorder=3)
        for x, (_, score, _, is_best) in zip(xs, trials):
            if is_best:
                ax.scatter([x], [score], s=160, facecolors="none", edgecolors="black", linewidths=1.5, zorder=4)
                ax.annotate("best", (x, score), textcoords="offset points", xytext=(8, 6))
        ax.set_xlabel(key)
        ax.grid(True, alpha=0.3)
    axes[0].set_ylabel(metric)
    states = list(dict.fromkeys(state for trials in points.values() for _, _, state, _ in trials))
    handles = [
        Line2D([], [], marker="o", linestyle="", color=STATE_COLOURS.get(s, OTHER_COLOUR), label=s) for s in states
    ]
    axes[-1].legend(handles=handles, loc="best", fontsize="small")
    fig.suptitle(f"sweep {Path(results['sweep_dir']).name}: {len(results['rows'])} trial(s)")
    fig.savefig(path, dpi=100)
    return path


def plot_folds(summary: dict[str, Any], path: Path) -> Path | None:
    """One panel per metric of a cross-validation (``train cv``'s summary): a bar per fold, the mean
    dashed. None when there is no fold."""
    folds, names = summary.get("folds") or [], list(summary.get("mean") or {})
    if not folds or not names:
        return None
    from matplotlib.figure import Figure

    fig = Figure(figsize=(4 * len(names), 3.5), layout="constrained")
    axes = fig.subplots(1, len(names), squeeze=False)[0]
    for ax, name in zip(axes, names):
        labels = [str(f["fold"]) for f in folds]
        ax.bar(labels, [f["metrics"].get(name, math.nan) for f in folds], color="tab:blue")
        ax.axhline(
            summary["mean"][name],
            color="black",
            linestyle="--",
            linewidth=1,
            label=f"mean {summary['mean'][name]:.4f} ± {summary['std'][name]:.4f}",
        )
        ax.set_xlabel("fold")
        ax.set_title(name)
        ax.legend(loc="lower right", fontsize="small")
    fig.suptitle("cross-validation: each fold's validation metrics")
    fig.savefig(path, dpi=100)
    return path


def plot_timeline(rows: list[dict[str, Any]], title: str, path: Path) -> Path | None:
    """A run's attempts as a timeline: one row per attempt (``label``), starting at ``start_s`` seconds
    after the first, its ``segments`` (``(bucket, seconds)``, :data:`TIMELINE_COLOURS`) one after the
    other; time in minutes; a legend of the buckets drawn. None when there is no attempt.

    Args:
        rows: :func:`trainer_cli.rundir.goodput.timeline_rows`.
        title: The picture's title.
        path: The file to write (SVG by its suffix).
    """
    if not rows:
        return None
    from matplotlib.figure import Figure
    from matplotlib.patches import Patch

    fig = Figure(figsize=(10, 1.2 + 0.5 * len(rows)), layout="constrained")
    ax = fig.add_subplot()
    drawn: dict[str, None] = {}
    for y, row in enumerate(rows):
        at = row["start_s"] / 60
        for bucket, seconds in row["segments"]:
            colour = TIMELINE_COLOURS.get(bucket, (OTHER_COLOUR, bucket))[0]
            ax.barh(y, seconds / 60, left=at, height=0.6, color=colour, edgecolor="white", linewidth=0.5)
            at += seconds / 60
            drawn[bucket] = None
    ax.set_yticks(range(len(rows)), [row["label"] for row in rows])
    ax.invert_yaxis()
    ax.set_xlabel("minutes since the first attempt started")
    ax.grid(True, axis="x", alpha=0.3)
    handles = [Patch(color=colour, label=text) for b, (colour, text) in TIMELINE_COLOURS.items() if b in drawn]
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize="small")
    ax.set_title(title)
    import matplotlib

    with matplotlib.rc_context({"svg.fonttype": "none"}):  # text as text: labels and legend readable in the SVG
        fig.savefig(path)
    return path
