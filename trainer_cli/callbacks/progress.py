"""The launcher's default progress display: in a terminal, Lightning's TQDM bar redrawn at most ten
times a second; elsewhere (a log file, Slurm's log, CI) one line per epoch with its metrics."""

from __future__ import annotations

import math
import sys
import time
from typing import Any

import lightning.pytorch as pl
from lightning.pytorch.callbacks import ProgressBar, TQDMProgressBar

MIN_REDRAW_INTERVAL_S = 0.1


class ThrottledTQDMProgressBar(TQDMProgressBar):
    """Lightning's ``TQDMProgressBar`` whose training bar is redrawn at most every ``min_interval_s``.

    Lightning redraws the bar (and reads every progress-bar metric) on every ``refresh_rate``-th
    batch, whatever the step time: with millisecond steps that is a large share of the per-step
    overhead (``benchmarks/README.md``). Skipped batches lose nothing: each redraw sets the
    absolute batch count, and the last batch of an epoch is always drawn.

    Args:
        refresh_rate: Redraw at most every this many batches (0 disables the bar), as in Lightning.
        process_position: Offset of the bars in the terminal, as in Lightning.
        min_interval_s: Least time between two redraws of the training bar, in seconds.
    """

    def __init__(
        self, refresh_rate: int = 1, process_position: int = 0, min_interval_s: float = MIN_REDRAW_INTERVAL_S
    ) -> None:
        super().__init__(refresh_rate=refresh_rate, process_position=process_position)
        self.min_interval_s = min_interval_s
        self._last_draw = float("-inf")

    def on_train_batch_end(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        now = time.monotonic()
        if batch_idx + 1 != self.total_train_batches and now - self._last_draw < self.min_interval_s:
            return
        self._last_draw = now
        super().on_train_batch_end(trainer, pl_module, outputs, batch, batch_idx)

    def get_metrics(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule
    ) -> dict[str, int | str | float | dict[str, float]]:
        """Lightning's, less ``v_num`` (the logger's version, cut to ``on_0``; RunSummary prints the
        run directory), plus the training metrics logged so far (``train/...`` scalars of
        ``trainer.callback_metrics``), read only when the bar is drawn.

        The launcher's models log their training loss without ``prog_bar=True``: Lightning converts
        every progress-bar value to a Python float after every step, whether the bar draws or not,
        and on a GPU each conversion waits for all queued work (a host sync per step).
        """
        items = super().get_metrics(trainer, pl_module)
        items.pop("v_num", None)
        for key, value in trainer.callback_metrics.items():
            if key.startswith("train/") and key not in items and getattr(value, "numel", lambda: 1)() == 1:
                items[key] = float(value)
        return items


def format_metric(value: float) -> str:
    """A metric as printed by the launcher: 4 decimals; 4 significant digits below 0.001 (learning rates)."""
    if value != 0 and math.isfinite(value) and abs(value) < 1e-3:
        return f"{value:.3e}"
    return f"{value:.4f}"


class EpochLineProgress(ProgressBar):
    """Progress for logs: one line per training epoch, no redraws (global rank 0 only).

    For example ``epoch 3/10  train/loss[step] 0.0410  train/acc 0.9861  val/loss 0.0520  val/acc 0.9850  12.1 s
    7.8 steps/s``:
    the epoch (counted from 1), the metrics logged for it (``trainer.callback_metrics``: training
    metrics first; validation metrics only when validation ran that epoch), its wall time
    (training and validation) and its optimizer steps per second of that time (``train jobs``
    shows the last one of a running job; below one step a second, the seconds per step come first,
    e.g. ``38.2 s/step  0.026 steps/s``). The line is printed once the epoch's last metrics are in, i.e. as
    the next epoch starts or training ends. The default display when stdout is not a terminal.

    Values are the epoch's: a metric logged per step only (``self.log(..., on_step=True, on_epoch=False)``,
    whose value at the epoch's end is its last step's, maybe of a last batch of one sample) is labelled
    ``train_loss[step]``; one logged both per step and per epoch shows its epoch value once (Lightning's
    ``_step`` and ``_epoch`` copies left out). A step value is told from an epoch one by the public
    ``trainer.callback_metrics`` alone: the value after the epoch's last training batch that the epoch's
    end did not replace (validation's, ``val*``, are epoch values) and that a step of this epoch wrote.
    """

    def __init__(self) -> None:
        super().__init__()
        self._enabled = True
        self._epoch_start = 0.0
        self._epoch_start_step = 0
        self._validated = False
        self._finished: tuple[int, float, bool, int] | None = None  # epoch, seconds, validated, steps: not printed yet
        self._at_start: dict[str, Any] = {}  # trainer.callback_metrics as the epoch started
        self._after_steps: dict[str, Any] | None = None  # ... after its last training batch (None: no batch)
        self._step_keys: set[str] = set()  # the metrics seen to be logged per step only

    @property
    def is_enabled(self) -> bool:
        return self._enabled

    def disable(self) -> None:
        self._enabled = False

    def enable(self) -> None:
        self._enabled = True

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._epoch_start = time.monotonic()  # a resume in the middle of an epoch starts no epoch
        self._epoch_start_step = trainer.global_step

    def on_train_epoch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._print_finished(trainer)
        self._epoch_start = time.monotonic()
        self._epoch_start_step = trainer.global_step
        self._validated = False
        self._at_start, self._after_steps = dict(trainer.callback_metrics), None

    def on_train_batch_end(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        total = self.total_train_batches
        if not isinstance(total, int) or batch_idx + 1 >= total:  # the epoch's last batch (every one: no length)
            self._after_steps = dict(trainer.callback_metrics)  # the step values, before the epoch's end

    def on_validation_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if not trainer.sanity_checking:
            self._validated = True

    def on_train_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        # the module's own on_train_epoch_end metrics (train/acc) are logged after this hook
        steps = trainer.global_step - self._epoch_start_step
        self._finished = (trainer.current_epoch, time.monotonic() - self._epoch_start, self._validated, steps)

    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._print_finished(trainer)

    def on_exception(self, trainer: pl.Trainer, pl_module: pl.LightningModule, exception: BaseException) -> None:
        self._print_finished(trainer)

    def epoch_line(self, trainer: pl.Trainer, epoch: int, seconds: float, validated: bool, steps: int = 0) -> str:
        """The line printed for ``epoch`` (0-based) that took ``seconds`` for ``steps`` optimizer steps."""
        total = f"/{trainer.max_epochs}" if trainer.max_epochs is not None and trainer.max_epochs > 0 else ""
        metrics = {
            k: v
            for k, v in trainer.callback_metrics.items()
            if getattr(v, "numel", lambda: 1)() == 1 and (validated or not k.startswith("val"))  # scalars only
        }
        per_step = self._per_step(metrics)
        names = sorted(metrics, key=lambda k: not k.startswith("train"))  # stable: training metrics first
        cells = [
            f"epoch {epoch + 1}{total}",
            *(f"{k}{'[step]' if k in per_step else ''} {format_metric(float(metrics[k]))}" for k in names),
            f"{seconds:.1f} s",
        ]
        if steps > 0 and seconds > 0:
            rate = steps / seconds
            if rate < 1:  # slow steps: their seconds, and a rate that does not round to 0.0
                cells.append(f"{seconds / steps:.1f} s/step")
            cells.append(f"{rate:.1f} steps/s" if rate >= 1 else f"{rate:.2g} steps/s")
        return "  ".join(cells)

    def _per_step(self, metrics: dict[str, Any]) -> set[str]:
        """The keys of ``metrics`` (left out of it: Lightning's ``_step``/``_epoch`` copies of a metric logged both
        ways) whose value is a training step's, not the epoch's (see the class's description)."""
        for key in list(metrics):
            base = key.removesuffix("_step") if key.endswith("_step") else key.removesuffix("_epoch")
            if base != key and base in metrics and (key.endswith("_step") or metrics[base] is metrics[key]):
                del metrics[key]
        after = self._after_steps
        if after is None:  # no training batch this epoch (a resume at its end): as the epochs before
            return {k for k in metrics if k in self._step_keys}
        for key, value in after.items():
            if key.startswith("val") or not _same_value(metrics.get(key), value):
                continue  # the epoch's end (or a validation) replaced it: an epoch value
            if not _same_value(value, self._at_start.get(key)) or key in self._step_keys:
                self._step_keys.add(key)  # a step of this epoch wrote it (or of an earlier one: still per step)
        return {k for k in metrics if k in self._step_keys and _same_value(after.get(k), metrics[k])}

    def _print_finished(self, trainer: pl.Trainer) -> None:
        if self._finished is None:
            return
        finished, self._finished = self._finished, None
        if self._enabled and trainer.is_global_zero:
            print(self.epoch_line(trainer, *finished), flush=True)


def _same_value(a: Any, b: Any) -> bool:
    """Whether two of ``trainer.callback_metrics``' values are one value Lightning logged: each reading of
    the dict gives a new ``detach()`` of the tensor Lightning keeps, which shares its memory."""
    if a is None or b is None:
        return False
    if hasattr(a, "data_ptr") and hasattr(b, "data_ptr"):
        return bool(a.device == b.device and a.data_ptr() == b.data_ptr())
    return a is b


def default_progress_bar(
    trainer_config: dict[str, Any], callbacks: list[pl.Callback], interactive: bool | None = None
) -> list[pl.Callback]:
    """``[ThrottledTQDMProgressBar()]`` (stdout a terminal) or ``[EpochLineProgress()]`` (a log file,
    Slurm's log, CI: no redraws), unless the progress bar is off or the config already names one.
    ``interactive`` (default: whether stdout is a terminal) picks between the two.

    Lightning picks its ``RichProgressBar`` whenever ``rich`` is installed (``lightning[extra]``
    installs it); on the digits benchmark that cost about 0.5 ms of CPU per step more than the
    TQDM bar (``benchmarks/README.md``). Users who prefer Rich list it in ``trainer.callbacks``.
    """
    if trainer_config.get("enable_progress_bar") is False:
        return []
    configured = trainer_config.get("callbacks") or []
    configured = configured if isinstance(configured, list) else [configured]
    if any(isinstance(cb, ProgressBar) for cb in [*configured, *callbacks]):
        return []
    interactive = sys.stdout.isatty() if interactive is None else interactive
    return [ThrottledTQDMProgressBar() if interactive else EpochLineProgress()]
