"""Optional extras (DeepSpeed, Weights & Biases, MLflow): checked before anything is built, so
a missing package is one clear error naming the extra to install, not a traceback mid-start."""

from __future__ import annotations

import importlib.util
from typing import Any

from trainer_cli.errors import UserError

# (what the config names, lower-cased substring) -> (import name, extra of trainer-cli)
NEEDS: dict[str, tuple[str, str]] = {
    "deepspeed": ("deepspeed", "deepspeed"),
    "wandblogger": ("wandb", "wandb"),
    "mlflowlogger": ("mlflow", "mlflow"),
}


def _named(value: Any) -> list[str]:
    """Strategy / logger names in a config value: strings and ``class_path`` entries."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, list):
        return [n for v in value for n in _named(v)]
    class_path = value.get("class_path") if hasattr(value, "get") else None
    return [class_path] if isinstance(class_path, str) else []


def check_extras(trainer_cfg: Any) -> None:
    """Raise when the trainer's strategy or logger needs an optional package that is missing.

    Raises:
        UserError: naming the package and ``pip install 'trainer-cli[EXTRA]'``.
    """
    names = _named(trainer_cfg.get("strategy")) + _named(trainer_cfg.get("logger"))
    for name in names:
        for key, (module, extra) in NEEDS.items():
            if key in name.lower() and importlib.util.find_spec(module) is None:
                raise UserError(
                    f"{name!r} needs the optional package {module!r}, which is not installed: "
                    f"pip install 'trainer-cli[{extra}]' (or pip install {module})"
                )
