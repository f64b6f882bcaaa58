"""Predictions to a CSV file, batch by batch (Lightning's ``BasePredictionWriter``)."""

from __future__ import annotations

import csv
from pathlib import Path
from typing import IO, Any, Optional, Sequence

import lightning.pytorch as pl
import torch
from lightning.pytorch.callbacks import BasePredictionWriter

DEFAULT_FILE = "predictions.csv"


class PredictionCSVWriter(BasePredictionWriter):
    """Write ``train predict`` results as CSV: ``index``, ``predicted`` (the arg-max class) and
    ``prob_0 .. prob_{C-1}``, one row per input, written after every batch (memory stays flat).

    ``index`` is the sample's position in the predict dataset (from Lightning's index-tracking
    batch sampler; a running count where the loader has none). The module's ``predict_step`` must
    return class probabilities ``[b, C]`` (as :class:`trainer_cli.models.ImageClassifier` does).
    With several processes each writes its own file, ``<stem>.rank<R>.csv``.

    Args:
        output: CSV file to write; empty: ``predictions.csv`` in the run directory
            (``trainer.default_root_dir``). An existing file is replaced.
        float_format: ``format`` spec of the probabilities (``.6g``: 6 significant digits).
    """

    def __init__(self, output: Optional[str] = None, float_format: str = ".6g") -> None:
        super().__init__(write_interval="batch")
        self.output = output
        self.float_format = float_format
        self.path: Path | None = None
        self._file: IO[str] | None = None
        self._writer: Any = None
        self._seen = 0

    def _target(self, trainer: pl.Trainer) -> Path:
        path = Path(self.output).expanduser() if self.output else Path(trainer.default_root_dir) / DEFAULT_FILE
        if trainer.world_size > 1:
            path = path.with_name(f"{path.stem}.rank{trainer.global_rank}{path.suffix}")
        return path

    def on_predict_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self.path = self._target(trainer)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._file = self.path.open("w", newline="")
        self._writer = csv.writer(self._file)
        self._seen = 0

    def write_on_batch_end(
        self,
        trainer: pl.Trainer,
        pl_module: pl.LightningModule,
        prediction: Any,
        batch_indices: Optional[Sequence[int]],
        batch: Any,
        batch_idx: int,
        dataloader_idx: int,
    ) -> None:
        """Append one row per sample of ``prediction`` (probabilities ``[b, C]``)."""
        probs = torch.as_tensor(prediction).detach().float().cpu()
        if probs.ndim != 2:
            raise ValueError(f"PredictionCSVWriter needs predictions of shape [batch, classes], got {tuple(probs.shape)}")
        if self._seen == 0 and self._writer is not None:
            self._writer.writerow(["index", "predicted", *(f"prob_{c}" for c in range(probs.shape[1]))])
        indices = list(batch_indices) if batch_indices else list(range(self._seen, self._seen + len(probs)))
        predicted = probs.argmax(dim=1).tolist()
        for index, label, row in zip(indices, predicted, probs.tolist()):
            self._writer.writerow([index, label, *(format(p, self.float_format) for p in row)])
        self._seen += len(probs)

    def on_predict_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
            print(f"Predictions ({self._seen} rows): {self.path}", flush=True)
