"""A step-wise learning-rate schedule across a resume whose run length changed.

A step-wise scheduler (one with ``total_steps``: ``OneCycleLR``, the project's warm-up schedules)
is built for the run's total optimizer steps (:mod:`trainer_cli.optim.configure`). When a resume
changes that total (``--trainer.max_epochs 25`` on a run of 20, another ``limit_train_batches``,
other devices), the checkpoint's schedule and the one this config builds differ, and
``--resume_schedule`` chooses what happens; one line says which, with the old and new totals and
the learning rate the first resumed step uses:

``restretch`` (the default)
    The schedule of the new length, continued from the step reached: the run follows the schedule
    it would have had had it been started with the new config. The learning rate jumps there (a
    finished OneCycle digits run extended from 20 to 25 epochs goes from its final 4e-8 back to where
    a 25-epoch cycle is at step 400 of 500, 1.85e-3). The default because the config then describes the
    schedule (``max_epochs`` is the run's length, as in a new run), a requeue or a mid-run extension
    changes little, and an extension of a finished run trains: kept, it would train the added epochs
    at the final, near-zero learning rate.
``keep``
    The checkpoint's schedule as it was (its ``total_steps``), run to its end; then its final
    learning rate is held for the added steps (the scheduler is no longer stepped).
``restart``
    A new schedule over the steps that remain (new total - the step reached), from its start:
    a new cycle (warm restart). Only for a scheduler built by trainer-cli (``--lr_scheduler``).

Unchanged totals resume the checkpoint's schedule whole. Each checkpoint records the total this
run's config planned (``trainer_cli_schedules``), so a requeue of a kept or restarted run goes on
with that schedule rather than deciding again.

Through Lightning's public hooks: ``on_load_checkpoint`` (before the optimizers are built: the
checkpoint is held), ``build_scheduler`` asks :func:`steps_to_build` (``restart``),
``on_fit_start`` (after they are built, before Lightning restores their states: the states to
restore are chosen), ``on_train_start`` (the learning rate of the first resumed step, the line).
"""

from __future__ import annotations

import functools
import sys
import warnings
from typing import Any, Literal

import lightning.pytorch as pl
import torch

from trainer_cli.errors import UserError

ResumeSchedule = Literal["restretch", "keep", "restart"]
MODES: tuple[str, ...] = ("restretch", "keep", "restart")
TOTAL_STEPS_KEY = "total_steps"  # in the state of a step-wise scheduler
PLANNED_KEY = "trainer_cli_schedules"  # in a checkpoint: the total each scheduler's run planned
HOLD = sys.maxsize  # an LRSchedulerConfig.frequency that never comes: the scheduler is not stepped again


@functools.cache
def _position_keys() -> frozenset[str]:
    """The state every torch scheduler has, whatever its schedule: what a minimal ``LRScheduler``
    subclass's ``state_dict`` holds (its position: ``last_epoch``, the step count, the last and
    base learning rates). Asked of torch, so it follows torch's version."""
    from torch.optim.lr_scheduler import LRScheduler

    class Constant(LRScheduler):
        def get_lr(self) -> list[float | torch.Tensor]:
            return [group["lr"] for group in self.optimizer.param_groups]

    optimizer = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=1.0)
    return frozenset(Constant(optimizer).state_dict())


def position_only(state: dict[str, Any]) -> dict[str, Any]:
    """A step-wise scheduler's stored state reduced to its position (:func:`_position_keys`): the
    shape (``total_steps`` and all derived from it) stays as built."""
    keep = _position_keys() | {"lr_lambdas"}  # LambdaLR's load_state_dict needs its lr_lambdas entry
    return {key: value for key, value in state.items() if key in keep}


def steps_to_build(trainer: Any, total: int) -> int:
    """The ``total_steps`` a step-wise scheduler built by trainer-cli gets: the run's ``total``, or
    the steps that remain for ``--resume_schedule restart`` of a changed schedule."""
    for callback in getattr(trainer, "callbacks", None) or []:
        if isinstance(callback, ScheduleOnResume):
            return callback.steps_to_build(total)
    return total


class ScheduleOnResume(pl.Callback):
    """Chooses the step-wise schedule of a resumed run (see the module's description).

    Args:
        mode: ``restretch``, ``keep`` or ``restart`` (``--resume_schedule``).
    """

    def __init__(self, mode: str | None = "restretch") -> None:
        self.mode = mode or "restretch"
        if self.mode not in MODES:
            raise UserError(f"--resume_schedule {mode}: choose one of {', '.join(MODES)}")
        self._checkpoint: dict[str, Any] | None = None
        self._restarted: tuple[int, int] | None = None  # (planned total, step the new cycle starts at)
        self._planned: list[int | None] = []
        self._changed: list[tuple[int, int, int]] = []  # (scheduler index, checkpoint total, new total)
        self._fit_started = False

    def on_load_checkpoint(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, checkpoint: dict[str, Any]
    ) -> None:
        if trainer.state.fn != "fit":
            return
        self._checkpoint = checkpoint  # the dict Lightning restores the schedulers from later
        if self._fit_started:  # a strategy that restores after its setup (DeepSpeed): the schedulers are built
            self._choose_states(trainer)

    def _stored(self, index: int) -> tuple[dict[str, Any] | None, int | None]:
        """The checkpoint's state of scheduler ``index`` (step-wise ones only) and the total its run planned."""
        states = (self._checkpoint or {}).get("lr_schedulers") or []
        state = states[index] if index < len(states) else None
        if not isinstance(state, dict) or TOTAL_STEPS_KEY not in state:
            return None, None
        planned = (self._checkpoint or {}).get(PLANNED_KEY) or []
        total = planned[index] if index < len(planned) and planned[index] is not None else state[TOTAL_STEPS_KEY]
        return state, int(total)

    def steps_to_build(self, total: int) -> int:
        state, planned = self._stored(0)
        if self.mode != "restart" or state is None or planned == total:
            return total
        start = int((self._checkpoint or {}).get("global_step", 0))
        if start >= total:
            raise UserError(
                f"--resume_schedule restart: the run already reached step {start} of the {total} it is configured for"
            )
        self._restarted = (total, start)
        return total - start

    def on_fit_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        configs = trainer.lr_scheduler_configs
        self._planned = [getattr(c.scheduler, TOTAL_STEPS_KEY, None) for c in configs]
        if self._restarted is not None and configs:
            self._planned[0] = self._restarted[0]
        self._fit_started = True
        self._choose_states(trainer)

    def _choose_states(self, trainer: pl.Trainer) -> None:
        """Which stored scheduler states Lightning restores (after the schedulers were built)."""
        configs = trainer.lr_scheduler_configs
        self._changed = []
        if self._checkpoint is None:
            return
        states = self._checkpoint.get("lr_schedulers") or []
        for index, config in enumerate(configs):
            state, planned = self._stored(index)
            built = self._planned[index]
            if state is None or built is None or planned == built:
                continue  # not step-wise, or the same schedule: restored whole
            self._changed.append((index, int(state[TOTAL_STEPS_KEY]), int(built)))
            if self.mode == "restretch":
                states[index] = position_only(state)
            elif self.mode == "restart":
                if self._restarted is None or index != 0:
                    raise UserError(
                        "--resume_schedule restart needs the scheduler built by trainer-cli (--lr_scheduler); "
                        f"{type(config.scheduler).__name__} comes from the model's configure_optimizers: use keep or "
                        "restretch"
                    )
                states[index] = config.scheduler.state_dict()  # the new cycle from its start: nothing restored
            # keep: the stored state whole (its own total_steps)

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        configs = trainer.lr_scheduler_configs
        self._hold_at_end(trainer)
        for index, old_total, new_total in self._changed:
            scheduler = configs[index].scheduler
            if (
                self.mode != "keep"
            ):  # the first resumed step uses the new schedule's rate, not the checkpoint's last one
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")  # torch's "use get_last_lr()": asked here on purpose
                    rates = scheduler.get_lr() if self.mode == "restretch" else scheduler.get_last_lr()
                for group, rate in zip(scheduler.optimizer.param_groups, rates):
                    group["lr"] = rate
            if trainer.is_global_zero:
                print(self._line(scheduler, old_total, new_total, trainer.global_step), flush=True)

    def on_train_batch_end(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        self._hold_at_end(trainer)  # before Lightning steps the schedulers for this batch

    def on_save_checkpoint(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, checkpoint: dict[str, Any]
    ) -> None:
        if any(p is not None for p in self._planned):
            checkpoint[PLANNED_KEY] = list(self._planned)

    def _hold_at_end(self, trainer: pl.Trainer) -> None:
        """A step-wise schedule that reached its end (a kept one, after the old total) is no longer
        stepped: its final learning rate holds (OneCycleLR would fail: "Tried to step ... times")."""
        for config in trainer.lr_scheduler_configs:
            scheduler, total = config.scheduler, getattr(config.scheduler, TOTAL_STEPS_KEY, None)
            if (
                config.frequency == HOLD
                or config.interval != "step"
                or not isinstance(total, int)
                or scheduler.last_epoch < total
            ):
                continue
            config.frequency = HOLD
            reached, scheduler.last_epoch = scheduler.last_epoch, total - 1  # the rate of the schedule's last step
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # torch's "use get_last_lr()": asked here on purpose
                rates = scheduler.get_lr()
            scheduler.last_epoch = reached
            for group, rate in zip(scheduler.optimizer.param_groups, rates):
                group["lr"] = rate

    def _line(self, scheduler: Any, old_total: int, new_total: int, step: int) -> str:
        name = type(scheduler).__name__
        rate = scheduler.optimizer.param_groups[0]["lr"]
        what = {
            "restretch": f"stretched to the new total, resumes at step {step} with lr {rate:.3g}",
            "keep": f"the old schedule kept, resumes at step {step} with lr {rate:.3g} (held after step {old_total})",
            "restart": f"a new cycle of {scheduler.total_steps} steps from step {step}, starting at lr {rate:.3g}",
        }[self.mode]
        others = ", ".join(m for m in MODES if m != self.mode)
        return (
            f"resume: the {name} schedule was {old_total} total steps, this run's is {new_total}: {what} "
            f"(--resume_schedule {self.mode}; or {others})"
        )
