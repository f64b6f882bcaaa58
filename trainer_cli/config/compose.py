"""Config composition: ``--config`` files, Hydra ``defaults:`` lists and OmegaConf interpolation.

Each ``--config`` value is resolved to a file (see :func:`trainer_cli.config.paths.resolve_config_path`).
A file whose top level holds a ``defaults:`` list is composed with Hydra's compose API (no
``@hydra.main``: no working-directory change, no argv rewriting) and handed to LightningCLI as the
composed YAML text, interpolations still unresolved. LightningCLI's parser runs in jsonargparse's
``omegaconf+`` mode, which resolves ``${...}`` once every ``--config`` layer and command-line flag
has been merged, so interpolations see overrides.

Group files start with ``# @package _global_`` so a group file is both a config fragment that
layers with ``--config`` and a Hydra group option that composes at the top level.

A user's configs live in folders laid out like ``configs/`` (config roots): an experiment's own
root, ``--config_root DIR`` and ``$TRAINER_CLI_CONFIG_PATH`` are searched before the bundled
``configs/`` (:func:`search_roots`). Composing a command line (:func:`compose_args`) returns its
:class:`Layers` beside the expanded arguments: every layer with the file and line of each key it
sets, so an error about a value names where it was written (:meth:`Layers.describe_origin`).
"""

from __future__ import annotations

import sys
import warnings
from collections.abc import Collection, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from trainer_cli.config.class_flags import place_class_flags
from trainer_cli.config.hydra_roots import (
    HYDRA_LOGGING,
    config_root_of,
    entry_group,
    files_of,
    has_defaults_list,
    root_config_of,
    search_roots,
    searchpath,
)
from trainer_cli.config.keys import Layer, Layers, file_layer
from trainer_cli.config.layer_order import under_earlier
from trainer_cli.config.paths import resolve_config_path, user_config_roots
from trainer_cli.config.request import Arg, Request, option
from trainer_cli.config.run_layers import with_run_settings
from trainer_cli.config.yaml_files import load_yaml_file
from trainer_cli.errors import UserError

if TYPE_CHECKING:
    from trainer_cli.config.hydra_style import Ignored

SHIM_PRIMARY = "trainer_cli_primary"  # Hydra ConfigStore name of the stand-in primary config (see _compose)


def compose_file(path: Path, roots: Sequence[Path] = ()) -> dict[str, Any]:
    """Compose a config file that has a Hydra ``defaults:`` list into one plain dict.

    Group options (``/model: cnn``) are looked up in the file's own config root, then in the user
    config ``roots``, then in the bundled ``configs/`` folder (:func:`search_roots`): a user group
    file named like a bundled one wins. Interpolations are left unresolved.

    Raises:
        UserError: for a missing defaults entry or any other composition error.
    """
    return _compose(path, roots)[0]


def _compose(path: Path, roots: Sequence[Path] = ()) -> tuple[dict[str, Any], list[tuple[Path, str]]]:
    """:func:`compose_file`, plus the files merged, in merge order, each with its package."""
    from hydra import compose, initialize_config_dir
    from hydra.core.config_store import ConfigStore
    from hydra.core.global_hydra import GlobalHydra
    from hydra.errors import HydraException
    from hydra.types import RunMode
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    path = path.resolve()
    search = search_roots(path, roots)
    name = path.relative_to(config_root_of(path)).with_suffix("").as_posix()
    primary = name
    if config_root_of(path) != search[0]:  # a bundled experiment under user roots: Hydra loads the primary
        # config from the first root only, so a stand-in primary (in Hydra's ConfigStore) names the file
        if any((r / f"{name}.yaml").is_file() for r in search[:-1]):
            search = [search[-1], *search[:-1]]  # a user file of the same name: the given file, bundled groups first
        else:
            primary = SHIM_PRIMARY
            ConfigStore.instance().store(name=SHIM_PRIMARY, node={"defaults": [f"/{name}", "_self_"]})
    # HYDRA_LOGGING: a template's hydra/default.yaml asks for the colorlog plugin: no Hydra run logs here
    overrides = [*searchpath(search), *HYDRA_LOGGING]
    base = _template_primary(path) if primary == name else None
    if base is not None:  # an experiment of a template's root config (`train.yaml` naming `experiment: null`)
        primary, overrides = base[0], [*overrides, f"{base[1]}={path.stem}"]
    GlobalHydra.instance().clear()
    try:
        with (
            initialize_config_dir(config_dir=str(search[0]), version_base="1.3", job_name="train"),
            warnings.catch_warnings(),
        ):
            warnings.filterwarnings("ignore", message=".*Defaults list is missing `_self_`", category=UserWarning)
            cfg = compose(config_name=primary, overrides=overrides)
            merged = (
                GlobalHydra.instance().config_loader().compute_defaults_list(primary, overrides, RunMode.RUN).defaults
            )
    except (HydraException, OmegaConfBaseException) as err:
        message = str(err).strip().splitlines()[0]
        raise UserError(f"cannot compose {path}: {message}") from None
    except RecursionError:  # Hydra follows the defaults lists without a cycle check
        raise UserError(
            f"cannot compose {path}: its defaults: lists form a cycle (a config that includes itself, directly or "
            "through another): remove one of the entries"
        ) from None
    finally:
        GlobalHydra.instance().clear()
    sources = files_of(merged, search, {name: path})
    return fold_list_appends(OmegaConf.to_container(cfg, resolve=False)), sources  # type: ignore[return-value]


def _template_primary(path: Path) -> tuple[str, str] | None:
    """The root config a Hydra project composes a group file into, when the file needs it: its
    ``defaults:`` list holds ``override /group: option`` entries of groups it does not list itself (a
    lightning-hydra-template experiment, run as ``python train.py experiment=example``; a debug config's
    ``[default, override /callbacks: none]``), which compose only in a root config that lists those groups, and
    a top-level file of its config root names the file's group in its own ``defaults:`` list
    (``- experiment: null``, :func:`root_config_of`). Returns that file's name and the group, else None."""
    root = config_root_of(path)
    if root == path.parent.resolve() or not path.is_relative_to(root):
        return None
    entries = [e for e in (load_yaml_file(path) or {}).get("defaults") or [] if e != "_self_"]
    overridden = {entry_group(k) for e in entries if isinstance(e, dict) for k in e if str(k).startswith("override ")}
    listed = {entry_group(k) for e in entries if isinstance(e, dict) for k in e if not str(k).startswith("override ")}
    if not overridden - listed:
        return None
    group = path.relative_to(root).parts[0]
    found = root_config_of(root, group)
    return (found[0], group) if found else None


def fold_list_appends(data: Any) -> Any:
    """Merge ``key+: [...]`` into ``key: [...]`` where one composed dict holds both.

    Additive group files (``callbacks/early_stopping.yaml``) say ``callbacks+:``: layered with
    ``--config`` jsonargparse appends them to the list so far; composed next to the list they
    extend (``/callbacks: [default, early_stopping]``) they are appended here, in order.
    """
    if isinstance(data, list):
        return [fold_list_appends(v) for v in data]
    if not isinstance(data, dict):
        return data
    out = {k: fold_list_appends(v) for k, v in data.items()}
    for key in [k for k in out if isinstance(k, str) and k.endswith("+")]:
        base = key[:-1]
        if isinstance(out.get(base), list) and isinstance(out[key], list):
            out[base] = out[base] + out.pop(key)
    return out


def config_text(value: str, layers: Layers, roots: Sequence[Path] = ()) -> str:
    """What LightningCLI gets for one ``--config`` value: a file path, or composed YAML text.

    ``roots`` are the user config roots (:func:`take_config_roots`); the layer is appended to
    ``layers`` for error messages.
    """
    if (
        value.lstrip().startswith("{") or "\n" in value
    ):  # a config given inline (JSON/YAML text), as jsonargparse takes it
        return value
    path = resolve_config_path(value, roots)
    data = load_yaml_file(path)
    if data is None:
        raise UserError(
            f"config file {path} is empty (no keys, or only comments): give it some settings or drop this --config"
        )
    if not isinstance(data, dict):
        raise UserError(f"config file {path} must hold a mapping of keys, found {type(data).__name__}")
    from trainer_cli.config import hydra_style

    hydra = hydra_style.is_hydra_style(data)
    if has_defaults_list(data) or (hydra and "# @package" not in path.read_text()):  # Hydra places it by its group
        composed, sources = _compose(path, roots)
        layer = file_layer(str(path), sources, composed_from=path)
        composed, notes = under_earlier(composed, layer, layers, roots)
        for line in notes:
            _note(line)
        layers.append(layer)
        if hydra or hydra_style.is_hydra_style(composed):
            layer.hydra = composed
            hydra_style.alias_keys(layer.keys)
            if "hydra" in data and "hydra" not in composed:  # compose drops Hydra's node: named in the note
                composed = {**composed, "hydra": data["hydra"]}
            composed, ignored = hydra_style.translate(
                composed, path, layer.keys, config_root_of(path), hydra_context(layers[:-1]), layers[:-1]
            )
            _note_ignored(ignored)
        return yaml.safe_dump(composed, sort_keys=False)
    layers.append(file_layer(str(path), [(path, "")]))
    if hydra:
        layers[-1].hydra = data
        hydra_style.alias_keys(layers[-1].keys)
        translated, ignored = hydra_style.translate(
            data, path, layers[-1].keys, config_root_of(path), hydra_context(layers[:-1]), layers[:-1]
        )
        _note_ignored(ignored)
        return yaml.safe_dump(translated, sort_keys=False)
    return str(path)


def hydra_context(layers: Sequence[Layer]) -> dict[str, Any]:
    """The Hydra-style layers of ``layers`` merged, untranslated: the one config Hydra would have
    composed so far, which a later layer's interpolations may point into (``${paths.output_dir}``)."""
    from omegaconf import OmegaConf

    parts = [layer.hydra for layer in layers if layer.hydra is not None]
    if not parts:
        return {}
    try:
        return OmegaConf.to_container(OmegaConf.merge(*parts), resolve=False)  # type: ignore[return-value]
    except Exception:  # noqa: BLE001 (layers that do not merge: each resolves on its own)
        return {}


_NOTED: set[str] = set()  # the notes printed by this process (a command line may be composed twice)
_NOTED_KEYS: set[Ignored] = set()  # the Hydra keys those notes named as left out, with their files


def _note(line: str | None) -> None:
    """Print a note about a config layer once (to stderr: the config printed by --print_config stays clean)."""
    if line and line not in _NOTED:
        _NOTED.add(line)
        print(f"note: {line}", file=sys.stderr)


def _note_ignored(ignored: Sequence[Ignored]) -> None:
    """Note the Hydra keys a layer leaves out, each under the file that wrote it, once: a key an earlier layer
    wrote (``logger.wandb`` of the experiment, under a later ``--config logger/csv``) was noted with that layer."""
    from trainer_cli.config import hydra_style

    fresh = [i for i in dict.fromkeys(ignored) if i not in _NOTED_KEYS]
    _NOTED_KEYS.update(fresh)
    for line in hydra_style.note_lines(fresh):
        _note(line)


def take_config_roots(request: Request) -> tuple[list[Path], Request]:
    """Take every ``--config_root DIR`` / ``--config_root=DIR`` out of ``request``; returns the user
    config roots (those, then ``$TRAINER_CLI_CONFIG_PATH``'s) and the request without them.

    Raises:
        UserError: for ``--config_root`` without a directory, or one that does not exist.
    """
    for arg in request:
        if arg.name == "config_root" and arg.missing_value:
            raise UserError(f"{arg.flag} needs a directory (a folder laid out like configs/)")
    return user_config_roots(request.values("config_root")), request.without("config_root")


def expand_config_args(request: Request) -> Request:
    """The request of :func:`compose_args`, where the layers are not needed."""
    return compose_args(request)[0]


def composed(request: Request) -> tuple[Request, Layers]:
    """``request`` composed (:func:`compose_args`): as ``train``'s precheck composed it already
    (:attr:`trainer_cli.config.request.Request.composed`), else here."""
    if request.composed is not None:
        return request.composed
    return compose_args(request)


def compose_args(request: Request, fixed: Collection[str] = ()) -> tuple[Request, Layers]:
    """Rewrite every ``--config FILE`` / ``--config=FILE`` / ``-c FILE`` of ``request`` for LightningCLI,
    after taking out the ``--config_root DIR`` flags (:func:`take_config_roots`); returns the
    composed request and its :class:`Layers` (for error messages). ``fixed``: as
    :func:`trainer_cli.config.class_flags.place_class_flags`.

    Raises:
        UserError: for a missing file, a YAML syntax error or a composition error.
    """
    roots, request = take_config_roots(request)
    layers = Layers()
    out: list[Arg] = []
    for arg in request:
        if arg.name == "config":
            if arg.value is None:
                raise UserError(f"{arg.flag} needs a file name")
            for file in with_run_settings(arg.value, request):
                out.append(option("config", config_text(file, layers, roots)))
        else:
            layers.note_flag(arg.tokens[0])
            out.append(arg)
    return place_class_flags(request.with_args(out), layers, fixed), layers
