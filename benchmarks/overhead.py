"""Framework overhead per optimizer step: ``train fit`` versus a hand-written PyTorch loop.

Both sides run in this process, alternately, on the same model, data, optimizer, scheduler, batch
size and number of steps, with validation off on both (the loop has none). ``train fit`` keeps
the launcher's defaults: the callbacks of ``configs/callbacks/default.yaml`` (checkpointing,
learning-rate monitor, model summary), the TensorBoard logger and the progress bar.

Workloads: the digits MLP (tiny steps: overhead shows) and torchvision ResNet-18 on synthetic
CIFAR-shaped tensors (compute-bound).
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import tempfile
from pathlib import Path
from typing import Any

import torch
from torch import nn

from benchmarks import clock
from benchmarks.common import alternate, medians
from benchmarks.synthetic import SyntheticImages
from tests.support import CONFIGS, DIGITS

DIGITS_BATCH = 64
DIGITS_LR, DIGITS_WD = 0.01, 0.01  # configs/experiment/digits.yaml (AdamW) and configs/optimizer/adamw.yaml
SGD = {"lr": 0.05, "momentum": 0.9, "weight_decay": 5e-4}  # configs/optimizer/sgd.yaml
RESNET_MAX_LR = 0.1  # configs/experiment/cifar10_resnet18.yaml


def plain_loop(model: nn.Module, loader: Any, optimizer: torch.optim.Optimizer, scheduler: Any, steps: int, device: torch.device) -> list[tuple[float, float]]:
    """The floor: ``steps`` optimizer steps over ``loader`` (epoch after epoch); start time of each step."""
    stamps: list[tuple[float, float]] = []
    model.train()
    loss_fn = nn.CrossEntropyLoss()
    while len(stamps) < steps:
        for x, y in loader:
            if device.type == "cuda":
                torch.cuda.synchronize()
            stamps.append(clock.stamp())
            x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
            loss = loss_fn(model(x), y)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            scheduler.step()
            if len(stamps) == steps:
                break
    return stamps


def run_fit(args: list[str]) -> list[tuple[float, float]]:
    """``train fit ARGS`` in this process with a :class:`benchmarks.clock.StepClock`; its step times."""
    from trainer_cli.cli import run_subcommand

    with tempfile.TemporaryDirectory() as tmp, contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        logging.getLogger("lightning").setLevel(logging.ERROR)
        run_subcommand("fit", [*args, "--trainer.default_root_dir", str(Path(tmp) / "runs"), "--trainer.callbacks+=benchmarks.clock.StepClock"])
    return list(clock.STAMPS)


NO_VAL = ["--trainer.limit_val_batches", "0", "--trainer.num_sanity_val_steps", "0", "--trainer.max_epochs", "-1"]


def digits_sides(steps: int, warmup: int) -> dict[str, Any]:
    from trainer_cli.data import DigitsDataModule
    from trainer_cli.registry import build_backbone

    def loop() -> dict[str, float]:
        dm = DigitsDataModule(batch_size=DIGITS_BATCH)
        dm.setup("fit")
        model = build_backbone("mlp", num_classes=10, in_channels=1, image_size=8)
        opt = torch.optim.AdamW(model.parameters(), lr=DIGITS_LR, weight_decay=DIGITS_WD)
        sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=DIGITS_LR, total_steps=steps)
        loader = torch.utils.data.DataLoader(dm.train_set, batch_size=DIGITS_BATCH, shuffle=True)
        return clock.step_stats(plain_loop(model, loader, opt, sched, steps, torch.device("cpu")), warmup, DIGITS_BATCH)

    def fit() -> dict[str, float]:
        args = ["--config", DIGITS, "--config", str(CONFIGS / "model" / "mlp.yaml"), "--trainer.max_steps", str(steps), *NO_VAL]
        return clock.step_stats(run_fit(args), warmup, DIGITS_BATCH)

    return {"plain_loop": loop, "train_fit": fit}


def resnet_sides(steps: int, warmup: int, batch_size: int, cifar_stem: bool) -> dict[str, Any]:
    from trainer_cli.registry import build_backbone

    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")

    def loop() -> dict[str, float]:
        dm = SyntheticImages(batch_size=batch_size, steps=steps)
        model = build_backbone("resnet18", num_classes=10, in_channels=3, image_size=32, cifar_stem=cifar_stem).to(device)
        opt = torch.optim.SGD(model.parameters(), **SGD)
        sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=RESNET_MAX_LR, total_steps=steps)
        loader = dm.train_dataloader()
        return clock.step_stats(plain_loop(model, loader, opt, sched, steps, device), warmup, batch_size)

    def fit() -> dict[str, float]:
        data = json.dumps({"class_path": "benchmarks.synthetic.SyntheticImages", "init_args": {"batch_size": batch_size, "steps": steps}})
        args = [
            "--config", str(CONFIGS / "experiment" / "cifar10_resnet18.yaml"), "--data", data,
            "--model.init_args.cifar_stem", str(cifar_stem).lower(), "--trainer.max_steps", str(steps),
            "--trainer.accelerator", device.type, "--trainer.devices", "1", *NO_VAL,
        ]
        return clock.step_stats(run_fit(args), warmup, batch_size)

    return {"plain_loop": loop, "train_fit": fit}


def compare(sides: dict[str, Any], repeats: int) -> dict[str, Any]:
    runs = alternate(sides, repeats)
    loop, fit = medians(runs["plain_loop"]), medians(runs["train_fit"])
    return {
        "plain_loop": loop,
        "train_fit": fit,
        "overhead_ms_per_step": fit["ms_per_step"] - loop["ms_per_step"],
        "overhead_median_step_ms": fit["median_step_ms"] - loop["median_step_ms"],
        "overhead_cpu_ms_per_step": fit["cpu_ms_per_step"] - loop["cpu_ms_per_step"],
        "throughput_ratio": loop["ms_per_step"] / fit["ms_per_step"],
        "runs": runs,
    }


def run(smoke: bool = False) -> dict[str, Any]:
    """Both workloads; medians of alternating repeats."""
    cfg = {
        "digits_mlp": {"steps": 30 if smoke else 400, "warmup": 5 if smoke else 20, "repeats": 1 if smoke else 7},
        "resnet18": {"steps": 3 if smoke else 14, "warmup": 1 if smoke else 3, "repeats": 1 if smoke else 3,
                     "batch_size": 2 if smoke else 32, "cifar_stem": False},
    }
    if torch.cuda.is_available() and not smoke:
        cfg["resnet18"].update(steps=120, warmup=20, repeats=5, batch_size=256, cifar_stem=True)
    d, r = cfg["digits_mlp"], cfg["resnet18"]
    return {
        "config": cfg,
        "digits_mlp": compare(digits_sides(d["steps"], d["warmup"]), d["repeats"]),
        "resnet18": compare(resnet_sides(r["steps"], r["warmup"], r["batch_size"], r["cifar_stem"]), r["repeats"]),
    }
