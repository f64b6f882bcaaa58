"""Around building and running a :class:`trainer_cli.runtime.cli.TrainerCLI`, for both of its entries
(``train``'s verbs, :mod:`trainer_cli.runtime.verbs`, and a user's script): the launcher's process-global
settings put back afterwards, and a failure said as the user's error it stands for."""

from __future__ import annotations

import sys
import time
import warnings
from collections.abc import Iterator
from contextlib import contextmanager

from jsonargparse import set_parsing_settings

from trainer_cli.atomic import LockTimeout
from trainer_cli.config.explain import as_user_error, user_code_error
from trainer_cli.config.keys import Layers
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
    (its traceback is kept). A run directory this start made is removed when it trained nothing and
    saved no checkpoint; one that trained is kept, whatever the error (:func:`remove_or_say_kept`). For
    both entries: ``train`` (:func:`trainer_cli.runtime.verbs.building_cli`) and a user's script
    (:class:`TrainerCLI` from the command line). The rank processes this one launched are ended first
    when its process group never formed (:func:`_end_ranks_left_waiting`)."""
    started = run.trained  # a crash in training keeps its logs
    _end_ranks_left_waiting(run)
    if is_disk_full(err):  # the run's records, logs or metrics (a checkpoint's own error is a UserError already)
        user_error: UserError | None = disk_full_error(err, run.path)
    elif isinstance(err, LockTimeout):  # a record's lock (trainer_cli.atomic): its message is the line
        user_error = UserError(str(err))
    else:
        user_error = as_user_error(err, run.ckpt_path, layers) or (None if started else user_code_error(err))
    remove_or_say_kept(run)  # a run that trained is kept, crashed or not
    return user_error


def _end_ranks_left_waiting(run: Run) -> None:
    """The rank processes this process launched (Lightning's subprocess launcher: ``train fit`` with
    DDP on one machine) are ended when this process fails before its process group formed (its
    rendezvous failed: the port was taken): they would wait for it in theirs until the group's
    timeout (30 minutes), holding the terminal and the job. Nothing of theirs is lost: no rank
    trains or saves before the group forms. They are taken from the launcher's list first, so that
    Lightning's observer of the ranks (which kills this process when one ends with an error) does
    not see them end."""
    launcher = getattr(getattr(run.trainer, "strategy", None), "launcher", None)
    procs = getattr(launcher, "procs", None)
    if not procs or not isinstance(procs, list):
        return
    import torch.distributed

    if torch.distributed.is_available() and torch.distributed.is_initialized():
        return
    ranks = list(procs)
    procs.clear()
    for proc in ranks:  # SIGKILL, as Lightning's observer ends them: a rank blocked in torch's rendezvous
        proc.kill()  # may not act on SIGTERM, and one that does would print a line of its own (stopped by SIGTERM)
    deadline = time.monotonic() + 10  # one not ended by then (stuck in the kernel) ends without this process
    for proc in ranks:
        while proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)


def remove_or_say_kept(run: Run) -> None:
    """After a failure: the run directory this start made is removed when it trained nothing and saved
    no checkpoint (:meth:`Run.remove_if_untrained`); a run that trained is kept, and one line on stderr
    (global rank 0) says what was kept when it holds no checkpoint (its steps were not saved)."""
    from lightning.fabric.utilities.rank_zero import rank_zero_only

    from trainer_cli.runtime.run_stop import kept_without_checkpoint

    if run.remove_if_untrained() or not run.trained or run.path is None or not run.path.is_dir():
        return
    if rank_zero_only.rank == 0 and not any(run.path.rglob("*.ckpt")):  # type: ignore[attr-defined]
        kept = kept_without_checkpoint(run, run.trainer)
        print(kept[:1].upper() + kept[1:], file=sys.stderr, flush=True)


def _stopped_before_training(run: Run) -> int:
    """After Ctrl-C or SIGTERM outside Lightning's own handling (while building, before training
    started; or a second Ctrl-C while it shuts down): the run directory this made is removed when it
    trained nothing, one line says so, else the lines of a stopped run say what was kept; returns the
    exit code (130 or 143)."""
    from trainer_cli.job import stop_signals
    from trainer_cli.runtime.run_stop import resume_hint

    cause = stop_signals.cause()
    name = stop_signals.NAMES.get(cause, "Ctrl-C")
    if run.trained:
        print(resume_hint(run, name, run.trainer), file=sys.stderr, flush=True)
        return stop_signals.EXIT_CODES.get(cause, EXIT_INTERRUPTED)
    run.remove_if_untrained()
    print(f"\nStopped by {name} before training started; nothing was saved.", file=sys.stderr, flush=True)
    return stop_signals.EXIT_CODES.get(cause, EXIT_INTERRUPTED)
