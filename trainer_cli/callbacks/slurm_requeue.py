"""Slurm requeue on SIGUSR1, done at a point every DDP rank reaches together."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import torch
from lightning.fabric.plugins.environments import SLURMEnvironment
from lightning.fabric.utilities.rank_zero import rank_zero_only

from trainer_cli.launch import jobstate, requeue_signal
from trainer_cli.launch import restarts as restarts_log
from trainer_cli.launch.requeue_signal import requeue_in_progress  # noqa: F401 - asked by trainer_cli.cli

ENV_MAX_RESTARTS = "TRAINER_CLI_MAX_RESTARTS"  # exported by the sbatch template (--slurm.max_restarts)
ENV_REQUEUE_MODE = "TRAINER_CLI_REQUEUE_MODE"  # (--slurm.requeue_mode: requeue or resubmit)
ENV_SIGNAL_DELAY_S = "TRAINER_CLI_SIGNAL_DELAY_S"  # (--slurm.signal_delay_s)
HPC_CKPT = re.compile(r"hpc_ckpt_(\d+)\.ckpt(\.used)?")  # .used: retired once resumed from (trainer_cli.rundir)
REQUEUE_WAIT_S = 600  # how long a requeued job's ranks wait for Slurm's SIGTERM before exiting


def _say(message: str) -> None:
    if rank_zero_only.rank == 0:
        print(f"trainer-cli: {message}", flush=True)


def next_hpc_checkpoint(directory: Path) -> Path:
    """``directory/hpc_ckpt_<N>.ckpt`` with N one past the highest there, retired ones included (as Lightning counts)."""
    numbers = [int(m.group(1)) for p in directory.glob("hpc_ckpt_*") if (m := HPC_CKPT.fullmatch(p.name))]
    return directory / f"hpc_ckpt_{max(numbers, default=0) + 1}.ckpt"


class SynchronizedRequeue(pl.Callback):
    """Slurm auto-requeue (an hpc checkpoint, then ``scontrol requeue``), run by every rank at the
    same point of training instead of inside a signal handler.

    SIGUSR1 (Slurm's warning before the time limit, or ``scancel -s USR1``) is recorded from the
    first moment of the ``train`` process (:mod:`trainer_cli.launch.requeue_signal`, installed in
    ``main()``; Lightning then leaves the signal alone). The record is acted on when training
    starts (so a signal during start-up or while restoring a checkpoint is not lost) and every
    ``check_every_n_steps`` training batches; under DDP the ranks all-reduce it first, so they save
    and requeue together (a save inside the handler could pair one rank's checkpoint barrier with
    another's gradient all-reduce and hang the job).

    Acting on it: every rank saves ``hpc_ckpt_<N>.ckpt`` in the run directory, and rank 0 tells the
    time limit's warning from a preemption and logs the event in ``<run>/restarts.jsonl``
    (:mod:`trainer_cli.launch.restarts`). If the job may restart again (its restarts, requeues and
    resubmissions together, below ``--slurm.max_restarts``) every rank makes SIGTERM a quiet exit,
    rank 0 runs ``scontrol requeue``, one line says so, and the ranks wait for Slurm to stop them (no
    Lightning SIGTERM handling, no collective left half-done, no resume hint). With
    ``--slurm.requeue_mode resubmit``, or when ``scontrol requeue`` fails, the ranks end instead and
    the batch script queues the same script into the same run (:func:`trainer_cli.launch.jobstate.ended`).
    Past the cap training stops after the checkpoint (the job ends, nothing waits in the queue) and
    a line says which cause ended the run and how to resume.

    Active only in ``fit`` under a Slurm batch job with auto-requeue; otherwise the signal gets its
    default action back.

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
        environment = getattr(trainer.strategy, "cluster_environment", None)
        if not isinstance(environment, SLURMEnvironment) or not environment.auto_requeue:
            requeue_signal.uninstall()  # no Slurm requeue here: the signal's default action
            return
        self._installed_here = not requeue_signal.installed()  # in a `train` process main() installed it
        self._active = requeue_signal.install()

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._check(trainer)  # a signal that arrived while starting or restoring a checkpoint

    def on_train_batch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule, *args: Any) -> None:
        if trainer.global_step % self.check_every_n_steps == 0:
            self._check(trainer)

    def _check(self, trainer: pl.Trainer) -> None:
        if not self._active:
            return
        signalled = requeue_signal.take()
        if trainer.world_size > 1:
            flag = torch.tensor(float(signalled), device=trainer.strategy.root_device)
            signalled = float(trainer.strategy.reduce(flag, reduce_op="max")) > 0
        if signalled:
            self._requeue(trainer)

    def _requeue(self, trainer: pl.Trainer) -> None:
        run_dir = Path(trainer.default_root_dir)
        restarts = jobstate.restart_count()
        max_restarts = int(os.environ.get(ENV_MAX_RESTARTS, "-1"))
        mode = os.environ.get(ENV_REQUEUE_MODE, "requeue")
        job_id = jobstate.this_job_id()
        for logger in trainer.loggers:
            logger.finalize("finished")  # the metrics so far are on disk
        path = trainer.strategy.broadcast(str(next_hpc_checkpoint(run_dir)))
        trainer.save_checkpoint(path)  # every rank takes part; the last collective of this job
        step = trainer.global_step
        cause, left_s = ("", None)
        if trainer.is_global_zero:  # time limit or preemption, from the time the job had left (trainer_cli.launch.restarts)
            delay_s = int(os.environ.get(ENV_SIGNAL_DELAY_S) or 0)
            cause, left_s = restarts_log.cause_of_signal(jobstate.scontrol_id(), delay_s, requeue_signal.received_at())
        said = f"SIGUSR1 at step {step} ({cause}{'' if left_s is None else f', {left_s} s left'})"
        event = {"job_id": job_id, "cause": cause, "seconds_left": left_s, "step": step, "checkpoint": path}
        if max_restarts >= 0 and restarts >= max_restarts:
            if trainer.is_global_zero:
                restarts_log.record(run_dir, restart=restarts, action="stop", **event)
                jobstate.update(run_dir, ended_by=cause)
                _say(
                    f"{said}: saved {path}; not requeued, restart {restarts} is the last that --slurm.max_restarts "
                    f"{max_restarts} allows: the run stops here, ended by {restarts_log.ENDED_BY.get(cause, cause)}. "
                    f"Resume with: train submit --config {run_dir / 'config.yaml'}"
                )
            trainer.should_stop = True  # end training here, the checkpoint is saved
            return
        # Every rank knows the outcome without asking: from here on Slurm's SIGTERM (sent as soon as
        # the requeue is accepted) ends each rank quietly, with no collective left half-done.
        requeue_signal.mark_requeued()
        signal.signal(signal.SIGTERM, lambda signum, frame: os._exit(0))
        if mode == "resubmit":  # the batch script resubmits the job once every task has ended
            if trainer.is_global_zero:
                _resubmit(run_dir, path, said, restarts + 1, event)
            os._exit(0)
        if trainer.is_global_zero:  # said and recorded first: the SIGTERM may come before scontrol returns
            restarts_log.record(run_dir, restart=restarts + 1, action="requeue", **event)
            jobstate.requeued(run_dir, path)
            _say(f"{said}: saved {path}; requeueing job {job_id} (restart {restarts + 1}), it resumes on its own")
            proc = subprocess.run(["scontrol", "requeue", str(jobstate.scontrol_id())], capture_output=True, text=True)  # this array task alone
            if proc.returncode != 0:  # the other ranks are stopped by srun --kill-on-bad-exit
                _say(f"`scontrol requeue {job_id}` failed: {proc.stderr.strip() or proc.stdout.strip()}; resubmitting instead")
                _resubmit(run_dir, path, None, restarts + 1, event)
                os._exit(1)
        _wait_for_slurm()

    def teardown(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        if self._installed_here:  # built in-process (tests, notebooks): leave the signal as it was
            requeue_signal.uninstall()
        self._active = self._installed_here = False


def _resubmit(run_dir: Path, checkpoint: str, said: str | None, restart: int, event: dict[str, Any]) -> None:
    """Rank 0: record that the job resubmits itself (``--slurm.requeue_mode resubmit``, or a failed
    requeue); the batch script's ``jobstate end`` then queues the same script into the same run.
    ``said``: the start of the line (the signal and step), None when a line said so already."""
    restarts_log.record(run_dir, restart=restart, action="resubmit", **event)
    jobstate.resubmit_requested(run_dir, checkpoint)
    start = f"{said}: saved {checkpoint}; the job" if said else "The job"
    _say(f"{start} resubmits itself into {run_dir} once its tasks have ended (restart {restart})")


def _wait_for_slurm() -> None:
    """After a requeue: Slurm stops every task (SIGTERM, handled by a quiet exit); wait for it."""
    deadline = time.monotonic() + REQUEUE_WAIT_S
    while time.monotonic() < deadline:
        time.sleep(1)
    os._exit(0)
