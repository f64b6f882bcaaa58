"""The corpus of real project shapes (``tests/corpus/<shape>``, see its README): a fresh copy of a shape in a
git repository outside this one, its data written where its code looks, and the commands its user runs."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import forkserver
from support import REPO

CORPUS = REPO / "tests" / "corpus"
LOADS = REPO / "tests" / "checkpoint_loads.py"


def git(repo: Path, *args: str) -> None:
    cmd = ["git", "-c", "user.email=t@example.com", "-c", "user.name=t", "-C", str(repo), *args]
    subprocess.run(cmd, check=True, timeout=60, capture_output=True, text=True)


def write_digits(folder: Path, n: int = 320) -> Path:
    """``x.npy`` (n x 64 float32 features in [0, 1]) and ``y.npy`` (labels 0-9): scikit-learn's digits."""
    import numpy as np
    from sklearn.datasets import load_digits

    digits = load_digits()
    folder.mkdir(parents=True, exist_ok=True)
    np.save(folder / "x.npy", (digits.data[:n] / 16).astype("float32"))
    np.save(folder / "y.npy", digits.target[:n])
    return folder


def project(parent: Path, shape: str) -> Path:
    """A fresh copy of ``tests/corpus/<shape>`` under ``parent``, committed to git."""
    target = parent / shape
    shutil.copytree(CORPUS / shape, target, ignore=shutil.ignore_patterns("__pycache__"))
    git(target, "init", "-q")
    git(target, "add", ".")
    git(target, "commit", "-qm", shape)
    return target


def user_env(**extra: str) -> dict[str, str]:
    """The user's shell: no launcher state inherited from the test process."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1", **extra}
    for key in [k for k in env if k.startswith("TRAINER_CLI_")]:
        env.pop(key)
    return env


def run(project_dir: Path, argv: list[str], env: dict[str, str], timeout: float = 600) -> subprocess.CompletedProcess[str]:
    """``python ARGV`` in the project (a script path or ``-m module``), through the fork server where it can."""
    return forkserver.run_python(argv, project_dir, env, timeout)


def loads(project_dir: Path, pairs: dict[str, Path] | list[tuple[str, Path]], block: bool = True) -> list[dict[str, object]]:
    """Each ``class path -> checkpoint`` loaded as its user would, in one fresh ``python`` in the project:
    ``Class.load_from_checkpoint(path)`` alone and ``torch.load(path, weights_only=True)``; with ``block``
    any import of trainer_cli fails there (:mod:`checkpoint_loads`). ``pairs`` a list to load several
    checkpoints of one class in the same process (one interpreter start with torch and Lightning, not one each)."""
    items = pairs.items() if isinstance(pairs, dict) else pairs
    argv = [sys.executable, str(LOADS), *(["--block"] if block else []), *(f"{c}={p}" for c, p in items)]
    env = {**user_env(), "PYTHONPATH": str(project_dir)}
    done = subprocess.run(argv, cwd=project_dir, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
