"""Hydra-style configs (lightning-hydra-template's) read as they are: translated for LightningCLI.

A config layer (one ``--config`` value, composed by :mod:`trainer_cli.config.compose`) written for
``hydra.utils.instantiate`` is rewritten once composed, before LightningCLI parses it:

- a node with ``_target_`` becomes ``class_path`` with its other keys under ``init_args`` (recursively);
  ``_args_`` become the class's first parameters by name; ``_partial_: true`` is dropped, its class
  checked callable (the model's optimizer and scheduler arguments are built as partials already, see
  :mod:`trainer_cli.optim`); every ``_target_`` must import;
- ``callbacks:`` and ``logger:`` (at the top or under ``trainer:``) given as a mapping of named entries
  become ``trainer.callbacks`` / ``trainer.logger``, the list of their values (a ``None`` entry or one
  without ``_target_`` dropped, as the template's ``instantiate_callbacks`` drops them); a layer's named
  entries merge by name into those of the Hydra-style layers before it (``callbacks: {early_stopping:
  {patience: 3}}`` given after an experiment changes its ``EarlyStopping``), as in Hydra's one config;
- ``trainer: {_target_: lightning.pytorch.Trainer, ...}`` is the trainer section;
- the template's top-level keys map to the launcher's options (``seed`` -> ``seed_everything``,
  ``ckpt_path`` -> ``ckpt_path``, ``task_name`` -> ``name``) or are dropped with one note line
  (:data:`IGNORED`); ``train: false`` and ``_recursive_: false`` cannot be honoured: an error;
- a script's own names for the sections (MinVQVAE's ``@hydra.main`` builds ``cfg.task`` and ``cfg.dataset``):
  a top-level node whose ``_target_`` is a LightningModule is the ``model`` section, a LightningDataModule
  the ``data`` section, where that section is not given otherwise (or is only a value interpolated into
  them, as its ``model:`` network is into ``task.model``).

Interpolations are resolved within the layer first (the top-level keys they point into, ``paths:``,
``train:``, a displaced ``model:``, are dropped, LightningCLI's own sections kept):
``${oc.env:PROJECT_ROOT}`` is the folder above the config root when the variable is not set (the
template's ``rootutils`` sets it so), ``${hydra:runtime.cwd}`` the working directory, and a value made
from Hydra's run folder (``${hydra:runtime.output_dir}``, the template's
``paths.output_dir``) is left out: the run directory is the launcher's (checkpoints, loggers and
``default_root_dir`` go there).
"""

from __future__ import annotations

import inspect
import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from trainer_cli.config.keys import Layer, Layers, plain_key
from trainer_cli.errors import UserError
from trainer_cli.imports import import_class

TARGET, PARTIAL, ARGS, RECURSIVE, CONVERT = "_target_", "_partial_", "_args_", "_recursive_", "_convert_"
TRAINERS = frozenset(
    {
        "lightning.pytorch.Trainer",
        "lightning.pytorch.trainer.Trainer",
        "lightning.pytorch.trainer.trainer.Trainer",
        "lightning.Trainer",
        "pytorch_lightning.Trainer",
        "pytorch_lightning.trainer.Trainer",
        "pytorch_lightning.trainer.trainer.Trainer",
    }
)
RENAMED = {"seed": "seed_everything", "ckpt_path": "ckpt_path", "task_name": "name"}  # template key -> launcher's
IGNORED = {  # template top-level key -> why the launcher has no use for it
    "tags": "no launcher equivalent: the run's name names it",
    "train": "`train fit` trains",
    "test": "add --test_after_fit to test the best checkpoint after the fit",
    "optimized_metric": "a sweep's metric is --sweep_metric",
    "paths": "resolved into the values that use it",
    "extras": "the template's own train.py scaffolding",
    "hydra": "no Hydra run: runs go to runs/<name>/version_N",
}
NAMED = ("callbacks", "logger")  # top-level mappings of named entries: the lists trainer.callbacks, trainer.logger
CLI_SECTIONS = frozenset({"model", "data", "optimizer", "lr_scheduler", "seed_everything", "ckpt_path"})
"""LightningCLI's top-level keys besides ``trainer``: kept even where interpolations point into them."""
HYDRA_TOP = frozenset({*RENAMED, *IGNORED, *NAMED}) - {"ckpt_path"}
RUN_FOLDER = "\x00hydra-run-folder\x00"  # stands for Hydra's run folder while the layer is resolved
_HYDRA_CWD = re.compile(r"\$\{hydra:\s*runtime\.cwd\s*\}")
_HYDRA_ANY = re.compile(r"\$\{hydra:[^}]*\}")
_INTERPOLATION = re.compile(r"\$\{\s*([A-Za-z_]\w*)\s*(?=[.}\[])")  # ${name...}, not a resolver's ${now:...}
_KeyLines = Mapping[str, tuple[Path | None, int | None]]
Ignored = tuple[Path, str, str]
"""One key a Hydra-style layer leaves out: the ``--config`` file that wrote it, the dotted key, and why."""
RUN_FOLDER_WHY = "made from Hydra's run folder: the run directory is the launcher's"
UNTARGETED_WHY = "no _target_: the template's instantiate_* skip such entries"


def is_hydra_style(data: Any) -> bool:
    """True when a loaded config holds a ``_target_`` anywhere, or one of the template's top-level keys."""
    if isinstance(data, dict) and any(k in HYDRA_TOP for k in data):
        return True
    return _has_target(data)


def _has_target(node: Any) -> bool:
    if isinstance(node, dict):
        return TARGET in node or any(_has_target(v) for v in node.values())
    if isinstance(node, list):
        return any(_has_target(v) for v in node)
    return False


def translate(
    data: dict[str, Any],
    path: Path,
    keys: _KeyLines,
    root: Path,
    context: dict[str, Any] | None = None,
    earlier: Sequence[Layer] = (),
) -> tuple[dict[str, Any], list[Ignored]]:
    """A Hydra-style config layer as LightningCLI reads it (see the module docstring).

    Args:
        data: The composed layer, interpolations unresolved.
        path: The file given with ``--config`` (for messages).
        keys: Where each dotted key of the layer is written (:attr:`trainer_cli.config.keys.Layer.keys`).
        root: The config root of ``path`` (its parent is the project root of ``${oc.env:PROJECT_ROOT}``).
        context: The Hydra-style layers before this one, merged and untranslated: what its interpolations
            may point into besides itself (``${paths.output_dir}`` of a ``trainer/cpu.yaml`` given after an
            experiment), as in the one config Hydra composes.
        earlier: The layers before this one (:class:`trainer_cli.config.keys.Layer`, where each of their keys is
            written); their Hydra-style ones make ``context``. A key left out that this layer does not write came
            with them (a named entry merged by name: ``logger.wandb`` of an experiment under a later
            ``--config logger/csv``) and is named with the file of the last of them that writes it.

    Returns:
        The translated layer and the keys left out, each with the file that wrote it and why
        (:data:`Ignored`; :func:`note_lines` words them).

    Raises:
        UserError: one line naming the file and key: an interpolation that does not resolve, a
            ``_target_`` that does not import, a ``_partial_`` on a non-callable, or a key the launcher
            cannot honour (``train: false``, ``_recursive_: false``, another ``Trainer`` class).
    """
    where = _Where(path, keys)
    resolved = _resolve(data, path, root, context or {})
    left_out: list[str] = []
    resolved = _drop_run_folder(resolved, "", left_out)
    variables = _referenced({**(context or {}), **data}) - {*RENAMED, *NAMED, "trainer"}
    roles = _roles(resolved, variables)
    out: dict[str, Any] = {}
    ignored: list[tuple[str, str]] = []  # (dotted key, why), in order
    for key, value in resolved.items():
        if key in roles:
            out[roles[key]] = value
        elif key in RENAMED:
            if value is not None:
                out[RENAMED[key]] = value
        elif key == "train" and value is False:
            raise UserError(
                f"{where('train')}train: false (no training) cannot be honoured by `train fit`: use `train test`"
            )
        elif key in IGNORED and not (key == "train" and isinstance(value, dict)):  # (MinVQVAE's group of values)
            ignored.append((key, IGNORED[key]))
        elif key in variables and (key not in CLI_SECTIONS or key in roles.values()):
            ignored.append((key, "resolved into the values that use it"))
        elif key in NAMED:
            out.setdefault("trainer", {})[key] = value
        elif key == "trainer" and isinstance(value, dict):
            out["trainer"] = {**value, **out.get("trainer", {})}
        else:
            out[key] = value
    trainer = out.get("trainer")
    if isinstance(trainer, dict):
        target = trainer.pop(TARGET, None)
        if target is not None and target not in TRAINERS:
            raise UserError(
                f"{where('trainer._target_')}trainer._target_: {target}: the launcher builds Lightning's Trainer; "
                "a Trainer subclass is not supported from a config (drop _target_)"
            )
        for key in (PARTIAL, CONVERT):
            trainer.pop(key, None)
        for key in NAMED:
            if isinstance(trainer.get(key), dict):  # (``callbacks: null``, the template's debug configs: none)
                trainer[key] = _named_entries(trainer[key], key, left_out)
    out = {k: _node(v, k, where) for k, v in out.items()}
    folder = [k for k in left_out if not k.startswith(("callbacks.", "logger.")) or k.count(".") > 1]
    untargeted = [k for k in left_out if k not in folder]
    ignored += [(k, RUN_FOLDER_WHY) for k in folder] + [(k, UNTARGETED_WHY) for k in untargeted]
    before = Layers(layer for layer in earlier if layer.hydra is not None)  # the layers of ``context``

    def written_in(dotted: str) -> Path:  # this layer's file, or the earlier layer's that wrote the key
        found = None if plain_key(dotted) in keys else before.origin_of([dotted])
        return Path(found[0].label) if found else path

    return out, [(written_in(key), key, why) for key, why in ignored]


def note_lines(ignored: Sequence[Ignored]) -> list[str]:
    """The note lines for keys left out (:func:`translate`): one a file, ``FILE: Hydra keys ignored: KEY (why);
    ...``, the keys made from Hydra's run folder and the entries without ``_target_`` each named in one group."""
    by_file: dict[Path, dict[tuple[str, str], list[str]]] = {}  # file -> (a key or "" for a group, why) -> keys
    for file, key, why in ignored:
        entry = ("" if why in (RUN_FOLDER_WHY, UNTARGETED_WHY) else key, why)
        by_file.setdefault(file, {}).setdefault(entry, []).append(key)
    return [
        f"{file}: Hydra keys ignored: " + "; ".join(f"{', '.join(keys)} ({why})" for (_, why), keys in entries.items())
        for file, entries in by_file.items()
    ]


def _referenced(data: Any) -> set[str]:
    """The top-level keys that interpolations (``${train.epochs}``, ``${model}``) of ``data`` point into."""
    if isinstance(data, dict):
        return set().union(*(_referenced(v) for v in data.values()))
    if isinstance(data, list):
        return set().union(*(_referenced(v) for v in data))
    return set(_INTERPOLATION.findall(data)) if isinstance(data, str) else set()


def _roles(resolved: dict[str, Any], variables: set[str]) -> dict[str, str]:
    """``{key: "model" | "data"}`` for top-level keys other than those whose ``_target_`` is a LightningModule
    or a LightningDataModule (MinVQVAE's ``task:`` and ``dataset:``), where the section they stand for is not
    given otherwise (or is only a value interpolated into them: its ``model:`` network)."""
    from lightning.pytorch import LightningDataModule, LightningModule

    roles: dict[str, str] = {}
    for key, value in resolved.items():
        if key in CLI_SECTIONS or key in HYDRA_TOP or key == "trainer" or not isinstance(value, dict):
            continue
        target = value.get(TARGET)
        try:
            built = import_class(target) if isinstance(target, str) and "." in target else None
        except (ImportError, AttributeError):
            continue  # named by the error LightningCLI gives for the key
        for role, base in (("model", LightningModule), ("data", LightningDataModule)):
            if isinstance(built, type) and issubclass(built, base) and role not in roles.values():
                if role not in resolved or role in variables:
                    roles[key] = role
    return roles


def alias_keys(keys: dict[str, Any]) -> None:
    """Add to a layer's ``keys`` (dotted key -> where it is written, :class:`trainer_cli.config.keys.Layer`)
    the keys LightningCLI names after :func:`translate`, so that its errors name the file and line:
    ``X.class_path`` for ``X._target_``, ``trainer.callbacks``/``trainer.logger`` for the top-level
    ``callbacks``/``logger`` (with and without the entry's name), the launcher's names of :data:`RENAMED` keys."""
    for key, where in list(keys.items()):
        top, _, rest = key.partition(".")
        if key.endswith(f".{TARGET}") or key == TARGET:
            keys.setdefault(key[: -len(TARGET)] + "class_path", where)
        if top in NAMED:  # LightningCLI names an entry of the list without its name
            keys.setdefault(f"trainer.{key}", where)
            keys.setdefault(".".join(["trainer", top, *rest.split(".")[1:]]), where)
        if not rest and top in RENAMED:
            keys.setdefault(RENAMED[top], where)


class _Where:
    """``in FILE line N: `` of a dotted key of the layer (the file given when the key is not found)."""

    def __init__(self, path: Path, keys: _KeyLines) -> None:
        self.path, self.keys = path, keys

    def __call__(self, dotted: str) -> str:
        file, line = self.keys.get(plain_key(dotted), (self.path, None))
        return f"in {file or self.path}{f' line {line}' if line else ''}: "


_PROJECT_ROOT = re.compile(r"\$\{oc\.env:\s*PROJECT_ROOT\s*(?:,[^}]*)?\}")
"""The template's ``${oc.env:PROJECT_ROOT}`` (with or without a default)."""


def _with_project_root(text: str, root: Path) -> str:
    """``text`` with ``${oc.env:PROJECT_ROOT}`` as the folder above the config root where the variable is not
    set (the template's ``rootutils`` sets it so), read, never written into the environment."""
    if "PROJECT_ROOT" in os.environ:
        return text
    return _PROJECT_ROOT.sub(str(root.parent).replace("\\", "/"), text)


def _resolve(data: dict[str, Any], path: Path, root: Path, context: dict[str, Any]) -> dict[str, Any]:
    """``data`` with its interpolations resolved over ``context`` (Hydra's run folder as :data:`RUN_FOLDER`)."""
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    def stand_in(node: Any) -> Any:
        if isinstance(node, dict):
            return {k: stand_in(v) for k, v in node.items()}
        if isinstance(node, list):
            return [stand_in(v) for v in node]
        if isinstance(node, str) and "${hydra:" in node.replace(" ", ""):
            node = _HYDRA_ANY.sub(RUN_FOLDER, _HYDRA_CWD.sub(os.getcwd().replace("\\", "/"), node))
        return _with_project_root(node, root) if isinstance(node, str) else node

    try:
        merged = OmegaConf.merge(OmegaConf.create(stand_in(context)), OmegaConf.create(stand_in(data)))
        whole = OmegaConf.to_container(merged, resolve=True)
        resolved = _project(whole, data)
        for key in NAMED:  # named entries merge by name with the layers before, as Hydra merges them
            if isinstance(data.get(key), dict) and isinstance(whole, dict):  # (a list of them replaces)
                resolved[key] = whole[key]
    except OmegaConfBaseException as err:
        key = getattr(err, "full_key", "") or ""
        message = str(err).strip().splitlines()[0]
        raise UserError(f"in {path}: {key + ': ' if key else ''}cannot resolve an interpolation: {message}") from None
    return resolved  # type: ignore[no-any-return]


def _project(resolved: Any, data: Any) -> Any:
    """The values of ``resolved`` at the keys of ``data`` (the layer itself, without its context)."""
    if isinstance(data, dict) and isinstance(resolved, dict):
        return {k: _project(resolved.get(k), v) for k, v in data.items()}
    return resolved


def _drop_run_folder(node: Any, prefix: str, left_out: list[str]) -> Any:
    """``node`` without the values made from Hydra's run folder (their dotted keys added to ``left_out``)."""
    if isinstance(node, dict):
        out = {}
        for key, value in node.items():
            dotted = f"{prefix}.{key}" if prefix else str(key)
            if isinstance(value, str) and RUN_FOLDER in value:
                if not dotted.startswith(("paths.", "hydra.")):
                    left_out.append(dotted)
                if key == "save_dir":  # a logger's, required by some: the launcher points it at the run directory
                    out[key] = "."
                continue
            out[key] = _drop_run_folder(value, dotted, left_out)
        return out
    if isinstance(node, list):
        return [_drop_run_folder(v, prefix, left_out) for v in node if not (isinstance(v, str) and RUN_FOLDER in v)]
    return node


def _named_entries(entries: dict[str, Any], key: str, left_out: list[str]) -> list[Any]:
    """The values of ``callbacks:``/``logger:`` given as named entries, as the template instantiates them:
    a ``None`` entry dropped, one without ``_target_`` dropped (noted)."""
    if TARGET in entries:  # one entry given as it is (MinVQVAE's ``logger: ${logger}``)
        return [entries]
    out = []
    for name, entry in entries.items():
        if entry is None:
            continue
        if isinstance(entry, dict) and TARGET in entry:
            out.append(entry)
        else:
            left_out.append(f"{key}.{name}")
    return out


def _node(node: Any, dotted: str, where: _Where) -> Any:
    """One value translated: a ``_target_`` node as ``class_path``/``init_args``, recursively."""
    if isinstance(node, list):
        return [_node(v, dotted, where) for v in node]
    if not isinstance(node, dict):
        return node
    if TARGET not in node:
        if node.get(PARTIAL):
            raise UserError(f"{where(f'{dotted}.{PARTIAL}')}{dotted}._partial_: true without a _target_ to call")
        return {k: _node(v, f"{dotted}.{k}", where) for k, v in node.items()}
    target = node[TARGET]
    if not isinstance(target, str) or not target:
        raise UserError(f"{where(f'{dotted}.{TARGET}')}{dotted}._target_ must be a dotted class or function name")
    if node.get(RECURSIVE) is False:
        raise UserError(
            f"{where(f'{dotted}.{RECURSIVE}')}{dotted}._recursive_: false cannot be honoured (LightningCLI builds "
            "nested classes first): drop it, or give the nested value without _target_"
        )
    built = _import(target, f"{dotted}.{TARGET}", where)
    partial = node.get(PARTIAL, False)
    if partial not in (True, False):
        raise UserError(f"{where(f'{dotted}.{PARTIAL}')}{dotted}._partial_ must be true or false, found {partial!r}")
    if partial and not callable(built):
        raise UserError(
            f"{where(f'{dotted}.{PARTIAL}')}{dotted}._partial_: true on {target}, which is not callable "
            f"(a {type(built).__name__}): drop _partial_ or name a class or function"
        )
    args = {
        k: _node(v, f"{dotted}.{k}", where)
        for k, v in node.items()
        if k not in (TARGET, PARTIAL, ARGS, RECURSIVE, CONVERT)
    }
    if ARGS in node:
        args = {**_positional(built, target, node[ARGS], f"{dotted}.{ARGS}", where), **args}
    return {"class_path": target, "init_args": args} if args else {"class_path": target}


def _import(target: str, dotted: str, where: _Where) -> Any:
    """What ``target`` names, imported; one line naming the file and key when it does not import."""
    if "." not in target:
        raise UserError(f"{where(dotted)}{dotted}: {target} is not a dotted name (module.Class)")
    try:
        return import_class(target)
    except (ImportError, AttributeError) as err:
        raise UserError(f"{where(dotted)}{dotted}: cannot import {target} ({err})") from None


def _positional(built: Any, target: str, values: Any, dotted: str, where: _Where) -> dict[str, Any]:
    """``_args_`` as the named parameters they fill (the first ones of ``built``'s signature)."""
    if not isinstance(values, list):
        raise UserError(f"{where(dotted)}{dotted} must be a list of positional arguments")
    try:
        params = list(inspect.signature(built).parameters.values())
    except (TypeError, ValueError):
        params = []
    named = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    if len(values) > len(named) or any(p.kind is p.POSITIONAL_ONLY for p in named[: len(values)]):
        raise UserError(
            f"{where(dotted)}{dotted}: {target} does not take {len(values)} positional argument(s) by name: "
            "give them by name as keys of the node"
        )
    return {p.name: v for p, v in zip(named, values)}
