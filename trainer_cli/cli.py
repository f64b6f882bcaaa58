"""The one-line swap of a LightningCLI script: ``lightning.pytorch.cli`` with ``LightningCLI`` the launcher's.

A script's import ``from lightning.pytorch.cli import ArgsType, LightningCLI`` (whatever else it names)
becomes ``from trainer_cli.cli import ArgsType, LightningCLI``: every public name of
``lightning.pytorch.cli`` is here, the same object, but ``LightningCLI``, which is
:class:`~trainer_cli.runtime.cli.TrainerCLI` (so is ``TrainerCLI``, the path of earlier versions). The names
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

from trainer_cli.runtime.cli import TrainerCLI

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
