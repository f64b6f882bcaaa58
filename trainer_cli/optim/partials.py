"""An optimizer or scheduler a module takes as an init argument and calls itself, as a module written for
Hydra does (``_partial_: true``, called in ``configure_optimizers`` as ``self.hparams.optimizer(params=...)``).

Such an argument may be annotated with the class it builds (``optimizer: torch.optim.Optimizer``, as
lightning-hydra-template's module has it) or with LightningCLI's callable types (``OptimizerCallable``,
``LRSchedulerCallable``). For the class annotation, the model's arguments named :data:`BUILT_BY_MODULE`
leave out the argument the module gives when it calls them (:func:`skipped_arguments`: the optimizer's
``params``, the scheduler's ``optimizer``), and the class is built as a :func:`functools.partial` of its
configured arguments (:func:`partial_when_unbound`, :data:`INSTANTIATORS`), as Hydra builds a
``_partial_`` entry.

LightningCLI saves the arguments' config, ``{"class_path", "init_args"}``, as the module's
hyperparameters, which cannot be called: each such config in ``hparams`` becomes a
:class:`ConfiguredPartial`, the same dict, callable as Hydra's partial is. A checkpoint keeps it as the
plain dict (:class:`PlainPartials`), which torch's safe loader reads.
"""

from __future__ import annotations

import inspect
from collections.abc import MutableMapping
from functools import partial
from typing import Any

from lightning.pytorch import LightningModule
from lightning.pytorch.callbacks import Callback
from torch.optim import Optimizer
from torch.optim.lr_scheduler import LRScheduler, ReduceLROnPlateau

from trainer_cli.imports import import_class

BUILT_LATER = (Optimizer, LRScheduler, ReduceLROnPlateau)  # classes a module can only build itself
# the model's init arguments a module builds itself, by the names modules give them (lightning-hydra-template's)
BUILT_BY_MODULE = ("optimizer", "scheduler", "lr_scheduler")


def _called_with(cls: type) -> str:
    """The argument a module gives ``cls`` when it builds it: an optimizer's ``params``, a scheduler's ``optimizer``."""
    return "params" if issubclass(cls, Optimizer) else "optimizer"


def skipped_arguments() -> set[str]:
    """The nested keys the model's parser leaves out (jsonargparse's ``skip``): the argument each of
    :data:`BUILT_BY_MODULE` is called with (``optimizer.init_args.params``, ``scheduler.init_args.optimizer``)."""
    return {f"{name}.init_args.{arg}" for name in BUILT_BY_MODULE for arg in ("params", "optimizer")}


def partial_when_unbound(class_type: type, *args: Any, **kwargs: Any) -> Any:
    """jsonargparse's instantiator of an optimizer or scheduler class (:data:`INSTANTIATORS`): the object,
    or a :func:`functools.partial` of ``kwargs`` when the argument it is called with is not given or null (a
    model's init argument the module calls, :func:`skipped_arguments`)."""
    first = _called_with(class_type)
    if args or kwargs.get(first) is not None:
        return class_type(*args, **kwargs)
    kwargs.pop(first, None)  # `optimizer: null` of a scheduler's config (a dump of the unvalidated value)
    return partial(class_type, **kwargs)


# (instantiator, class, subclasses too), the form of jsonargparse's `instantiate(..., instantiators=...)`
INSTANTIATORS = [(partial_when_unbound, cls, True) for cls in BUILT_LATER]


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


def instantiate_classes(cli: Any) -> None:
    """LightningCLI's ``instantiate_classes`` for ``cli`` (a :class:`trainer_cli.runtime.cli.TrainerCLI`,
    whose LightningCLI automatic optimizers are off), with :data:`INSTANTIATORS` for the optimizer and
    scheduler classes (in jsonargparse's ``instantiate`` call from 4.52, else added to the parser, its API
    before), and the model's hparams made callable (:func:`callable_partials`) before the Trainer is built."""
    parser, config = cli.parser, cli.config
    if "instantiators" in inspect.signature(parser.instantiate).parameters:
        cli.config_init = parser.instantiate(config, instantiators=INSTANTIATORS)
    else:
        for instantiator, cls, subclasses in INSTANTIATORS:
            parser.add_instantiator(instantiator, cls, subclasses=subclasses)
        cli.config_init = parser.instantiate_classes(config)
    init = cli.config_init.get(str(cli.subcommand), cli.config_init)  # the verb's, as LightningCLI reads it
    cli.datamodule, cli.model = init.get("data"), init.get("model")
    callable_partials(cli.model)
    cli.trainer = cli.instantiate_trainer()


def callable_partials(model: Any) -> list[str]:
    """Make each optimizer or scheduler config among the values of ``model``'s hparams callable
    (:class:`ConfiguredPartial`), in place, built before the Trainer: a module calls them in
    ``configure_optimizers`` (``self.hparams.optimizer(params=...)``). Returns their keys (none for
    anything but a LightningModule)."""
    hparams: MutableMapping[str, Any] | None = getattr(model, "hparams", None)
    if not isinstance(model, LightningModule) or not isinstance(hparams, MutableMapping):
        return []
    keys = [key for key, value in hparams.items() if _built_later(value) and not isinstance(value, ConfiguredPartial)]
    for key in keys:
        hparams[key] = ConfiguredPartial(hparams[key])
    return keys


def has_partials(model: Any) -> bool:
    """Whether ``model``'s hparams hold a :class:`ConfiguredPartial` (:func:`callable_partials` made one)."""
    hparams = getattr(model, "hparams", None)
    return isinstance(hparams, MutableMapping) and any(isinstance(v, ConfiguredPartial) for v in hparams.values())


class PlainPartials(Callback):
    """Save each :class:`ConfiguredPartial` of a checkpoint's ``hyper_parameters`` as the plain dict it is,
    so that the checkpoint reads with torch's safe loader (``weights_only=True``)."""

    def on_save_checkpoint(self, trainer: Any, pl_module: Any, checkpoint: dict[str, Any]) -> None:
        hparams = checkpoint.get(pl_module.CHECKPOINT_HYPER_PARAMS_KEY)
        if isinstance(hparams, MutableMapping):
            for key, value in hparams.items():
                if isinstance(value, ConfiguredPartial):
                    hparams[key] = dict(value)
