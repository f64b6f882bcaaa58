"""Stratified k-fold splits of a data module's pooled training and validation data (``train cv``)."""

from __future__ import annotations

from typing import Any

import numpy as np
from lightning.pytorch import Callback
from torch.utils.data import ConcatDataset, Dataset, Subset, TensorDataset

from trainer_cli.errors import UserError


def labels_of(dataset: Dataset[Any]) -> np.ndarray:
    """Class labels ``[n]`` of a classification dataset.

    Read without loading images where the dataset keeps them (``TensorDataset``: its last tensor;
    torchvision datasets: ``targets``; ``Subset`` and ``ConcatDataset`` of those), else from each
    sample's second element.
    """
    if isinstance(dataset, TensorDataset):
        return dataset.tensors[-1].numpy()
    if isinstance(dataset, Subset):
        return labels_of(dataset.dataset)[np.asarray(dataset.indices)]
    if isinstance(dataset, ConcatDataset):
        return np.concatenate([labels_of(d) for d in dataset.datasets])
    targets = getattr(dataset, "targets", None)
    if targets is not None:
        return np.asarray(targets)
    return np.asarray([_target_of(dataset[i], dataset) for i in range(len(dataset))])  # type: ignore[arg-type]


def _target_of(sample: Any, dataset: Dataset[Any]) -> Any:
    """The target of one ``(input, target)`` sample, as a Python number.

    Raises:
        UserError: for a sample that is not an ``(input, target)`` pair with one number as target.
    """
    target: Any = sample[1] if isinstance(sample, (tuple, list)) and len(sample) >= 2 else None
    if hasattr(target, "numel") and target.numel() == 1:
        target = target.item()
    if not isinstance(target, (int, float, np.integer, np.floating)) or isinstance(target, bool):
        got = type(sample).__name__ if target is None else f"targets of type {type(target).__name__}"
        raise UserError(
            f"train cv makes stratified folds by class and needs (input, class label) samples; "
            f"{type(dataset).__name__} gives {got}: cross-validation is for classification data only"
        )
    return target


def class_labels(labels: np.ndarray, source: str) -> np.ndarray:
    """``labels`` as integer class labels.

    Raises:
        UserError: when they are not one whole number per sample (regression targets, say), naming ``source``.
    """
    if labels.ndim != 1:
        raise UserError(
            f"train cv makes stratified folds by class: {source} has targets of shape {list(labels.shape[1:])} per "
            "sample, "
            "not one class label; cross-validation is for classification data only"
        )
    if labels.dtype.kind in "iu":
        return labels
    if labels.dtype.kind == "f":
        odd = labels[~np.isfinite(labels) | (labels != np.round(labels))]
        if not len(odd):
            return labels.astype(np.int64)
        raise UserError(
            f"train cv makes stratified folds by class, but {source}'s targets are not class labels "
            f"(e.g. {odd[0]:g}; regression?): cross-validation is for classification data only"
        )
    raise UserError(
        f"train cv makes stratified folds by class: {source}'s targets are {labels.dtype} values, not class labels"
    )


def pooled_views(train_set: Dataset[Any], val_set: Dataset[Any]) -> tuple[Dataset[Any], Dataset[Any], np.ndarray]:
    """The training and validation samples pooled, as a training view and an evaluation view of the
    same samples in the same order, plus their labels.

    When both splits are ``Subset``s of two views of one dataset (how the project's CIFAR-10 and
    image-folder modules hold out validation: augmenting and plain transforms), the pool keeps that
    distinction, so a fold validates without augmentation. Otherwise both views are the
    concatenation ``train + val`` as the data module made them.
    """
    if (
        isinstance(train_set, Subset) and isinstance(val_set, Subset) and len(train_set.dataset) == len(val_set.dataset)  # type: ignore[arg-type]
    ):
        indices = [*train_set.indices, *val_set.indices]
        return (
            Subset(train_set.dataset, indices),
            Subset(val_set.dataset, indices),
            labels_of(train_set.dataset)[indices],
        )
    pool: ConcatDataset[Any] = ConcatDataset([train_set, val_set])
    return pool, pool, labels_of(pool)


def fold_indices(labels: np.ndarray, folds: int, fold: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Training and validation indices of fold ``fold`` of ``folds`` (scikit-learn's
    ``StratifiedKFold(folds, shuffle=True, random_state=seed)``: every class in every fold in proportion).

    Raises:
        UserError: when a class has fewer than ``folds`` samples.
    """
    from sklearn.model_selection import StratifiedKFold

    counts = np.unique(labels, return_counts=True)
    if counts[1].min() < folds:
        rare = counts[0][counts[1].argmin()]
        raise UserError(
            f"--folds {folds}: class {rare} has only {counts[1].min()} samples; use at most that many folds"
        )
    splits = StratifiedKFold(n_splits=folds, shuffle=True, random_state=seed).split(np.zeros(len(labels)), labels)
    for i, (train_idx, val_idx) in enumerate(splits):
        if i == fold:
            return train_idx, val_idx
    raise ValueError(f"fold {fold} out of range for {folds} folds")


class FoldSplit(Callback):
    """Puts a fold's training and validation subsets into the data module each time Lightning sets
    it up (a callback's ``setup`` runs right after the data module's own)."""

    def __init__(self, train_set: Dataset[Any], val_set: Dataset[Any]) -> None:
        self.train_set, self.val_set = train_set, val_set

    def apply(self, datamodule: Any) -> None:
        datamodule.train_set, datamodule.val_set = self.train_set, self.val_set

    def setup(self, trainer: Any, pl_module: Any, stage: str) -> None:
        if trainer.datamodule is not None:
            self.apply(trainer.datamodule)


def use_fold(trainer: Any, datamodule: Any, folds: int, fold: int, seed: int) -> dict[str, int]:
    """Make ``datamodule`` train on the other folds and validate on fold ``fold``; returns the sizes.

    The data module is set up for fitting, its ``train_set`` and ``val_set`` are pooled
    (:func:`pooled_views`) and replaced by the fold's; a :class:`FoldSplit` callback added to
    ``trainer`` re-applies the fold whenever Lightning sets the data module up again.
    ``test_set`` is untouched (held out).

    Raises:
        UserError: for a data module that does not keep its splits in ``train_set`` and ``val_set``,
            or whose targets are not class labels.
    """
    datamodule.prepare_data()
    datamodule.setup("fit")
    train_set, val_set = getattr(datamodule, "train_set", None), getattr(datamodule, "val_set", None)
    if train_set is None or val_set is None:
        raise UserError(
            f"cv needs a data module that keeps its splits in train_set and val_set after setup() "
            f"(like trainer_cli.data.DigitsDataModule); {type(datamodule).__name__} does not"
        )
    train_view, eval_view, labels = pooled_views(train_set, val_set)
    labels = class_labels(labels, type(datamodule).__name__)
    train_idx, val_idx = fold_indices(labels, folds, fold, seed)
    split = FoldSplit(Subset(train_view, train_idx.tolist()), Subset(eval_view, val_idx.tolist()))
    split.apply(datamodule)
    trainer.callbacks.append(split)
    return {"train_size": len(train_idx), "val_size": len(val_idx)}
