"""Settings that cannot work together, declared once with the reason (:data:`INCOMPATIBLE`).

:func:`check_compatible` runs before anything is built or written: a pair below is one
``error:`` line (exit 2) naming both settings, why, and what to use instead. Missing optional
packages (deepspeed, wandb, mlflow) are declared in :mod:`trainer_cli.config.extras`. Decided here:
``16-mixed`` on CPU is refused, not silently run as ``bf16-mixed`` (Lightning's fallback would
leave a run whose config says float16); ``bf16-mixed`` and ``64-true`` run on CPU.
``tests/test_combinations.py`` checks every shipped config file against every shipped experiment
against this table.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from trainer_cli.errors import UserError


@dataclass(frozen=True)
class Facts:
    """What the rules look at, read from a parsed config (nothing built)."""

    on_cpu: bool
    precision: str
    strategy: str
    optimizer: str
    backbone: str
    cifar_stem: bool
    one_channel_data: bool


@dataclass(frozen=True)
class Incompatible:
    """One declared incompatibility: ``applies`` to the facts, and the error line's text."""

    applies: Callable[[Facts], bool]
    message: str


def _torchvision_backbone(name: str) -> bool:
    from trainer_cli.models.registry import torchvision_classification_models

    return bool(name) and name in torchvision_classification_models()  # an unknown name: the registry's error


INCOMPATIBLE: tuple[Incompatible, ...] = (
    Incompatible(
        lambda f: f.on_cpu and f.precision.startswith("16"),
        "--trainer.precision 16-mixed on CPU: float16 autocast with loss scaling needs a CUDA GPU; "
        "on CPU use configs/precision/bf16-mixed.yaml (or 32-true)",
    ),
    Incompatible(
        lambda f: f.optimizer.endswith(".SAM") and f.precision.startswith("16"),
        "optimizer SAM with --trainer.precision 16-mixed: its GradScaler steps without the closure SAM "
        "needs for its second pass; use bf16-mixed or 32-true",
    ),
    Incompatible(
        lambda f: f.on_cpu and "fsdp" in f.strategy.lower(),
        "strategy FSDP on CPU: Lightning's FSDPStrategy needs CUDA GPUs; on CPU use configs/strategy/ddp_cpu_sim.yaml "
        "(or strategy auto)",
    ),
    Incompatible(
        lambda f: f.one_channel_data and _torchvision_backbone(f.backbone) and not f.cifar_stem,
        "a torchvision backbone on 1-channel images (digits): its first convolution takes 3 channels; "
        "add --data.rgb true, or use a project backbone (configs/model/cnn.yaml, mlp.yaml)",
    ),
)


def _name(value: Any) -> str:
    """A setting given as a string or as ``class_path`` (+ ``init_args``)."""
    if isinstance(value, str):
        return value
    class_path = value.get("class_path") if hasattr(value, "get") else None
    return class_path if isinstance(class_path, str) else ""


def _on_cpu(accelerator: Any) -> bool:
    name = _name(accelerator).lower() or "auto"
    if name == "cpu" or name.endswith("cpuaccelerator"):
        return True
    if name != "auto":
        return False
    import torch

    return not (torch.cuda.is_available() or torch.backends.mps.is_available())


def facts(cfg: Any) -> Facts:
    """The :class:`Facts` of a parsed ``fit``/``validate``/... config."""
    trainer = cfg.get("trainer") or {}
    model = cfg.get("model")
    init = (model.get("init_args") if hasattr(model, "get") else None) or {}
    data = cfg.get("data")
    data_init = (data.get("init_args") if hasattr(data, "get") else None) or {}
    digits = _name(data).endswith("DigitsDataModule")
    return Facts(
        on_cpu=_on_cpu(trainer.get("accelerator")),
        precision=str(trainer.get("precision") or "32-true"),
        strategy=_name(trainer.get("strategy")),
        optimizer=_name(cfg.get("optimizer")),
        backbone=str(init.get("backbone") or ""),
        cifar_stem=bool(init.get("cifar_stem")),
        one_channel_data=digits and not data_init.get("rgb"),
    )


def check_compatible(cfg: Any) -> None:
    """Refuse a config holding a declared incompatible pair (:data:`INCOMPATIBLE`).

    Raises:
        UserError: the first rule that applies, as one line.
    """
    found = facts(cfg)
    for rule in INCOMPATIBLE:
        if rule.applies(found):
            raise UserError(rule.message)
