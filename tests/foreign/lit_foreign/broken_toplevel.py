"""A user module whose top level uses an undefined name (fails on import)."""

from lit_foreign.model import SmallNet

DEFAULT_WIDTH = DEFAULT_WIDHT  # noqa: F821 - the user's typo


class TopNet(SmallNet):
    """Never importable."""
