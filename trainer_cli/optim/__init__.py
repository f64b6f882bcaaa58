"""Optimizers, parameter groups and schedulers with inferred total steps."""

from trainer_cli.optim.param_groups import ParamGroups
from trainer_cli.optim.sam import SAM
from trainer_cli.optim.schedulers import FlatCosineLR, LinearWarmupCosineLR

__all__ = ["SAM", "FlatCosineLR", "LinearWarmupCosineLR", "ParamGroups"]
