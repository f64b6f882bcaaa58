"""A user module whose own import fails."""

from lit_foreign.helpers_that_were_renamed import make_layers  # noqa: F401

from lit_foreign.model import SmallNet


class ImportNet(SmallNet):
    """Never importable."""
