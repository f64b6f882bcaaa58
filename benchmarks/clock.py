"""Timing a window of optimizer steps, taken the same way in the plain loop and in ``train fit``.

A :class:`Window` synchronises the device twice: at the start of step ``warmup`` and at the start
of the last step; the steps between them run as they do in a real run, the host free to queue
the next steps while the device works (no synchronisation per step). It reports:

- ``images_per_s`` and ``ms_per_step``: wall time over the window (whole steps: data loading,
  forward, backward, optimizer, logging, callbacks), finished device work included;
- ``host_ms_per_step``: CPU time of this process (all threads) over the window per step, the
  host's own work; ``cpu_ms_per_step`` is the same figure under its former name;
- ``device_ms_per_step`` (CUDA only, else absent): the device's time per step, from CUDA events
  recorded on the stream at the start and the end of each step (``Event.elapsed_time``, read after
  the closing synchronisation).

``device_ms_per_step`` close to ``ms_per_step`` means the device bounds the side; well below, the
device idles waiting for the host (host-bound), and ``host_ms_per_step`` shows the host's cost.
"""

from __future__ import annotations

import statistics
import time
from typing import Any

import lightning.pytorch as pl
import torch

FIRST_STEP_MARK = "BENCH_FIRST_STEP_DONE_AT"


def stamp() -> tuple[float, float]:
    """Wall-clock time and the CPU time of this process (all threads), in seconds."""
    return time.perf_counter(), time.process_time()


class Window:
    """Steps ``warmup`` .. ``steps - 2`` timed with one synchronisation at each end.

    Call :meth:`step_start` at the start of every step and :meth:`step_end` after its optimizer
    step; the window closes at the start of step ``steps - 1``.
    """

    def __init__(self, warmup: int, steps: int, device: torch.device | str = "cpu") -> None:
        if steps < warmup + 2:
            raise ValueError(f"need at least warmup + 2 = {warmup + 2} steps, got {steps}")
        self.warmup, self.steps, self.device = warmup, steps, torch.device(device)
        self.started = 0
        self.host: list[float] = []  # host time at the start of each step in the window (no synchronisation)
        self.begin: tuple[float, float] | None = None
        self.end: tuple[float, float] | None = None
        self.events: list[tuple[Any, Any]] = []

    def _sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def step_start(self) -> None:
        index, self.started = self.started, self.started + 1
        if index == self.warmup:
            self._sync()
            self.begin = stamp()
        elif index == self.steps - 1:
            self._sync()
            self.end = stamp()
        if self.warmup <= index < self.steps - 1:
            self.host.append(time.perf_counter())
            if self.device.type == "cuda":
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                self.events.append((start, end))

    def step_end(self) -> None:
        if self.events and self.warmup <= self.started - 1 < self.steps - 1:
            self.events[-1][1].record()

    @property
    def done(self) -> bool:
        return self.end is not None

    def stats(self, batch_size: int) -> dict[str, float]:
        if self.begin is None or self.end is None:
            raise ValueError(f"the window did not close: {self.started} of {self.steps} steps started")
        n = self.steps - 1 - self.warmup
        wall_s, cpu_s = self.end[0] - self.begin[0], self.end[1] - self.begin[1]
        diffs = [b - a for a, b in zip(self.host, [*self.host[1:], self.end[0]])]
        out = {
            "ms_per_step": 1e3 * wall_s / n, "median_step_ms": 1e3 * statistics.median(diffs),
            "host_ms_per_step": 1e3 * cpu_s / n, "cpu_ms_per_step": 1e3 * cpu_s / n,
            "images_per_s": batch_size * n / wall_s,
        }
        if self.events:
            out["device_ms_per_step"] = sum(a.elapsed_time(b) for a, b in self.events) / len(self.events)
        return out


def step_stats(window: Window, batch_size: int) -> dict[str, float]:
    """The figures of a closed :class:`Window` (see the module's docstring)."""
    return window.stats(batch_size)


# the window of the latest StepClock in this process (read after ``train fit``)
LAST: list[Window] = []


class StepClock(pl.Callback):
    """A :class:`Window` over the training batches of a run: ``warmup`` steps skipped, ``steps`` in all
    (0: the trainer's ``max_steps``); the latest is ``LAST[0]``."""

    def __init__(self, warmup: int = 0, steps: int = 0) -> None:
        self.warmup, self.steps = warmup, steps

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        LAST[:] = [Window(self.warmup, self.steps or trainer.max_steps, pl_module.device)]

    def on_train_batch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule, *args: Any) -> None:
        LAST[0].step_start()

    def on_train_batch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule, *args: Any) -> None:
        LAST[0].step_end()


class FirstStepClock(pl.Callback):
    """Print the wall-clock time (``time.time()``) when the first optimizer step has finished."""

    def on_train_batch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any, batch: Any, batch_idx: int) -> None:
        if trainer.global_step == 1 and not getattr(self, "_done", False):
            self._done = True
            print(f"{FIRST_STEP_MARK} {time.time():.6f}", flush=True)
