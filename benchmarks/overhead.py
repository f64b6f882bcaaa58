"""Framework overhead per optimizer step: a hand-written PyTorch loop, a hand-written Lightning
Trainer with Lightning's defaults, and ``train fit``.

The three sides run in this process, alternately, on the same model, data, optimizer, scheduler,
batch size and number of steps, with validation off on all (the loop has none). The Lightning side
is what a user writes by hand: a LightningModule logging its loss every step, ``pl.Trainer`` with
its defaults (its logger, a checkpoint every epoch, the model summary), the progress bar off.
``train fit`` keeps the launcher's defaults: the callbacks of ``configs/callbacks/default.yaml``
(checkpointing: the best by ``val/acc`` and ``last.ckpt`` at the first and last epoch end and at most
once a minute between; learning-rate monitor; model summary), checkpoint files written off the
training thread, the TensorBoard logger and the progress bar.

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

import lightning.pytorch as pl
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


def plain_loop(
    model: nn.Module, loader: Any, optimizer: torch.optim.Optimizer, scheduler: Any, steps: int,
    device: torch.device, warmup: int,
) -> clock.Window:
    """The floor: ``steps`` optimizer steps over ``loader`` (epoch after epoch), timed by a :class:`clock.Window`."""
    window = clock.Window(warmup, steps, device)
    model.train()
    loss_fn = nn.CrossEntropyLoss()
    while window.started < steps:
        for x, y in loader:
            window.step_start()
            x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
            loss = loss_fn(model(x), y)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            scheduler.step()
            window.step_end()
            if window.started == steps:
                break
    return window


def run_fit(args: list[str], warmup: int = 0, steps: int = 0) -> clock.Window:
    """``train fit ARGS`` in this process with a :class:`benchmarks.clock.StepClock`; its window."""
    timer = json.dumps({"class_path": "benchmarks.clock.StepClock", "init_args": {"warmup": warmup, "steps": steps}})
    from trainer_cli.config.request import Request
    from trainer_cli.runtime.verbs import run_subcommand

    with tempfile.TemporaryDirectory() as tmp, contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        logging.getLogger("lightning").setLevel(logging.ERROR)
        run_subcommand("fit", Request.of([*args, "--trainer.default_root_dir", str(Path(tmp) / "runs"), f"--trainer.callbacks+={timer}"], "fit"))
    return clock.LAST[0]


class _HandWritten(pl.LightningModule):
    """The Lightning side: the same network, loss, optimizer and per-step OneCycleLR, written the
    way Lightning's documentation shows (the loss logged every step)."""

    def __init__(self, model: nn.Module, make_optimizer: Any, make_scheduler: Any) -> None:
        super().__init__()
        self.model = model
        self.loss_fn = nn.CrossEntropyLoss()
        self._make_optimizer, self._make_scheduler = make_optimizer, make_scheduler

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        loss = self.loss_fn(self.model(x), y)
        self.log("train_loss", loss)
        return loss

    def configure_optimizers(self) -> Any:
        optimizer = self._make_optimizer(self.model.parameters())
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": self._make_scheduler(optimizer), "interval": "step"}}


def run_lightning(module: pl.LightningModule, loader: Any, steps: int, device: torch.device, warmup: int) -> clock.Window:
    """``pl.Trainer`` with Lightning's defaults (progress bar off) for ``steps`` steps; its step times."""
    with tempfile.TemporaryDirectory() as tmp, contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        for name in ("lightning", "lightning.pytorch", "lightning.fabric"):  # its handlers hold the real stderr
            logging.getLogger(name).setLevel(logging.ERROR)
        trainer = pl.Trainer(
            max_steps=steps, max_epochs=-1, limit_val_batches=0, num_sanity_val_steps=0, enable_progress_bar=False,
            accelerator=device.type, devices=1, default_root_dir=tmp, callbacks=[clock.StepClock(warmup, steps)],
        )
        trainer.fit(module, train_dataloaders=loader)
    return clock.LAST[0]


NO_VAL = ["--trainer.limit_val_batches", "0", "--trainer.num_sanity_val_steps", "0", "--trainer.max_epochs", "-1"]


def digits_sides(steps: int, warmup: int) -> dict[str, Any]:
    from trainer_cli.data import DigitsDataModule
    from trainer_cli.models.registry import build_backbone

    def optimizer(params: Any) -> torch.optim.Optimizer:
        return torch.optim.AdamW(params, lr=DIGITS_LR, weight_decay=DIGITS_WD)

    def scheduler(opt: torch.optim.Optimizer) -> Any:
        return torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=DIGITS_LR, total_steps=steps)

    def parts() -> tuple[nn.Module, Any]:
        dm = DigitsDataModule(batch_size=DIGITS_BATCH)
        dm.setup("fit")
        model = build_backbone("mlp", num_classes=10, in_channels=1, image_size=8)
        return model, torch.utils.data.DataLoader(dm.train_set, batch_size=DIGITS_BATCH, shuffle=True)

    def loop() -> dict[str, float]:
        model, loader = parts()
        opt = optimizer(model.parameters())
        return clock.step_stats(plain_loop(model, loader, opt, scheduler(opt), steps, torch.device("cpu"), warmup), DIGITS_BATCH)

    def lightning() -> dict[str, float]:
        model, loader = parts()
        return clock.step_stats(run_lightning(_HandWritten(model, optimizer, scheduler), loader, steps, torch.device("cpu"), warmup), DIGITS_BATCH)

    def fit() -> dict[str, float]:
        args = ["--config", DIGITS, "--config", str(CONFIGS / "model" / "mlp.yaml"), "--trainer.max_steps", str(steps), *NO_VAL]
        return clock.step_stats(run_fit(args, warmup, steps), DIGITS_BATCH)

    return {"plain_loop": loop, "lightning": lightning, "train_fit": fit}


def resnet_sides(steps: int, warmup: int, batch_size: int, cifar_stem: bool) -> dict[str, Any]:
    from trainer_cli.models.registry import build_backbone

    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")

    def optimizer(params: Any) -> torch.optim.Optimizer:
        return torch.optim.SGD(params, **SGD)

    def scheduler(opt: torch.optim.Optimizer) -> Any:
        return torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=RESNET_MAX_LR, total_steps=steps)

    def parts() -> tuple[nn.Module, Any]:
        model = build_backbone("resnet18", num_classes=10, in_channels=3, image_size=32, cifar_stem=cifar_stem)
        return model, SyntheticImages(batch_size=batch_size, steps=steps).train_dataloader()

    def loop() -> dict[str, float]:
        model, loader = parts()
        model = model.to(device)
        opt = optimizer(model.parameters())
        return clock.step_stats(plain_loop(model, loader, opt, scheduler(opt), steps, device, warmup), batch_size)

    def lightning() -> dict[str, float]:
        model, loader = parts()
        return clock.step_stats(run_lightning(_HandWritten(model, optimizer, scheduler), loader, steps, device, warmup), batch_size)

    def fit() -> dict[str, float]:
        data = json.dumps({"class_path": "benchmarks.synthetic.SyntheticImages", "init_args": {"batch_size": batch_size, "steps": steps}})
        args = [
            "--config", str(CONFIGS / "experiment" / "cifar10_resnet18.yaml"), "--data", data,
            "--model.init_args.cifar_stem", str(cifar_stem).lower(), "--trainer.max_steps", str(steps),
            "--trainer.accelerator", device.type, "--trainer.devices", "1", *NO_VAL,
        ]
        return clock.step_stats(run_fit(args, warmup, steps), batch_size)

    return {"plain_loop": loop, "lightning": lightning, "train_fit": fit}


def compare(sides: dict[str, Any], repeats: int) -> dict[str, Any]:
    runs = alternate(sides, repeats)
    loop, lightning, fit = medians(runs["plain_loop"]), medians(runs["lightning"]), medians(runs["train_fit"])
    return {
        "plain_loop": loop,
        "lightning": lightning,
        "train_fit": fit,
        # step time over the plain loop's (1.0: no overhead), for Lightning's defaults and train fit
        "lightning_over_loop": lightning["ms_per_step"] / loop["ms_per_step"],
        "fit_over_loop": fit["ms_per_step"] / loop["ms_per_step"],
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
