"""YAML document crossings (text -> tree loads, tree -> text dumps) of one run: the launcher's are at
most 1.5 times a stock LightningCLI run's (issue "One request, one run").

The user project ``tests/foreign`` runs ``fit`` for one epoch three ways in a copy of it: its stock
script (``plain_main.py``), its script with TrainerCLI swapped in (``main.py``) and ``train fit``.
Each process counts its crossings with ``tests/yamlcount/sitecustomize.py`` (on PYTHONPATH, imported
at interpreter start: plain processes, not the fork server, whose processes start without it), written
to ``YAML_OUT.<pid>`` as ``<loads> <dumps> ... <call sites>``. The config is dumped once and read
once into a tree; text is made from the tree only where a file is written
(:mod:`trainer_cli.runtime.run_record`).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from foreign_support import DATA, FOREIGN, MODEL
from support import REPO

COUNTER = Path(__file__).with_name("yamlcount")
LIMIT = 1.5  # times stock's crossings

COMMANDS = {
    "stock": ["plain_main.py", "fit", "--trainer.max_epochs", "1"],
    "script": ["main.py", "fit", "--trainer.max_epochs", "1"],
    "train": ["-m", "trainer_cli", "fit", "--model", MODEL, "--data", DATA, "--trainer.max_epochs", "1"],
}


def _crossings(out: Path) -> tuple[int, str]:
    """The crossings of every process that wrote ``out.<pid>`` (loads + dumps), and their lines."""
    lines = [p.read_text().strip() for p in sorted(out.parent.glob(out.name + ".*"))]
    assert lines, f"no counts written for {out.name}"
    return sum(int(n) for line in lines for n in line.split()[:2]), "\n".join(lines)


@pytest.fixture(scope="module")
def counts(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[int, str]]:
    tmp = tmp_path_factory.mktemp("yaml_crossings")
    project, outs = tmp / "project", tmp / "counts"
    shutil.copytree(FOREIGN, project, ignore=shutil.ignore_patterns("__pycache__", "lightning_logs", "runs"))
    outs.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("TRAINER_CLI_RUN_DIR", "YAML_OUT")}
    env["PYTHONPATH"] = os.pathsep.join([str(COUNTER), str(REPO), "."])
    env["PYTHONUNBUFFERED"] = "1"
    found = {}
    for name, argv in COMMANDS.items():
        done = subprocess.run(
            [sys.executable, *argv],
            cwd=project,
            env={**env, "YAML_OUT": str(outs / name)},
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert done.returncode == 0, f"{name}: {done.stderr[-3000:]}"
        found[name] = _crossings(outs / name)
    return found


# `train fit` stays within the limit because TrainerCLI hands LightningCLI the run's one tree as its
# config_dump (the model's and data's hyperparameters) instead of LightningCLI dumping the config again
# (runtime/cli.py, before_instantiate_classes): 19 crossings on 2026-11-27, 32 without it, 53 before the issue
@pytest.mark.parametrize("name", ["script", "train"])
def test_a_run_crosses_yaml_at_most_one_and_a_half_times_stock(counts: dict[str, tuple[int, str]], name: str) -> None:
    stock, _ = counts["stock"]
    total, lines = counts[name]
    assert stock > 0
    assert total <= LIMIT * stock, f"{name}: {total} YAML crossings, stock {stock} (limit {LIMIT}x):\n{lines}"
