"""Requeue on the scheduler's warning signal (Slurm's SIGUSR1), done at a point every DDP rank reaches together."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
from lightning.fabric.utilities.rank_zero import rank_zero_only

from trainer_cli.job import context as job_context
from trainer_cli.job import jobstate, requeue_signal, stop_signals
from trainer_cli.job import restarts as restarts_log
from trainer_cli.job.scheduler import in_job_side

HPC_CKPT = re.compile(r"hpc_ckpt_(\d+)\.ckpt(\.used)?")  # .used: retired once resumed from (trainer_cli.rundir.policy)


def _say(message: str) -> None:
    if rank_zero_only.rank == 0:  # type: ignore[attr-defined]
        print(f"trainer-cli: {message}", flush=True)


def next_hpc_checkpoint(directory: Path) -> Path:
    """``directory/hpc_ckpt_<N>.ckpt`` with N one past the highest there, retired ones included (as Lightning
    counts)."""
    numbers = [int(m.group(1)) for p in directory.glob("hpc_ckpt_*") if (m := HPC_CKPT.fullmatch(p.name))]
    return directory / f"hpc_ckpt_{max(numbers, default=0) + 1}.ckpt"


class SynchronizedRequeue(pl.Callback):
    """Auto-requeue: an hpc checkpoint saved by every rank at the same step, then training stops and the
    batch script restarts the job; nothing is done inside a signal handler.

    The job's requeue signal (:attr:`trainer_cli.job.context.JobContext.requeue_signal`; under Slurm
    SIGUSR1, its warning before the time limit, or ``scancel -s USR1``) is recorded from the
    first moment of the ``train`` process (:mod:`trainer_cli.job.requeue_signal`, installed in
    ``main()``; Lightning then leaves the signal alone). The record is acted on when training
    starts (so a signal during start-up or while restoring a checkpoint is not lost) and every
    ``check_every_n_steps`` training batches; under DDP the ranks agree on it with the one
    all-reduce of that step boundary (:func:`trainer_cli.job.stop_signals.agree`, which carries
    SIGTERM and Ctrl-C too), so they save together.

    Acting on it: every rank saves ``hpc_ckpt_<N>.ckpt`` in the run directory, rank 0 tells the
    time limit's warning from a preemption (:mod:`trainer_cli.job.restarts`) and leaves the cause
    in ``job.json``, training stops, and every task exits with
    :data:`trainer_cli.job.jobstate.EXIT_REQUEUE` (75). The batch script decides once ``srun``
    returned (:func:`trainer_cli.schedulers.slurm.batch.end_of_step`): ``scontrol requeue`` (with a
    timeout; when it fails, a resubmission), a resubmission (``--slurm.requeue_mode resubmit``), or,
    past ``--slurm.max_restarts``, the end of the run with a line naming the cause and how to resume.

    Active only in ``fit`` in a job whose scheduler sends a requeue signal
    (:func:`trainer_cli.job.requeue_signal.expected`), unless the Trainer's cluster environment turns
    auto-requeue off (Lightning's ``SLURMEnvironment(auto_requeue=False)`` in ``trainer.plugins``): then
    the signal gets its default action back.

    Args:
        check_every_n_steps: Training batches between checks (under DDP each check is one tiny all-reduce).
    """

    def __init__(self, check_every_n_steps: int = 1) -> None:
        if check_every_n_steps < 1:
            raise ValueError(f"check_every_n_steps must be >= 1, got {check_every_n_steps}")
        self.check_every_n_steps = check_every_n_steps
        self._active = False
        self._installed_here = False

    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        if stage != "fit":
            return
        # a one-process strategy (SingleDeviceStrategy: `strategy: auto` for one task, as `train init` writes)
        # keeps no cluster environment, yet is requeued as any other: only an environment that says no stops it
        environment = getattr(trainer.strategy, "cluster_environment", None)
        if not requeue_signal.expected() or getattr(environment, "auto_requeue", True) is False:
            requeue_signal.uninstall()  # no requeue on the signal here: its default action
            return
        self._installed_here = not requeue_signal.installed()  # in a `train` process main() installed it
        self._active = requeue_signal.install()

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._check(
            trainer, ("start", trainer.current_epoch, trainer.global_step)
        )  # a signal while starting or restoring

    def on_train_batch_end(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        if batch_idx + 1 >= trainer.num_training_batches:
            # the epoch's last batch: a checkpoint before the epoch's end resumes one batch off; the next batch acts
            return
        if trainer.global_step % self.check_every_n_steps == 0:
            self._check(trainer, (trainer.current_epoch, batch_idx, trainer.global_step))

    def _check(self, trainer: pl.Trainer, key: Any) -> None:
        if not self._active:
            return
        stop_signals.agree(trainer, key)  # the one collective of this boundary, shared with SIGTERM / Ctrl-C
        if stop_signals.take_requeue():
            self._requeue(trainer)

    def _requeue(self, trainer: pl.Trainer) -> None:
        run_dir = Path(trainer.default_root_dir)
        for logger in trainer.loggers:
            logger.finalize("finished")  # the metrics so far are on disk
        path = trainer.strategy.broadcast(str(next_hpc_checkpoint(run_dir)))
        trainer.save_checkpoint(path)  # every rank takes part, at the same step
        if trainer.is_global_zero:  # time limit or preemption, as the scheduler's in-job side tells them apart
            job = job_context.current()
            side = in_job_side(job)
            signalled_at = requeue_signal.received_at()
            cause, left_s = side.cause_of_signal(job, signalled_at) if side else (restarts_log.UNKNOWN, None)
            request = {"cause": cause, "seconds_left": left_s, "step": trainer.global_step, "checkpoint": path,
                       "signalled_at": signalled_at}  # fmt: skip
            jobstate.update(run_dir, requeue_request=request)  # read by the batch script's `batch end`
            _say(
                f"SIGUSR1 at step {trainer.global_step}: saved {path}; training stops, the batch script restarts the "
                "job"
            )
        requeue_signal.mark_requeued()
        # Stop here, on every rank: no other checkpoint may follow this one (`should_stop` would end
        # the epoch early and save it as complete: its remaining batches would be skipped on resume)
        raise SystemExit(jobstate.EXIT_REQUEUE)

    def teardown(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        if self._installed_here:  # built in-process (tests, notebooks): leave the signal as it was
            requeue_signal.uninstall()
        self._active = self._installed_here = False
