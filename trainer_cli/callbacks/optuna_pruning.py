"""Pruning a sweep's trial: report the monitored metric to the Optuna study at each validation, and
stop the trial when the study's pruner says so.

A sweep trial's ``config.yaml`` names this callback when the sweep has a pruner
(``--sweep_pruner``); the trial runs as a plain ``train fit`` process, so the callback opens the study
itself from its storage (the journal file in the sweep directory, or a database URL) and finds the
trial by its number. Global rank 0 reports and asks; its answer is broadcast, so under DDP every rank
stops at the same step. A pruned trial is not aborted: ``trainer.should_stop`` ends the fit after
this validation, whose checkpoints (``last.ckpt``) are still written, and the trial's user attribute
``pruned_at_step`` tells the sweep (:mod:`trainer_cli.sweeps.study`) to mark it PRUNED; the sweep,
not this callback, tells the study the trial's end, once.

Why not optuna-integration's ``PyTorchLightningPruningCallback``: under DDP it accepts only an
RDB storage (not the journal file a sweep keeps by default), without DDP it raises ``TrialPruned``
inside ``on_validation_end`` (the fit is aborted before that validation's checkpoint is saved), and
it needs the ``optuna.Trial`` of the process that asked for it, which a trial run as its own process
does not have.

Intermediate values are reported at ``trainer.global_step`` (unique per validation, also with
several validations per epoch, and unchanged by a resume). Optuna is imported on the first report.
"""

from __future__ import annotations

import warnings
from typing import Any

import lightning.pytorch as pl

from trainer_cli.callbacks.optuna_study import PRUNED_ATTR, make_pruner, open_storage

__all__ = ["PRUNED_ATTR", "OptunaPruning", "make_pruner", "open_storage"]


class OptunaPruning(pl.Callback):
    """Report ``monitor`` to trial ``trial_number`` of study ``study_name`` after each validation; stop
    the fit (every rank, same step) when the pruner prunes it.

    Args:
        storage: The study's storage: a journal file's path or a database URL.
        study_name: The study's name in that storage.
        trial_number: The trial's number in the study (``trial_<n>``).
        monitor: The metric reported (the sweep's metric).
        pruner: The pruner (:func:`make_pruner`), the sweep's ``--sweep_pruner``: Optuna keeps no
            pruner in the storage.
    """

    def __init__(self, storage: str, study_name: str, trial_number: int, monitor: str, pruner: str = "median") -> None:
        self.storage = storage
        self.study_name = study_name
        self.trial_number = trial_number
        self.monitor = monitor
        self.pruner = pruner
        self._trial: Any = None
        self._set_user_attr: Any = None
        self._finished = False

    def _open(self) -> Any:
        if self._trial is None:
            import optuna

            storage = optuna.storages.get_storage(open_storage(self.storage))
            study = optuna.load_study(study_name=self.study_name, storage=storage, pruner=make_pruner(self.pruner))
            study_id = storage.get_study_id_from_name(self.study_name)
            trial_id = storage.get_trial_id_from_study_id_trial_number(study_id, self.trial_number)
            self._trial = optuna.trial.Trial(study, trial_id)
            self._set_user_attr = lambda key, value: storage.set_trial_user_attr(trial_id, key, value)
        return self._trial

    def _report(self, trainer: pl.Trainer) -> bool:
        """Report the metric (rank 0); whether the trial is to stop."""
        value = trainer.callback_metrics.get(self.monitor)
        if value is None or self._finished:
            return False
        import optuna

        trial = self._open()
        try:
            trial.report(float(value), step=trainer.global_step)
            prune = bool(trial.should_prune())
        except optuna.exceptions.UpdateFinishedTrialError:  # a finished trial run again: nothing to report
            warnings.warn(
                f"trial {self.trial_number} of study {self.study_name} is finished: not reported", stacklevel=2
            )
            self._finished = True
            return False
        if prune:
            self._set_user_attr(PRUNED_ATTR, trainer.global_step)
        return prune

    def on_validation_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if trainer.sanity_checking:
            return
        prune = self._report(trainer) if trainer.is_global_zero else False
        prune = bool(trainer.strategy.broadcast(prune, src=0))
        if prune:
            trainer.should_stop = True
            if trainer.is_global_zero:
                print(
                    f"trial {self.trial_number} pruned at step {trainer.global_step} ({self.monitor} "
                    f"{float(trainer.callback_metrics[self.monitor]):.4g})",
                    flush=True,
                )
