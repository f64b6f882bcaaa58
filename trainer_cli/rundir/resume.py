"""Resuming a run: the config stored with it, and which changes a resume may make.

A resumed run restores the model's weights, so the configured model must take the checkpoint's
tensors: that is decided by the tensors themselves (:func:`check_weights_fit`: every parameter and
buffer name and shape of the configured model against the checkpoint's ``state_dict``), not by a
list of keys, so a model argument that leaves them as they are (a loss weight, a dropout rate, a
debug flag) may change, one line each. The model class and the data's class, image size and colour
mode are still compared as config keys (the same tensors can mean other inputs). The run restores
the optimizer, scheduler and callback states too, so their classes, the precision and the
callbacks that keep state must also be the run's. The rest (learning rate, number of epochs,
logging, display callbacks) may change and each change is reported on one line.

``--resume_force true`` lets a refused change through: the launcher's refusal becomes a
``resume: forced: ...`` line, and the checkpoint is loaded as plain LightningCLI loads it (the
model's own ``on_load_checkpoint`` first, then every tensor strictly; the optimizer, scheduler and
callback states into whatever the new config built). It never loads part of the weights: a tensor
that does not fit still fails the load, unless the model's ``on_load_checkpoint`` converts it.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

from trainer_cli.errors import UserError
from trainer_cli.rundir import record
from trainer_cli.rundir.layout import CONFIG_FILE

# keys (dotted prefixes) that decide the meaning of the network's inputs or outputs beyond its tensors
# (the model's other arguments are decided by the checkpoint's tensors: check_weights_fit)
ARCHITECTURE_KEYS = ("model.class_path", "data.class_path", "data.init_args.image_size", "data.init_args.rgb")
# keys that say how this start of the run resumes (recorded in history.jsonl, not kept in config.yaml)
RESUME_OPTIONS = ("ckpt_path", "run_dir", "resume_force", "resume_schedule")
# keys that say where or how to resume, never compared
IGNORED_KEYS = (*RESUME_OPTIONS, "config", "trainer.default_root_dir", "trainer.logger", "name")
FORCE_HINT = "--resume_force true lets it through (the checkpoint then loads as plain LightningCLI loads it)"
MAX_TENSORS_NAMED = 4
# keys whose change would restore a checkpoint's state into something else (a OneCycle state onto
# a FlatCos schedule, float32 optimizer state into bf16 training, EarlyStopping silently dropped)
STATE_KEYS = ("optimizer.class_path", "lr_scheduler.class_path", "trainer.precision")
# callbacks that only display or log: adding or dropping one on resume is fine
DISPLAY_CALLBACKS = frozenset(
    {
        "TQDMProgressBar",
        "RichProgressBar",
        "ThrottledTQDMProgressBar",
        "ModelSummary",
        "RichModelSummary",
        "LearningRateMonitor",
        "DeviceStatsMonitor",
        "Timer",
    }
)


def stored_config(run_dir: Path) -> dict[str, Any] | None:
    """The resolved config a run started with (``<run_dir>/config.yaml`` with the launcher's settings
    beside it, :func:`trainer_cli.rundir.record.read`), or None without one."""
    return record.read(run_dir / CONFIG_FILE)


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
    return [
        str(i.get("class_path", "?")).rsplit(".", 1)[-1] if isinstance(i, dict) else type(i).__name__ for i in items
    ]


def _state_callbacks(items: Any) -> list[str]:
    """The class names of callbacks that carry training state (display-only ones left out)."""
    return sorted(n for n in _class_names(items) if n not in DISPLAY_CALLBACKS)


def describe_change(key: str, old: Any, new: Any) -> str:
    """One short line for a changed config value: ``key: old -> new``; a list of callbacks or a
    mapping is summarised (``trainer.callbacks: 5 -> 4 entries (EarlyStopping dropped)``)."""
    entries = [
        i
        for i in [*(old if isinstance(old, list) else []), *(new if isinstance(new, list) else [])]
        if isinstance(i, dict)
    ]
    if isinstance(old, (list, type(None))) and isinstance(new, (list, type(None))) and entries:
        before, after = _class_names(old), _class_names(new)
        dropped = [n for n in before if n not in after or before.count(n) > after.count(n)]
        added = [n for n in after if n not in before or after.count(n) > before.count(n)]
        what = ", ".join(
            [*(f"{n} dropped" for n in dict.fromkeys(dropped)), *(f"{n} added" for n in dict.fromkeys(added))]
        )
        if not what:  # same classes: name the entries whose settings changed
            changed = [n for n, o, w in zip(after, old or [], new or []) if o != w]
            what = f"settings of {', '.join(dict.fromkeys(changed))} changed" if changed else "order changed"
        return f"{key}: {len(before)} -> {len(after)} entries ({what})"
    if isinstance(old, dict) or isinstance(new, dict):
        o, n = flatten(old or {}), flatten(new or {})
        keys = [k for k in sorted(set(o) | set(n)) if o.get(k) != n.get(k)]
        return f"{key}: {len(keys)} settings changed ({', '.join(keys[:3])}{', ...' if len(keys) > 3 else ''})"
    return f"{key}: {_short(old)} -> {_short(new)}"


def compare_for_resume(
    stored: dict[str, Any], current: dict[str, Any], run_dir: Path, force: bool = False
) -> list[str]:
    """Check a resumed run's config against the one it started with.

    Returns:
        One short line per allowed change (:func:`describe_change`); with ``force``, a refused
        change is one more line, ``forced: ...``.

    Raises:
        UserError: (unless ``force``) naming every architecture key (:data:`ARCHITECTURE_KEYS`)
            that differs, or every change of what the checkpoint restores state into
            (:data:`STATE_KEYS`: the optimizer or scheduler class, the precision, callbacks that
            keep state). Other model arguments are decided by the tensors (:func:`check_weights_fit`).
    """
    old, new = flatten(stored), flatten(current)
    changed = _changed_keys(old, new)
    fatal = [k for k in changed if _matches(k, ARCHITECTURE_KEYS)]
    if fatal and not force:
        details = "; ".join(describe_change(k, old.get(k), new.get(k)) for k in fatal)
        raise UserError(
            f"cannot resume {run_dir}: the architecture changed ({details}). The checkpoint's weights fit "
            f"the run's {run_dir / CONFIG_FILE}: drop the change, or start a new run without --ckpt_path; {FORCE_HINT}"
        )
    state = [k for k in changed if k in STATE_KEYS]
    if "trainer.callbacks" in changed and _state_callbacks(old.get("trainer.callbacks")) != _state_callbacks(
        new.get("trainer.callbacks")
    ):
        state.append("trainer.callbacks")
    if state and not force:
        details = "; ".join(describe_change(k, old.get(k), new.get(k)) for k in state)
        raise UserError(
            f"cannot resume {run_dir} with another optimizer, scheduler, precision or callbacks ({details}): "
            f"its checkpoint holds their state. Resume with the run's own config: "
            f"`train fit --run_dir {run_dir} --ckpt_path last` (without these changes), or start a new run; "
            f"{FORCE_HINT}"
        )
    refused = set(fatal) | set(state)
    return [("forced: " if k in refused else "") + describe_change(k, old.get(k), new.get(k)) for k in changed]


def _changed_keys(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """The flattened keys whose values differ, the resume options and the places a run logs left out."""
    changed = [
        k for k in sorted(set(old) | set(new)) if not _same(k, old.get(k), new.get(k)) and not _matches(k, IGNORED_KEYS)
    ]
    # another class: its init_args differ as a matter of course, the class_path line says it all
    other_class = tuple(k[: -len("class_path")] + "init_args" for k in changed if k.endswith("class_path"))
    return [k for k in changed if not _matches(k, other_class)]


COUNT_KEYS = ("trainer.devices", "trainer.num_nodes")
"""Keys Lightning reads the same as a number or as its text (``devices: 1`` and ``devices: '1'``, as a
job's command line gives it): not a change."""


def _same(key: str, old: Any, new: Any) -> bool:
    if old == new:
        return True
    scalars = all(isinstance(v, (int, str)) and not isinstance(v, bool) for v in (old, new))
    return key in COUNT_KEYS and scalars and str(old).strip() == str(new).strip()


def describe_overrides(stored: dict[str, Any], current: dict[str, Any]) -> list[str]:
    """One line per value an evaluation of a run (``test``/``validate``/``predict --run_dir``) gives
    otherwise than the run's config (``data.init_args.path: 'val' -> 'test'``): recorded in the run's
    history, so a number says which data and settings it came from. Nothing is refused."""
    old, new = flatten(stored), flatten(current)
    own = {k for k in set(new) - set(old) if "." not in k}  # the verb's own arguments (``verbose``): not the run's
    return [describe_change(k, old.get(k), new.get(k)) for k in _changed_keys(old, new) if k not in own]


def check_weights_fit(model: Any, ckpt_path: Any, force: bool = False, changes: Iterable[str] = ()) -> None:
    """Check that the configured (built) LightningModule takes the checkpoint's tensors: every
    parameter and buffer name and shape of ``model.state_dict()`` against the checkpoint's
    ``state_dict`` (read memory-mapped, weights only). Tensors not made yet (lazy modules, a model
    that makes them in ``configure_model``) are not compared; names are compared only where the
    model loads strictly (``strict_loading``, Lightning's switch).

    Args:
        changes: The model's config changes on this resume (``resume:`` lines), named in the error.

    Raises:
        UserError: (unless ``force``: then one ``resume: forced: ...`` line) naming each tensor that
            does not fit, e.g. ``backbone.features.0.weight: checkpoint [32, 1, 3, 3], configured [64, 1, 3, 3]``.
    """
    import torch
    from torch.nn.parameter import UninitializedParameter

    if not ckpt_path or not Path(str(ckpt_path)).is_file():
        return
    configured = {k: v for k, v in model.state_dict().items() if not isinstance(v, UninitializedParameter)}
    if not configured:
        return
    try:
        stored = torch.load(str(ckpt_path), weights_only=True, map_location="cpu", mmap=True).get("state_dict") or {}
    except Exception:  # noqa: BLE001 - an unreadable file is reported where Lightning loads it
        return
    strict = getattr(model, "strict_loading", True)
    problems = [
        f"{k}: checkpoint {list(stored[k].shape)}, configured {list(v.shape)}"
        for k, v in configured.items()
        if k in stored and hasattr(stored[k], "shape") and stored[k].shape != v.shape
    ]
    if strict:
        problems += [f"{k}: not in the checkpoint" for k in configured if k not in stored]
        problems += [f"{k}: in the checkpoint, not in the configured model" for k in stored if k not in configured]
    if not problems:
        return
    named = "; ".join(problems[:MAX_TENSORS_NAMED]) + (
        f"; and {len(problems) - MAX_TENSORS_NAMED} more" if len(problems) > MAX_TENSORS_NAMED else ""
    )
    if force:
        print(f"resume: forced: the checkpoint's weights do not fit the configured model ({named})", flush=True)
        return
    cause = "; ".join(c for c in changes if c.startswith("model."))
    raise UserError(
        f"cannot resume from {ckpt_path}: its weights do not fit the configured model ({named}). "
        f"Drop the model change{f' ({cause})' if cause else ''} (the run's config.yaml fits), or start a new run "
        f"without --ckpt_path; {FORCE_HINT}"
    )


def check_config_weights_fit(
    model_config: Any, ckpt_path: Any, force: bool = False, model_class: type | None = None
) -> None:
    """:func:`check_weights_fit` for a model given as its config (``{class_path, init_args}``, as
    config.yaml holds it, the data->model link values included; or, with ``model_class``, the class a
    user's script fixes, its config being the init arguments alone): built here, on the CPU, to check
    a resubmission on the submitting machine. A model that cannot be built here is left to the job.

    Raises:
        UserError: as :func:`check_weights_fit`.
    """
    if not isinstance(model_config, dict):
        return
    if model_class is not None and "class_path" not in model_config:
        build, init_args = model_class, model_config
    elif model_config.get("class_path"):
        build, init_args = None, model_config.get("init_args") or {}
    else:
        return
    try:
        from trainer_cli.imports import import_class

        model = (build or import_class(model_config["class_path"]))(**init_args)
    except Exception:  # noqa: BLE001 - built (and any error reported) in the job
        return
    check_weights_fit(model, ckpt_path, force)


def add_resume_arguments(parser: Any) -> None:
    """The launcher's options for how a start resumes (recorded in history.jsonl, not kept in config.yaml)."""
    from typing import Literal

    parser.add_argument(
        "--resume_schedule",
        type=Literal["restretch", "keep", "restart"],
        default="restretch",
        help="On a resume that changes a step-wise schedule's total steps (a longer max_epochs): restretch (the "
        "schedule of the new length from the step reached), keep (the old schedule, then its final lr held) "
        "or restart (a new cycle over the remaining steps).",
    )
    parser.add_argument(
        "--resume_force",
        type=bool,
        default=False,
        help="Resume although the check refuses a change (weights that do not fit, another model or optimizer "
        "class): the checkpoint then loads as plain LightningCLI loads it, strictly; no partial loading.",
    )
