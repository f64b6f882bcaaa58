"""Short names -> classes, derived from code: torchvision's model registry, ``torch.optim``,
and the project's own modules. Nothing here is a hand-kept list of names."""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Any

import torch
from torch import nn

from trainer_cli.errors import UserError, did_you_mean


def own_backbones() -> dict[str, type[nn.Module]]:
    """The project's backbones by name: every ``nn.Module`` class in :mod:`trainer_cli.models.backbones`."""
    from trainer_cli.models import backbones

    return {
        cls.__name__.lower(): cls
        for _, cls in inspect.getmembers(backbones, inspect.isclass)
        if issubclass(cls, nn.Module) and cls.__module__ == backbones.__name__
    }


def torchvision_classification_models() -> list[str]:
    """Names of torchvision's classification models (``torchvision.models.list_models``)."""
    import torchvision

    return sorted(torchvision.models.list_models(module=torchvision.models))


def backbone_names() -> list[str]:
    """Every name :func:`build_backbone` accepts."""
    return sorted(own_backbones()) + torchvision_classification_models()


def _replace_last_linear(model: nn.Module, num_classes: int) -> None:
    """Swap the last ``nn.Linear`` of ``model`` (its classification head) for one with ``num_classes`` outputs."""
    name, last = None, None
    for module_name, module in model.named_modules():
        if isinstance(module, nn.Linear):
            name, last = module_name, module
    if last is None or name is None:
        raise UserError(f"cannot find a linear classification head in {type(model).__name__} to resize")
    parent = model.get_submodule(name.rpartition(".")[0]) if "." in name else model
    setattr(parent, name.rpartition(".")[2], nn.Linear(last.in_features, num_classes))


def _cifar_stem(model: nn.Module, in_channels: int) -> None:
    """The CIFAR stem for ResNets: 3x3 ``conv1`` with stride 1 and no max-pool."""
    if not (hasattr(model, "conv1") and hasattr(model, "maxpool")):
        raise UserError(f"cifar_stem applies to ResNet-style models (conv1 + maxpool), not {type(model).__name__}")
    conv1: Any = model.conv1
    model.conv1 = nn.Conv2d(in_channels, conv1.out_channels, kernel_size=3, stride=1, padding=1, bias=False)
    model.maxpool = nn.Identity()


def build_backbone(
    name: str,
    *,
    num_classes: int,
    in_channels: int,
    image_size: int,
    cifar_stem: bool = False,
    weights_path: str | None = None,
    **kwargs: Any,
) -> nn.Module:
    """Build a plain ``nn.Module`` backbone by short name.

    Args:
        name: One of the project's backbones (``mlp``, ``cnn``) or a torchvision classification
            model name (``resnet18``, ``efficientnet_b0``, ...).
        num_classes: Number of output logits.
        in_channels: Input image channels.
        image_size: Input image height and width in pixels.
        cifar_stem: ResNets only: 3x3 stride-1 ``conv1`` and no max-pool, for 32x32 images.
        weights_path: Local file with a torchvision ``state_dict`` for the model with its original
            head (e.g. ImageNet weights); loaded before the head is resized to ``num_classes``.
        **kwargs: Passed to the backbone's constructor.

    Raises:
        UserError: for an unknown name, a missing weights file or weights that don't fit.
    """
    own = own_backbones()
    if name in own:
        return own[name](num_classes=num_classes, in_channels=in_channels, image_size=image_size, **kwargs)
    tv_names = torchvision_classification_models()
    if name not in tv_names:
        raise UserError(
            f"unknown backbone {name!r}.{did_you_mean(name, list(own) + tv_names)} `train ls models` lists them all."
        )
    import torchvision

    if weights_path:
        path = Path(weights_path).expanduser()
        if not path.is_file():
            raise UserError(f"weights_path {weights_path}: file not found (no download here: put the .pth file there)")
        model = torchvision.models.get_model(name, weights=None, **kwargs)
        state = torch.load(path, map_location="cpu", weights_only=True)
        try:
            model.load_state_dict(state.get("state_dict", state) if isinstance(state, dict) else state)
        except RuntimeError as err:
            raise UserError(f"weights_path {weights_path} does not fit {name}: {str(err).splitlines()[0]}") from None
        _replace_last_linear(model, num_classes)
    else:
        model = torchvision.models.get_model(name, weights=None, num_classes=num_classes, **kwargs)
    if cifar_stem:
        _cifar_stem(model, in_channels)
    elif in_channels != 3:
        raise UserError(
            f"torchvision model {name!r} takes 3-channel images, the data has {in_channels}: "
            "use data with 3 channels (digits: --data.rgb true) or a project backbone (mlp, cnn)"
        )
    return model
