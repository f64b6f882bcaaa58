"""Optimizer parameter groups: no weight decay on biases and normalisation weights, and
learning-rate multipliers by parameter-name pattern (discriminative learning rates).

The config's top-level ``param_groups`` section (a :class:`ParamGroups`) sets both::

    param_groups:
      no_decay_bias_norm: true          # biases and norm weights get weight_decay 0
      lr_multipliers:                   # first matching pattern wins; others get x1
        'net\\.features': 0.1           # backbone at 0.1 x the head's learning rate

Each group's learning rate is ``lr x multiplier`` when the optimizer is built, so every
scheduler scales each group from its own starting value (``OneCycleLR``'s ``max_lr`` is
scaled per group by trainer-cli, see :func:`scale_per_group`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from torch import nn

from trainer_cli.errors import UserError

LR_MULT_KEY = "lr_mult"


@dataclass
class ParamGroups:
    """How the model's parameters are split into optimizer parameter groups.

    Args:
        no_decay_bias_norm: Biases and normalisation weights (every parameter with fewer than
            2 dimensions) get ``weight_decay: 0`` (the practice of Goyal et al. 2017,
            arXiv 1706.02677, section 5.1; timm's ``param_groups_weight_decay``; nanoGPT).
        lr_multipliers: Regular expression on the parameter name (``re.search``, e.g.
            ``net\\.features``) -> factor on the optimizer's learning rate. The first matching
            pattern wins; unmatched parameters keep factor 1.
    """

    no_decay_bias_norm: bool = False
    lr_multipliers: dict[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for pattern, factor in self.lr_multipliers.items():
            try:
                re.compile(pattern)
            except re.error as err:
                raise UserError(
                    f"param_groups.lr_multipliers: {pattern!r} is not a regular expression: {err}"
                ) from None
            if factor < 0:
                raise UserError(f"param_groups.lr_multipliers[{pattern!r}] must be >= 0, got {factor}")

    @property
    def active(self) -> bool:
        """True when the parameters are split at all."""
        return self.no_decay_bias_norm or bool(self.lr_multipliers)


def is_no_decay(name: str, param: nn.Parameter) -> bool:
    """Biases and normalisation weights: parameters with fewer than 2 dimensions."""
    return param.ndim < 2 or name.endswith(".bias")


def build_param_groups(
    module: nn.Module, spec: ParamGroups, lr: float, weight_decay: float | None
) -> list[dict[str, Any]]:
    """The trainable parameters of ``module`` as optimizer parameter groups.

    Frozen parameters (``requires_grad=False``, e.g. a backbone frozen by
    ``BackboneFinetuning``) are left out; the callback adds them when it unfreezes them.

    Args:
        module: The model whose ``named_parameters()`` are grouped.
        spec: The grouping rules.
        lr: The optimizer's learning rate (each group gets ``lr x multiplier``).
        weight_decay: The optimizer's weight decay, or ``None`` when it has none.

    Returns:
        Non-empty groups, each with ``params``, ``lr``, ``lr_mult`` and, for the no-decay
        groups, ``weight_decay: 0.0``; in a fixed order (multipliers as listed, then the rest).

    Raises:
        UserError: when a pattern of ``lr_multipliers`` matches no trainable parameter.
    """
    patterns = list(spec.lr_multipliers.items())
    keys: list[tuple[int, bool]] = []
    buckets: dict[tuple[int, bool], list[nn.Parameter]] = {}
    used: set[int] = set()
    for name, param in module.named_parameters():
        if not param.requires_grad:
            continue
        index = next((i for i, (pattern, _) in enumerate(patterns) if re.search(pattern, name)), len(patterns))
        used.add(index)
        key = (index, spec.no_decay_bias_norm and is_no_decay(name, param))
        if key not in buckets:
            keys.append(key)
            buckets[key] = []
        buckets[key].append(param)
    unmatched = [p for i, (p, _) in enumerate(patterns) if i not in used]
    if unmatched:
        names = ", ".join(n for n, _ in list(module.named_parameters())[:6])
        raise UserError(
            f"param_groups.lr_multipliers: {unmatched} match no trainable parameter (names look like: {names}, ...)"
        )
    groups = []
    for key in sorted(keys):
        index, no_decay = key
        mult = patterns[index][1] if index < len(patterns) else 1.0
        group: dict[str, Any] = {"params": buckets[key], "lr": lr * mult, LR_MULT_KEY: mult}
        if no_decay and weight_decay is not None:
            group["weight_decay"] = 0.0
        groups.append(group)
    return groups


def scale_per_group(value: Any, param_groups: list[dict[str, Any]]) -> Any:
    """A scheduler's scalar learning-rate argument (``max_lr``) as one value per group, each
    times the group's ``lr_mult``, so the multipliers hold through the schedule."""
    if not isinstance(value, (int, float)) or all(g.get(LR_MULT_KEY, 1.0) == 1.0 for g in param_groups):
        return value
    return [value * g.get(LR_MULT_KEY, 1.0) for g in param_groups]
