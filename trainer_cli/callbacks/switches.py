"""Trainer switches that win over callbacks a config file lists."""

from __future__ import annotations

from typing import Any

from lightning.pytorch.callbacks import DeviceStatsMonitor, LearningRateMonitor, ModelSummary, ProgressBar

# trainer flag -> the callback types it turns off when false
SWITCHES = {
    "enable_progress_bar": ProgressBar,
    "enable_model_summary": ModelSummary,
    "logger": (LearningRateMonitor, DeviceStatsMonitor),
}


def drop_switched_off(trainer_config: dict[str, Any]) -> dict[str, Any]:
    """``trainer_config`` without the callbacks its own flags turn off.

    ``--trainer.enable_progress_bar false`` removes a ``RichProgressBar`` that a callbacks file
    lists (Lightning would stop with a MisconfigurationException), ``--trainer.enable_model_summary
    false`` removes a listed ``ModelSummary``, and ``--trainer.logger false`` removes the callbacks
    that only log (``LearningRateMonitor``, ``DeviceStatsMonitor``: Lightning refuses them without
    a logger).
    """
    callbacks = trainer_config.get("callbacks")
    if not callbacks:
        return trainer_config
    callbacks = callbacks if isinstance(callbacks, list) else [callbacks]
    off: tuple[type, ...] = ()
    for flag, types in SWITCHES.items():
        if trainer_config.get(flag) is False:
            off += types if isinstance(types, tuple) else (types,)
    return {**trainer_config, "callbacks": [c for c in callbacks if not (off and isinstance(c, off))]}
