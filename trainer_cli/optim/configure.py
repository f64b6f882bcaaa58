"""``configure_optimizers`` built from the config's ``optimizer`` and ``lr_scheduler`` sections.

Built lazily, when Lightning asks, so a step-wise scheduler can read the run's total number of
optimizer steps from ``trainer.estimated_stepping_batches``.
"""

from __future__ import annotations

import inspect
import math
from typing import Any

import lightning.pytorch as pl
from torch.optim import Optimizer
from torch.optim.lr_scheduler import ReduceLROnPlateau

from trainer_cli.errors import UserError
from trainer_cli.imports import import_class
from trainer_cli.optim.param_groups import ParamGroups, build_param_groups, scale_per_group
from trainer_cli.optim.sam import SAM
from trainer_cli.optim.schedule_resume import steps_to_build

TOTAL_STEPS_ARG = "total_steps"
PER_GROUP_LR_ARGS = ("max_lr", "base_lr")  # scheduler arguments scaled by each group's lr_mult
DEFAULT_PLATEAU_MONITOR = "val/loss"


def is_step_wise(scheduler_class: type) -> bool:
    """Schedulers with a ``total_steps`` argument are stepped per optimizer step."""
    return TOTAL_STEPS_ARG in inspect.signature(scheduler_class).parameters


def total_optimizer_steps(trainer: pl.Trainer) -> int:
    """The run's total number of optimizer steps, as Lightning estimates it.

    Raises:
        UserError: when the run has no end (no max_epochs and no max_steps).
    """
    steps = trainer.estimated_stepping_batches
    if steps is None or math.isinf(steps):
        raise UserError("a step-wise scheduler needs a finite run: set --trainer.max_epochs or --trainer.max_steps")
    return int(steps)


def build_scheduler(optimizer: Optimizer, init: dict[str, Any], trainer: pl.Trainer | None) -> dict[str, Any]:
    """The ``lr_scheduler`` config dict Lightning takes, with ``total_steps`` filled in when empty."""
    cls = import_class(init["class_path"])
    kwargs = dict(init.get("init_args") or {})
    step_wise = is_step_wise(cls)
    if step_wise and kwargs.get(TOTAL_STEPS_ARG) is None:
        if trainer is None:
            raise RuntimeError(
                f"{cls.__name__} takes {TOTAL_STEPS_ARG} from the Trainer: call configure_optimizers from a Trainer, "
                f"or give {TOTAL_STEPS_ARG}"
            )
        kwargs[TOTAL_STEPS_ARG] = steps_to_build(
            trainer, total_optimizer_steps(trainer)
        )  # --resume_schedule restart: fewer
    for key in PER_GROUP_LR_ARGS:
        if key in kwargs:
            kwargs[key] = scale_per_group(kwargs[key], optimizer.param_groups)
    scheduler = cls(optimizer, **kwargs)  # on resume only its position is restored (checkpointing.ResumeState)
    config: dict[str, Any] = {"scheduler": scheduler, "interval": "step" if step_wise else "epoch"}
    if isinstance(scheduler, ReduceLROnPlateau):
        config["monitor"] = getattr(scheduler, "monitor", DEFAULT_PLATEAU_MONITOR)
    return config


def _default_arg(cls: type, name: str) -> Any:
    param = inspect.signature(cls).parameters.get(name)
    return None if param is None or param.default is inspect.Parameter.empty else param.default


def build_optimizer(
    module: pl.LightningModule, optimizer_init: dict[str, Any], param_groups: ParamGroups | None = None
) -> Optimizer:
    """The configured optimizer over the module's trainable parameters, split into groups by
    ``param_groups`` (see :mod:`trainer_cli.optim.param_groups`).

    Raises:
        UserError: for SAM with gradient accumulation (its second pass would see one micro-batch).
    """
    cls = import_class(optimizer_init["class_path"])
    kwargs = dict(optimizer_init.get("init_args") or {})
    try:
        trainer = module.trainer
    except RuntimeError:  # not attached to a Trainer
        trainer = None
    if issubclass(cls, SAM) and trainer is not None and trainer.accumulate_grad_batches > 1:
        raise UserError("SAM cannot be combined with gradient accumulation: set --trainer.accumulate_grad_batches 1")
    spec = param_groups or ParamGroups()
    if not spec.active:
        return cls([p for p in module.parameters() if p.requires_grad], **kwargs)
    lr = kwargs.get("lr", _default_arg(cls, "lr"))
    if not isinstance(lr, (int, float)):
        raise UserError("param_groups needs a numeric learning rate: set --optimizer.lr")
    weight_decay = kwargs.get("weight_decay", _default_arg(cls, "weight_decay"))
    return cls(build_param_groups(module, spec, lr, weight_decay), **kwargs)


def configure_optimizers(
    module: pl.LightningModule,
    optimizer_init: dict[str, Any],
    lr_scheduler_init: dict[str, Any] | None,
    param_groups: ParamGroups | None = None,
) -> Any:
    """What ``LightningModule.configure_optimizers`` returns for the configured optimizer, its
    parameter groups and the scheduler."""
    optimizer = build_optimizer(module, optimizer_init, param_groups)
    if not lr_scheduler_init:
        return optimizer
    try:
        trainer = module.trainer
    except (
        RuntimeError
    ):  # called outside a Trainer (as LightningCLI allows): a step-wise scheduler needs total_steps given
        trainer = None
    config = build_scheduler(optimizer, lr_scheduler_init, trainer)
    if "monitor" in config:  # ReduceLROnPlateau: the dict form, as LightningCLI returns it
        return {"optimizer": optimizer, "lr_scheduler": config}
    # LightningCLI's shape ([optimizer], [scheduler]); a step-wise one keeps its interval in the config dict
    return [optimizer], [config if config["interval"] == "step" else config["scheduler"]]
