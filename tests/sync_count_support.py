"""Counting the calls that make the host wait for the device, per training step.

How: :func:`counting` replaces the tensor methods that copy a device value to the host and so
block until the device has computed it (``Tensor.item``, ``tolist``, ``numpy``, ``cpu``,
``__bool__``, ``__float__``, ``__int__``, ``__index__``, ``__format__``, ``to("cpu")``) and
``torch.cuda.synchronize`` with wrappers that count the call (with the caller's file and line) and
then call the original. On CPU nothing waits, but the same call on a GPU tensor would: the count is
what a GPU run would synchronise. :class:`SyncCounter`, a callback, cuts the record at the start
of every training batch, so each step's calls (the step itself, the hooks and callbacks after it,
the next batch's loading) are known. Calls made by ``torch.optim`` (the optimizers' step
counters, which live on the host) and by data loading (host tensors, in the loader's workers in a
real run) are not counted.
"""

from __future__ import annotations

import contextlib
import traceback
from collections.abc import Iterator
from typing import Any

import lightning.pytorch as pl
import torch

METHODS = ("item", "tolist", "numpy", "cpu", "__bool__", "__float__", "__int__", "__index__", "__format__")

# per training batch (in order): (global_step before the batch, last batch of its epoch, [(method, "file:line"), ...])
STEPS: list[tuple[int, bool, list[tuple[str, str]]]] = []
_CURRENT: list[tuple[str, str]] | None = None


def _caller() -> str | None:
    """file:line of the first frame outside torch's tensor code and this module; None for the calls
    of torch.optim and of data loading (host tensors, made in the loader's workers in a real run)."""
    stack = traceback.extract_stack()[:-2]
    if any("/torch/utils/data/" in frame.filename.replace("\\", "/") for frame in stack):
        return None
    for frame in reversed(stack):
        name = frame.filename.replace("\\", "/")
        if name.endswith(("sync_count_support.py", "torch/_tensor.py", "torch/overrides.py")):
            continue
        if "/torch/optim/" in name:
            return None
        return f"{name.split('site-packages/')[-1]}:{frame.lineno}"
    return "?"


def _wrap(name: str, original: Any) -> Any:
    def counted(*args: Any, **kwargs: Any) -> Any:
        if _CURRENT is not None and (name != "to" or _to_host(args, kwargs)):
            where = _caller()
            if where is not None:
                _CURRENT.append((name, where))
        return original(*args, **kwargs)

    return counted


def _to_host(args: Any, kwargs: Any) -> bool:
    target = kwargs.get("device", args[1] if len(args) > 1 else None)
    return str(target).startswith("cpu")


@contextlib.contextmanager
def counting() -> Iterator[None]:
    saved = {name: getattr(torch.Tensor, name) for name in METHODS}
    sync = torch.cuda.synchronize
    try:
        for name, original in saved.items():
            setattr(torch.Tensor, name, _wrap(name, original))
        torch.cuda.synchronize = _wrap("cuda.synchronize", sync)
        yield
    finally:
        for name, original in saved.items():
            setattr(torch.Tensor, name, original)
        torch.cuda.synchronize = sync


class SyncCounter(pl.Callback):
    """Start a new record at the start of every training batch; stop at the end of training."""

    def on_fit_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        global _CURRENT
        STEPS.clear()
        _CURRENT = None

    def on_train_batch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: Any, idx: int) -> None:
        global _CURRENT
        _CURRENT = []
        STEPS.append((trainer.global_step, idx + 1 == trainer.num_training_batches, _CURRENT))

    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        global _CURRENT
        _CURRENT = None


class ItemEveryStep(pl.Callback):
    """A callback that reads the loss on the host at every step: the synchronisation the test must catch."""

    def on_train_batch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any, *args: Any) -> None:
        outputs["loss"].item()
