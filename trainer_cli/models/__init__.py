"""Plain ``nn.Module`` backbones and the LightningModules that wrap them.

:mod:`trainer_cli.models.backbones` imports only torch, so a backbone can be rebuilt from an export
(``train export``) without importing Lightning; the LightningModules are imported on first use
(PEP 562 module ``__getattr__``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from trainer_cli.models.classifier import ImageClassifier

__all__ = ["ImageClassifier"]


def __getattr__(name: str) -> Any:
    if name == "ImageClassifier":
        from trainer_cli.models.classifier import ImageClassifier

        return ImageClassifier
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
