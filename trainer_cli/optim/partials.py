"""An optimizer or scheduler a module takes as an init argument and calls itself, as a module written for
Hydra does (``_partial_: true``, called in ``configure_optimizers`` as ``self.hparams.optimizer(params=...)``).

LightningCLI gives such an argument (typed :data:`lightning.pytorch.cli.OptimizerCallable` or
``LRSchedulerCallable``) a callable, but the module's ``hparams`` hold its config, ``{"class_path",
"init_args"}`` (LightningCLI saves the config as the hyperparameters), which cannot be called. Here
each such config in ``hparams`` becomes a :class:`ConfiguredPartial`: the same dict, callable as
Hydra's partial is. A checkpoint keeps it as the plain dict (:class:`PlainPartials`), which torch's
safe loader reads.
"""

from __future__ import annotations

from collections.abc import MutableMapping
from typing import Any

from lightning.pytorch.callbacks import Callback
from torch.optim import Optimizer
from torch.optim.lr_scheduler import LRScheduler, ReduceLROnPlateau

from trainer_cli.imports import import_class

BUILT_LATER = (Optimizer, LRScheduler, ReduceLROnPlateau)  # classes a module can only build itself


class ConfiguredPartial(dict):  # type: ignore[type-arg]
    """A ``{"class_path", "init_args"}`` config that builds its class when called, the config's
    arguments first, then the call's (``hparams.optimizer(params=self.parameters())``)."""

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return import_class(self["class_path"])(*args, **{**(self.get("init_args") or {}), **kwargs})


def _built_later(value: Any) -> bool:
    """Whether ``value`` is the config of an optimizer or a scheduler (:data:`BUILT_LATER`)."""
    if not isinstance(value, dict) or not isinstance(value.get("class_path"), str):
        return False
    try:
        cls = import_class(value["class_path"])
    except (ImportError, AttributeError, ValueError):
        return False
    return isinstance(cls, type) and issubclass(cls, BUILT_LATER)


def callable_partials(hparams: MutableMapping[str, Any]) -> list[str]:
    """Make each optimizer or scheduler config among ``hparams``' values callable (:class:`ConfiguredPartial`),
    in place; returns their keys."""
    keys = [key for key, value in hparams.items() if _built_later(value) and not isinstance(value, ConfiguredPartial)]
    for key in keys:
        hparams[key] = ConfiguredPartial(hparams[key])
    return keys


class PlainPartials(Callback):
    """Save each :class:`ConfiguredPartial` of a checkpoint's ``hyper_parameters`` as the plain dict it is,
    so that the checkpoint reads with torch's safe loader (``weights_only=True``)."""

    def on_save_checkpoint(self, trainer: Any, pl_module: Any, checkpoint: dict[str, Any]) -> None:
        hparams = checkpoint.get(pl_module.CHECKPOINT_HYPER_PARAMS_KEY)
        if isinstance(hparams, MutableMapping):
            for key, value in hparams.items():
                if isinstance(value, ConfiguredPartial):
                    hparams[key] = dict(value)
