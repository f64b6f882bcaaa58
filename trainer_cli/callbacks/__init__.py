"""Callbacks Lightning lacks."""

from trainer_cli.callbacks.non_finite import NonFiniteLoss
from trainer_cli.callbacks.run_summary import RunSummary

__all__ = ["NonFiniteLoss", "RunSummary"]
