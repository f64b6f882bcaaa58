"""Classes named by dotted paths in configs and checkpoints, imported on demand (no torch here)."""

from __future__ import annotations

import gc
import importlib
import sys
from collections.abc import Iterator
from contextlib import contextmanager

_OWN_PROCESS = False  # `train` is the whole process (its entry point, not a call from Python)


def import_class(class_path: str) -> type:
    """The class named by a dotted ``class_path`` (``torch.optim.SGD``, ``mypkg.models.Net``).

    Raises:
        ImportError: when the module does not import.
        AttributeError: when the module has no such name.
    """
    module_name, _, name = class_path.rpartition(".")
    return getattr(importlib.import_module(module_name), name)


def own_process() -> None:
    """Say that ``train`` is the whole process (``trainer_cli.__main__`` run as the program, not
    ``main(argv)`` called from Python): :func:`heavy_import` may then pause the collector."""
    global _OWN_PROCESS
    _OWN_PROCESS = True


def is_own_process() -> bool:
    """Whether ``train`` is the whole process (:func:`own_process`): its main module is
    ``trainer_cli.__main__``, which a worker process started by ``spawn`` or ``forkserver`` may import."""
    return _OWN_PROCESS


@contextmanager
def heavy_import() -> Iterator[None]:
    """Run an import of torch and Lightning (``from trainer_cli.runtime.verbs import ...``, a verb's module)
    with the cyclic garbage collector paused, then freeze what was imported and turn it back on.

    Importing Lightning makes about 750,000 objects that live as long as the process; the
    collector, left on, walks them again and again while they are made: ``import lightning.pytorch``
    took 3.8 s with it and 2.5 s without on a quiet 2-core machine (benchmarks/README.md,
    "Start-up"). Frozen (``gc.freeze``), later collections during training skip them as well. The
    cost: the cyclic garbage the imports leave (about 13,000 objects) is kept. Only in ``train``'s
    own process (:func:`own_process`) and while Lightning is not imported yet: a caller's process
    keeps its collector as it set it, and the objects of a run under way are never frozen.
    """
    if not _OWN_PROCESS or not gc.isenabled() or "lightning.pytorch" in sys.modules:
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.freeze()
        gc.enable()
