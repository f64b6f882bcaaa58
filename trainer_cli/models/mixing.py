"""MixUp and CutMix applied to whole training batches (``torchvision.transforms.v2``).

MixUp: Zhang et al. 2018, "mixup: Beyond Empirical Risk Minimization", arXiv 1710.09412.
CutMix: Yun et al. 2019, "CutMix: Regularization Strategy to Train Strong Classifiers with
Localizable Features", arXiv 1905.04899. Both come from torchvision (``v2.MixUp``,
``v2.CutMix``); with both on, each batch gets one of them at random (``v2.RandomChoice``), the
recipe of torchvision's reference classification training.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from trainer_cli.errors import UserError

BatchMix = Callable[[torch.Tensor, torch.Tensor], tuple[torch.Tensor, torch.Tensor]]


def build_batch_mix(num_classes: int, mixup_alpha: float = 0.0, cutmix_alpha: float = 0.0) -> BatchMix | None:
    """The batch transform for the given Beta-distribution parameters, or ``None`` when both are 0.

    The transform maps images ``[b, c, h, w]`` and integer labels ``[b]`` to mixed images
    ``[b, c, h, w]`` and soft targets ``[b, num_classes]`` (rows sum to 1).

    Raises:
        UserError: for a negative alpha.
    """
    if mixup_alpha < 0 or cutmix_alpha < 0:
        raise UserError(
            f"mixup_alpha and cutmix_alpha must be >= 0 (0 turns one off), got {mixup_alpha}, {cutmix_alpha}"
        )
    if mixup_alpha == 0 and cutmix_alpha == 0:
        return None
    from torchvision.transforms import v2  # only when mixing (start-up: `train fit --help` needs none of it)

    choices: list[v2.Transform] = []
    if mixup_alpha > 0:
        choices.append(v2.MixUp(alpha=mixup_alpha, num_classes=num_classes))
    if cutmix_alpha > 0:
        choices.append(v2.CutMix(alpha=cutmix_alpha, num_classes=num_classes))
    return choices[0] if len(choices) == 1 else v2.RandomChoice(choices)


def hard_labels(target: torch.Tensor) -> torch.Tensor:
    """Class indices ``[b]`` from integer labels ``[b]`` or soft targets ``[b, num_classes]``."""
    return target.argmax(dim=-1) if target.ndim > 1 else target
