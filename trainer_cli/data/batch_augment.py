"""Augmentation applied to a whole batch at once, on whatever device the batch is on.

The fastest CIFAR-10 trainers keep the uint8 dataset as one tensor and augment per batch on the
GPU instead of per sample in DataLoader workers: Keller Jordan's airbench
(https://github.com/KellerJordan/cifar10-airbench, ``airbench94.py``: ``batch_crop`` / ``batch_flip_lr``) and
tysam-code's hlb-CIFAR10 (https://github.com/tysam-code/hlb-CIFAR10). The functions here do the
classic CIFAR-10 recipe (random crop with zero padding, horizontal flip, normalise) with the same
semantics as torchvision's ``RandomCrop(32, padding=4)``, ``RandomHorizontalFlip()`` and
``Normalize(mean, std)``, each sample drawing its own offsets and flip.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

import torch
import torch.nn.functional as F

MAX_PIXEL = 255.0


def random_crop(images: torch.Tensor, padding: int, generator: torch.Generator | None = None) -> torch.Tensor:
    """Random crops of the original size from the zero-padded images, one offset per sample.

    Separable, as airbench94's ``batch_crop``: one gather along the rows, then one along the
    columns (about twice as fast as one 4-d advanced index).

    Args:
        images: Batch ``[b, c, h, w]`` of any dtype (uint8 is cheapest).
        padding: Pixels of zeros added on every side before cropping (4 for CIFAR-10).
        generator: Optional random generator on ``images.device`` (for reproducible crops).

    Returns:
        Tensor ``[b, c, h, w]`` of the same dtype and device.

    Raises:
        ValueError: if ``padding`` is negative or ``images`` is not 4-dimensional.
    """
    if images.dim() != 4:
        raise ValueError(f"images must have shape [b, c, h, w], got {tuple(images.shape)}")
    if padding < 0:
        raise ValueError(f"padding must be >= 0, got {padding}")
    if padding == 0:
        return images
    b, c, h, w = images.shape
    padded = F.pad(images, (padding, padding, padding, padding))
    dev = images.device
    shifts = torch.randint(0, 2 * padding + 1, (2, b), device=dev, generator=generator)
    rows = (shifts[0][:, None] + torch.arange(h, device=dev))[:, None, :, None]  # [b, 1, h, 1]
    cols = (shifts[1][:, None] + torch.arange(w, device=dev))[:, None, None, :]  # [b, 1, 1, w]
    rows_kept = padded.gather(2, rows.expand(b, c, h, w + 2 * padding))  # [b, c, h, w + 2p]
    return rows_kept.gather(3, cols.expand(b, c, h, w))


def random_flip(images: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
    """Each image ``[b, c, h, w]`` mirrored left-right with probability 1/2; same shape and dtype."""
    flip = torch.rand(images.shape[0], device=images.device, generator=generator) < 0.5
    return torch.where(flip[:, None, None, None], images.flip(3), images)


@functools.lru_cache(maxsize=32)
def _affine(
    mean: tuple[float, ...], std: tuple[float, ...], device: torch.device, dtype: torch.dtype
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(scale, shift)`` of :func:`normalize` on ``device``, made once: a tensor built from a Python
    list on a GPU is a blocking host-to-device copy, which would stall the GPU on every batch
    (three host syncs per step, seen with ``torch.cuda.set_sync_debug_mode``)."""
    std_t = torch.tensor(std, dtype=torch.float64)
    scale = 1.0 / (MAX_PIXEL * std_t)
    shift = -torch.tensor(mean, dtype=torch.float64) / std_t
    return scale.to(device=device, dtype=dtype), shift.to(device=device, dtype=dtype)


def normalize(
    images: torch.Tensor,
    mean: Sequence[float],
    std: Sequence[float],
    dtype: torch.dtype = torch.float32,
    channels_last: bool = False,
) -> torch.Tensor:
    """uint8 images ``[b, c, h, w]`` in 0..255 -> ``(x / 255 - mean) / std`` as ``dtype``.

    Args:
        images: uint8 batch ``[b, c, h, w]``.
        mean: Per-channel mean of the [0, 1]-scaled images (``c`` values).
        std: Per-channel standard deviation (``c`` values).
        dtype: Floating dtype of the result.
        channels_last: Return the result in ``torch.channels_last`` memory format.

    Returns:
        Tensor ``[b, c, h, w]`` of ``dtype``.
    """
    scale, shift = _affine(tuple(mean), tuple(std), images.device, dtype)
    fmt = torch.channels_last if channels_last else torch.contiguous_format
    x = images.to(dtype=dtype, memory_format=fmt)
    return x.mul_(scale[:, None, None]).add_(shift[:, None, None])  # in place: no extra full-size tensors


def crop_flip_normalize(
    images: torch.Tensor,
    mean: Sequence[float],
    std: Sequence[float],
    padding: int = 4,
    augment: bool = True,
    channels_last: bool = False,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """The CIFAR-10 training transform for a whole uint8 batch ``[b, c, h, w]``.

    Random crop (``padding``) and flip when ``augment``, then :func:`normalize` to float32.
    With ``augment=False`` it is the evaluation transform (normalise only).
    """
    if augment:
        images = random_flip(random_crop(images, padding, generator), generator)
    return normalize(images, mean, std, channels_last=channels_last)
