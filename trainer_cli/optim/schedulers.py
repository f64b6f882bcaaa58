"""Step-wise learning-rate schedules whose length is the run's total number of optimizer steps.

Any scheduler with a ``total_steps`` argument (these and ``torch.optim.lr_scheduler.OneCycleLR``)
is stepped after every optimizer step, and trainer-cli fills ``total_steps`` from
``trainer.estimated_stepping_batches`` when the config leaves it empty, so the schedule stays
right for any devices x num_nodes x accumulate_grad_batches x limit_train_batches x max_epochs.
"""

from __future__ import annotations

import math

from torch import Tensor
from torch.optim import Optimizer
from torch.optim.lr_scheduler import LRScheduler


class _StepwiseLR(LRScheduler):
    """Base: ``lr = base_lr * factor(step)`` for step 0, 1, ... ``total_steps - 1``."""

    def __init__(self, optimizer: Optimizer, total_steps: int | None, last_epoch: int = -1) -> None:
        if total_steps is None:
            raise ValueError(f"{type(self).__name__} needs total_steps (trainer-cli fills it from the trainer)")
        if total_steps < 1:
            raise ValueError(f"total_steps must be >= 1, got {total_steps}")
        self.total_steps = total_steps
        super().__init__(optimizer, last_epoch)

    def factor(self, step: int) -> float:
        raise NotImplementedError

    def get_lr(self) -> list[float | Tensor]:  # torch's type (a tensor learning rate is allowed)
        f = self.factor(self.last_epoch)
        return [base * f for base in self.base_lrs]


def _cosine(progress: float, min_ratio: float) -> float:
    progress = min(max(progress, 0.0), 1.0)
    return min_ratio + (1.0 - min_ratio) * 0.5 * (1.0 + math.cos(math.pi * progress))


class LinearWarmupCosineLR(_StepwiseLR):
    """Linear warm-up, then cosine decay, stepped per optimizer step.

    With ``w`` warm-up steps and ``T`` total steps, the factor applied to each group's base
    learning rate at step ``s`` (0-based) is ``(s + 1) / w`` for ``s < w`` and
    ``m + (1 - m) * (1 + cos(pi * (s - w) / (T - w))) / 2`` after, where ``m = min_lr_ratio``.
    (Goyal et al. 2017, arXiv 1706.02677, for the warm-up; Loshchilov & Hutter 2017,
    arXiv 1608.03983, for the cosine.)

    Args:
        optimizer: The wrapped optimizer.
        total_steps: Optimizer steps of the whole run; left empty, trainer-cli infers it.
        warmup_steps: Warm-up length in optimizer steps; when empty, ``warmup_pct`` of ``total_steps``.
        warmup_pct: Warm-up length as a fraction of ``total_steps`` in [0, 1).
        min_lr_ratio: Final learning rate as a fraction of the base learning rate.
        last_epoch: Index of the last step, for resuming (-1: start).

    Raises:
        ValueError: for a missing or non-positive ``total_steps`` or a fraction out of range.
    """

    def __init__(
        self,
        optimizer: Optimizer,
        total_steps: int | None = None,
        warmup_steps: int | None = None,
        warmup_pct: float = 0.05,
        min_lr_ratio: float = 0.0,
        last_epoch: int = -1,
    ) -> None:
        if not 0.0 <= warmup_pct < 1.0:
            raise ValueError(f"warmup_pct must be in [0, 1), got {warmup_pct}")
        if not 0.0 <= min_lr_ratio <= 1.0:
            raise ValueError(f"min_lr_ratio must be in [0, 1], got {min_lr_ratio}")
        self.warmup_steps_arg = warmup_steps
        self.warmup_pct = warmup_pct
        self.min_lr_ratio = min_lr_ratio
        if total_steps is not None:
            self.warmup_steps = warmup_steps if warmup_steps is not None else int(round(warmup_pct * total_steps))
        super().__init__(optimizer, total_steps, last_epoch)

    def factor(self, step: int) -> float:
        w, t = self.warmup_steps, self.total_steps
        if step < w:
            return (step + 1) / w
        return _cosine((step - w) / max(1, t - w), self.min_lr_ratio)


class FlatCosineLR(_StepwiseLR):
    """fastai's ``fit_flat_cos``: the base learning rate for ``pct_start`` of the run, then cosine
    annealing to ``min_lr_ratio`` of it, stepped per optimizer step.

    Factor at step ``s`` with ``f = round(pct_start * T)``: ``1`` for ``s < f``, then
    ``m + (1 - m) * (1 + cos(pi * (s - f) / (T - f))) / 2``. (fastai ``fit_flat_cos``;
    mgrankin/over9000 ``train.py``.)

    Args:
        optimizer: The wrapped optimizer.
        total_steps: Optimizer steps of the whole run; left empty, trainer-cli infers it.
        pct_start: Fraction of the run at the flat base learning rate, in [0, 1).
        min_lr_ratio: Final learning rate as a fraction of the base learning rate.
        last_epoch: Index of the last step, for resuming (-1: start).

    Raises:
        ValueError: for a missing or non-positive ``total_steps`` or a fraction out of range.
    """

    def __init__(
        self,
        optimizer: Optimizer,
        total_steps: int | None = None,
        pct_start: float = 0.72,
        min_lr_ratio: float = 0.0,
        last_epoch: int = -1,
    ) -> None:
        if not 0.0 <= pct_start < 1.0:
            raise ValueError(f"pct_start must be in [0, 1), got {pct_start}")
        self.pct_start = pct_start
        self.min_lr_ratio = min_lr_ratio
        super().__init__(optimizer, total_steps, last_epoch)

    def factor(self, step: int) -> float:
        flat = int(round(self.pct_start * self.total_steps))
        if step < flat:
            return 1.0
        return _cosine((step - flat) / max(1, self.total_steps - flat), self.min_lr_ratio)
