"""A tiny CIFAR-10 in the official ``cifar-10-batches-py`` pickle layout, for tests and benchmarks."""

from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np

CLASSES = ["airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"]


def write_fake_cifar10(root: Path, n_train: int = 64, n_test: int = 32, seed: int = 0) -> Path:
    """Write random images in CIFAR-10's layout under ``root/cifar-10-batches-py`` and return ``root``.

    ``n_train`` images are spread over ``data_batch_1..5`` (uint8 rows of 3072 = 3x32x32 values,
    channel-major, as in the official files), ``n_test`` go to ``test_batch``; labels cycle 0..9;
    ``batches.meta`` names the classes. Pass ``root`` as ``--data.data_dir``.
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
        with (folder / name).open("wb") as f:
            pickle.dump(entry, f)
    with (folder / "batches.meta").open("wb") as f:
        pickle.dump({"label_names": CLASSES, "num_cases_per_batch": max(1, n_train // 5), "num_vis": 3072}, f)
    return Path(root)
