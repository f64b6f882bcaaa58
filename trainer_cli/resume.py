"""Resuming a run: the config stored with it, and which changes a resume may make.

A resumed run restores the model's weights, so anything that shapes the network must be what the
run started with; the rest (learning rate, number of epochs, logging, callbacks) may change and
each change is reported.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from trainer_cli.errors import UserError

CONFIG_FILE = "config.yaml"
# keys (dotted prefixes) that decide the network's shape or the meaning of its outputs
ARCHITECTURE_KEYS = ("model", "data.class_path", "data.init_args.image_size", "data.init_args.rgb")
# keys that say where or how to resume, never compared
IGNORED_KEYS = ("ckpt_path", "run_dir", "config", "trainer.default_root_dir", "trainer.logger", "name")


def stored_config(run_dir: Path) -> dict[str, Any] | None:
    """The resolved config a run started with (``<run_dir>/config.yaml``), or None without one."""
    file = run_dir / CONFIG_FILE
    if not file.is_file():
        return None
    data = yaml.safe_load(file.read_text())
    return data if isinstance(data, dict) else None


def flatten(data: Any, prefix: str = "") -> dict[str, Any]:
    """``{"a": {"b": 1}}`` -> ``{"a.b": 1}``; lists stay values."""
    if not isinstance(data, dict) or (prefix and not data):
        return {prefix: data}
    out: dict[str, Any] = {}
    for key, value in data.items():
        out.update(flatten(value, f"{prefix}.{key}" if prefix else str(key)))
    return out


def _matches(key: str, prefixes: tuple[str, ...]) -> bool:
    return any(key == p or key.startswith(p + ".") for p in prefixes)


def compare_for_resume(stored: dict[str, Any], current: dict[str, Any], run_dir: Path) -> list[str]:
    """Check a resumed run's config against the one it started with.

    Returns:
        One line per allowed change, ``key: old -> new``.

    Raises:
        UserError: naming every architecture key (:data:`ARCHITECTURE_KEYS`) that differs.
    """
    old, new = flatten(stored), flatten(current)
    changed = [k for k in sorted(set(old) | set(new)) if old.get(k) != new.get(k) and not _matches(k, IGNORED_KEYS)]
    fatal = [k for k in changed if _matches(k, ARCHITECTURE_KEYS)]
    if fatal:
        details = "; ".join(f"{k}: {old.get(k)!r} -> {new.get(k)!r}" for k in fatal)
        raise UserError(
            f"cannot resume {run_dir}: the architecture changed ({details}). The checkpoint's weights fit "
            f"the run's {run_dir / CONFIG_FILE}: drop the change, or start a new run without --ckpt_path"
        )
    return [f"{k}: {old.get(k)!r} -> {new.get(k)!r}" for k in changed]


def with_stored_config(args: list[str]) -> list[str]:
    """Put ``--config <run_dir>/config.yaml`` first when ``--run_dir`` names a run and no --config is given."""
    if any(a == "--config" or a.startswith("--config=") for a in args):
        return args
    run_dir = None
    for i, arg in enumerate(args):
        if arg == "--run_dir" and i + 1 < len(args):
            run_dir = args[i + 1]
        elif arg.startswith("--run_dir="):
            run_dir = arg.split("=", 1)[1]
    if run_dir and (Path(run_dir) / "config.yaml").is_file():
        return ["--config", str(Path(run_dir) / "config.yaml"), *args]
    return args
