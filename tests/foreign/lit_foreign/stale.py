"""A user module whose annotation names a class torch no longer has (fails on import)."""

from torch import nn

from lit_foreign.model import SmallNet


class StaleNet(SmallNet):
    """A model with a stale annotation."""

    def __init__(self, act: nn.NoSuchActivation = None, num_classes: int = 10) -> None:
        super().__init__(num_classes=num_classes)
