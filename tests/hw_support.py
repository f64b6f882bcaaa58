"""The user project in ``tests/foreign_hw`` (see its README): a fresh copy of it in a git repository, with
its git-ignored data written where its code finds it, and the commands a user runs in it."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import forkserver
from support import REPO

HW = REPO / "tests" / "foreign_hw"
CLASSES, FEATURES, ROWS = 5, 12, 96


def git(repo: Path, *args: str) -> subprocess.CompletedProcess[str]:
    cmd = ["git", "-c", "user.email=t@example.com", "-c", "user.name=t", "-C", str(repo), *args]
    return subprocess.run(cmd, check=True, timeout=60, capture_output=True, text=True)


def write_data(project: Path) -> Path:
    """``data/raw/strokes/{metadata.json,samples.csv}``: separable rows, label first (the project's download)."""
    import random

    folder = project / "data" / "raw" / "strokes"
    folder.mkdir(parents=True, exist_ok=True)
    rng = random.Random(0)
    centers = [[rng.gauss(0, 3) for _ in range(FEATURES)] for _ in range(CLASSES)]
    lines = []
    for i in range(ROWS):
        label = i % CLASSES
        lines.append(",".join([str(label), *(f"{c + rng.gauss(0, 1):.4f}" for c in centers[label])]))
    (folder / "samples.csv").write_text("\n".join(lines) + "\n")
    (folder / "metadata.json").write_text(json.dumps({"num_classes": CLASSES, "input_dim": FEATURES}))
    return folder


def hw_project(parent: Path, name: str = "hwr-project") -> Path:
    """A fresh copy of the project under ``parent``, committed to git, its data written (git-ignored)."""
    project = parent / name
    def outputs(folder: str, names: list[str]) -> set[str]:  # what a test run in tests/foreign_hw may have left
        top = Path(folder) == HW
        return {n for n in names if n == "__pycache__" or (top and n in {"data", "wandb", "lightning_logs"})}

    shutil.copytree(HW, project, ignore=outputs)
    write_data(project)
    git(project, "init", "-q")
    git(project, "add", ".")
    git(project, "commit", "-qm", "the recogniser")
    return project


def hw_env(**extra: str) -> dict[str, str]:
    """The user's environment: W&B offline and quiet, no launcher state inherited from the test process."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "WANDB_MODE": "offline", "WANDB_SILENT": "true"}
    env.update({"WANDB_DISABLE_GIT": "true", "WANDB_CONSOLE": "off", **extra})
    for key in [k for k in env if k.startswith("TRAINER_CLI_")]:
        env.pop(key)
    return env


def run_main(project: Path, *args: str, script: str = "main.py", timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """``python <script> <args>`` in the project folder, as the user runs it (forked from the suite's
    server where it can: :mod:`forkserver`, no torch import per start)."""
    return forkserver.run_python([script, *args], project, hw_env(), timeout)


def run_train(project: Path, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """``train <args>`` in the project folder, the project's package importable from there."""
    env = hw_env(PYTHONPATH=os.pathsep.join(p for p in (str(project), os.environ.get("PYTHONPATH")) if p))
    return forkserver.run_python(["-m", "trainer_cli", *args], project, env, timeout)


DEFAULT = ("--config", "configs/default.yaml")
