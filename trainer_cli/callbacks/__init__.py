"""Callbacks Lightning lacks."""

from trainer_cli.callbacks.ema import WarmupEMA
from trainer_cli.callbacks.final_checkpoint import FinalCheckpoint
from trainer_cli.callbacks.grad_norm import GradNormMonitor
from trainer_cli.callbacks.last_checkpoint import LastCheckpoint
from trainer_cli.callbacks.non_finite import NonFiniteLoss
from trainer_cli.callbacks.prediction_writer import PredictionCSVWriter
from trainer_cli.callbacks.progress import EpochLineProgress, ThrottledTQDMProgressBar
from trainer_cli.callbacks.run_summary import RunSummary

__all__ = [
    "EpochLineProgress",
    "FinalCheckpoint",
    "GradNormMonitor",
    "LastCheckpoint",
    "NonFiniteLoss",
    "PredictionCSVWriter",
    "RunSummary",
    "ThrottledTQDMProgressBar",
    "WarmupEMA",
]
