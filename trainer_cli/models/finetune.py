"""A backbone / head split of any classifier network, for Lightning's ``BackboneFinetuning``."""

from __future__ import annotations

from torch import nn


def classification_head(net: nn.Module) -> nn.Module:
    """The network's classification head: its last ``nn.Linear``.

    Raises:
        ValueError: when the network has no ``nn.Linear``.
    """
    last = None
    for module in net.modules():
        if isinstance(module, nn.Linear):
            last = module
    if last is None:
        raise ValueError(f"{type(net).__name__} has no nn.Linear classification head to keep trainable")
    return last


def backbone_modules(net: nn.Module) -> nn.ModuleList:
    """Every leaf module of ``net`` except the classification head, as one ``nn.ModuleList``
    (a view: the modules stay where they are in ``net``)."""
    head = classification_head(net)
    return nn.ModuleList(m for m in net.modules() if m is not head and not list(m.children()))
