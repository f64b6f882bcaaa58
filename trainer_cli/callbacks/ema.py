"""An exponential moving average of the weights whose decay warms up, for runs of any length.

A fixed decay of 0.999 averages over ~1/(1-0.999) = 1000 optimizer steps: on a 200-step run the
average is still mostly the random initial weights and validates at chance. The warm-up is
timm's ``ModelEmaV3`` (``decay_t = min(decay, 1 - (1 + t / gamma) ** -power)`` after ``t`` updates;
https://github.com/huggingface/pytorch-image-models, ``timm/utils/model_ema.py``): power 3/4
reaches 0.999 after ~10k steps, so a short run averages over its last tens of steps and a long
run gets the full decay. The rest (validation on the average, checkpoints holding it, the model
holding it after fit) is Lightning's ``WeightAveraging``, as for its ``EMAWeightAveraging``.
"""

from __future__ import annotations

import math
import sys
from functools import partial

import lightning.pytorch as pl
import torch
from lightning.pytorch.callbacks import WeightAveraging
from lightning.pytorch.utilities import rank_zero_only


@torch.no_grad()
def warmup_ema_update(
    ema_param: torch.Tensor,
    current_param: torch.Tensor,
    num_averaged: torch.Tensor,
    decay: float,
    power: float,
    gamma: float,
) -> torch.Tensor:
    """One EMA update ``ema + (1 - decay_t) (current - ema)`` with the warmed-up ``decay_t``.

    Args:
        ema_param: The average so far.
        current_param: The model's current value.
        num_averaged: Updates folded into the average so far (a tensor: no host sync on GPUs).
        decay: The decay the warm-up rises to.
        power: Warm-up power (0: no warm-up, ``decay`` from the first update).
        gamma: Warm-up time scale in updates.
    """
    if power > 0:
        warm = 1.0 - (1.0 + num_averaged.to(torch.float64) / gamma) ** -power
        decay_t = torch.clamp(warm, max=decay).to(torch.float32)
    else:
        decay_t = torch.tensor(decay, device=ema_param.device)
    return ema_param + (current_param - ema_param) * (1.0 - decay_t)


def decay_after(updates: float, decay: float, power: float, gamma: float) -> float:
    """``decay_t`` after ``updates`` updates (what :func:`warmup_ema_update` uses)."""
    return min(decay, 1.0 - (1.0 + updates / gamma) ** -power) if power > 0 else decay


class WarmupEMA(WeightAveraging):
    """EMA of the weights (and buffers) after every ``update_every_n_steps`` optimizer steps, with a warm-up of the
    decay.

    Validation runs on the average, every checkpoint's ``state_dict`` holds it (the raw weights are
    in ``current_model_state``) and after fit the model holds it. Warns in one line when the
    averaging horizon ``1 / (1 - decay)`` exceeds the run's optimizer steps.

    Args:
        decay: The decay the warm-up rises to (0.999: an average over ~1000 updates).
        warmup_power: timm ``ModelEmaV3``'s power: 3/4 reaches 0.999 after ~10k updates, 2/3 after
            ~32k; 0 turns the warm-up off.
        warmup_gamma: Warm-up time scale in updates.
        update_every_n_steps: Update the average every this many optimizer steps.
        device: Where the average is kept (``cpu`` saves accelerator memory); empty: with the model.
        use_buffers: Average buffers (BatchNorm statistics) too; otherwise they are copied.
    """

    def __init__(
        self,
        decay: float = 0.999,
        warmup_power: float = 0.75,
        warmup_gamma: float = 1.0,
        update_every_n_steps: int = 1,
        device: str | None = None,
        use_buffers: bool = True,
    ) -> None:
        if not 0.0 <= decay < 1.0:
            raise ValueError(f"decay must be in [0, 1), got {decay}")
        if warmup_power < 0 or warmup_gamma <= 0 or update_every_n_steps < 1:
            raise ValueError(
                f"need warmup_power >= 0, warmup_gamma > 0 and update_every_n_steps >= 1, got "
                f"{warmup_power}, {warmup_gamma}, {update_every_n_steps}"
            )
        avg_fn = partial(warmup_ema_update, decay=decay, power=warmup_power, gamma=warmup_gamma)
        super().__init__(device=device, use_buffers=use_buffers, avg_fn=avg_fn)
        self.decay, self.warmup_power, self.warmup_gamma = decay, warmup_power, warmup_gamma
        self.update_every_n_steps = update_every_n_steps

    def should_update(self, step_idx: int | None = None, epoch_idx: int | None = None) -> bool:
        """After every ``update_every_n_steps``-th optimizer step; never at an epoch's end."""
        return step_idx is not None and step_idx % self.update_every_n_steps == 0

    def on_fit_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        """Warn when the averaging horizon exceeds the run's optimizer steps."""
        super().on_fit_start(trainer, pl_module)
        total = trainer.estimated_stepping_batches
        if not math.isfinite(total) or total <= 0:
            return
        horizon = 1.0 / (1.0 - self.decay)
        updates = total / self.update_every_n_steps
        if horizon <= updates:
            return
        if self.warmup_power > 0:
            end = decay_after(updates, self.decay, self.warmup_power, self.warmup_gamma)
            how = f"the warm-up holds it at {end:.3f} by the end (an average of the last ~{1 / (1 - end):.0f} updates)"
        else:
            how = "the average stays near the first weights: lower the decay or set warmup_power (e.g. 0.75)"
        # one line (a Python warning would add its source line)
        if rank_zero_only.rank == 0:  # type: ignore[attr-defined]
            message = (
                f"EMA decay {self.decay} averages over ~{horizon:.0f} updates, "
                f"more than this run's {updates:.0f}: {how}"
            )
            print(f"warning: {message}", file=sys.stderr, flush=True)
