"""Training throughput of the CIFAR-10 recipe (``configs/experiment/cifar10_fast.yaml``: ResNet-18
with the CIFAR stem, SGD + OneCycleLR, bf16-mixed, channels_last, cudnn benchmark, TF32) under
``train fit`` versus a plain PyTorch loop doing the same on the same device, with and without
``torch.compile``, on synthetic on-device data and on the real (batched) data path.

On a machine without a GPU it runs in a reduced mode (CPU, tiny batches, few steps, no compile)
so that it is known to work; its figures say nothing about GPU speed.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

import torch
from torch import nn

from benchmarks import clock
from benchmarks.common import alternate, medians
from benchmarks.overhead import NO_VAL, RESNET_MAX_LR, SGD, run_fit
from benchmarks.synthetic import random_batch
from tests.support import CONFIGS, write_fake_cifar10

FAST = CONFIGS / "experiment" / "cifar10_fast.yaml"


def settings(smoke: bool) -> dict[str, Any]:
    """Sizes for a GPU, or the reduced CPU mode."""
    if torch.cuda.is_available():
        return {"mode": "gpu", "device": "cuda", "batch_size": 512, "steps": 150, "warmup": 30, "repeats": 3,
                "compile": [False, True], "n_train": 98 * 512, "precision": "bf16-mixed"}  # (97 full batches after val: no odd-sized batch to recompile for)
    return {"mode": "reduced-cpu", "device": "cpu", "batch_size": 4, "steps": 3 if smoke else 5, "warmup": 1,
            "repeats": 1, "compile": [False], "n_train": 64, "precision": "bf16-mixed"}


def plain_loop(cfg: dict[str, Any], compiled: bool, data: str, loader: Any) -> dict[str, float]:
    """The recipe as a hand-written loop: channels_last model, bf16 autocast, SGD + OneCycleLR."""
    from trainer_cli.data.batch_augment import crop_flip_normalize
    from trainer_cli.data.cifar10 import CIFAR10_MEAN, CIFAR10_STD
    from trainer_cli.models.registry import build_backbone

    device = torch.device(cfg["device"])
    torch.backends.cudnn.benchmark = True
    torch.set_float32_matmul_precision("high")
    model = build_backbone("resnet18", num_classes=10, in_channels=3, image_size=32, cifar_stem=True)
    model = model.to(device, memory_format=torch.channels_last)
    if compiled:
        model.compile()
    opt = torch.optim.SGD(model.parameters(), **SGD)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=RESNET_MAX_LR, total_steps=cfg["steps"])
    loss_fn = nn.CrossEntropyLoss()
    synthetic = random_batch(cfg["batch_size"], device=device)
    synthetic = (synthetic[0].contiguous(memory_format=torch.channels_last), synthetic[1])
    window = clock.Window(cfg["warmup"], cfg["steps"], device)
    model.train()
    while window.started < cfg["steps"]:
        for batch in loader if data == "real" else iter(lambda: synthetic, None):
            window.step_start()
            if data == "real":
                x_u8, y = batch[0].to(device, non_blocking=True), batch[1].to(device, non_blocking=True)
                x = crop_flip_normalize(x_u8, CIFAR10_MEAN, CIFAR10_STD, padding=4, channels_last=True)
            else:
                x, y = batch
            with torch.autocast(device.type, dtype=torch.bfloat16):
                loss = loss_fn(model(x), y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            sched.step()
            window.step_end()
            if window.started == cfg["steps"]:
                break
    return clock.step_stats(window, cfg["batch_size"])


def fit_args(cfg: dict[str, Any], compiled: bool, data: str, data_dir: Path) -> list[str]:
    args = [
        "--config", str(FAST), "--model.init_args.compile", str(compiled).lower(),
        "--trainer.max_steps", str(cfg["steps"]), "--trainer.accelerator", cfg["device"], "--trainer.devices", "1",
        "--trainer.precision", cfg["precision"], *NO_VAL,
    ]
    if data == "real":
        return [*args, "--data.data_dir", str(data_dir), "--data.batch_size", str(cfg["batch_size"]), "--data.val_size", str(cfg["batch_size"])]
    synthetic = {"batch_size": cfg["batch_size"], "steps": cfg["steps"], "on_device": True, "channels_last": True}
    return [*args, "--data", json.dumps({"class_path": "benchmarks.synthetic.SyntheticImages", "init_args": synthetic})]


def run(smoke: bool = False) -> dict[str, Any]:
    from trainer_cli.data import CIFAR10DataModule

    cfg = settings(smoke)
    results: dict[str, Any] = {"settings": cfg}
    with tempfile.TemporaryDirectory() as tmp:
        data_dir = write_fake_cifar10(Path(tmp), n_train=cfg["n_train"], n_test=cfg["batch_size"])
        dm = CIFAR10DataModule(str(data_dir), batch_size=cfg["batch_size"], val_size=cfg["batch_size"], batched=True, pin_memory=cfg["device"] == "cuda")
        dm.setup("fit")
        for compiled in cfg["compile"]:
            for data in ("synthetic", "real"):
                sides = {
                    "plain_loop": lambda c=compiled, d=data: plain_loop(cfg, c, d, dm.train_dataloader()),
                    "train_fit": lambda c=compiled, d=data: clock.step_stats(
                        run_fit(fit_args(cfg, c, d, data_dir), cfg["warmup"], cfg["steps"]), cfg["batch_size"]
                    ),
                }
                runs = alternate(sides, cfg["repeats"])
                loop, fit = medians(runs["plain_loop"]), medians(runs["train_fit"])
                results[f"{'compiled' if compiled else 'eager'}_{data}"] = {
                    "plain_loop": loop, "train_fit": fit, "ratio": fit["images_per_s"] / loop["images_per_s"], "runs": runs,
                }
    for mode in ("compiled", "eager"):
        if f"{mode}_real" in results:
            real, synth = results[f"{mode}_real"]["train_fit"], results[f"{mode}_synthetic"]["train_fit"]
            results[f"{mode}_real_over_synthetic"] = real["images_per_s"] / synth["images_per_s"]
    return results
