"""Checks run before anything is built or written, so a mistake costs seconds and no files."""

from __future__ import annotations

import inspect
import pickle
import re
from collections.abc import Iterable
from typing import Any

from jsonargparse import Namespace

from trainer_cli.errors import UserError, did_you_mean
from trainer_cli.imports import import_class


def checkpoint_hparams(ckpt_path: str) -> dict[str, Any]:
    """The ``hyper_parameters`` of a checkpoint, read as LightningCLI reads them (torch's safe loader,
    ``weights_only=True``); empty when it has none.

    Raises:
        UserError: when the safe loader refuses the file (an object it does not allow, a bad file).
    """
    import torch

    try:
        return torch.load(ckpt_path, weights_only=True, map_location="cpu", mmap=True).get("hyper_parameters") or {}
    except pickle.UnpicklingError as err:
        raise UserError(
            f"--ckpt_path {ckpt_path}: refused by torch's safe loader (weights_only=True; nothing in it was run): "
            f"{refused_object(err)}"
        ) from None
    except Exception as err:  # noqa: BLE001 - any unpickling problem is a bad file
        raise UserError(f"--ckpt_path {ckpt_path}: cannot read the checkpoint ({first_line(err)})") from None


def first_line(err: BaseException) -> str:
    """The first line of an error's message, without the terminal colour codes torch puts in it."""
    return re.sub(r"\x1b\[[0-9;]*m", "", (str(err).strip().splitlines() or [type(err).__name__])[0]).strip()


def refused_object(err: BaseException) -> str:
    """What torch's safe loader refused, in one sentence: its line naming the ``GLOBAL`` it does not
    allow (e.g. ``Trying to load unsupported GLOBAL posix.system whose module posix is blocked``)."""
    text = re.sub(r"\x1b\[[0-9;]*m", "", str(err))
    named = [line.strip() for line in text.splitlines() if "GLOBAL" in line]
    return named[0].split(". ")[0].rstrip(".") if named else first_line(err)


def check_checkpoint_model(ckpt_path: str, model: Any, linked: Iterable[str] = ()) -> None:
    """Compare the hyperparameters stored in a checkpoint with the configured model.

    ``linked`` values (``num_classes``, ``in_channels``, ``image_size``) are left out: they come from the data.

    Raises:
        UserError: naming the checkpoint and every hyperparameter that differs.
    """
    if not isinstance(model, Namespace) or not model.get("class_path"):
        return
    hparams = checkpoint_hparams(ckpt_path)
    stored_class = hparams.get("_class_path")
    if stored_class and stored_class != model.class_path and not _is_subclass(stored_class, model.class_path):
        # (a subclass of the configured model: LightningCLI builds the checkpoint's class, as it does here)
        raise UserError(
            f"--ckpt_path {ckpt_path} is a checkpoint of {stored_class}, not of the configured model {model.class_path}"
        )
    if not stored_class:  # written by a script with the model class fixed in code: its arguments must fit
        _check_arguments_fit(ckpt_path, hparams, model.class_path)
    init_args = model.get("init_args") or Namespace()
    changed = [
        key for key in init_args.keys() if key in hparams and key not in linked and hparams[key] != init_args[key]
    ]
    # settings a model class declares as not shaping its weights (loss, augmentation, speed) may change
    free = set(getattr(import_class(model.class_path), "NON_ARCHITECTURE_HPARAMS", ()))
    for key in [k for k in changed if k in free]:
        print(f"note: model.init_args.{key}: checkpoint {hparams[key]!r} -> config {init_args[key]!r}", flush=True)
    differ = [f"{key}: checkpoint {hparams[key]!r}, config {init_args[key]!r}" for key in changed if key not in free]
    if differ:
        raise UserError(
            f"--ckpt_path {ckpt_path} does not fit the model (a checkpoint from another model): "
            + "; ".join(f"model.init_args.{d}" for d in differ)
            + ". Use the checkpoint's config (its run directory's config.yaml) or another checkpoint"
        )


def _check_arguments_fit(ckpt_path: str, hparams: dict[str, Any], class_path: str) -> None:
    """Raise UserError when a checkpoint's hyperparameters name arguments ``class_path`` does not take."""
    try:
        params = inspect.signature(import_class(class_path)).parameters
    except Exception:  # noqa: BLE001 - an unimportable class is reported where it is built
        return
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return
    foreign = [key for key in hparams if not key.startswith("_") and key not in params]
    if foreign:
        raise UserError(
            f"--ckpt_path {ckpt_path} does not fit the model {class_path}: its hyperparameters {', '.join(foreign)} "
            "are "
            f"not arguments of it (a checkpoint of another model? its class is not recorded: --model names it)"
        )


def with_checkpoint_class(obj: Any, base: Any) -> Any:
    """A checkpoint's model hyperparameters as LightningCLI parses them after ``--ckpt_path``
    (``{verb: {"model": hparams}}``), with the configured model's ``class_path`` when they name none.

    A checkpoint written by a stock ``LightningCLI(MyModel, ...)`` (the model class fixed in code)
    stores its hyperparameters without ``_class_path``. In subclass mode (``train``) jsonargparse
    parses such a mapping on top of the base class ``LightningModule``, not of the configured class,
    and fails; named after the configured class (as Lightning names a ``_class_path`` one) they
    apply to it. Anything else is returned unchanged.
    """
    if not isinstance(obj, dict) or len(obj) != 1 or not isinstance(base, Namespace):
        return obj
    verb, section = next(iter(obj.items()))
    if not isinstance(section, dict) or set(section) != {"model"} or not isinstance(section["model"], dict):
        return obj
    hparams = section["model"]
    configured = base.get(f"{verb}.model") if verb in base else None
    if "class_path" in hparams or not isinstance(configured, Namespace) or not configured.get("class_path"):
        return obj
    return {verb: {"model": {"class_path": configured.class_path, "dict_kwargs": hparams}}}


# trainer integers Lightning accepts at construction but fails on later (e.g. a division by zero)
TRAINER_MINIMUMS = {"accumulate_grad_batches": 1, "num_nodes": 1, "check_val_every_n_epoch": 1, "log_every_n_steps": 1}


def check_trainer_minimums(cfg: Namespace) -> None:
    """Raises UserError for a trainer integer below its minimum (:data:`TRAINER_MINIMUMS`)."""
    trainer = cfg.get("trainer") or Namespace()
    problems = [
        f"--trainer.{key} {trainer[key]}: must be {low} or more"
        for key, low in TRAINER_MINIMUMS.items()
        if isinstance(trainer.get(key), int) and not isinstance(trainer.get(key), bool) and trainer[key] < low
    ]
    if problems:
        raise UserError("; ".join(problems))


def check_optimizer_config(cfg: Namespace) -> None:
    """Build the configured optimizer and scheduler on one dummy parameter, so a bad value (a
    negative learning rate, betas out of range) is reported before anything is built.

    Raises:
        UserError: naming the section and the optimizer's or scheduler's own message.
    """
    import torch

    from trainer_cli.optim.configure import TOTAL_STEPS_ARG, is_step_wise

    optimizer_init, scheduler_init = cfg.get("optimizer"), cfg.get("lr_scheduler")
    if not isinstance(optimizer_init, Namespace) or not optimizer_init.get("class_path"):
        return
    try:
        optimizer = import_class(optimizer_init.class_path)(
            [torch.nn.Parameter(torch.zeros(1))], **dict(optimizer_init.get("init_args") or {})
        )
    except (ValueError, TypeError) as err:
        raise UserError(f"optimizer {optimizer_init.class_path}: {err}") from None
    if not isinstance(scheduler_init, Namespace) or not scheduler_init.get("class_path"):
        return
    cls = import_class(scheduler_init.class_path)
    kwargs = dict(scheduler_init.get("init_args") or {})
    if is_step_wise(cls) and kwargs.get(TOTAL_STEPS_ARG) is None:
        kwargs[TOTAL_STEPS_ARG] = 1000
    try:
        cls(optimizer, **kwargs)
    except (ValueError, TypeError) as err:
        raise UserError(f"lr_scheduler {scheduler_init.class_path}: {err}") from None


def _unexpected_kwarg(err: TypeError) -> str | None:
    """The keyword a ``TypeError`` says a constructor does not take, or ``None``."""
    match = re.search(r"unexpected keyword argument '(\w+)'", str(err))
    return match.group(1) if match else None


def _own_backbone_options() -> set[str]:
    """Every option of the project's own backbones (``cnn``'s ``width``, ``mlp``'s ``hidden``, ...)."""
    from trainer_cli.models.registry import own_backbones

    return {name for cls in own_backbones().values() for name in inspect.signature(cls).parameters} - set(LINKED_SHAPES)


LINKED_SHAPES = ("num_classes", "in_channels", "image_size")


def check_backbone_kwargs(cfg: Namespace) -> None:
    """Fit ``model.init_args.backbone_kwargs`` to the chosen backbone, before anything is built.

    A config file sets ``backbone_kwargs`` for its backbone (``model/cnn.yaml``: ``width``,
    ``stages``); ``--model.backbone mlp`` on top switches the backbone but leaves them. Options of
    another project backbone that the chosen one does not take are dropped with one ``note:`` line
    (the config keeps what the backbone gets); any other option it does not take is an error. The
    backbone is built on the ``meta`` device to learn what it takes (no memory, no weights read).

    Raises:
        UserError: naming the option, the backbone and the options it takes.
    """
    import torch

    from trainer_cli.models.registry import build_backbone

    model = cfg.get("model")
    init_args = model.get("init_args") if isinstance(model, Namespace) else None
    if not isinstance(init_args, Namespace) or not isinstance(init_args.get("backbone"), str):
        return
    kwargs = dict(init_args.get("backbone_kwargs") or {})
    if not kwargs:
        return
    name = init_args.backbone
    shapes = {key: init_args.get(key) for key in LINKED_SHAPES if isinstance(init_args.get(key), int)}
    dropped: list[str] = []
    while True:
        try:
            with torch.device("meta"):
                build_backbone(name, **shapes, cifar_stem=bool(init_args.get("cifar_stem")), **kwargs)
            break
        except TypeError as err:
            key = _unexpected_kwarg(err)
            if key is None or key not in kwargs:
                return  # another problem: the real build reports it
            if key not in _own_backbone_options():
                raise UserError(
                    f"model.init_args.backbone_kwargs: backbone {name!r} takes no option {key!r}."
                    f"{did_you_mean(key, _backbone_options(name))} Fix or drop it (--model.backbone_kwargs '{{}}' "
                    "clears them)"
                ) from None
            dropped.append(key)
            del kwargs[key]
        except Exception:  # noqa: BLE001 - not about the options: the real build reports it
            return
    if dropped:
        init_args.backbone_kwargs = kwargs
        print(
            f"note: backbone {name!r} takes no {', '.join(dropped)} (another backbone's options from the config): "
            f"dropped; model.init_args.backbone_kwargs is now {kwargs}",
            flush=True,
        )


def _backbone_options(name: str) -> list[str]:
    """Named options of a project backbone (empty for torchvision models: theirs go through ``**kwargs``)."""
    from trainer_cli.models.registry import own_backbones

    cls = own_backbones().get(name)
    return [p for p in inspect.signature(cls).parameters if p not in LINKED_SHAPES] if cls else []


def _is_subclass(class_path: str, base_path: str) -> bool:
    """Whether the class at ``class_path`` subclasses the one at ``base_path`` (False when either does not import)."""
    from trainer_cli.imports import import_class

    try:
        cls, base = import_class(class_path), import_class(base_path)
    except (ImportError, AttributeError, ValueError):
        return False
    return isinstance(cls, type) and isinstance(base, type) and issubclass(cls, base)
