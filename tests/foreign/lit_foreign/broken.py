"""Mistakes a user makes in their own model code (tests of how `train` reports them)."""

from __future__ import annotations

from torch import nn

from lit_foreign.model import SmallNet


class TypoNet(SmallNet):
    """A model whose constructor uses an undefined name."""

    def __init__(self, num_classes: int = 10, hidden_dim: int = 32) -> None:
        super().__init__(num_classes=num_classes, hidden_dim=hidden_dim)
        self.head = nn.Linear(hidden_dim, num_clases)  # noqa: F821 - the user's typo


class SetupNet(SmallNet):
    """A model whose ``setup`` fails (after the run directory is made)."""

    def setup(self, stage: str) -> None:
        raise RuntimeError(f"cannot set up for {stage}: lookup table missing")


class ArgNet(SmallNet):
    """A model that calls a library constructor wrongly (a TypeError raised inside torch)."""

    def __init__(self, num_classes: int = 10, hidden_dim: int = 32) -> None:
        super().__init__(num_classes=num_classes, hidden_dim=hidden_dim)
        self.extra = nn.Linear(hidden_dim)  # the user forgot out_features


class CheckedNet(SmallNet):
    """A model that checks a value of its config itself."""

    def __init__(self, num_classes: int = 10, dropout: float = 0.0) -> None:
        super().__init__(num_classes=num_classes)
        if not 0 <= dropout < 1:
            raise ValueError(f"dropout must be in [0, 1), got {dropout}")
