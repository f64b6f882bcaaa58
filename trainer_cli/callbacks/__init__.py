"""Callbacks Lightning lacks."""

from trainer_cli.callbacks.prediction_writer import PredictionCSVWriter
from trainer_cli.callbacks.run_summary import RunSummary

__all__ = ["PredictionCSVWriter", "RunSummary"]
