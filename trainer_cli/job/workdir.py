"""A Slurm job started in its code snapshot works in the directory it was submitted from.

The batch script starts the job in ``<run>/code/<submit dir>`` (``#SBATCH --chdir``), so Python puts
the snapshot first on ``sys.path`` and the user's modules are imported from the submitted copy
(:mod:`trainer_cli.schedulers.snapshot`); it exports :data:`WORKDIR_ENV`, the submitting directory, and
:func:`enter` changes to it, so relative paths (a config's data folder, a data module's
``data/x.csv``) mean what they meant at submit. Paths derived from a module's own file resolve in
the snapshot, where the work tree's git-ignored entries (its data) are linked. Called
first thing by ``train`` (:mod:`trainer_cli.__main__`) and by a user's script's TrainerCLI
(:class:`trainer_cli.runtime.cli.TrainerCLI`), before any class of the user's is built.
"""

from __future__ import annotations

import os

WORKDIR_ENV = "TRAINER_CLI_WORKDIR"
"""The submitting directory, exported by the batch script when the job runs in a code snapshot."""


def enter() -> str | None:
    """Change to the submitting directory (:data:`WORKDIR_ENV`) when set; returns it (None: unset,
    nothing changed). Repeating it is harmless (``train`` enters it, then builds a TrainerCLI)."""
    workdir = os.environ.get(WORKDIR_ENV)
    if workdir:
        os.chdir(workdir)
    return workdir or None
