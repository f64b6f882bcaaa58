"""The one place the launcher writes ``os.environ``: values for the processes a run starts.

A run's own code gets its context as values (the run directory is :attr:`trainer_cli.runtime.run.Run.path`);
only child processes need the environment: the DDP ranks Lightning starts from this one
(``TRAINER_CLI_RUN_DIR``: the directory rank 0 chose), a cross-validation's folds
(``TRAINER_CLI_CV_DIR``), a library that reads a switch from it (MLflow's file store). They are
exported for a scope (:func:`scope`, around building and running one run) and the process's
environment is as it was once the scope ends, so one process can run several runs (a notebook,
the tests, ``train cv``'s folds) and a plain LightningCLI afterwards sees none of them.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager

_scopes: list[dict[str, str | None]] = []  # per open scope: each exported name's value before it


@contextmanager
def scope() -> Iterator[None]:
    """Around one run: what :func:`export` sets inside is put back as it was when the block ends."""
    saved: dict[str, str | None] = {}
    _scopes.append(saved)
    try:
        yield
    finally:
        _scopes.remove(saved)
        for name, before in saved.items():
            if before is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = before


def export(name: str, value: str, keep_given: bool = False) -> None:
    """Set ``name`` for the child processes started from here, until the innermost :func:`scope`
    ends (for the rest of the process when none is open: a DDP rank, a job step).

    Args:
        name: The environment variable.
        value: Its value.
        keep_given: Leave a value the user set alone (a switch the user may have chosen).
    """
    if keep_given and name in os.environ:
        return
    if _scopes and name not in _scopes[-1]:
        _scopes[-1][name] = os.environ.get(name)
    os.environ[name] = value


def unexport(name: str) -> None:
    """Remove ``name`` for the processes started from here, until the innermost :func:`scope` ends."""
    if _scopes and name not in _scopes[-1]:
        _scopes[-1][name] = os.environ.get(name)
    os.environ.pop(name, None)
