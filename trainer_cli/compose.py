"""Config composition: ``--config`` files, Hydra ``defaults:`` lists and OmegaConf interpolation.

Each ``--config`` value is resolved to a file (see :func:`trainer_cli.paths.resolve_config_path`).
A file whose top level holds a ``defaults:`` list is composed with Hydra's compose API (no
``@hydra.main``: no working-directory change, no argv rewriting) and handed to LightningCLI as the
composed YAML text, interpolations still unresolved. LightningCLI's parser runs in jsonargparse's
``omegaconf+`` mode, which resolves ``${...}`` once every ``--config`` layer and command-line flag
has been merged, so interpolations see overrides.

Group files start with ``# @package _global_`` so a group file is both a config fragment that
layers with ``--config`` and a Hydra group option that composes at the top level.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from trainer_cli.errors import UserError
from trainer_cli.paths import configs_dir, resolve_config_path

CONFIG_FLAGS = ("--config", "-c")


def load_yaml_file(path: Path) -> Any:
    """Load a YAML file safely (no Python object tags).

    Raises:
        UserError: on a YAML syntax error, naming the file, line and column.
    """
    try:
        text = path.read_text()
    except OSError as err:
        raise UserError(f"cannot read config file {path}: {err.strerror}") from None
    try:
        return yaml.safe_load(text)
    except yaml.MarkedYAMLError as err:
        mark = err.problem_mark
        where = f" line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise UserError(f"YAML syntax error in {path}{where}: {err.problem or err}") from None
    except yaml.YAMLError as err:
        raise UserError(f"YAML error in {path}: {err}") from None


def has_defaults_list(data: Any) -> bool:
    """True when a loaded YAML document is a Hydra primary config with a ``defaults:`` list."""
    return isinstance(data, dict) and isinstance(data.get("defaults"), list)


def compose_file(path: Path) -> dict[str, Any]:
    """Compose a config file that has a Hydra ``defaults:`` list into one plain dict.

    Group options (``/model: cnn``) are looked up in the bundled ``configs/`` folder; a file
    outside it also finds groups next to itself. Interpolations are left unresolved.

    Raises:
        UserError: for a missing defaults entry or any other composition error.
    """
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from hydra.errors import HydraException
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    root = configs_dir().resolve()
    path = path.resolve()
    overrides: list[str] = []
    if not path.is_relative_to(root):
        overrides = [f"hydra.searchpath=[file://{root}]"]
        root = path.parent
    name = path.relative_to(root).with_suffix("").as_posix()
    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(config_dir=str(root), version_base="1.3", job_name="train"):
            cfg = compose(config_name=name, overrides=overrides)
    except (HydraException, OmegaConfBaseException) as err:
        message = str(err).strip().splitlines()[0]
        raise UserError(f"cannot compose {path}: {message}") from None
    finally:
        GlobalHydra.instance().clear()
    return fold_list_appends(OmegaConf.to_container(cfg, resolve=False))  # type: ignore[arg-type]


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


def config_text(value: str) -> str:
    """What LightningCLI gets for one ``--config`` value: a file path, or composed YAML text."""
    path = resolve_config_path(value)
    data = load_yaml_file(path)
    if data is None:
        return str(path)
    if not isinstance(data, dict):
        raise UserError(f"config file {path} must hold a mapping of keys, found {type(data).__name__}")
    if has_defaults_list(data):
        return yaml.safe_dump(compose_file(path), sort_keys=False)
    return str(path)


def expand_config_args(args: list[str]) -> list[str]:
    """Rewrite every ``--config FILE`` / ``--config=FILE`` / ``-c FILE`` in ``args`` for LightningCLI.

    Raises:
        UserError: for a missing file, a YAML syntax error or a composition error.
    """
    out: list[str] = []
    i = 0
    while i < len(args):
        arg = args[i]
        if arg in CONFIG_FLAGS:
            if i + 1 >= len(args):
                raise UserError(f"{arg} needs a file name")
            out += ["--config", config_text(args[i + 1])]
            i += 2
            continue
        if arg.startswith("--config="):
            out += ["--config", config_text(arg.split("=", 1)[1])]
        else:
            out.append(arg)
        i += 1
    return out
