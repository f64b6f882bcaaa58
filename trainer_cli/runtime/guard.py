"""Around building and running a :class:`trainer_cli.runtime.cli.TrainerCLI`, for both of its entries
(``train``'s verbs, :mod:`trainer_cli.runtime.verbs`, and a user's script): the launcher's process-global
settings put back afterwards, and a failure said as the user's error it stands for."""

from __future__ import annotations

import sys
import warnings
from collections.abc import Iterator
from contextlib import contextmanager

from jsonargparse import set_parsing_settings

from trainer_cli.config.compose import Layers
from trainer_cli.config.explain import as_user_error, user_code_error
from trainer_cli.errors import UserError, disk_full_error, is_disk_full
from trainer_cli.job import export
from trainer_cli.runtime import quiet
from trainer_cli.runtime.run import EXIT_INTERRUPTED, Run


@contextmanager
def _process_state_restored() -> Iterator[None]:
    """Around building and running a :class:`trainer_cli.runtime.cli.TrainerCLI`: the launcher's process-global settings
    (jsonargparse's ``omegaconf_absolute_to_relative_paths``, the quiet warning and log filters of
    :mod:`trainer_cli.runtime.quiet`, ``TRAINER_CLI_RUN_DIR``) apply inside and are put back afterwards, so a
    plain LightningCLI built later in the same process behaves as it would alone."""
    relative_before = False  # jsonargparse's default; it has no public getter to read another value back
    # configs say ${optimizer.init_args.lr}; under a subcommand the key is fit.optimizer...: resolve relative
    set_parsing_settings(omegaconf_absolute_to_relative_paths=True)
    try:
        with warnings.catch_warnings(), quiet.installed(), export.scope():  # what the run exports for its ranks
            yield
    finally:
        set_parsing_settings(omegaconf_absolute_to_relative_paths=relative_before)


def explain_failure(err: Exception, run: Run, layers: Layers | None) -> UserError | None:
    """The :class:`UserError` that ``err``, raised while ``run`` was built or trained, stands for:
    the user's input (a value, with the file and line of ``layers`` that set it), a full disk, or an
    exception of the user's own code before the first step, shown with their frames; None for a bug
    (its traceback is kept). A run directory that saved no checkpoint is removed first, except after
    a crash in training that is not the user's input (its logs are kept). For both entries: ``train``
    (:func:`trainer_cli.runtime.verbs.building_cli`) and a user's script (:class:`TrainerCLI` from the command line)."""
    started = run.trainer is not None and run.trainer.global_step > 0  # a crash in training keeps its logs
    if is_disk_full(err):  # the run's records, logs or metrics (a checkpoint's own error is a UserError already)
        user_error: UserError | None = disk_full_error(err, run.path)
    else:
        user_error = as_user_error(err, run.ckpt_path, layers) or (None if started else user_code_error(err))
    if not started or user_error is not None:
        run.remove_if_untrained()
    return user_error


def _stopped_before_training(run: Run) -> int:
    """After Ctrl-C or SIGTERM while building, before training started: the run directory this made
    is removed, one line says so; returns the exit code (130 or 143)."""
    from trainer_cli.job import stop_signals

    run.remove_if_untrained()
    cause = stop_signals.cause()
    print(
        f"\nStopped by {stop_signals.NAMES.get(cause, 'Ctrl-C')} before training started; nothing was saved.",
        file=sys.stderr,
        flush=True,
    )
    return stop_signals.EXIT_CODES.get(cause, EXIT_INTERRUPTED)
