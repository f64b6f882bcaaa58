"""The run summary's global batch size for a data module that names its batch size its own way (a
user's `batch`, not `batch_size`): read from the training DataLoader (found by a new user's project,
which printed 'unknown')."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import torch
from torch.utils.data import DataLoader, TensorDataset

from trainer_cli.callbacks.run_summary import RunSummary


class _Points(pl.LightningDataModule):
    def __init__(self, batch: int = 8) -> None:
        super().__init__()
        self.batch = batch

    def train_dataloader(self) -> DataLoader:
        return DataLoader(TensorDataset(torch.randn(32, 2), torch.randint(0, 2, (32,))), batch_size=self.batch)


class _Net(pl.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(2, 2)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        return torch.nn.functional.cross_entropy(self.layer(x), y)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.1)


class _Seen(pl.Callback):
    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self.quantities = RunSummary.quantities(trainer)


def test_global_batch_size_from_the_loader_when_the_data_module_names_it_otherwise(tmp_path: Path) -> None:
    seen = _Seen()
    trainer = pl.Trainer(max_steps=2, accumulate_grad_batches=2, accelerator="cpu", logger=False, enable_checkpointing=False,
                         enable_progress_bar=False, enable_model_summary=False, callbacks=[seen], default_root_dir=tmp_path)
    trainer.fit(_Net(), datamodule=_Points(batch=8))
    assert (seen.quantities["batch_size_per_device"], seen.quantities["global_batch_size"]) == (8, 16)
