"""Callbacks Lightning lacks."""

from trainer_cli.callbacks.progress import ThrottledTQDMProgressBar
from trainer_cli.callbacks.run_summary import RunSummary

__all__ = ["RunSummary", "ThrottledTQDMProgressBar"]
