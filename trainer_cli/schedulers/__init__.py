"""The engines behind the scheduler seam (:class:`trainer_cli.job.scheduler.Scheduler`): one module or
folder per engine (:mod:`trainer_cli.schedulers.slurm.engine`; the Ray engine in ``schedulers/ray``, for
``train submit --scheduler ray``), and the lookup by name the entry point builds its ``{name: engine}``
map from (``train jobs``, ``train cancel``).
"""

from __future__ import annotations

import importlib.util
import os

from trainer_cli.errors import UserError
from trainer_cli.job.scheduler import SCHEDULER_NAMES, Scheduler


def engine(name: str) -> Scheduler:
    """The engine called ``name`` (:data:`trainer_cli.job.scheduler.SCHEDULER_NAMES`); Ray's talks to the
    cluster ``RAY_ADDRESS`` names.

    Raises:
        UserError: for a name no engine has.
    """
    if name == "slurm":  # (each engine imported when asked for: this package's shared modules import none)
        from trainer_cli.schedulers.slurm.engine import SlurmScheduler

        return SlurmScheduler()
    if name == "ray":
        from trainer_cli.schedulers.ray.engine import RayScheduler
        from trainer_cli.schedulers.ray.options import RayOptions

        return RayScheduler(RayOptions(address=os.environ.get("RAY_ADDRESS")))
    raise UserError(f"--scheduler {name}: no such engine here; choose one of {', '.join(SCHEDULER_NAMES)}")


def engines() -> dict[str, Scheduler]:
    """``{name: engine}`` of every engine this installation can ask now (what ``train jobs`` and
    ``train cancel`` use): Slurm's, and Ray's where ``ray`` is installed and ``RAY_ADDRESS`` names a
    cluster (without it a Ray job's row is read from its run's ``job.json``)."""
    found: dict[str, Scheduler] = {"slurm": engine("slurm")}
    if os.environ.get("RAY_ADDRESS") and importlib.util.find_spec("ray") is not None:
        found["ray"] = engine("ray")
    return found


def current_clusters() -> dict[str, str | None]:
    """``{engine: cluster}``: the cluster each engine is on here (Slurm's ``ClusterName``, None where Slurm
    cannot be asked; the Ray cluster ``RAY_ADDRESS`` names, None without it), as the registry records a
    job's ``cluster`` (:func:`trainer_cli.schedulers.submissions.of_cluster`)."""
    from trainer_cli.job.slurm_commands import cluster_name

    return {"slurm": cluster_name(), "ray": os.environ.get("RAY_ADDRESS") or None}
