"""A run's record as :class:`trainer_cli.runtime.run.Run` makes it: the config as a tree, computed once.

The launcher dumps the resolved config once, before it points the loggers at the run directory
(:meth:`trainer_cli.runtime.run.Run.prepare`), and reads that text once into a tree. The config the
Trainer is built from (what ``config.yaml`` records) is that tree with the values the launcher set
applied (:func:`pointed_tree`: ``ckpt_path`` resolved, the loggers pointed), not a second dump; the
record (:func:`build_record`), the history (:func:`trainer_cli.rundir.history.record_start`) and the
record's files (:func:`trainer_cli.rundir.record.write`) take the tree as a value, and text is made
from it only where a file is written.
"""

from __future__ import annotations

import copy
from pathlib import PurePath
from typing import TYPE_CHECKING, Any

from jsonargparse import Namespace
from lightning.pytorch import Callback

from trainer_cli.rundir import record as run_records
from trainer_cli.rundir.resume import flatten

if TYPE_CHECKING:  # trainer_cli.runtime.run imports this module: the type only, no module circle
    from trainer_cli.runtime.run import Run

MISSING: Any = object()  # no value at a key (a new key, or a dump that has none there)


def plain(value: Any) -> Any:
    """A config value (namespaces, lists, paths) as plain data, as a dump gives it back."""
    if isinstance(value, Namespace):
        return {key: plain(item) for key, item in vars(value).items() if not key.startswith("__")}  # no meta keys
    if isinstance(value, dict):
        return {key: plain(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(item) for item in value]
    if isinstance(value, PurePath):
        return str(value)
    return value


def _merged(dumped: Any, before: Any, after: Any) -> Any:
    """The dumped value ``dumped`` of a config value that was ``before`` and is ``after`` now (plain
    data): the dumped form wherever the value did not change, ``after`` where it did."""
    if isinstance(after, dict) and isinstance(before, dict) and isinstance(dumped, dict):
        out = {}
        for key, value in after.items():
            if key in before and key in dumped:
                out[key] = _merged(dumped[key], before[key], value)
            else:
                out[key] = value
        return out
    if (
        isinstance(after, list)
        and isinstance(before, list)
        and isinstance(dumped, list)
        and len(after) == len(before) == len(dumped)
    ):
        return [_merged(d, b, a) for d, b, a in zip(dumped, before, after)]
    if dumped is not MISSING and before == after:
        return dumped
    return after


def pointed_tree(dumped: dict[str, Any], changed: dict[str, tuple[Any, Any]]) -> dict[str, Any]:
    """The dumped config tree ``dumped`` with the values the launcher set since the dump: ``changed``
    is ``{dotted key: (plain value at the dump, plain value now)}`` (``ckpt_path``, ``trainer.logger``)."""
    tree = copy.deepcopy(dumped)
    for key, (before, after) in changed.items():
        if before == after:
            continue
        *parents, leaf = key.split(".")
        section: Any = tree
        for part in parents:
            section = section.setdefault(part, {}) if isinstance(section, dict) else None
        if isinstance(section, dict):
            section[leaf] = _merged(section.get(leaf, MISSING), before, after)
    return tree


def build_record(
    tree: dict[str, Any] | None,
    body: str | None,
    launcher_set: dict[str, Any],
    linked: dict[str, Any],
    script_keeps_own: bool,
    command: str,
) -> run_records.Record:
    """The record ``config.yaml`` is written from: the resolved config the Trainer, model, data,
    callbacks and loggers were built from (``tree``; ``body`` its text while unchanged), the
    data->model link values filled in, and a header naming the values the launcher set
    (``launcher_set``); ``script_keeps_own``: a user's script's record keeps the script's own logger
    settings (re-running it logs where the script does)."""
    tree = copy.deepcopy(tree) if tree is not None else None
    own = {k: v for k, v in launcher_set.items() if " " not in k} if script_keeps_own else {}
    if tree is not None:
        for key, value in {**linked, **own}.items():
            set_dotted(tree, key, value)
    header = [f"# The resolved config of this run: `{command} fit --config <this file>` builds it again."]
    if own:
        header.append(
            "# Pointed at this run directory by trainer-cli for this run (the values below are the script's own): "
            + ", ".join(sorted(own))
        )
    elif launcher_set:
        header += run_records.set_lines(launcher_set)
    if linked:
        header.append(run_records.linked_line(linked))
    if (linked or own) and tree:
        body = None  # the tree changed: dumped where the record is written
    return run_records.Record(header, tree, body)


def in_form_of(current: Any, stored: Any) -> Any:
    """``stored`` with each ``model``/``data`` section in ``class_path``/``init_args`` form unwrapped to
    its init args where ``current`` has that section without a ``class_path`` (a fixed class)."""
    if not isinstance(stored, dict) or not isinstance(current, dict):
        return stored
    out = dict(stored)
    for key in ("model", "data"):
        old, new = stored.get(key), current.get(key)
        if isinstance(old, dict) and "class_path" in old and isinstance(new, dict) and "class_path" not in new:
            out[key] = old.get("init_args") or {}
    return out


def set_dotted(tree: Any, key: str, value: Any) -> None:
    """``tree["a"]["b"] = value`` for ``key`` ``"a.b"`` (missing dicts made)."""
    *parents, leaf = key.split(".")
    for part in parents:
        tree = tree.setdefault(part, {}) if isinstance(tree, dict) else {}
    if isinstance(tree, dict):
        tree[leaf] = value


def pop_dotted(tree: dict[str, Any], key: str) -> None:
    *parents, leaf = key.split(".")
    for part in parents:
        tree = tree.get(part) if isinstance(tree, dict) else None  # type: ignore[assignment]
    if isinstance(tree, dict):
        tree.pop(leaf, None)


def changed_keys(before: Any, after: Any) -> dict[str, Any]:
    """The dotted keys whose value differs between two config trees, with the value before.

    Where ``before`` held a plain value at a key that ``after`` made a section (``trainer.logger:
    null`` that became a logger's ``class_path``/``init_args``), the key is that section's, with the
    plain value: restoring it must give back ``logger: null``, not a section of nulls.
    """
    old, new = flatten(before), flatten(after)
    changed: dict[str, Any] = {}
    for key in new:
        parts = key.split(".")
        was_plain = next((p for p in (".".join(parts[:i]) for i in range(1, len(parts))) if p in old), None)
        if was_plain is not None:
            changed[was_plain] = old[was_plain]
        elif old.get(key) != new[key]:
            changed[key] = old.get(key)
    return changed


class RunRecord(Callback):
    """Writes the run's record (:meth:`Run.freeze`: config.yaml, git.txt, the logger runs) when the
    Trainer starts a verb, on global rank 0 only (no collective)."""

    def __init__(self, run: Run) -> None:
        self.run = run

    def setup(self, trainer: Any, pl_module: Any, stage: str) -> None:
        if trainer.is_global_zero:
            self.run.freeze()
