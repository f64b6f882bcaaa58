"""The launcher's default progress bar."""

from __future__ import annotations

from typing import Any

import lightning.pytorch as pl
from lightning.pytorch.callbacks import ProgressBar, TQDMProgressBar


def default_progress_bar(trainer_config: dict[str, Any], callbacks: list[pl.Callback]) -> list[pl.Callback]:
    """``[TQDMProgressBar()]`` unless the progress bar is off or the config already names one.

    Lightning picks its ``RichProgressBar`` whenever ``rich`` is installed (``lightning[extra]``
    installs it); on the digits benchmark that cost about 0.5 ms of CPU per step more than
    ``TQDMProgressBar`` (``benchmarks/README.md``). Users who prefer Rich list it in
    ``trainer.callbacks``.
    """
    if trainer_config.get("enable_progress_bar") is False:
        return []
    configured = trainer_config.get("callbacks") or []
    configured = configured if isinstance(configured, list) else [configured]
    if any(isinstance(cb, ProgressBar) for cb in [*configured, *callbacks]):
        return []
    return [TQDMProgressBar()]
