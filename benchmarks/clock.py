"""Timestamps of optimizer steps, taken the same way in the plain loop and in ``train fit``."""

from __future__ import annotations

import statistics
import time
from typing import Any

import lightning.pytorch as pl

FIRST_STEP_MARK = "BENCH_FIRST_STEP_DONE_AT"

# (wall, process CPU) times of the latest run in this process (read after ``train fit``)
STAMPS: list[tuple[float, float]] = []


def stamp() -> tuple[float, float]:
    """Wall-clock time and the CPU time of this process (all threads), in seconds."""
    return time.perf_counter(), time.process_time()


def step_stats(stamps: list[tuple[float, float]], warmup: int, batch_size: int) -> dict[str, float]:
    """ms/step and images/s from the :func:`stamp` at the start of each step, skipping ``warmup`` steps.

    The span from the start of step ``warmup`` to the start of the last step covers whole steps:
    data loading, forward, backward, optimizer, logging, callbacks and epoch boundaries.
    ``cpu_ms_per_step`` is the process CPU time over the same span: on a shared machine it moves
    much less than wall time when other processes take the cores.
    """
    span = stamps[warmup:]
    if len(span) < 2:
        raise ValueError(f"need at least warmup + 2 = {warmup + 2} steps, got {len(stamps)}")
    mean_s = (span[-1][0] - span[0][0]) / (len(span) - 1)
    cpu_s = (span[-1][1] - span[0][1]) / (len(span) - 1)
    diffs = [b[0] - a[0] for a, b in zip(span, span[1:])]
    return {
        "ms_per_step": 1e3 * mean_s, "median_step_ms": 1e3 * statistics.median(diffs),
        "cpu_ms_per_step": 1e3 * cpu_s, "images_per_s": batch_size / mean_s,
    }


class StepClock(pl.Callback):
    """Record ``time.perf_counter()`` at the start of every training batch into :data:`STAMPS`
    (synchronising the GPU first, so the time covers finished work)."""

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        STAMPS.clear()

    def on_train_batch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: Any, batch_idx: int) -> None:
        if pl_module.device.type == "cuda":
            import torch

            torch.cuda.synchronize()
        STAMPS.append(stamp())


class FirstStepClock(pl.Callback):
    """Print the wall-clock time (``time.time()``) when the first optimizer step has finished."""

    def on_train_batch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any, batch: Any, batch_idx: int) -> None:
        if trainer.global_step == 1 and not getattr(self, "_done", False):
            self._done = True
            print(f"{FIRST_STEP_MARK} {time.time():.6f}", flush=True)
