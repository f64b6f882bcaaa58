"""Listing: ``train runs`` over a folder of 100 runs (``tools.runs.collect``: each run's config.yaml and
its event file read), in-process, after one warm-up; the median of the repeats.

The runs are copies of one real digits run (1 epoch, 4 batches), made by ``train fit`` in a temporary folder.
"""

from __future__ import annotations

import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from tests.support import DIGITS, REPO, quiet_args

RUNS, REPEATS = 100, 5
TARGET_S = 1.0  # `train runs` answers over 100 runs in under a second


def run(smoke: bool = False) -> dict[str, Any]:
    from trainer_cli.tools import runs

    n, repeats = (5, 1) if smoke else (RUNS, REPEATS)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "runs"
        cmd = [sys.executable, "-m", "trainer_cli", "fit", "--config", DIGITS, *quiet_args(root),
               "--trainer.limit_train_batches", "4", "--trainer.limit_val_batches", "2"]
        subprocess.run(cmd, cwd=REPO, check=True, capture_output=True, text=True)
        made = next(root.glob("*/version_0"))
        many = Path(tmp) / "many"
        for i in range(n):
            (many / f"run_{i}").mkdir(parents=True)
            for f in [made / "config.yaml", *made.glob("events.out.tfevents.*")]:
                shutil.copy(f, many / f"run_{i}" / f.name)
        assert len(runs.collect([many])["runs"]) == n  # the warm-up: imports, the event file reader
        took = []
        for _ in range(repeats):
            start = time.perf_counter()
            runs.collect([many])
            took.append(time.perf_counter() - start)
    return {"runs": n, "collect_s": statistics.median(took), "repeats_s": took, "target_s": TARGET_S}
