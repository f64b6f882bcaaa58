"""Classes named by dotted paths in configs and checkpoints, imported on demand (no torch here)."""

from __future__ import annotations

import importlib


def import_class(class_path: str) -> type:
    """The class named by a dotted ``class_path`` (``torch.optim.SGD``, ``mypkg.models.Net``).

    Raises:
        ImportError: when the module does not import.
        AttributeError: when the module has no such name.
    """
    module_name, _, name = class_path.rpartition(".")
    return getattr(importlib.import_module(module_name), name)
