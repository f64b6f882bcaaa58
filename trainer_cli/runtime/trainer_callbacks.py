"""The callbacks a run of :class:`trainer_cli.runtime.cli.TrainerCLI` adds to the Trainer's own
(``instantiate_trainer``): what the launcher's run directory, resume and requeue need, next to
the callbacks the config and LightningCLI give."""

from __future__ import annotations

from typing import Any

from lightning.pytorch.callbacks import BasePredictionWriter, Callback, ModelCheckpoint

from trainer_cli.callbacks import LastCheckpoint, PredictionCSVWriter, RunSummary, register
from trainer_cli.callbacks.attempt_clock import AttemptClock
from trainer_cli.callbacks.progress import default_progress_bar
from trainer_cli.callbacks.requeue import SynchronizedRequeue
from trainer_cli.job import requeue_signal
from trainer_cli.optim.partials import PlainPartials, has_partials
from trainer_cli.optim.schedule_resume import ScheduleOnResume
from trainer_cli.runtime.checkpointing import ResumeState

register()  # the project's callbacks imported, for short names in a config (`class_path: WarmupEMA`)


def added_callbacks(cli: Any, trainer_config: dict[str, Any], configured: list[Any]) -> list[Any]:
    """The callbacks the run of ``cli`` (a :class:`trainer_cli.runtime.cli.TrainerCLI`) adds to the Trainer's
    ``configured`` ones (``trainer_config``: the trainer's config with the arguments it is built with):
    the run summary, RNG states, the schedule on resume, the checkpoints (:func:`checkpoint_callbacks`),
    the requeue on the scheduler's signal, the run's own (:meth:`trainer_cli.runtime.run.Run.callbacks`)
    and the progress bar; a training run's account of its time
    (:class:`~trainer_cli.callbacks.attempt_clock.AttemptClock`) first, so that its hooks see a step, a save
    or an exception before the others act on it."""
    added: list[Any] = [AttemptClock(str(cli.run_dir) if cli.run_dir else None)] if cli.run.trains else []
    added.append(RunSummary(str(cli.run_dir) if cli.run_dir else None))
    if cli.subcommand == "predict" and not any(isinstance(c, BasePredictionWriter) for c in configured):
        added.append(PredictionCSVWriter())  # predictions.csv in the run directory
    added += [ResumeState(), ScheduleOnResume(cli._subconfig().get("resume_schedule"))]
    if has_partials(cli.model):  # callable optimizer configs in the model's hparams: saved as plain dicts
        added.append(PlainPartials())
    known = [*configured, *lightning_cli_callbacks(cli)]
    if trainer_config.get("enable_checkpointing") is not False and not trainer_config.get("fast_dev_run"):
        added += checkpoint_callbacks(known)
    if requeue_signal.expected():  # the scheduler's warning (Slurm's SIGUSR1) -> checkpoint + requeue
        added.append(SynchronizedRequeue())
    added += cli.run.callbacks(known, added)
    added += default_progress_bar(trainer_config, added)
    return added


def lightning_cli_callbacks(cli: Any) -> list[Any]:
    """The callbacks LightningCLI adds to the Trainer itself, beside ``trainer.callbacks``: those of
    the parser's ``callback_keys`` (``parser.add_lightning_class_args(ModelCheckpoint, ...)``) and
    of ``trainer_defaults["callbacks"]``."""
    keys = getattr(cli.verb_parser, "callback_keys", None) or []
    found = [cli._subconfig_init().get(key) for key in keys]
    defaults = cli.trainer_defaults.get("callbacks") or []
    return [c for c in [*found, *(defaults if isinstance(defaults, list) else [defaults])] if c is not None]


def checkpoint_callbacks(known: list[Any]) -> list[Any]:
    """The checkpoint callbacks the run adds to ``known``, every callback the Trainer is given
    (``trainer.callbacks``, :func:`lightning_cli_callbacks`): Lightning's default ``ModelCheckpoint``
    where none of them is one (as stock LightningCLI's run has it; a model's ``configure_callbacks``
    returning one replaces it, by Lightning's rule), so two never write the same files; and the
    run's resume checkpoint (:class:`~trainer_cli.callbacks.LastCheckpoint`) unless one of them is one:
    ``checkpoints/last.ckpt``, or ``checkpoints/resume.ckpt`` where a user's ``save_last`` one writes
    ``last.ckpt`` (it falls behind the run: Lightning rewrites it only with a top-k file)."""
    added: list[Any] = []
    if not any(isinstance(c, ModelCheckpoint) for c in known):
        added.append(ModelCheckpoint())
    if not any(isinstance(c, LastCheckpoint) for c in known):
        added.append(LastCheckpoint())  # its dirpath: the run's checkpoints/ (Run.callbacks, bind_to_log_dir)
    return added


class ResumeOnce(Callback):
    """For a script built with ``run=False`` resumed with ``--ckpt_path``: the Trainer's stateful checkpoint
    path (``trainer.ckpt_path``, set by :class:`trainer_cli.runtime.cli.TrainerCLI`) makes the script's own
    ``trainer.fit(model, ...)`` resume; cleared once that fit has started, so that the script's later
    ``trainer.test(ckpt_path="best")`` reads its own choice, without Lightning's warning of two paths."""

    def on_fit_start(self, trainer: Any, pl_module: Any) -> None:
        trainer.ckpt_path = None
