"""Bug 11: verbs and writers that only make sense for classification say so for other models.

``train predict`` writes a non-classifier's outputs as they are, with honest column names;
``train cv`` on regression data stops with one ``error:`` line and leaves no directory behind.
In-process through the real entry point (a user module in ``tmp_path``)."""

from __future__ import annotations

import csv
from pathlib import Path

import lightning.pytorch  # noqa: F401 - imported now, its log handler writes to the session's stderr, not one test's
import pytest

from trainer_cli.__main__ import main

REGRESSION = '''
import lightning.pytorch as pl
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset


class RegressionData(pl.LightningDataModule):
    """40 samples of 32 features; the target is a real number (regression)."""

    def setup(self, stage=None):
        g = torch.Generator().manual_seed(0)
        x = torch.randn(40, 32, generator=g)
        y = x.sum(1) * 3
        self.train_set, self.val_set = TensorDataset(x[:30], y[:30]), TensorDataset(x[30:], y[30:])

    def train_dataloader(self):
        return DataLoader(self.train_set, batch_size=8)

    def val_dataloader(self):
        return DataLoader(self.val_set, batch_size=8)

    def predict_dataloader(self):
        return DataLoader(TensorDataset(self.val_set.tensors[0]), batch_size=4)


class Regressor(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.layer = torch.nn.Linear(32, 1)

    def forward(self, x):
        return self.layer(x).squeeze(1)

    def training_step(self, batch, batch_idx):
        return F.mse_loss(self(batch[0]), batch[1])

    def predict_step(self, batch, batch_idx):
        return self(batch[0])
'''
BORING = "lightning.pytorch.demos.boring_classes."


@pytest.fixture
def user_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "myregression.py").write_text(REGRESSION)
    monkeypatch.syspath_prepend(str(tmp_path / "src"))
    return "myregression."


def quiet(root: Path) -> list[str]:
    return ["--trainer.default_root_dir", str(root), "--trainer.enable_progress_bar", "false", "--trainer.accelerator", "cpu"]


def read_csv(run_root: Path) -> list[list[str]]:
    (path,) = run_root.rglob("predictions.csv")
    with path.open() as f:
        return list(csv.reader(f))


def test_predict_writes_a_non_classifiers_outputs_with_honest_columns(tmp_path: Path, user_module: str, capsys: pytest.CaptureFixture[str]) -> None:
    # the boring model: relu outputs [b, 10], not probabilities
    assert main(["predict", "--model", BORING + "DemoModel", "--data", BORING + "BoringDataModule",
                 "--trainer.limit_predict_batches", "3", *quiet(tmp_path / "demo")]) == 0
    rows = read_csv(tmp_path / "demo")
    assert rows[0] == ["index", *(f"output_{k}" for k in range(10))]
    assert len(rows) == 4 and all(float(v) >= 0 for row in rows[1:] for v in row[1:])
    assert "not class probabilities" in capsys.readouterr().out
    # a regression: one number per sample, [b]
    assert main(["predict", "--model", user_module + "Regressor", "--data", user_module + "RegressionData", *quiet(tmp_path / "reg")]) == 0
    rows = read_csv(tmp_path / "reg")
    assert rows[0] == ["index", "output"] and [int(r[0]) for r in rows[1:]] == list(range(10))
    assert len({r[1] for r in rows[1:]}) == 10  # real, distinct values


def test_cv_on_regression_data_is_one_error_line_and_leaves_no_directory(tmp_path: Path, user_module: str, capsys: pytest.CaptureFixture[str]) -> None:
    root = tmp_path / "runs"
    code = main(["cv", "--folds", "2", "--model", user_module + "Regressor", "--data", user_module + "RegressionData",
                 "--optimizer", "SGD", "--optimizer.lr", "0.01", *quiet(root)])
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err, err[-3000:]
    message = err[err.index("error:"):].strip()
    assert "\n" not in message
    assert "RegressionData's targets are not class labels" in message and "classification data only" in message
    assert not root.exists() or not any(root.rglob("*"))
