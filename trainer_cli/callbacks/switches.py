"""Trainer switches that win over callbacks a config file lists."""

from __future__ import annotations

from typing import Any

from lightning.pytorch.callbacks import Checkpoint, DeviceStatsMonitor, LearningRateMonitor, ModelSummary, ProgressBar

from trainer_cli.callbacks.final_checkpoint import FinalCheckpoint

# trainer flag -> the callback types it turns off when false
SWITCHES = {
    "enable_progress_bar": ProgressBar,
    "enable_model_summary": ModelSummary,
    "logger": (LearningRateMonitor, DeviceStatsMonitor),
    "enable_checkpointing": (Checkpoint, FinalCheckpoint),
}
NO_CHECKPOINTS = (
    "note: --trainer.enable_checkpointing false: this run keeps no checkpoints (the config's ModelCheckpoint, "
    "LastCheckpoint and FinalCheckpoint are left out): it cannot be resumed after it ends or fails, nor tested "
    "from its best epoch (only a stop by Ctrl-C or SIGTERM still saves checkpoints/last.ckpt)"
)


def drop_switched_off(trainer_config: dict[str, Any]) -> dict[str, Any]:
    """``trainer_config`` without the callbacks its own flags turn off.

    ``--trainer.enable_progress_bar false`` removes a ``RichProgressBar`` that a callbacks file
    lists (Lightning would stop with a MisconfigurationException), ``--trainer.enable_model_summary
    false`` removes a listed ``ModelSummary``, ``--trainer.logger false`` removes the callbacks
    that only log (``LearningRateMonitor``, ``DeviceStatsMonitor``: Lightning refuses them without
    a logger), and ``--trainer.enable_checkpointing false`` the checkpoint callbacks (``ModelCheckpoint``
    and its subclasses such as ``LastCheckpoint``, ``FinalCheckpoint``: Lightning refuses a
    ``ModelCheckpoint`` then).
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
