"""The project's own plain ``nn.Module`` backbones.

Every public ``nn.Module`` subclass defined here is a backbone the registry knows by its
lower-cased class name (``mlp``, ``cnn``); each takes ``num_classes``, ``in_channels`` and
``image_size`` plus its own options, and maps images ``[b, c, h, w]`` to logits ``[b, num_classes]``.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn


class MLP(nn.Module):
    """A multi-layer perceptron on flattened images.

    Args:
        num_classes: Number of output logits.
        in_channels: Image channels ``c``.
        image_size: Image height and width in pixels.
        hidden: Width of each hidden layer.
        dropout: Dropout probability after each hidden layer.
    """

    def __init__(
        self,
        num_classes: int,
        in_channels: int,
        image_size: int,
        hidden: Sequence[int] = (256, 128),
        dropout: float = 0.1,
    ) -> None:
        super().__init__()
        layers: list[nn.Module] = [nn.Flatten()]
        width = in_channels * image_size * image_size
        for size in hidden:
            layers += [nn.Linear(width, size), nn.ReLU(inplace=True), nn.Dropout(dropout)]
            width = size
        layers.append(nn.Linear(width, num_classes))
        self.layers = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Logits ``[b, num_classes]`` for images ``x`` of shape ``[b, c, h, w]``."""
        return self.layers(x)


class CNN(nn.Module):
    """A small convolutional network: two conv-BN-ReLU blocks per stage, global average pooling.

    Args:
        num_classes: Number of output logits.
        in_channels: Image channels ``c``.
        image_size: Image height and width in pixels (any size; pooling is global).
        width: Channels of the first stage; each of the ``stages`` doubles it.
        stages: Number of stages; every stage but the first halves the resolution.
        dropout: Dropout probability before the classifier.
    """

    def __init__(
        self,
        num_classes: int,
        in_channels: int,
        image_size: int,
        width: int = 32,
        stages: int = 2,
        dropout: float = 0.1,
    ) -> None:
        super().__init__()
        del image_size  # global pooling makes the network size-agnostic
        blocks: list[nn.Module] = []
        channels = in_channels
        for stage in range(stages):
            out = width * 2**stage
            if stage > 0:
                blocks.append(nn.MaxPool2d(2, ceil_mode=True))
            for _ in range(2):
                blocks += [
                    nn.Conv2d(channels, out, 3, padding=1, bias=False),
                    nn.BatchNorm2d(out),
                    nn.ReLU(inplace=True),
                ]
                channels = out
        self.features = nn.Sequential(*blocks)
        self.head = nn.Sequential(
            nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Dropout(dropout), nn.Linear(channels, num_classes)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Logits ``[b, num_classes]`` for images ``x`` of shape ``[b, c, h, w]``."""
        return self.head(self.features(x))
