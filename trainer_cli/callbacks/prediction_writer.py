"""Predictions to a CSV file, batch by batch (Lightning's ``BasePredictionWriter``)."""

from __future__ import annotations

import csv
from pathlib import Path
from typing import IO, Any, Optional, Sequence

import lightning.pytorch as pl
import torch
from lightning.pytorch.callbacks import BasePredictionWriter

from trainer_cli.errors import UserError

DEFAULT_FILE = "predictions.csv"


class PredictionCSVWriter(BasePredictionWriter):
    """Write ``train predict`` results as CSV, one row per input, written after every batch (memory
    stays flat).

    For a classifier (``predict_step`` returns class probabilities ``[b, C]``, each row summing to 1,
    as :class:`trainer_cli.models.ImageClassifier` does) the columns are ``index``, ``predicted``
    (the arg-max class) and ``prob_0 .. prob_{C-1}``. Any other ``[b, K]`` or ``[b]`` output (a
    regression, logits, embeddings) is written as it is, honestly named: ``index``,
    ``output_0 .. output_{K-1}`` (or ``output``); the first batch decides. Other outputs need a
    writer of their own (a ``BasePredictionWriter`` in ``trainer.callbacks``).

    ``index`` is the sample's position in the predict dataset (from Lightning's index-tracking
    batch sampler; a running count where the loader has none). With several processes each writes
    its own file, ``<stem>.rank<R>.csv``.

    Args:
        output: CSV file to write; empty: ``predictions.csv`` in the run directory
            (``trainer.default_root_dir``). An existing file is replaced.
        float_format: ``format`` spec of the values (``.6g``: 6 significant digits).
    """

    def __init__(self, output: Optional[str] = None, float_format: str = ".6g") -> None:
        super().__init__(write_interval="batch")
        self.output = output
        self.float_format = float_format
        self.path: Path | None = None
        self._file: IO[str] | None = None
        self._writer: Any = None
        self._seen = 0
        self.probabilities: bool | None = None  # decided by the first batch: class probabilities or raw outputs

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
        self.probabilities = None

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
        """Append one row per sample of ``prediction`` (``[b, C]`` probabilities, or ``[b, K]`` / ``[b]`` raw outputs).

        Raises:
            UserError: for a prediction that is not one row of numbers per sample.
        """
        values = self._as_rows(prediction, pl_module)
        if self.probabilities is None:
            self.probabilities = looks_like_probabilities(values)
            if self.probabilities:
                header = ["index", "predicted", *(f"prob_{c}" for c in range(values.shape[1]))]
            else:
                header = (
                    ["index", *(f"output_{k}" for k in range(values.shape[1]))]
                    if values.shape[1] > 1
                    else ["index", "output"]
                )
                print(
                    f"{type(pl_module).__name__}'s predictions are not class probabilities (rows of values >= 0 "
                    "summing "
                    f"to 1): {DEFAULT_FILE if not self.output else self.output} holds them as they are, "
                    f"columns {', '.join(header[1:3])}{', ...' if len(header) > 3 else ''}",
                    flush=True,
                )
            if self._writer is not None:
                self._writer.writerow(header)
        indices = list(batch_indices) if batch_indices else list(range(self._seen, self._seen + len(values)))
        rows = values.tolist()
        if self.probabilities:
            for index, label, row in zip(indices, values.argmax(dim=1).tolist(), rows):
                self._writer.writerow([index, label, *(format(p, self.float_format) for p in row)])
        else:
            for index, row in zip(indices, rows):
                self._writer.writerow([index, *(format(v, self.float_format) for v in row)])
        self._seen += len(values)

    @staticmethod
    def _as_rows(prediction: Any, pl_module: pl.LightningModule) -> torch.Tensor:
        """``prediction`` as a float tensor ``[b, K]`` (``[b]`` becomes ``[b, 1]``)."""
        what = f"{type(pl_module).__name__}.predict_step returned"
        if not isinstance(prediction, torch.Tensor):
            raise UserError(
                f"PredictionCSVWriter writes a tensor [batch] or [batch, K] per batch; {what} a "
                f"{type(prediction).__name__}: "
                "return a tensor from predict_step, or configure a BasePredictionWriter of your own in "
                "trainer.callbacks"
            )
        values = prediction.detach().float().cpu()
        if values.ndim == 1:
            values = values[:, None]
        if values.ndim != 2:
            raise UserError(
                f"PredictionCSVWriter writes a tensor [batch] or [batch, K] per batch; {what} shape "
                f"{tuple(prediction.shape)}: "
                "flatten it in predict_step, or configure a BasePredictionWriter of your own in trainer.callbacks"
            )
        return values

    def on_exception(self, trainer: pl.Trainer, pl_module: pl.LightningModule, exception: BaseException) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None

    def on_predict_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
            kind = "class probabilities" if self.probabilities else "raw outputs"
            print(f"Predictions ({self._seen} rows, {kind}): {self.path}", flush=True)


def looks_like_probabilities(values: torch.Tensor) -> bool:
    """True when every row of ``values`` ``[b, C]`` (C >= 2) is >= 0 and sums to 1 (within 0.01, for
    16-bit precision): class probabilities."""
    if values.ndim != 2 or values.shape[1] < 2 or not len(values):
        return False
    return bool((values >= 0).all() and torch.allclose(values.sum(dim=1), torch.ones(len(values)), atol=1e-2))
