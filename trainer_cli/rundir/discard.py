"""Rule 4 of a run's directory (:mod:`trainer_cli.rundir.policy`), discard: a start that saved nothing leaves
nothing. A directory a start made is removed again only when nothing in it is a checkpoint, and the folders
the start made above it go when that leaves them empty; a folder that holds anything stays."""

from __future__ import annotations

import shutil
from pathlib import Path


def discard_if_untrained(path: Path, empty_parents: int = 0) -> bool:
    """Remove ``path`` (a run, fold or cv directory the caller made) unless something in it is a
    checkpoint (nothing a run saved is ever removed), then up to ``empty_parents`` of the folders
    above it that this leaves empty. Returns whether it removed ``path``."""
    if not path.is_dir() or any(path.rglob("*.ckpt")):
        return False
    shutil.rmtree(path, ignore_errors=True)
    for parent in list(path.parents)[:empty_parents]:
        try:
            parent.rmdir()  # only when empty
        except OSError:
            break
    return True


def remove_made_folders(path: Path, made_from: Path) -> None:
    """After ``path`` (a run directory) is gone: remove the folders between it and ``made_from`` (the
    highest folder its start made, :func:`first_missing`) that are empty, from the innermost up; a
    folder that holds anything (another run) stays, and so do the ones above it."""
    path, made_from = Path(path).absolute(), Path(made_from).absolute()
    if path.exists() or not path.is_relative_to(made_from):
        return
    for parent in path.parents:
        if not parent.is_relative_to(made_from):
            break
        try:
            parent.rmdir()  # only when empty
        except OSError:
            break
