"""Optimizers, parameter groups and schedulers with inferred total steps."""

from trainer_cli.optim.schedulers import FlatCosineLR, LinearWarmupCosineLR

__all__ = ["FlatCosineLR", "LinearWarmupCosineLR"]
