"""The template's fully connected net (``src/models/components/simple_dense_net.py``), same arguments."""

import torch
from torch import nn


class SimpleDenseNet(nn.Module):
    """Linear -> BatchNorm -> ReLU, three times, then a linear head, over a flattened image."""

    def __init__(
        self, input_size: int = 784, lin1_size: int = 256, lin2_size: int = 256, lin3_size: int = 256, output_size: int = 10
    ) -> None:
        super().__init__()
        sizes = [input_size, lin1_size, lin2_size, lin3_size]
        layers: list[nn.Module] = []
        for n_in, n_out in zip(sizes, sizes[1:]):
            layers += [nn.Linear(n_in, n_out), nn.BatchNorm1d(n_out), nn.ReLU()]
        self.model = nn.Sequential(*layers, nn.Linear(lin3_size, output_size))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.model(x.view(x.size(0), -1))
