"""The benchmark suite runs (``python -m benchmarks --smoke``): figures are not asserted, only that
every benchmark finishes and writes its JSON and that the README table renders from it."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.support import REPO


@pytest.mark.long  # make test's 12 minutes: the benchmarks run, not the product (scale's smoke trains real runs)
def test_benchmarks_smoke_run_writes_every_result(tmp_path) -> None:
    out = tmp_path / "results"
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks", "--smoke", "--out", str(out)], cwd=REPO, capture_output=True, text=True, timeout=1800
    )
    assert done.returncode == 0, done.stderr[-3000:]
    for name in ("overhead", "startup", "datapath", "gpu"):
        payload = json.loads((out / f"{name}.json").read_text())
        assert payload["smoke"] is True and payload["machine"]["cores"] >= 1
    startup = json.loads((out / "startup.json").read_text())["result"]
    assert startup["launcher_verbs"]["train --help"]["imports_torch"] is False
    assert startup["launcher_verbs"]["train fit --help (cached)"]["imports_torch"] is False
    assert startup["first_step"]["train_fit"]["first_step_s"] > 0
    assert startup["errors"] and all(e["exit_code"] == 2 and e["imports_torch"] is False for e in startup["errors"].values())

    from benchmarks.report import update_readme

    readme = tmp_path / "README.md"
    update_readme(readme, out)
    text = readme.read_text()
    assert "digits MLP" in text and "batched >= 10x" in text and "reduced CPU mode" in text


def test_benchmarks_reject_an_unknown_name() -> None:
    done = subprocess.run([sys.executable, "-m", "benchmarks", "overheads"], cwd=REPO, capture_output=True, text=True)
    assert done.returncode == 2 and "unknown benchmark overheads" in done.stderr
