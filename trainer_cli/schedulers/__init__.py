"""The engines behind the scheduler seam (:class:`trainer_cli.job.scheduler.Scheduler`): one module or
folder per engine (:mod:`trainer_cli.schedulers.slurm`; Ray's in ``schedulers/ray``), and the lookup
by name the entry point builds its ``{name: engine}`` map from (``train jobs``, ``train cancel``).
"""

from __future__ import annotations

from trainer_cli.errors import UserError
from trainer_cli.job.scheduler import SCHEDULER_NAMES, Scheduler
from trainer_cli.schedulers.slurm import SlurmScheduler


def engine(name: str) -> Scheduler:
    """The engine called ``name`` (:data:`trainer_cli.job.scheduler.SCHEDULER_NAMES`).

    Raises:
        UserError: for a name no engine has.
    """
    if name == SlurmScheduler.name:
        return SlurmScheduler()
    raise UserError(f"--scheduler {name}: no such engine here; choose one of {', '.join(SCHEDULER_NAMES)}")


def engines() -> dict[str, Scheduler]:
    """``{name: engine}`` of every engine this installation has (what ``train jobs`` asks)."""
    return {name: engine(name) for name in (SlurmScheduler.name,)}
