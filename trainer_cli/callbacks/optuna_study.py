"""What the pruning callback (:mod:`trainer_cli.callbacks.optuna_pruning`) and a sweep's study
(:mod:`trainer_cli.sweeps.study`) both open: the Optuna storage a study lives in and the pruner a config
names. No Lightning here: ``train sweep-results`` and a sweep's worker open the study without importing
torch (8 s of CPU on a loaded 2-core machine).
"""

from __future__ import annotations

import ast
import re
from typing import Any

PRUNED_ATTR = "pruned_at_step"
"""The user attribute of a trial the pruning callback stopped (the step it was pruned at)."""
_CALL = re.compile(r"\s*([a-z_]+)\s*(?:\((.*)\))?\s*", re.S)


def make_pruner(spec: str) -> Any:
    """The Optuna pruner ``spec`` names: ``none``, ``median``, ``hyperband``, ``successive_halving``,
    each optionally with keyword arguments of its Optuna class (``median(n_startup_trials=2)``).

    Raises:
        ValueError: for an unknown name, or arguments that are not ``key=literal`` or that the class refuses.
    """
    import optuna

    match = _CALL.fullmatch(spec)
    classes = {
        "none": optuna.pruners.NopPruner,
        "median": optuna.pruners.MedianPruner,
        "hyperband": optuna.pruners.HyperbandPruner,
        "successive_halving": optuna.pruners.SuccessiveHalvingPruner,
    }
    if match is None or match.group(1) not in classes:
        raise ValueError(f"{spec!r}: expected one of {', '.join(classes)}, optionally name(key=value,...)")
    kwargs: dict[str, Any] = {}
    try:
        call = ast.parse(f"f({match.group(2) or ''})", mode="eval").body
        assert isinstance(call, ast.Call) and not call.args
        for keyword in call.keywords:
            assert keyword.arg is not None
            kwargs[keyword.arg] = ast.literal_eval(keyword.value)
    except (SyntaxError, ValueError, AssertionError):
        raise ValueError(f"{spec!r}: the arguments must be key=value, e.g. median(n_startup_trials=2)") from None
    try:
        return classes[match.group(1)](**kwargs)
    except TypeError as err:
        raise ValueError(f"{spec!r}: {err}") from None


def open_storage(storage: str) -> Any:
    """An Optuna storage: a database URL as is, else the path of a journal file (``JournalFileBackend``)."""
    if "://" in storage:
        return storage
    from optuna.storages import JournalStorage
    from optuna.storages.journal import JournalFileBackend

    return JournalStorage(JournalFileBackend(storage))
