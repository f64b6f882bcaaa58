"""Stratified k-fold splits of a data module's pooled training and validation data (``train cv``)."""

from __future__ import annotations

from typing import Any

import numpy as np
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
    return np.asarray([int(dataset[i][1]) for i in range(len(dataset))])  # type: ignore[arg-type]


def pooled_views(train_set: Dataset[Any], val_set: Dataset[Any]) -> tuple[Dataset[Any], Dataset[Any], np.ndarray]:
    """The training and validation samples pooled, as a training view and an evaluation view of the
    same samples in the same order, plus their labels.

    When both splits are ``Subset``s of two views of one dataset (how the project's CIFAR-10 and
    image-folder modules hold out validation: augmenting and plain transforms), the pool keeps that
    distinction, so a fold validates without augmentation. Otherwise both views are the
    concatenation ``train + val`` as the data module made them.
    """
    if (
        isinstance(train_set, Subset) and isinstance(val_set, Subset)
        and len(train_set.dataset) == len(val_set.dataset)  # type: ignore[arg-type]
    ):
        indices = [*train_set.indices, *val_set.indices]
        return Subset(train_set.dataset, indices), Subset(val_set.dataset, indices), labels_of(train_set.dataset)[indices]
    pool = ConcatDataset([train_set, val_set])
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
        raise UserError(f"--folds {folds}: class {rare} has only {counts[1].min()} samples; use at most that many folds")
    splits = StratifiedKFold(n_splits=folds, shuffle=True, random_state=seed).split(np.zeros(len(labels)), labels)
    for i, (train_idx, val_idx) in enumerate(splits):
        if i == fold:
            return train_idx, val_idx
    raise ValueError(f"fold {fold} out of range for {folds} folds")


def use_fold(datamodule: Any, folds: int, fold: int, seed: int) -> dict[str, int]:
    """Make ``datamodule`` train on the other folds and validate on fold ``fold``; returns the sizes.

    The data module is set up for fitting, its ``train_set`` and ``val_set`` are pooled
    (:func:`pooled_views`) and replaced by the fold's; ``setup`` re-applies the fold when Lightning
    calls it again. ``test_set`` is untouched (held out).

    Raises:
        UserError: for a data module that does not keep its splits in ``train_set`` and ``val_set``.
    """
    datamodule.prepare_data()
    datamodule.setup("fit")
    train_set, val_set = getattr(datamodule, "train_set", None), getattr(datamodule, "val_set", None)
    if train_set is None or val_set is None:
        raise UserError(f"cv needs a data module that keeps its splits in train_set and val_set after setup() "
                        f"(like trainer_cli.data.DigitsDataModule); {type(datamodule).__name__} does not")
    train_view, eval_view, labels = pooled_views(train_set, val_set)
    train_idx, val_idx = fold_indices(labels, folds, fold, seed)
    fold_train, fold_val = Subset(train_view, train_idx.tolist()), Subset(eval_view, val_idx.tolist())
    original_setup = datamodule.setup

    def setup(stage: str | None = None) -> None:
        original_setup(stage)
        datamodule.train_set, datamodule.val_set = fold_train, fold_val

    datamodule.setup = setup
    datamodule.train_set, datamodule.val_set = fold_train, fold_val
    return {"train_size": len(train_idx), "val_size": len(val_idx)}
