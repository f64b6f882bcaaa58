"""The optimizer and scheduler groups of :class:`trainer_cli.runtime.cli.TrainerCLI` (``--optimizer AdamW``,
``--lr_scheduler OneCycleLR``), added by LightningCLI's rule for ``auto_configure_optimizers`` and built
lazily, when Lightning asks: a step-wise scheduler learns the run's total steps from the trainer."""

from __future__ import annotations

from functools import partial, update_wrapper
from typing import Any

from jsonargparse import Namespace
from lightning.pytorch.cli import LightningArgumentParser, LightningCLI, LRSchedulerTypeTuple
from torch.optim import Optimizer

from trainer_cli.optim.configure import configure_optimizers


def _added_any(parser: LightningArgumentParser, kind: str) -> bool:
    """Whether the user's ``add_arguments_to_parser`` added optimizers (``kind="optimizers"``) or
    schedulers: LightningArgumentParser's record of ``add_optimizer_args``/``add_lr_scheduler_args``,
    read, as LightningCLI reads it, to add the automatic ones only when there are none."""
    return bool(vars(parser).get("_" + kind))


def _automatic(parser: Any, kind: str) -> list[tuple[str, Any]]:
    """The ``(key, class)`` of each optimizer (``kind="optimizers"``) or scheduler group added with
    ``link_to="AUTOMATIC"`` (LightningArgumentParser's record, read as LightningCLI reads it)."""
    return [
        (key, cls) for key, (cls, link_to) in (vars(parser).get("_" + kind) or {}).items() if link_to == "AUTOMATIC"
    ]


def _with_class_path(cls: Any, value: Any) -> dict[str, Any] | None:
    """A group's instantiated config as ``{"class_path", "init_args"}`` (a group of one class holds
    only its init args)."""
    if not value:
        return None
    value = value.as_dict() if isinstance(value, Namespace) else dict(value)
    if not isinstance(cls, tuple) and "class_path" not in value:
        return {"class_path": f"{cls.__module__}.{cls.__qualname__}", "init_args": value}
    return value


def add_automatic_groups(parsers: list[LightningArgumentParser], auto_configure_optimizers: bool) -> None:
    """The ``--optimizer`` and ``--lr_scheduler`` groups on each of ``parsers`` where the user's
    ``add_arguments_to_parser`` added none, after it, as LightningCLI adds them (``auto_configure_optimizers``)."""
    for core in parsers:
        if auto_configure_optimizers and not _added_any(core, "optimizers"):
            core.add_optimizer_args((Optimizer,))  # --optimizer NAME
        if auto_configure_optimizers and not _added_any(core, "lr_schedulers"):
            core.add_lr_scheduler_args(LRSchedulerTypeTuple)


def add_configure_optimizers(cli: Any) -> None:
    """The ``configure_optimizers`` of ``cli``'s model from the optimizer and scheduler groups, by
    LightningCLI's rule (``auto_configure_optimizers``: the one optimizer and at most one scheduler
    group added with ``link_to="AUTOMATIC"``; the model's own stays when none is configured), built
    when Lightning asks: a step-wise scheduler gets ``total_steps`` from
    ``trainer.estimated_stepping_batches``. A CLI subclass that overrides ``configure_optimizers``
    gets the built optimizer and scheduler, as LightningCLI gives them.

    Raises:
        MisconfigurationException: for more than one automatic optimizer or scheduler group (LightningCLI's rule).
    """
    if not cli._auto_optimizers:
        return
    parser = cli.verb_parser
    optimizers = _automatic(parser, "optimizers")
    schedulers = _automatic(parser, "lr_schedulers")
    if not optimizers:
        return
    if len(optimizers) > 1 or len(schedulers) > 1:
        from lightning.pytorch.utilities.exceptions import MisconfigurationException

        raise MisconfigurationException(
            f"{type(cli).__name__} builds configure_optimizers from one optimizer and at most one lr_scheduler "
            f"group added as 'AUTOMATIC', found {optimizers + schedulers}: link the groups and implement "
            "configure_optimizers"
        )
    init = cli._subconfig_init()
    optimizer_init = _with_class_path(optimizers[0][1], init.get(optimizers[0][0]))
    if not optimizer_init:
        return  # registered automatically, not given: the model's own configure_optimizers
    scheduler_init = _with_class_path(schedulers[0][1], init.get(schedulers[0][0])) if schedulers else None
    from lightning.pytorch.utilities import rank_zero_info
    from lightning.pytorch.utilities.model_helpers import is_overridden

    if is_overridden("configure_optimizers", cli.model) and cli.run.entry.follows_lightning:
        from lightning.pytorch.utilities import rank_zero_warn

        # a user's script: LightningCLI's own warning, naming the user's CLI class
        rank_zero_warn(
            f"`{cli.model.__class__.__name__}.configure_optimizers` will be overridden by "
            f"`{cli.__class__.__name__}.configure_optimizers`."
        )
    elif is_overridden("configure_optimizers", cli.model):  # LightningCLI's rule, said in the config's terms
        built = f"optimizer {optimizer_init.get('class_path')}"
        if scheduler_init:
            built += f" and lr_scheduler {scheduler_init.get('class_path')}"
        rank_zero_info(
            f"note: {type(cli.model).__name__}.configure_optimizers is not used: the config's {built} "
            "replace it (LightningCLI's rule); leave `optimizer` out of the config to use the model's own"
        )
    if type(cli).configure_optimizers is not LightningCLI.configure_optimizers:  # the user's CLI builds them
        from types import MethodType

        from lightning.pytorch.cli import instantiate_class

        optimizer = instantiate_class(cli.model.parameters(), optimizer_init)
        scheduler = instantiate_class(optimizer, scheduler_init) if scheduler_init else None
        user_fn = partial(cli.configure_optimizers, optimizer=optimizer, lr_scheduler=scheduler)
        update_wrapper(user_fn, cli.configure_optimizers)
        cli.model.configure_optimizers = MethodType(user_fn, cli.model)
        return
    # a partial holding the model, not a bound method: it pickles whole (ddp_spawn sends the
    # model to its processes; a bound method would come back as the class's configure_optimizers)
    fn = partial(
        configure_optimizers,
        cli.model,
        optimizer_init=optimizer_init,
        lr_scheduler_init=scheduler_init,
        param_groups=init.get("param_groups"),
    )
    update_wrapper(fn, configure_optimizers)
    cli.model.configure_optimizers = fn
