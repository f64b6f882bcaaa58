"""Small datasets written in the official on-disk layouts (no download is possible here)."""

from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np

CIFAR10_CLASSES = ["airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"]


def write_fake_cifar10(root: Path, per_batch: int = 20, n_test: int = 20, seed: int = 0) -> Path:
    """Write ``root/cifar-10-batches-py`` as torchvision's CIFAR10 reads it: five training pickles of
    ``per_batch`` images, one test pickle, ``batches.meta``. Returns ``root``."""
    rng = np.random.default_rng(seed)
    folder = root / "cifar-10-batches-py"
    folder.mkdir(parents=True, exist_ok=True)

    def batch(n: int) -> dict[str, object]:
        return {"data": rng.integers(0, 256, size=(n, 3072), dtype=np.uint8), "labels": [int(i % 10) for i in range(n)]}

    for i in range(1, 6):
        (folder / f"data_batch_{i}").write_bytes(pickle.dumps(batch(per_batch)))
    (folder / "test_batch").write_bytes(pickle.dumps(batch(n_test)))
    (folder / "batches.meta").write_bytes(pickle.dumps({"label_names": CIFAR10_CLASSES}))
    return root


def write_image_folder(root: Path, classes: tuple[str, ...] = ("cat", "dog", "fox"), per_class: int = 6, size: int = 40) -> Path:
    """Write ``root/train/<class>/<i>.png`` (and ``root/val/<class>/``) with random RGB images. Returns ``root``."""
    from PIL import Image

    rng = np.random.default_rng(0)
    for split, n in (("train", per_class), ("val", max(2, per_class // 3))):
        for c in classes:
            d = root / split / c
            d.mkdir(parents=True, exist_ok=True)
            for i in range(n):
                Image.fromarray(rng.integers(0, 256, size=(size, size, 3), dtype=np.uint8)).save(d / f"{i}.png")
    return root
