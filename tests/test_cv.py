"""``train cv`` on digits: stratified folds, one run directory per fold, the aggregate table."""

from __future__ import annotations

import csv
import json
import statistics
from pathlib import Path

import numpy as np
from support import DIGITS, quiet_args, run_train
from tuning_support import FAST

DIGITS_TRAIN_AND_VAL = 1797 - 270  # all samples minus the held-out test split


def test_three_folds_make_three_runs_and_a_table(tmp_path: Path) -> None:
    root = tmp_path / "runs"
    proc = run_train("cv", "--folds", "3", "--config", DIGITS, *quiet_args(root), *FAST)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (cv_dir,) = (root / "digits" / "cv").glob("version_*")
    folds = [json.loads((cv_dir / f"fold_{i}" / "cv_fold.json").read_text()) for i in range(3)]
    for i, record in enumerate(folds):
        run = cv_dir / f"fold_{i}"
        assert (run / "config.yaml").is_file() and (run / "checkpoints" / "last.ckpt").is_file()
        assert record["fold"] == i and record["train_size"] + record["val_size"] == DIGITS_TRAIN_AND_VAL
        assert 0.0 <= record["metrics"]["val/acc"] <= 1.0
    assert sum(r["val_size"] for r in folds) == DIGITS_TRAIN_AND_VAL  # every sample validated exactly once

    summary = json.loads((cv_dir / "cv_results.json").read_text())
    for name in ("val/acc", "val/loss"):
        values = [r["metrics"][name] for r in folds]
        assert min(values) <= summary["mean"][name] <= max(values)
        assert summary["mean"][name] == statistics.fmean(values)
        assert summary["std"][name] == statistics.stdev(values)
    with (cv_dir / "cv_results.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert [r["fold"] for r in rows] == ["0", "1", "2", "mean", "std"]
    assert float(rows[3]["val/acc"]) == summary["mean"]["val/acc"]
    table = proc.stdout[proc.stdout.index("cross-validation"):]
    assert "mean" in table and "std" in table and "val/acc" in table
    from matplotlib.image import imread

    pixels = imread(cv_dir / "cv_results.png")  # a bar per fold for each metric
    assert pixels.shape[0] > 100 and pixels[..., :3].var() > 1e-3, "the picture is not blank"

    # the aggregate alone rebuilds the same files; a finished fold is not trained again
    expected = (cv_dir / "cv_results.csv").read_text()
    (cv_dir / "cv_results.csv").unlink()
    proc = run_train("cv", "--folds", "3", "--aggregate", "--cv_dir", str(cv_dir))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (cv_dir / "cv_results.csv").read_text() == expected
    proc = run_train("cv", "--folds", "3", "--fold", "1", "--cv_dir", str(cv_dir), "--config", DIGITS, *quiet_args(root))
    assert proc.returncode == 0 and "fold 1/3: done already" in proc.stdout

    # other settings on the same directory, and an aggregate with folds missing, are user errors
    proc = run_train("cv", "--folds", "4", "--fold", "3", "--cv_dir", str(cv_dir), "--config", DIGITS, *quiet_args(root))
    assert proc.returncode == 2 and "was started with --folds 3 --cv_seed 0" in proc.stderr
    proc = run_train("cv", "--folds", "4", "--aggregate", "--cv_dir", str(cv_dir))
    assert proc.returncode == 2 and "no results yet for fold(s) 3 of 4" in proc.stderr


def test_folds_are_stratified_disjoint_and_seeded() -> None:
    from sklearn.datasets import load_digits

    from trainer_cli.data.folds import fold_indices

    labels = load_digits().target
    k = 5
    val_parts = [fold_indices(labels, k, i, seed=7)[1] for i in range(k)]
    assert sorted(np.concatenate(val_parts).tolist()) == list(range(len(labels)))  # a partition
    for part in val_parts:
        share = np.bincount(labels[part], minlength=10) / len(part)
        assert np.abs(share - np.bincount(labels) / len(labels)).max() < 0.01  # every class in proportion
    assert np.array_equal(fold_indices(labels, k, 2, seed=7)[1], val_parts[2])
    assert not np.array_equal(fold_indices(labels, k, 2, seed=8)[1], val_parts[2])


def test_an_interrupted_fold_resumes_from_its_checkpoint(tmp_path: Path) -> None:
    """SIGTERM in a fold: exit 143, a checkpoint, the resume line; the same command again resumes that
    fold (its run directory, its step) and finishes it, as a requeued fold job does."""
    root, cv_dir = tmp_path / "runs", tmp_path / "runs" / "cv1"
    stop = '{"class_path": "resume_signals.SignalAt", "init_args": {"hook": "on_train_batch_end", "epoch": 1, "batch": 1}}'
    args = ["cv", "--folds", "2", "--fold", "0", "--cv_dir", str(cv_dir), "--config", DIGITS, "--trainer.default_root_dir", str(root),
            "--trainer.max_epochs", "3", "--trainer.limit_train_batches", "4", "--trainer.limit_val_batches", "1", f"--trainer.callbacks+={stop}"]
    env = {"PYTHONPATH": str(Path(__file__).parent)}
    first = run_train(*args, env=env)
    assert first.returncode == 143, first.stderr[-3000:]
    assert "checkpoint saved" in first.stderr and "the same `train cv` command" in first.stderr
    assert not (cv_dir / "fold_0" / "cv_fold.json").exists()
    again = run_train(*args, env=env)
    assert again.returncode == 0, again.stderr[-3000:]
    assert f"Restoring states from the checkpoint path at {cv_dir / 'fold_0' / 'checkpoints' / 'last.ckpt'}" in again.stdout + again.stderr
    record = json.loads((cv_dir / "fold_0" / "cv_fold.json").read_text())
    assert record["fold"] == 0 and 0.0 <= record["metrics"]["val/acc"] <= 1.0
    assert sorted(p.name for p in cv_dir.iterdir()) == ["cv.json", "fold_0"]  # one run directory for the fold
    # the resumed epoch's time is its own (not counted from an epoch start that never happened here)
    resumed_epoch = next(line for line in again.stdout.splitlines() if line.startswith("epoch 2/3"))
    assert float(resumed_epoch.split()[-2]) < 300
