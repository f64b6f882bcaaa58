"""The CIFAR-10 recipe's data path: images/s of the training augmentation (random crop with
padding 4, horizontal flip, normalise), per-sample versus batched, on the CPU.

- per-sample: ``CIFAR10DataModule(batched=False)``: torchvision ``v2`` transforms on PIL images in
  a DataLoader, with 0 and with 2 worker processes;
- batched: ``CIFAR10DataModule(batched=True)``: batches sliced from the uint8 tensor and augmented
  whole by :func:`trainer_cli.data.batch_augment.crop_flip_normalize` (what
  ``on_after_batch_transfer`` runs on the training device).

Both read a CIFAR-10-sized stand-in written in the official pickle layout (random pixels: the
cost of the transforms does not depend on the content).
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path
from typing import Any

import torch

from benchmarks.common import alternate, medians
from tests.support import write_fake_cifar10

BATCH = 256


def _fake_cifar10(root: Path, n_train: int) -> Path:
    return write_fake_cifar10(root, n_train=n_train, n_test=BATCH)


def images_per_s(loader: Any, transform: Any, images: int) -> dict[str, float]:
    """Draw batches from ``loader`` (``transform`` applied to each) until ``images`` are done."""
    done = 0
    t0 = time.perf_counter()
    while done < images:
        for x, _ in loader:
            x = transform(x)
            done += x.shape[0]
            if done >= images:
                break
    return {"images_per_s": done / (time.perf_counter() - t0)}


def run(smoke: bool = False) -> dict[str, Any]:
    from trainer_cli.data import CIFAR10DataModule
    from trainer_cli.data.batch_augment import crop_flip_normalize
    from trainer_cli.data.cifar10 import CIFAR10_MEAN, CIFAR10_STD

    n_train = 2 * BATCH if smoke else 10_000
    per_sample_images = BATCH if smoke else 3_000
    batched_images = 4 * BATCH if smoke else 50_000
    repeats = 1 if smoke else 3
    with tempfile.TemporaryDirectory() as tmp:
        root = _fake_cifar10(Path(tmp), n_train)

        def module(**kw: Any) -> CIFAR10DataModule:
            dm = CIFAR10DataModule(str(root), batch_size=BATCH, val_size=BATCH, **kw)
            dm.setup("fit")
            return dm

        def per_sample(workers: int) -> Any:
            def side() -> dict[str, float]:
                loader = module(num_workers=workers, persistent_workers=False).train_dataloader()
                return images_per_s(loader, lambda x: x, per_sample_images)

            return side

        def batched() -> dict[str, float]:
            loader = module(batched=True).train_dataloader()
            augment = lambda x: crop_flip_normalize(x, CIFAR10_MEAN, CIFAR10_STD, padding=4)  # noqa: E731
            return images_per_s(loader, augment, batched_images)

        sides = {"per_sample_0_workers": per_sample(0), "per_sample_2_workers": per_sample(2), "batched": batched}
        runs = alternate(sides, repeats)
    result = {name: medians(r) for name, r in runs.items()}
    best_per_sample = max(result["per_sample_0_workers"]["images_per_s"], result["per_sample_2_workers"]["images_per_s"])
    return result | {
        "speedup_over_best_per_sample": result["batched"]["images_per_s"] / best_per_sample,
        "batch_size": BATCH, "torch_threads": torch.get_num_threads(), "runs": runs,
    }
