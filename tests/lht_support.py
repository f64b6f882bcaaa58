"""The project of lightning-hydra-template's shape in ``tests/foreign_lht`` and the MNIST files it reads.

MNIST cannot be downloaded here, so :func:`write_mnist` writes a small one in torchvision's raw layout
(``<data_dir>/MNIST/raw/{train,t10k}-{images-idx3,labels-idx1}-ubyte``, the idx files torchvision's
``MNIST`` reads and finds present, so its ``download=True`` downloads nothing): scikit-learn's 8x8
digits, scaled up to 28x28, so the net has something to learn.
"""

from __future__ import annotations

import shutil
import struct
from pathlib import Path

from support import REPO

LHT = REPO / "tests" / "foreign_lht"


def _idx(path: Path, data: bytes, dims: tuple[int, ...]) -> None:
    """One idx file: magic (unsigned bytes, ``len(dims)`` dimensions), the sizes, the data."""
    path.write_bytes(struct.pack(">I", 0x0800 | len(dims)) + b"".join(struct.pack(">I", d) for d in dims) + data)


def write_mnist(data_dir: Path, n_train: int = 240, n_test: int = 80) -> None:
    """``n_train`` + ``n_test`` digits in torchvision's raw MNIST layout under ``data_dir``."""
    import numpy as np
    from sklearn.datasets import load_digits

    digits = load_digits()
    images = np.kron(digits.images[: n_train + n_test], np.ones((3, 3)))  # 8x8 -> 24x24
    images = np.pad(images, ((0, 0), (2, 2), (2, 2)))  # 28x28, as MNIST
    images = (images * (255 / 16)).astype(np.uint8)
    labels = digits.target[: n_train + n_test].astype(np.uint8)
    raw = data_dir / "MNIST" / "raw"
    raw.mkdir(parents=True, exist_ok=True)
    for prefix, part in (("train", slice(0, n_train)), ("t10k", slice(n_train, n_train + n_test))):
        count = len(labels[part])
        _idx(raw / f"{prefix}-images-idx3-ubyte", images[part].tobytes(), (count, 28, 28))
        _idx(raw / f"{prefix}-labels-idx1-ubyte", labels[part].tobytes(), (count,))


def lht_project(dest: Path) -> Path:
    """A copy of the project at ``dest`` (its ``src/``, ``configs/``, ``.gitignore``) with its data written
    to ``data/`` (its git-ignored, relative ``data_dir``)."""

    def outputs(folder: str, names: list[str]) -> set[str]:  # what a run of the project left in the source tree
        top = {"data", "runs", "logs"} if Path(folder) == LHT else set()
        return {n for n in names if n == "__pycache__" or n in top}

    shutil.copytree(LHT, dest, ignore=outputs)
    write_mnist(dest / "data")
    return dest
