from torch import nn


class VanillaAE(nn.Module):
    """An autoencoder of ``in_dim`` features through ``hidden_dims`` to ``latent_dim`` and back."""

    def __init__(self, in_dim: int, latent_dim: int, hidden_dims: list[int]):
        super().__init__()
        dims = [in_dim, *hidden_dims, latent_dim]
        down = [m for a, b in zip(dims, dims[1:]) for m in (nn.Linear(a, b), nn.ReLU())]
        up = [m for a, b in zip(dims[::-1], dims[::-1][1:]) for m in (nn.Linear(a, b), nn.ReLU())]
        self.in_dim = in_dim
        self.net = nn.Sequential(*down[:-1], *up[:-1])

    def forward(self, x):
        return self.net(x)
