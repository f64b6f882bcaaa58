"""What the tests and benchmarks share: the repository's paths, ``train`` run in a subprocess,
small datasets written in the official on-disk layouts (nothing can be downloaded here) and
TensorBoard scalars read back.

Import it as ``support`` from a test (``tests/`` is on ``sys.path`` under pytest) or as
``tests.support`` from the repository root (the benchmarks).
"""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np

try:
    import forkserver
except ImportError:  # imported as tests.support (benchmarks/), tests/ not on sys.path
    from tests import forkserver

REPO = Path(__file__).resolve().parents[1]
CONFIGS = REPO / "configs"
DIGITS = str(CONFIGS / "experiment" / "digits.yaml")


def quiet_args(root: Path, epochs: int = 1) -> list[str]:
    """Flags for a short, quiet digits run writing under ``root``."""
    return [
        "--trainer.default_root_dir", str(root),
        "--trainer.max_epochs", str(epochs),
        "--trainer.enable_progress_bar", "false",
        "--trainer.enable_model_summary", "false",
    ]


def every_epoch_last_checkpoint(root: Path) -> list[str]:
    """``--config FILE``: the default callbacks with ``last.ckpt`` saved at every epoch end
    (``LastCheckpoint(min_interval_s=0)``) instead of at most once a minute, for tests that pace
    their steps (preempt, node failure, crash) by the run's newest checkpoint."""
    import yaml

    config = yaml.safe_load((CONFIGS / "callbacks" / "default.yaml").read_text())
    for callback in config["trainer"]["callbacks"]:
        if callback["class_path"].endswith(".LastCheckpoint"):
            callback["init_args"]["min_interval_s"] = 0
    path = root / "every_epoch_last_checkpoint.yaml"
    root.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return ["--config", str(path)]


def run_train(*args: str, cwd: Path | None = None, env: dict[str, str] | None = None, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    """Run ``python -m trainer_cli ARGS`` and return the finished process (text output), through
    :mod:`forkserver` where it can (same process, without the start-up imports)."""
    full_env = {**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})}
    full_env.pop("TRAINER_CLI_RUN_DIR", None)
    return forkserver.run_python(["-m", "trainer_cli", *args], cwd or REPO, full_env, timeout)


def build_and_install_wheel(folder: Path) -> tuple[Path, Path]:
    """Build the repository's wheel (hatchling, as ``make dist``) into ``folder/wheels`` and install it
    with ``pip install --no-deps --target folder/site``: ``(the wheel, the site folder)``."""
    wheels, site = folder / "wheels", folder / "site"
    build = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(wheels), str(REPO)],
        capture_output=True, text=True,
    )
    assert build.returncode == 0, build.stderr[-2000:]
    wheel = next(wheels.glob("trainer_cli-*.whl"))
    install = subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", str(site), str(wheel)],
                             capture_output=True, text=True)
    assert install.returncode == 0, install.stderr[-2000:]
    return wheel, site


def run_helper(script: Path | str, *args: str, env: dict[str, str], timeout: float = 900) -> None:
    """Run ``python SCRIPT ARGS`` from the repository root (a helper that runs many cases in one
    process), through :mod:`forkserver` where it can; fails the test with its stderr if it fails."""
    done = forkserver.run_python([str(script), *args], REPO, env, timeout)
    assert done.returncode == 0, f"{script} exited {done.returncode}:\n{done.stderr[-3000:]}"


CIFAR10_CLASSES = ["airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"]


def write_fake_cifar10(root: Path, n_train: int = 100, n_test: int = 20, seed: int = 0) -> Path:
    """Write random images in CIFAR-10's layout under ``root/cifar-10-batches-py`` and return ``root``.

    ``n_train`` images are spread over ``data_batch_1..5`` (uint8 rows of 3072 = 3x32x32 values,
    channel-major, as in the official files), ``n_test`` go to ``test_batch``; labels cycle 0..9;
    ``batches.meta`` names the classes. Pass ``root`` as ``--data.data_dir``.

    Args:
        root: The data directory (created if missing).
        n_train: Training images, over the five training batches.
        n_test: Test images.
        seed: Seed of the random pixels.
    """
    rng = np.random.default_rng(seed)
    folder = Path(root) / "cifar-10-batches-py"
    folder.mkdir(parents=True, exist_ok=True)
    splits = np.array_split(np.arange(n_train), 5)
    files = [(f"data_batch_{i + 1}", len(part)) for i, part in enumerate(splits)] + [("test_batch", n_test)]
    for name, n in files:
        entry = {
            "batch_label": name,
            "data": rng.integers(0, 256, size=(n, 3072), dtype=np.uint8),
            "labels": [int(k % 10) for k in range(n)],
            "filenames": [f"{name}_{k}.png" for k in range(n)],
        }
        (folder / name).write_bytes(pickle.dumps(entry))
    meta = {"label_names": CIFAR10_CLASSES, "num_cases_per_batch": max(1, n_train // 5), "num_vis": 3072}
    (folder / "batches.meta").write_bytes(pickle.dumps(meta))
    return Path(root)


def write_image_folder(root: Path, classes: tuple[str, ...] = ("cat", "dog", "fox"), per_class: int = 6, size: int = 40) -> Path:
    """Write ``root/train/<class>/<i>.png`` (and ``root/val/<class>/``) with random RGB images; return ``root``.

    Args:
        root: The data directory (created if missing).
        classes: One folder per class, in each split.
        per_class: Training images per class (validation gets a third of it, at least 2).
        size: Side of the square images, in pixels.
    """
    from PIL import Image

    rng = np.random.default_rng(0)
    for split, n in (("train", per_class), ("val", max(2, per_class // 3))):
        for c in classes:
            d = root / split / c
            d.mkdir(parents=True, exist_ok=True)
            for i in range(n):
                Image.fromarray(rng.integers(0, 256, size=(size, size, 3), dtype=np.uint8)).save(d / f"{i}.png")
    return root


def scalars(events: Path, tag: str) -> list[Any]:
    """The TensorBoard scalar events of ``tag`` (each with ``.step``, ``.value``, ``.wall_time``), as written.

    Args:
        events: A run directory (all its event files) or one ``events.out.tfevents.*`` file.
        tag: The logged name, e.g. ``val/acc``.
    """
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    accumulator = EventAccumulator(str(events))
    accumulator.Reload()
    return accumulator.Scalars(tag)


# a user's own LightningModule, outside the project: written into a user folder by tests
USER_MODULE = '''
import lightning.pytorch as pl
import torch.nn.functional as F
from torch import nn


class TinyNet(pl.LightningModule):
    """A user's own LightningModule, outside the project."""

    def __init__(self, num_classes: int = 10, in_channels: int = 1, image_size: int = 8, hidden: int = 16) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.net = nn.Sequential(nn.Flatten(), nn.Linear(in_channels * image_size * image_size, hidden), nn.ReLU(), nn.Linear(hidden, num_classes))

    def forward(self, x):
        return self.net(x)

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = F.cross_entropy(self(x), y)
        self.log("train/loss", loss)
        return loss

    def validation_step(self, batch, batch_idx):
        x, y = batch
        logits = self(x)
        self.log("val/loss", F.cross_entropy(logits, y))
        self.log("val/acc", (logits.argmax(1) == y).float().mean())
'''
