"""The one-line swap of a LightningCLI script: ``lightning.pytorch.cli`` with ``LightningCLI`` the launcher's.

A script's import ``from lightning.pytorch.cli import ArgsType, LightningCLI`` (whatever else it names)
becomes ``from trainer_cli.cli import ArgsType, LightningCLI``: every public name of
``lightning.pytorch.cli`` is here, the same object, but ``LightningCLI``, which is :class:`TrainerCLI`
(``from trainer_cli import TrainerCLI`` too). The names
Lightning defines in that module are imported here; any other it offers (jsonargparse's ``Namespace``,
``ActionConfigFile``, Lightning's ``Trainer``, ...) is looked up there when asked for (:func:`__getattr__`).
"""

from __future__ import annotations

from typing import Any

import lightning.pytorch.cli as _stock
from lightning.pytorch.cli import (
    ArgsType,
    LightningArgumentParser,
    LRSchedulerCallable,
    LRSchedulerType,
    LRSchedulerTypeTuple,
    LRSchedulerTypeUnion,
    OptimizerCallable,
    ReduceLROnPlateau,
    SaveConfigCallback,
    instantiate_class,
)

from trainer_cli.config.request import Request
from trainer_cli.runtime import cli as _runtime


def _submit(request: Request, *rest: Any, **kwargs: Any) -> int:
    """``python main.py submit ARGS``: the engine ``--scheduler`` names, as ``train submit`` picks it
    (:mod:`trainer_cli.__main__`): :func:`trainer_cli.schedulers.ray.submit.from_script` for ``ray``, else
    :func:`trainer_cli.schedulers.slurm.submit.from_script` (Slurm); imported when it runs."""
    if request.last("scheduler") == "ray":
        from trainer_cli.schedulers.ray.submit import from_script
    else:
        from trainer_cli.schedulers.slurm.submit import from_script

    return from_script(request, *rest, **kwargs)


class TrainerCLI(_runtime.TrainerCLI):
    """:class:`trainer_cli.runtime.cli.TrainerCLI` for a user's script: LightningCLI's verbs and the
    launcher's ``submit`` (``python main.py submit ARGS``: the script's fit run queued as a Slurm job, or
    with ``--scheduler ray`` as a Ray job).

    The package face gives ``submit`` (:attr:`~trainer_cli.runtime.cli.TrainerCLI.script_verbs`): the submit
    library is a layer above the runtime, which imports nothing of it.
    """

    script_verbs = {"submit": _submit}


LightningCLI = TrainerCLI

__all__ = [
    "ArgsType",
    "LRSchedulerCallable",
    "LRSchedulerType",
    "LRSchedulerTypeTuple",
    "LRSchedulerTypeUnion",
    "LightningArgumentParser",
    "LightningCLI",
    "OptimizerCallable",
    "ReduceLROnPlateau",
    "SaveConfigCallback",
    "TrainerCLI",
    "instantiate_class",
]


def __getattr__(name: str) -> Any:
    """Any other public name of ``lightning.pytorch.cli`` (``from trainer_cli.cli import Namespace``).

    Raises:
        AttributeError: for a name ``lightning.pytorch.cli`` has not either, or a private one.
    """
    if not name.startswith("_") and hasattr(_stock, name):
        return getattr(_stock, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r} (lightning.pytorch.cli has none either)")


def __dir__() -> list[str]:
    return sorted(set(__all__) | {n for n in dir(_stock) if not n.startswith("_")})
