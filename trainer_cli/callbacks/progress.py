"""The launcher's default progress bar: Lightning's TQDM bar, redrawn at most ten times a second."""

from __future__ import annotations

import time
from typing import Any

import lightning.pytorch as pl
from lightning.pytorch.callbacks import ProgressBar, TQDMProgressBar

MIN_REDRAW_INTERVAL_S = 0.1


class ThrottledTQDMProgressBar(TQDMProgressBar):
    """Lightning's ``TQDMProgressBar`` whose training bar is redrawn at most every ``min_interval_s``.

    Lightning redraws the bar (and reads every progress-bar metric) on every ``refresh_rate``-th
    batch, whatever the step time: with millisecond steps that is a large share of the per-step
    overhead (``benchmarks/README.md``). Skipped batches lose nothing: each redraw sets the
    absolute batch count, and the last batch of an epoch is always drawn.

    Args:
        refresh_rate: Redraw at most every this many batches (0 disables the bar), as in Lightning.
        process_position: Offset of the bars in the terminal, as in Lightning.
        min_interval_s: Least time between two redraws of the training bar, in seconds.
    """

    def __init__(self, refresh_rate: int = 1, process_position: int = 0, min_interval_s: float = MIN_REDRAW_INTERVAL_S) -> None:
        super().__init__(refresh_rate=refresh_rate, process_position=process_position)
        self.min_interval_s = min_interval_s
        self._last_draw = float("-inf")

    def on_train_batch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any, batch: Any, batch_idx: int) -> None:
        now = time.monotonic()
        if batch_idx + 1 != self.total_train_batches and now - self._last_draw < self.min_interval_s:
            return
        self._last_draw = now
        super().on_train_batch_end(trainer, pl_module, outputs, batch, batch_idx)


def default_progress_bar(trainer_config: dict[str, Any], callbacks: list[pl.Callback]) -> list[pl.Callback]:
    """``[ThrottledTQDMProgressBar()]`` unless the progress bar is off or the config already names one.

    Lightning picks its ``RichProgressBar`` whenever ``rich`` is installed (``lightning[extra]``
    installs it); on the digits benchmark that cost about 0.5 ms of CPU per step more than the
    TQDM bar (``benchmarks/README.md``). Users who prefer Rich list it in ``trainer.callbacks``.
    """
    if trainer_config.get("enable_progress_bar") is False:
        return []
    configured = trainer_config.get("callbacks") or []
    configured = configured if isinstance(configured, list) else [configured]
    if any(isinstance(cb, ProgressBar) for cb in [*configured, *callbacks]):
        return []
    return [ThrottledTQDMProgressBar()]
