"""The data->model links of :class:`trainer_cli.runtime.cli.TrainerCLI` (:data:`DATA_TO_MODEL`): the
model's argument takes the data module's value where the model declares it, the user left it at its
default and the data module declares it; added after parsing, when the classes are known."""

from __future__ import annotations

import inspect
from functools import partial
from typing import Any

from jsonargparse import Namespace
from lightning.pytorch.cli import LightningArgumentParser

from trainer_cli.config.keys import Layers, plain_key
from trainer_cli.imports import import_class
from trainer_cli.rundir import record

# what flows from the data module to the model, stated once (links on instantiation)
DATA_TO_MODEL = ("num_classes", "in_channels", "image_size")


def _linked_value(key: str, target: str, current: Any, applied: dict[str, Any], data: Any) -> Any:
    """The value a data->model link gives ``target``: the data module's ``key`` attribute (the
    model's own ``current`` value when the data module was not built or lacks it); the value used
    is recorded in ``applied`` (for config.yaml)."""
    if data is None or not hasattr(data, key):
        return current
    applied[target] = getattr(data, key)
    return applied[target]


def _parameters(target: Any) -> dict[str, Any]:
    """The keyword parameters of a class's ``__init__`` (or a callable) with their defaults; a class
    whose ``__init__`` takes ``**kwargs`` also has its base classes' (as jsonargparse resolves them)."""
    params: dict[str, Any] = {}
    for klass in getattr(target, "__mro__", (target,)):
        init = klass.__dict__.get("__init__") if isinstance(klass, type) else klass
        if init is None:
            continue
        try:
            signature = inspect.signature(init)
        except (TypeError, ValueError):
            break
        forwards = False
        for name, p in signature.parameters.items():
            if p.kind == p.VAR_KEYWORD:
                forwards = True
            elif p.kind != p.VAR_POSITIONAL and name != "self":
                params.setdefault(name, p.default)
        if not forwards:
            break
    return params


def _class_of(model_cfg: Any, fixed: Any, subclass_mode: bool) -> Any:
    """The model class a parsed ``model`` config builds (its ``class_path`` in subclass mode)."""
    if not subclass_mode:
        return fixed
    class_path = model_cfg.get("class_path") if isinstance(model_cfg, Namespace) else None
    if not class_path:
        return None
    try:
        return import_class(class_path)
    except (ImportError, AttributeError, ValueError):
        return None


def _declares(cls: type, key: str) -> bool:
    """Whether a data module class declares ``key``: a class attribute, an annotation or an ``__init__`` argument."""
    annotations: dict[str, Any] = {}
    for klass in getattr(cls, "__mro__", ()):
        annotations.update(getattr(klass, "__annotations__", {}))
    return hasattr(cls, key) or key in annotations or key in _parameters(cls)


def _recorded_link(layers: Layers | None, target: str, value: Any) -> bool:
    """Whether ``value``, the model's ``target`` as parsed, was written by a run's record that names it as a
    link's value (:func:`trainer_cli.rundir.record.recorded_links`): a resume, or a new run, read from
    ``<run>/config.yaml``, where the values the links gave stand as plain values. Such a value is the
    link's, not the user's: the link is added again, as on the run's first start."""
    found = layers.origin_of([target]) if layers else None
    if found is None:
        return False
    layer, key = found
    file = layer.keys[key][0]
    if file is None:  # a flag: the user's
        return False
    linked = record.recorded_links(file)
    return any(plain_key(k) == key and v == value for k, v in linked.items())


def link_unset_model_args(cli: Any, parser: LightningArgumentParser) -> None:
    """Add to ``parser`` the data->model links (:data:`DATA_TO_MODEL`) that apply to the classes ``cli``
    (a :class:`trainer_cli.runtime.cli.TrainerCLI`) parsed: the
    model declares the argument and the user left it at its default, the data module declares
    the attribute, and the user's CLI does not link the key itself. After parsing, when the
    classes are known: a model without the argument gets nothing (not even in its hparams)."""
    cfg = cli._subconfig()
    model_cfg, data_cfg = cfg.get("model"), cfg.get("data")
    model_class = _class_of(model_cfg, cli._model_class, cli.subclass_mode_model)
    data_class = _class_of(data_cfg, cli.datamodule_class, cli.subclass_mode_data)
    if model_class is None or data_class is None or not isinstance(model_cfg, Namespace):
        return
    params = _parameters(model_class)
    user_targets: set[str] = getattr(parser, "link_targets", set())
    for key in DATA_TO_MODEL:
        target = f"model.init_args.{key}" if cli.subclass_mode_model else f"model.{key}"
        if key not in params or not _declares(data_class, key):
            continue
        if target in user_targets or f"model.{key}" in user_targets or f"model.init_args.{key}" in user_targets:
            continue  # the user's own link on the same key wins
        if cli._data_links.get(key) == target:
            continue  # linked by an earlier parse with this parser (ConfigParser)
        current = model_cfg.get(target.split(".", 1)[1])
        if (
            params[key] is not inspect.Parameter.empty
            and current != params[key]
            and not _recorded_link(getattr(cli, "layers", None), target, current)
        ):
            continue  # set by the user: their value stays
        # a plain function, not a bound method: the parser travels with the Trainer to ddp_spawn's processes
        parser.link_arguments(
            "data",
            target,
            compute_fn=partial(_linked_value, key, target, current, cli.applied_links),
            apply_on="instantiate",
        )
        cli._data_links[key] = target
