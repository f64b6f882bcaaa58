"""Callbacks Lightning lacks.

Each is imported on first use (``from trainer_cli.callbacks import LastCheckpoint``, a config's
``trainer_cli.callbacks.WarmupEMA``), so a module of this package without Lightning
(:mod:`trainer_cli.callbacks.optuna_study`, which a sweep's study opens) imports no torch;
:func:`register` imports them all (LightningCLI's short names: ``class_path: WarmupEMA``).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from trainer_cli.callbacks.ema import WarmupEMA
    from trainer_cli.callbacks.final_checkpoint import FinalCheckpoint
    from trainer_cli.callbacks.grad_norm import GradNormMonitor
    from trainer_cli.callbacks.last_checkpoint import LastCheckpoint
    from trainer_cli.callbacks.non_finite import NonFiniteLoss
    from trainer_cli.callbacks.prediction_writer import PredictionCSVWriter
    from trainer_cli.callbacks.progress import EpochLineProgress, ThrottledTQDMProgressBar
    from trainer_cli.callbacks.run_summary import RunSummary

# name -> its module, named in full (the layer test reads these names as imports)
_MODULES = {
    "EpochLineProgress": "trainer_cli.callbacks.progress",
    "FinalCheckpoint": "trainer_cli.callbacks.final_checkpoint",
    "GradNormMonitor": "trainer_cli.callbacks.grad_norm",
    "LastCheckpoint": "trainer_cli.callbacks.last_checkpoint",
    "NonFiniteLoss": "trainer_cli.callbacks.non_finite",
    "PredictionCSVWriter": "trainer_cli.callbacks.prediction_writer",
    "RunSummary": "trainer_cli.callbacks.run_summary",
    "ThrottledTQDMProgressBar": "trainer_cli.callbacks.progress",
    "WarmupEMA": "trainer_cli.callbacks.ema",
}
__all__ = [
    "EpochLineProgress",
    "FinalCheckpoint",
    "GradNormMonitor",
    "LastCheckpoint",
    "NonFiniteLoss",
    "PredictionCSVWriter",
    "RunSummary",
    "ThrottledTQDMProgressBar",
    "WarmupEMA",
]


def __getattr__(name: str) -> Any:
    if name not in _MODULES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(_MODULES[name]), name)
    globals()[name] = value
    return value


def register() -> None:
    """Import every callback of :data:`__all__` (LightningCLI finds a short class name among the imported ones)."""
    for name in __all__:
        __getattr__(name)
