"""Where ``--model pkg.Class`` / ``--data pkg.Class`` go on an expanded command line: a config printed
by a stock ``LightningCLI(MyModel, MyData)`` script has no ``class_path``, so its values parse only on
top of a class given before it (:func:`place_class_flags`)."""

from __future__ import annotations

from collections.abc import Collection
from pathlib import Path
from typing import Any

import yaml

from trainer_cli.config.keys import Layers
from trainer_cli.config.request import Arg, Request
from trainer_cli.config.yaml_files import load_yaml_file
from trainer_cli.errors import UserError

CLASS_KEYS = ("model", "data")  # sections whose class a stock LightningCLI script fixes in code


def _class_flag(arg: Arg) -> str | None:
    """The :data:`CLASS_KEYS` section whose class ``arg`` names (``--model pkg.Class``, ``--model=...``,
    ``--model.class_path pkg.Class``), else None."""
    for key in CLASS_KEYS:
        if arg.name in (key, f"{key}.class_path") and arg.value is not None:
            return key
    return None


def _config_section(value: str, key: str) -> Any:
    """The ``key`` section of one expanded ``--config`` value (a file path or composed YAML text)."""
    try:
        data = load_yaml_file(Path(value)) if "\n" not in value and Path(value).is_file() else yaml.safe_load(value)
    except (UserError, yaml.YAMLError):
        return None
    return data.get(key) if isinstance(data, dict) else None


def place_class_flags(request: Request, layers: Layers, fixed: Collection[str] = ()) -> Request:
    """Let ``--model pkg.Class`` / ``--data pkg.Class`` stand anywhere on an expanded command line.

    A config printed by a stock ``LightningCLI(MyModel, MyData)`` script has no ``class_path``
    (``model: {hidden_dim: 32}``): its values only parse on top of a class given before it. Such a
    flag given after the config is also put (copied, so that it still wins where it stands) right
    before the first config that needs it. ``fixed``: the sections whose class the CLI itself fixes
    (a user's script with ``LightningCLI(MyModel, MyData)``): there such a config is the class's
    own arguments, as LightningCLI reads it.

    Raises:
        UserError: for a config section without ``class_path`` and no class for it anywhere, saying
            which flag or key to add.
    """
    out = list(request.args)
    for key in (k for k in CLASS_KEYS if k not in fixed):
        has_class = False
        configs = 0  # the --config items seen so far
        i = 0
        while i < len(out):
            arg = out[i]
            if _class_flag(arg) == key:
                has_class = True
            elif arg.name == "config" and arg.value is not None:
                section = _config_section(arg.value, key)
                if isinstance(section, dict) and section and "class_path" not in section and not has_class:
                    later = next((a for a in out[i + 1 :] if _class_flag(a) == key), None)
                    if later is None:
                        raise UserError(_no_class_message(key, configs, layers, section))
                    out.insert(i, later)  # copied: it still wins where it stands
                    i += 1
                has_class = (
                    has_class or isinstance(section, str) or (isinstance(section, dict) and "class_path" in section)
                )
                configs += 1
            i += 1
    return request.with_args(out)


def _no_class_message(key: str, ordinal: int, layers: Layers, section: dict[str, Any]) -> str:
    """The error for a ``key:`` section without ``class_path`` in the ``ordinal``-th ``--config``
    (0-based) and no ``--key`` class flag. A section that holds only ``key:`` again (``model: {model:
    {class_path: ...}}``) is a group file written as the bundled ones are but without their first line,
    ``# @package _global_``: Hydra puts such a file's keys under its group's name."""
    files = [layer for layer in layers if not layer.label.startswith("-")]
    file, line = files[ordinal].keys.get(key, (None, None)) if ordinal < len(files) else (None, None)
    where = f"in {file}{f' line {line}' if line else ''}: " if file else ""
    if set(section) == {key} and isinstance(section[key], dict) and "class_path" in section[key]:
        return (
            f"{where}the config's {key}: holds {key}: again ({key}.{key}.class_path): a group file of {key}/ written "
            f"with a top-level {key}: key lacks the bundled group files' first line `# @package _global_` (without "
            f"it Hydra puts the file's keys under {key}:): add that line to the file, or drop its {key}: level"
        )
    return (
        f"{where}the config's {key}: has no class_path (a config printed by a LightningCLI script with a fixed "
        f"{key} class?): add --{key} pkg.Class (anywhere on the command line) or {key}.class_path: pkg.Class to the "
        "config"
    )
