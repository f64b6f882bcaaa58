"""Slurm requeue on SIGUSR1, done at a point every DDP rank reaches together."""

from __future__ import annotations

import signal
from typing import Any

import lightning.pytorch as pl
import torch
from lightning.fabric.plugins.environments import SLURMEnvironment


class SynchronizedRequeue(pl.Callback):
    """Lightning's Slurm auto-requeue (hpc checkpoint, then ``scontrol requeue``), run by every rank
    at the same training step instead of inside the signal handler.

    Lightning 2.6 saves the hpc checkpoint inside its SIGUSR1 handler. Under DDP each rank runs that
    handler whenever the signal reaches it, so one rank can enter the checkpoint's barrier while
    another is still inside a gradient all-reduce: the collectives pair up wrongly and the job can
    hang (seen here on the local Slurm cluster). This callback installs a SIGUSR1 handler of its own
    before Lightning registers one (Lightning then leaves the signal alone); the handler only
    records the signal. Every ``check_every_n_steps`` training batches the ranks all-reduce that
    record, and if any rank was signalled they all run Lightning's own requeue handler together.

    Active only under Slurm with auto-requeue and more than one process; otherwise Lightning's
    handling is untouched.

    Args:
        check_every_n_steps: Training batches between checks (each check is one tiny all-reduce).
    """

    def __init__(self, check_every_n_steps: int = 1) -> None:
        if check_every_n_steps < 1:
            raise ValueError(f"check_every_n_steps must be >= 1, got {check_every_n_steps}")
        self.check_every_n_steps = check_every_n_steps
        self._signum: int | None = None
        self._previous: Any = None
        self._signalled = False

    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        environment = getattr(trainer.strategy, "cluster_environment", None)
        if stage != "fit" or trainer.world_size < 2:
            return
        if not isinstance(environment, SLURMEnvironment) or not environment.auto_requeue:
            return
        self._signum = environment.requeue_signal or signal.SIGUSR1
        self._signalled = False
        self._previous = signal.signal(self._signum, self._record)

    def _record(self, signum: int, frame: Any) -> None:
        self._signalled = True

    def on_train_batch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule, *args: Any) -> None:
        if self._signum is None or (trainer.global_step % self.check_every_n_steps):
            return
        flag = torch.tensor(float(self._signalled), device=trainer.strategy.root_device)
        if float(trainer.strategy.reduce(flag, reduce_op="max")) > 0:
            self._signalled = False
            trainer._signal_connector._slurm_sigusr_handler_fn(self._signum, None)  # Lightning's requeue

    def teardown(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        if self._signum is not None:
            signal.signal(self._signum, self._previous if self._previous is not None else signal.SIG_DFL)
            self._signum = None
