"""The user project in ``tests/foreign_ccds`` (see its README): a fresh copy of it in a git repository,
its raw data written and processed by its own step (git-ignored ``data/raw``, ``data/processed``)."""

from __future__ import annotations

import random
import shutil
from pathlib import Path

import forkserver
from hw_support import git, hw_env, run_main
from support import REPO

CCDS = REPO / "tests" / "foreign_ccds"
CLASSES, FEATURES, ROWS = 3, 8, 64
GITIGNORES = {
    "subfolders": "data/raw\ndata/processed\n",  # the issue's: git lists data/, data/raw/, data/processed/
    "whole": "/data/\n",  # the template's master (0f6b163)
    "contents": "data/raw/*\n!data/raw/.gitkeep\ndata/processed/*\n!data/processed/.gitkeep\n",  # its 0129c3f
}
"""The data lines of the template's ``.gitignore`` over its history (the rest of the file as the project's)."""


def ccds_project(
    parent: Path, name: str = "ccds-project", data_ignore: str = "subfolders", process: bool = True
) -> Path:
    """A fresh copy of the project under ``parent``, committed to git, its data raw and processed
    (git-ignored by the ``.gitignore`` lines :data:`GITIGNORES` names ``data_ignore``); without
    ``process`` the processed files are stand-ins (a test of where files are, not what they hold)."""
    project = parent / name

    def outputs(folder: str, names: list[str]) -> set[str]:  # what a test run in tests/foreign_ccds may have left
        top = Path(folder) == CCDS
        return {n for n in names if n == "__pycache__" or (top and n in {"data", "lightning_logs"})}

    shutil.copytree(CCDS, project, ignore=outputs)
    ignore = project / ".gitignore"
    ignore.write_text(GITIGNORES[data_ignore] + ignore.read_text().split("\n\n", 1)[1])
    raw = project / "data" / "raw"
    raw.mkdir(parents=True)
    (project / "data" / "processed").mkdir()
    for folder in ("raw", "processed"):  # the template's placeholders, tracked where its .gitignore lets them be
        (project / "data" / folder / ".gitkeep").touch()
    rng = random.Random(0)
    centers = [[rng.gauss(0, 3) for _ in range(FEATURES)] for _ in range(CLASSES)]
    rows = [[i % CLASSES, *(c + rng.gauss(0, 1) for c in centers[i % CLASSES])] for i in range(ROWS)]
    (raw / "points.csv").write_text("".join(f"{r[0]}," + ",".join(f"{v:.4f}" for v in r[1:]) + "\n" for r in rows))
    if process:
        env = hw_env(PYTHONPATH=str(project))
        done = forkserver.run_python(["-m", "ccds_digits.dataset"], project, env, 120)  # the project's `make data`
        assert done.returncode == 0, done.stderr[-3000:]
    else:
        for stand_in in ("features.npy", "labels.csv"):
            (project / "data" / "processed" / stand_in).write_text("stand-in\n")
    git(project, "init", "-q")
    git(project, "add", ".")
    git(project, "commit", "-qm", "the project")
    return project


__all__ = ["CCDS", "ccds_project", "hw_env", "run_main"]
