"""Scale (issue 48): the wall time and peak memory of ``train runs`` (a folder of N runs, and ``--diff``) for N
in 100, 1,000 and 10,000, each a fresh ``python -m trainer_cli runs`` process.

The runs are copies of one real digits run (``train fit``, 2 epochs of 4 batches; checkpoints left out), its
files copied with their modification times (``shutil.copy2``), so their content is real. Cases per N:

- ``no summary``: the copies without ``summary.json`` (runs made before issue 48): every logger's file read
  (N <= 1,000: about 35 ms a run on this machine); the listing keeps each run's summary;
- ``fit's summary``: each copy with the summary its fit kept (the metrics part only): the first listing of
  runs made now, which decodes no event file;
- ``warm``: again, the rows kept by the listing before, page cache warm;
- ``cold``: the same after ``echo 3 > /proc/sys/vm/drop_caches`` (root only; ``cold_measured`` says whether).

Peak memory: the listing process's maximum resident set (``/usr/bin/time``).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from tests.support import DIGITS, REPO, quiet_args

SIZES = (100, 1_000, 10_000)
SLOW_UP_TO = 1_000  # the listing without summaries is measured up to this N (10,000: minutes)
TARGET_S = 2.0  # `train runs` over 10,000 runs


def _drop_caches() -> bool:
    try:
        os.sync()
        Path("/proc/sys/vm/drop_caches").write_text("3\n")
    except OSError:
        return False
    return True


def _listing(folder: Path, *extra: str) -> dict[str, float]:
    """Wall seconds, CPU seconds and peak resident MB of ``python -m trainer_cli runs FOLDER`` (``/usr/bin/time``:
    started from a small process, so the peak is the listing's own, not this process's before ``exec``)."""
    cmd = ["/usr/bin/time", "-f", "%e %U %S %M", sys.executable, "-m", "trainer_cli", "runs", str(folder), *extra]
    done = subprocess.run(cmd, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"train runs {folder} failed: {done.stderr[-2000:]}")
    wall, user, system, peak_kb = done.stderr.strip().splitlines()[-1].split()
    return {"wall_s": float(wall), "cpu_s": round(float(user) + float(system), 2), "peak_mb": round(int(peak_kb) / 1024, 1)}


def _copies(made: Path, folder: Path, n: int, with_summary: bool) -> None:
    files = [f for f in made.rglob("*") if f.is_file() and "checkpoints" not in f.parts and not f.name.endswith(".lock")]
    for i in range(n):
        target = folder / f"trial_{i}"
        for f in files:
            if f.name == "summary.json" and not with_summary:
                continue
            (target / f.relative_to(made)).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(f, target / f.relative_to(made))


def run(smoke: bool = False) -> dict[str, Any]:
    sizes = (3, 5) if smoke else SIZES
    out: dict[str, Any] = {"sizes": {}, "target_s": TARGET_S, "cold_measured": False}
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "made"
        cmd = [sys.executable, "-m", "trainer_cli", "fit", "--config", DIGITS, *quiet_args(root, epochs=2),
               "--trainer.limit_train_batches", "4", "--trainer.limit_val_batches", "2"]
        subprocess.run(cmd, cwd=REPO, check=True, capture_output=True, text=True)
        made = next(root.glob("*/version_0"))
        for n in sizes:
            figures: dict[str, Any] = {}
            if n <= SLOW_UP_TO:
                old = Path(tmp) / f"old_{n}"
                _copies(made, old, n, with_summary=False)
                figures["no summary"] = _listing(old)
                shutil.rmtree(old)
            folder = Path(tmp) / f"runs_{n}"
            _copies(made, folder, n, with_summary=True)
            figures["fit's summary"] = _listing(folder)
            figures["warm"] = _listing(folder)
            figures["warm --diff"] = _listing(folder, "--diff")
            if _drop_caches():
                out["cold_measured"] = True
                figures["cold"] = _listing(folder)
            shutil.rmtree(folder)
            out["sizes"][str(n)] = figures
            print(f"   train runs, {n} runs: {figures}", flush=True)
    return out
