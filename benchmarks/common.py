"""What every benchmark shares: the machine description, alternating repeats, medians, JSON results."""

from __future__ import annotations

import json
import os
import platform
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.support import REPO

RESULTS = REPO / "benchmarks" / "results"


def machine() -> dict[str, Any]:
    """CPU model, cores, load, library versions and the GPU, if any (what a figure depends on)."""
    import lightning
    import torch

    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "load_avg_1min_at_start": os.getloadavg()[0],
        "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
        "python": platform.python_version(),
        "torch": torch.__version__,
        "lightning": lightning.__version__,
        "torch_threads": torch.get_num_threads(),
        "date_utc": time.strftime("%Y-%m-%d %H:%M", time.gmtime()),
    }


def alternate(sides: dict[str, Callable[[], dict[str, float]]], repeats: int) -> dict[str, list[dict[str, float]]]:
    """Run every side once per round, ``repeats`` rounds, reversing the order each round (so a
    slow spell on the shared machine hits both sides alike). Returns each side's measurements."""
    runs: dict[str, list[dict[str, float]]] = {name: [] for name in sides}
    names = list(sides)
    for round_ in range(repeats):
        for name in names if round_ % 2 == 0 else reversed(names):
            runs[name].append(sides[name]())
    return runs


def medians(runs: list[dict[str, float]]) -> dict[str, float]:
    """Key-wise median of repeated measurements."""
    return {key: statistics.median(r[key] for r in runs) for key in runs[0]}


def write_result(out_dir: Path, name: str, payload: dict[str, Any]) -> Path:
    """Write ``<out_dir>/<name>.json`` (atomic rename) and return its path."""
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"{name}.json"
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(payload, indent=2, sort_keys=True) + "\n")
    tmp.replace(path)
    return path
