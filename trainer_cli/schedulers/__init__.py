"""The engines behind the scheduler seam (:class:`trainer_cli.job.scheduler.Scheduler`): one module or
folder per engine (:mod:`trainer_cli.schedulers.slurm.engine`; the Ray engine in ``schedulers/ray``, for
``train submit --scheduler ray``), and the lookup by name the entry point builds its ``{name: engine}``
map from (``train jobs``, ``train cancel``).
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from trainer_cli.errors import UserError
from trainer_cli.job.scheduler import DEFAULT_SCHEDULER, SCHEDULER_NAMES, Scheduler


def _slurm() -> Scheduler:
    from trainer_cli.schedulers.slurm.engine import SlurmScheduler

    return SlurmScheduler()


def _ray() -> Scheduler:
    """Ray's engine, on the cluster ``RAY_ADDRESS`` names."""
    from trainer_cli.schedulers.ray.engine import RayScheduler
    from trainer_cli.schedulers.ray.options import RayOptions

    return RayScheduler(RayOptions(address=os.environ.get("RAY_ADDRESS")))


def _ray_reachable() -> bool:
    """Whether Ray can be asked from here: ``ray`` installed and ``RAY_ADDRESS`` naming a cluster."""
    return bool(os.environ.get("RAY_ADDRESS")) and importlib.util.find_spec("ray") is not None


# name -> (how the engine is built, whether it can be asked here): every name of SCHEDULER_NAMES, each
# engine imported only when built (this package's shared modules import none)
_ENGINES: dict[str, tuple[Callable[[], Scheduler], Callable[[], bool]]] = {
    "slurm": (_slurm, lambda: True),  # (asking a Slurm that is not there answers nothing, quietly)
    "ray": (_ray, _ray_reachable),
}
assert tuple(_ENGINES) == SCHEDULER_NAMES, "an engine for every name train submit --scheduler accepts"


def engine(name: str) -> Scheduler:
    """The engine called ``name`` (:data:`trainer_cli.job.scheduler.SCHEDULER_NAMES`); Ray's talks to the
    cluster ``RAY_ADDRESS`` names.

    Raises:
        UserError: for a name no engine has.
    """
    if name not in _ENGINES:
        raise UserError(f"--scheduler {name}: no such engine here; choose one of {', '.join(SCHEDULER_NAMES)}")
    return _ENGINES[name][0]()


def engines() -> dict[str, Scheduler]:
    """``{name: engine}`` of every engine this installation can ask now (what ``train jobs``, ``train
    cancel`` and ``train sweep-results`` use): Slurm's, and Ray's where ``ray`` is installed and
    ``RAY_ADDRESS`` names a cluster (without it a Ray job's row is read from its run's ``job.json``)."""
    return {name: build() for name, (build, reachable) in _ENGINES.items() if reachable()}


def current_clusters(found: Mapping[str, Scheduler]) -> dict[str, str | None]:
    """``{engine: cluster}``: the cluster each engine of ``found`` (:func:`engines`) is on here
    (:meth:`~trainer_cli.job.scheduler.Scheduler.cluster`), as the registry records a job's ``cluster``
    (:func:`trainer_cli.schedulers.submissions.of_cluster`: an engine not in ``found`` is on no cluster
    known, and its jobs are all listed)."""
    return {name: scheduler.cluster() for name, scheduler in found.items()}


def refuse_other_engines_options(args: Iterable[Any], chosen: str) -> None:
    """Refuse the options of an engine other than ``chosen`` (``--ray.*`` on Slurm, ``--slurm.*`` or ``--slurm
    FILE`` on Ray), one line, before anything is written or submitted.

    Args:
        args: The request's items (:class:`trainer_cli.config.request.Arg`: ``name``, ``flag``).
        chosen: The engine ``train submit --scheduler`` chose (:data:`~trainer_cli.job.scheduler.SCHEDULER_NAMES`).

    Raises:
        UserError: naming the first such flag, its engine, and how to use or drop it.
    """
    for arg in args:
        section = (arg.name or "").split(".")[0]
        if section in SCHEDULER_NAMES and section != chosen:
            given = "the default, " if chosen == DEFAULT_SCHEDULER else ""
            raise UserError(
                f"{arg.flag} is an option of `train submit --scheduler {section}`, not of --scheduler {chosen} "
                f"({given}the engine chosen): submit with --scheduler {section}, or drop it"
            )


def option_flags() -> list[str]:
    """``--<engine>.<field>`` of every engine's options (``train submit``'s: ``--slurm.time``, ``--ray.address``),
    as shell completion offers them."""
    import dataclasses

    from trainer_cli.schedulers.ray.options import RayOptions
    from trainer_cli.schedulers.slurm.options import SlurmOptions

    classes: dict[str, Any] = {"slurm": SlurmOptions, "ray": RayOptions}
    assert tuple(classes) == SCHEDULER_NAMES, "the options of every engine"
    return [f"--{name}.{f.name}" for name, cls in classes.items() for f in dataclasses.fields(cls)]
