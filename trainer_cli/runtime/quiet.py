"""Library messages that do not apply to a launcher run, silenced in one place, by message.

Each entry of :data:`WARNINGS` (Python warnings) and :data:`LOG_LINES` (lines of Lightning's
``logging`` loggers) names the message it drops (a regular expression matched at the start of
the message) and why it does not apply to a run of this launcher. Everything else still shows:
a new or real warning is never hidden by a broad category filter. :func:`install` is called once
before a run is built (``trainer_cli.runtime.verbs.building_cli``); :func:`tuning` adds
:data:`TUNING_WARNINGS` and the tuner's own progress bar while ``train lr-find`` or
``train scale-batch-size`` runs Lightning's short trial fits.
"""

from __future__ import annotations

import functools
import logging
import re
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from trainer_cli.job import context as job_context


@dataclass(frozen=True)
class Silenced:
    """One message a launcher run does not show.

    Args:
        pattern: Regular expression matched at the start of the message.
        why: Why the message does not apply to a run of this launcher.
        only_if: Silence it only while this returns True (``None``: always).
    """

    pattern: str
    why: str
    only_if: Callable[[], bool] | None = None

    def applies(self) -> bool:
        """Whether the message is silenced now."""
        return self.only_if is None or self.only_if()


def _outside_slurm_job() -> bool:
    return job_context.current().scheduler != "slurm"


_tuning = False  # inside :func:`tuning`


def _while_tuning() -> bool:
    return _tuning


WARNINGS: tuple[Silenced, ...] = (
    Silenced(
        r"The `srun` command is available on your system but is not used",
        "Outside a Slurm job the launcher runs locally on purpose; `train submit` is how a run goes to "
        "Slurm (its sbatch script starts every task with srun). Inside a job the hint still shows.",
        only_if=_outside_slurm_job,
    ),
    Silenced(
        r"No seed found, seed set to",
        "`seed_everything: true` (LightningCLI's default) asks Lightning to choose the seed: the next line, "
        "`Seed set to N`, says which, and config.yaml records it, so the run is repeatable as it is.",
    ),
    Silenced(
        r"`isinstance\(treespec, LeafSpec\)` is deprecated",
        "Lightning's own use of a torch API deprecated under it (lightning/pytorch/utilities/_pytree.py); "
        "nothing the user can change.",
    ),
    Silenced(
        r"'set_vital' is deprecated",
        "torchdata's StatefulDataLoader (the training loaders) calls a torch API deprecated under it "
        "(torchdata/stateful_dataloader/stateful_dataloader.py); nothing the user can change.",
    ),
    Silenced(
        r"Checkpoint directory .*/checkpoints exists and is not empty",
        "A run directory is never reused, so its checkpoints/ holds files only when the run resumes in "
        "place, which is the point (a ModelCheckpoint dirpath of another name is still warned about).",
    ),
    Silenced(
        r"Experiment logs directory .* exists and is not empty. Previous log files",
        "CSVLogger writes into the run directory, which already holds config.yaml and run.json; a resumed "
        "run's metrics.csv is kept and continued (trainer_cli.rundir.identity.keep_csv_metrics), nothing is deleted.",
    ),
    Silenced(
        r"The dirpath has changed from",
        "A run directory is never reused: a checkpoint from another run starts a new run whose "
        "ModelCheckpoint keeps its own top-k bookkeeping, as intended (resuming in place keeps the dirpath).",
    ),
)

LOG_LINES: tuple[Silenced, ...] = (
    Silenced(
        r"(GPU|TPU|HPU) available: ",
        "RunSummary prints the accelerator and the devices used; an unused GPU still gets Lightning's "
        "'GPU available but not used' warning.",
    ),
    Silenced(r"💡 Tip: ", "Advertisements for litlogger / litmodels, which the launcher does not use."),
    Silenced(
        r"Trainer already configured with model summary callbacks",
        "The callbacks config lists its ModelSummary on purpose.",
    ),
    Silenced(
        r"Loading `train_dataloader` to estimate number of stepping batches",
        "RunSummary prints the result (steps per epoch, total optimizer steps).",
    ),
    Silenced(
        r"`weights_only` was not set",
        "Lightning's note on saving a full checkpoint (optimizer and loop state, which a resume needs); it is "
        "about what is saved, not how a file is read (every checkpoint the launcher reads: weights_only=True).",
    ),
    Silenced(
        r"`Trainer.fit` stopped: `max_epochs=\d+` reached",
        "The normal end of a run: the epoch line after it says `epoch N/N` (and the run summary the total "
        "steps); printed before that line, it only read as if something had gone wrong.",
    ),
    Silenced(
        r"`Trainer.fit` stopped: `max_steps=\d+` reached",
        "Each of a tuner's trial fits ends so (scale-batch-size: `--steps_per_trial`; lr-find: `--num_training`): "
        "one line per trial says nothing the tool's own report does not.",
        only_if=_while_tuning,
    ),
    Silenced(
        r"Finished batch size finder, will continue with full run using batch size",
        "`train scale-batch-size` does not continue with a run: it reports the size and writes a config fragment.",
    ),
    Silenced(
        r"Restor(ing|ed all) states from the checkpoint (path )?at .*[/\\]\.(lr_find|scale_batch_size)_",
        "The tuner's own temporary checkpoint (its model and optimizer put back after the trials, the file "
        "deleted): nothing the user asked for or can use.",
    ),
    Silenced(
        r"(Creating initial MLflow database tables|Updating database tables)",
        "MLflow making the tables of the default store (runs/mlflow.db) on a run root's first MLflow run: "
        "nothing to do for the user; the store is named in the README.",
    ),
)

TUNING_WARNINGS: tuple[Silenced, ...] = (
    Silenced(
        r"The number of training batches \(\d+\) is smaller than the logging interval",
        "A tuner's trial fits run a few steps each and log nothing the tool reports (the fit of the tuned run "
        "still warns).",
    ),
)

# the loggers Lightning's rank_zero_info / log.info (and MLflow's store) write these lines to
LIGHTNING_LOGGERS = (
    "lightning.pytorch.utilities.rank_zero",
    "lightning.pytorch.tuner.batch_size_scaling",
    "lightning.pytorch.tuner.lr_finder",
    "lightning.fabric.utilities.rank_zero",
    "lightning.pytorch.trainer.connectors.checkpoint_connector",
    "mlflow.store.db.utils",  # MLflow's, for its database store's first use
)


class _DropSilencedLines(logging.Filter):
    """Drops log records whose message starts with one of :data:`LOG_LINES`."""

    def __init__(self) -> None:
        super().__init__()
        self.patterns = [(re.compile(s.pattern), s) for s in LOG_LINES]

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        return not any(p.match(message) and s.applies() for p, s in self.patterns)


def install() -> list[tuple[logging.Logger, logging.Filter]]:
    """Silence the messages of :data:`WARNINGS` and :data:`LOG_LINES` (idempotent); returns the log
    filters it added (for :func:`installed` to remove again)."""
    for silenced in WARNINGS:
        if silenced.applies():
            warnings.filterwarnings("ignore", message=silenced.pattern)
    added: list[tuple[logging.Logger, logging.Filter]] = []
    for name in LIGHTNING_LOGGERS:
        logger = logging.getLogger(name)
        if not any(isinstance(f, _DropSilencedLines) for f in logger.filters):
            dropper = _DropSilencedLines()
            added.append((logger, dropper))
            logger.addFilter(dropper)
    return added


@contextmanager
def installed() -> Iterator[None]:
    """:func:`install` for the duration of a block: the warning filters and log filters are put back
    afterwards (a TrainerCLI in a user's script leaves the process as it found it)."""
    with warnings.catch_warnings():
        added = install()
        try:
            yield
        finally:
            for logger, log_filter in added:
                logger.removeFilter(log_filter)


@contextmanager
def tuning(progress_bar: bool) -> Iterator[None]:
    """While a tuner (``Tuner.lr_find``, ``Tuner.scale_batch_size``) runs its trial fits: silence
    :data:`TUNING_WARNINGS` and the log lines only a tuning run does not need, and, unless
    ``progress_bar`` (a terminal and ``trainer.enable_progress_bar``), the tqdm bar of
    ``Tuner.lr_find`` (Lightning starts it whatever the Trainer's progress bar, and its carriage
    returns fill a log file)."""
    global _tuning
    from lightning.pytorch.tuner import lr_finder

    bar = lr_finder.tqdm
    with warnings.catch_warnings():
        for silenced in TUNING_WARNINGS:
            warnings.filterwarnings("ignore", message=silenced.pattern)
        _tuning = True
        if not progress_bar:
            lr_finder.tqdm = functools.partial(bar, disable=True)  # type: ignore[misc]
        try:
            yield
        finally:
            _tuning = False
            lr_finder.tqdm = bar  # type: ignore[misc]
