"""Resuming a run: the config stored with it, and which changes a resume may make.

A resumed run restores the model's weights, so anything that shapes the network must be what the
run started with; it restores the optimizer, scheduler and callback states too, so their classes,
the precision and the callbacks that keep state must also be the run's. The rest (learning rate,
number of epochs, logging, display callbacks) may change and each change is reported on one line.
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
# keys whose change would restore a checkpoint's state into something else (a OneCycle state onto
# a FlatCos schedule, float32 optimizer state into bf16 training, EarlyStopping silently dropped)
STATE_KEYS = ("optimizer.class_path", "lr_scheduler.class_path", "trainer.precision")
# callbacks that only display or log: adding or dropping one on resume is fine
DISPLAY_CALLBACKS = frozenset({
    "TQDMProgressBar", "RichProgressBar", "ThrottledTQDMProgressBar", "ModelSummary", "RichModelSummary",
    "LearningRateMonitor", "DeviceStatsMonitor", "Timer",
})


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


def _short(value: Any, width: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= width else text[: width - 3] + "..."


def _class_names(items: Any) -> list[str]:
    """Short class names of a list of ``{class_path: ...}`` entries (other entries by their type)."""
    items = items if isinstance(items, list) else [] if items is None else [items]
    return [str(i.get("class_path", "?")).rsplit(".", 1)[-1] if isinstance(i, dict) else type(i).__name__ for i in items]


def _state_callbacks(items: Any) -> list[str]:
    """The class names of callbacks that carry training state (display-only ones left out)."""
    return sorted(n for n in _class_names(items) if n not in DISPLAY_CALLBACKS)


def describe_change(key: str, old: Any, new: Any) -> str:
    """One short line for a changed config value: ``key: old -> new``; a list of callbacks or a
    mapping is summarised (``trainer.callbacks: 5 -> 4 entries (EarlyStopping dropped)``)."""
    entries = [i for i in [*(old if isinstance(old, list) else []), *(new if isinstance(new, list) else [])] if isinstance(i, dict)]
    if isinstance(old, (list, type(None))) and isinstance(new, (list, type(None))) and entries:
        before, after = _class_names(old), _class_names(new)
        dropped = [n for n in before if n not in after or before.count(n) > after.count(n)]
        added = [n for n in after if n not in before or after.count(n) > before.count(n)]
        what = ", ".join([*(f"{n} dropped" for n in dict.fromkeys(dropped)), *(f"{n} added" for n in dict.fromkeys(added))])
        if not what:  # same classes: name the entries whose settings changed
            changed = [n for n, o, w in zip(after, old or [], new or []) if o != w]
            what = f"settings of {', '.join(dict.fromkeys(changed))} changed" if changed else "order changed"
        return f"{key}: {len(before)} -> {len(after)} entries ({what})"
    if isinstance(old, dict) or isinstance(new, dict):
        o, n = flatten(old or {}), flatten(new or {})
        keys = [k for k in sorted(set(o) | set(n)) if o.get(k) != n.get(k)]
        return f"{key}: {len(keys)} settings changed ({', '.join(keys[:3])}{', ...' if len(keys) > 3 else ''})"
    return f"{key}: {_short(old)} -> {_short(new)}"


def _free_model_keys(stored_class: Any, current_class: Any) -> tuple[str, ...]:
    """``model.init_args.<key>`` for the settings the (unchanged) model class declares as not
    shaping its weights (``NON_ARCHITECTURE_HPARAMS``: loss, augmentation, speed); empty when the
    class changed or cannot be imported."""
    if not isinstance(stored_class, str) or stored_class != current_class:
        return ()
    try:
        from trainer_cli.imports import import_class

        names = getattr(import_class(stored_class), "NON_ARCHITECTURE_HPARAMS", ())
    except Exception:  # noqa: BLE001 - an unimportable class is reported where it is built
        return ()
    return tuple(f"model.init_args.{name}" for name in names)


def compare_for_resume(stored: dict[str, Any], current: dict[str, Any], run_dir: Path) -> list[str]:
    """Check a resumed run's config against the one it started with.

    Returns:
        One short line per allowed change (:func:`describe_change`).

    Raises:
        UserError: naming every architecture key (:data:`ARCHITECTURE_KEYS`, less the model class's
            ``NON_ARCHITECTURE_HPARAMS``: augmentation, loss, speed settings) that differs, or every
            change of what the checkpoint restores state into (:data:`STATE_KEYS`: the optimizer or
            scheduler class, the precision, callbacks that keep state).
    """
    old, new = flatten(stored), flatten(current)
    changed = [k for k in sorted(set(old) | set(new)) if old.get(k) != new.get(k) and not _matches(k, IGNORED_KEYS)]
    # another class: its init_args differ as a matter of course, the class_path line says it all
    other_class = tuple(k[: -len("class_path")] + "init_args" for k in changed if k.endswith("class_path"))
    changed = [k for k in changed if not _matches(k, other_class)]
    free = _free_model_keys(old.get("model.class_path"), new.get("model.class_path"))
    fatal = [k for k in changed if _matches(k, ARCHITECTURE_KEYS) and not _matches(k, free)]
    if fatal:
        details = "; ".join(describe_change(k, old.get(k), new.get(k)) for k in fatal)
        raise UserError(
            f"cannot resume {run_dir}: the architecture changed ({details}). The checkpoint's weights fit "
            f"the run's {run_dir / CONFIG_FILE}: drop the change, or start a new run without --ckpt_path"
        )
    state = [k for k in changed if k in STATE_KEYS]
    if "trainer.callbacks" in changed and _state_callbacks(old.get("trainer.callbacks")) != _state_callbacks(new.get("trainer.callbacks")):
        state.append("trainer.callbacks")
    if state:
        details = "; ".join(describe_change(k, old.get(k), new.get(k)) for k in state)
        raise UserError(
            f"cannot resume {run_dir} with another optimizer, scheduler, precision or callbacks ({details}): "
            f"its checkpoint holds their state. Resume with the run's own config: "
            f"`train fit --run_dir {run_dir} --ckpt_path last` (without these changes), or start a new run"
        )
    return [describe_change(k, old.get(k), new.get(k)) for k in changed]


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
