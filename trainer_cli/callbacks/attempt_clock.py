"""The launcher's account of where each start of a run spends its time, and its peak memory.

:class:`AttemptClock` drives a :class:`trainer_cli.rundir.attempts.Recorder` from Lightning's hooks
(the record's fields and files: :mod:`trainer_cli.rundir.attempts`; the goodput and badput read from
them: :mod:`trainer_cli.rundir.goodput`). Timestamps only at boundaries (setup, checkpoint restore,
fit start, train start, the first step, validation, checkpoint saves, the end), never a device sync;
per training step one ``time.time()`` and one ``os.pwrite`` of the step reached.
"""

from __future__ import annotations

import atexit
import importlib.util
import os
import socket
import sys
import threading
import time
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import torch
from lightning.pytorch.trainer.states import TrainerFn
from lightning.pytorch.utilities.exceptions import SIGTERMException

from trainer_cli.job import context as job_context
from trainer_cli.job import export, jobstate
from trainer_cli.job.scheduler import JOB_FIELD
from trainer_cli.rundir.attempts import CHECKPOINT, VALIDATION, Recorder
from trainer_cli.rundir.layout import ENV_RUN_DIR

ENV_ATTEMPT = "TRAINER_CLI_ATTEMPT"
"""The id of this start, for the DDP ranks Lightning launches from the first (they share it)."""
EXIT_REQUEUE = 75  # trainer_cli.job.jobstate.EXIT_REQUEUE: a task that saved on SIGUSR1 for a restart
_CURRENT: list[AttemptClock] = []  # the latest clock of this process that measures an attempt
_LAST_END = [0.0]  # when the last fit of this process ended (the next one's start-up begins there)


def attempt_id() -> str:
    """The id of this start: the one the launching rank exported, else ``<job>.<restart>`` in a
    scheduler's job (every task of the step computes the same), else ``<time>-<pid>`` (exported for the
    DDP ranks started from here)."""
    given = os.environ.get(ENV_ATTEMPT)
    if given and not given.endswith(f"-{os.getpid()}"):
        return given
    job = job_context.current()
    if job.in_job:
        value = f"{job.job_id}.{jobstate.policy().count}"
    else:
        value = f"{time.time():.0f}-{os.getpid()}"
    export.export(ENV_ATTEMPT, value)
    return value


def process_started() -> float:
    """When this process started (``time.time()`` clock), to about 10 ms on Linux: the kernel's start of the
    process (``/proc/self/stat``'s ``starttime``, clock ticks since boot) against ``/proc/uptime``.
    psutil's ``create_time()`` counts from ``/proc/stat``'s boot time in whole seconds, so it is up to a second
    early, which made every attempt up to a second long (more than sacct's allocation of a short attempt);
    it is the fallback elsewhere, and the import of this module where neither answers."""
    try:
        with open("/proc/self/stat") as stat, open("/proc/uptime") as uptime:
            ticks = int(stat.read().rpartition(")")[2].split()[19])  # field 22 (the fields after the name start at 3)
            since_boot = float(uptime.read().split()[0])
            now = time.time()
        return now - since_boot + ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        pass
    try:
        import psutil  # type: ignore[import-untyped]

        return float(psutil.Process().create_time())
    except Exception:  # noqa: BLE001 - no psutil or no /proc: the import of this module is the nearest
        return _IMPORTED


_IMPORTED = time.time()


def _epoch(iso: Any) -> float | None:
    """An ISO time ``job.json`` holds, as seconds since the epoch; None when it is none."""
    from datetime import datetime

    try:
        return datetime.fromisoformat(str(iso)).timestamp()
    except (TypeError, ValueError):
        return None


def checkpoint_written() -> None:
    """The checkpoint plugin returned from a save (the launcher's: :mod:`trainer_cli.runtime.checkpointing`):
    the training thread's part of the save ends."""
    if _CURRENT:
        _CURRENT[-1].checkpoint_done(threading.get_ident())


class _GpuSampler(threading.Thread):
    """NVML utilisation and device memory in use, sampled every ``every_s`` (``torch.cuda.utilization``)."""

    def __init__(self, device: torch.device, every_s: float) -> None:
        super().__init__(name="trainer-cli-gpu-sampler", daemon=True)
        self.device, self.every_s = device, every_s
        self.count, self.total, self.peak, self.used_peak = 0, 0.0, 0.0, 0
        self.halt = threading.Event()

    def run(self) -> None:
        while not self.halt.wait(self.every_s):
            try:
                util = float(torch.cuda.utilization(self.device))
                used = int(torch.cuda.device_memory_used(self.device))
            except Exception:  # noqa: BLE001 - NVML gone or refusing: sampling is advice
                return
            self.count, self.total = self.count + 1, self.total + util
            self.peak, self.used_peak = max(self.peak, util), max(self.used_peak, used)

    def stats(self) -> dict[str, Any]:
        if not self.count:
            return {}
        return {
            "gpu_util_mean": round(self.total / self.count, 1),
            "gpu_util_max": self.peak,
            "gpu_util_samples": self.count,
            "gpu_memory_used_peak_bytes": self.used_peak,
        }


class AttemptClock(pl.Callback):
    """Records, per start of a ``fit`` and per rank, where its time went and its peak memory, in the
    run directory (:mod:`trainer_cli.rundir.attempts`). Added by the launcher to every run with a
    run directory.

    Args:
        run_dir: The run directory; None: the one the run exported for its processes
            (``TRAINER_CLI_RUN_DIR``: a user's script's is known once its Trainer is built), else
            nothing is recorded.
        gpu_sample_s: Seconds between NVML samples of GPU utilisation (on CUDA, where ``pynvml``, from
            ``nvidia-ml-py``, is importable).
    """

    def __init__(self, run_dir: Path | str | None = None, gpu_sample_s: float = 2.0) -> None:
        self.run_dir = run_dir
        self.gpu_sample_s = gpu_sample_s
        self.attempt = attempt_id()
        self.recorder: Recorder | None = None
        self._sampler: _GpuSampler | None = None
        self._device: torch.device | None = None
        self._sanity_from = 0.0
        self._ended_by: str | None = None

    def _where(self) -> Path | None:
        where = self.run_dir or os.environ.get(ENV_RUN_DIR)
        return Path(where) if where else None

    # -- start-up ---------------------------------------------------------------------------------
    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        run_dir = self._where()
        if stage != "fit" or run_dir is None:
            return
        now = time.time()
        context = job_context.current()
        info: dict[str, Any] = {"node": context.node_name or socket.gethostname(), "pid": os.getpid(), JOB_FIELD: None}
        if context.in_job:  # the job it runs in (null outside a job, as the readers expect: recorded_job)
            job_field: dict[str, Any] = {
                "scheduler": context.scheduler,
                "job_id": jobstate.this_job_id(),  # the array's id in an array task: as job.json names it
                "task": context.own_id,  # this task alone (<array>_<task>): its own allocation in sacct
                "restart": jobstate.policy().count,
            }
            info[JOB_FIELD] = job_field
            job = jobstate.read(run_dir)  # the batch script's `batch start` of this restart: its moment
            if str(job.get("job_id")) == str(job_field["job_id"]) and job.get("restarts") == job_field["restart"]:
                job_field["script_started"] = _epoch(job.get("started"))
        try:
            started = min(max(process_started(), _LAST_END[0]), now)  # a later fit here: from the last end
            self.recorder = Recorder(run_dir, trainer.global_rank, self.attempt, started, info)
        except OSError:
            return  # a run directory it cannot write: nothing measured, the training goes on
        self.recorder.mark("setup", now)
        self.recorder.write(now=now)  # an attempt that dies in its start-up is still on record
        if not _CURRENT:
            atexit.register(_at_exit)
        _CURRENT[:] = [self]  # an earlier fit of this process ended at its teardown

    def on_load_checkpoint(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, checkpoint: dict[str, Any]
    ) -> None:
        if self.recorder is not None and trainer.state.fn == TrainerFn.FITTING:
            self.recorder.mark("checkpoint_loaded")

    def on_fit_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self.recorder is None:
            return
        self.recorder.mark("fit_start")
        self._device = pl_module.device
        if self._device.type == "cuda" and importlib.util.find_spec("pynvml") is not None:
            self._sampler = _GpuSampler(self._device, self.gpu_sample_s)
            self._sampler.start()

    def on_sanity_check_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self.recorder is not None:
            self._sanity_from = self.recorder.seconds[VALIDATION]

    def on_sanity_check_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self.recorder is not None:
            self.recorder.line["sanity_s"] = round(self.recorder.seconds[VALIDATION] - self._sanity_from, 6)

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self.recorder is not None:
            self.checkpoint_done()
            self.recorder.train_started(trainer.global_step)
            batches = trainer.num_training_batches  # an epoch's, limit_train_batches applied (inf: unknown)
            if isinstance(batches, int) and batches > 0:
                self.recorder.line["batches_per_epoch"] = batches
            self.recorder.write(self.memory())

    # -- training ---------------------------------------------------------------------------------
    def on_train_batch_start(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: Any, batch_idx: int
    ) -> None:
        if self.recorder is not None and len(self.recorder.stack) > 1:
            self.checkpoint_done()  # a save by a plugin that does not say when it returned

    def on_train_batch_end(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        recorder = self.recorder
        if recorder is None:
            return
        first = recorder.last_step is None
        recorder.step(trainer.global_step)
        if first:
            recorder.write(self.memory())

    def on_validation_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self.recorder is not None and trainer.state.fn == TrainerFn.FITTING:
            self.checkpoint_done()
            self.recorder.enter(VALIDATION)

    def on_validation_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self.recorder is not None and self.recorder.stack[-1] == VALIDATION:
            self.recorder.write(self.memory(), leaving=VALIDATION)  # the write is part of the phase
            self.recorder.leave(VALIDATION)

    def on_save_checkpoint(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, checkpoint: dict[str, Any]
    ) -> None:
        if self.recorder is not None and trainer.state.fn == TrainerFn.FITTING:
            self.recorder.enter(CHECKPOINT)
            self.recorder.checkpoint_thread = threading.get_ident()
            self.recorder.checkpoint_saved(trainer.global_step)

    def checkpoint_done(self, thread: int | None = None) -> None:
        """The open checkpoint save ended (``thread``: the thread whose plugin returned; None: a later hook)."""
        recorder = self.recorder
        if recorder is None or recorder.stack[-1] != CHECKPOINT:
            return
        if thread is not None and thread != recorder.checkpoint_thread:
            return  # the plugin's own writer thread
        recorder.write(self.memory(), leaving=CHECKPOINT)
        recorder.leave(CHECKPOINT)

    def on_train_epoch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self.checkpoint_done()

    def on_train_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self.checkpoint_done()

    # -- the end ----------------------------------------------------------------------------------
    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self.recorder is not None:
            self.checkpoint_done()
            self.recorder.write(self.memory())

    def on_exception(self, trainer: pl.Trainer, pl_module: pl.LightningModule, exception: BaseException) -> None:
        if isinstance(exception, (SIGTERMException, KeyboardInterrupt)):
            self._ended_by = "stopped"
        elif isinstance(exception, SystemExit):
            self._ended_by = "requeue" if exception.code == EXIT_REQUEUE else f"exit {exception.code}"
        else:
            self._ended_by = f"error: {type(exception).__name__}"
        self.checkpoint_done()
        if self.recorder is not None:  # Lightning tears no callback down after an exception: said here
            self.recorder.line["ended_by"] = self._ended_by
            self.recorder.write(self.memory())

    def teardown(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        if self.recorder is None or stage != "fit":
            return
        self.checkpoint_done()
        if self._sampler is not None:
            self._sampler.halt.set()
        self.finish()
        if self.recorder is not None:
            self.recorder.close_note()
        _LAST_END[0] = time.time()

    def finish(self) -> None:
        """Write the attempt as ended now (its teardown; again at the process's exit, which ends its tail)."""
        if self.recorder is not None:
            self.recorder.write(self.memory(), ended_by=self._ended_by or "completed")

    def memory(self) -> dict[str, Any]:
        """This process's peaks: host RSS (``ru_maxrss``; not its DataLoader workers': a forked child's
        counts the pages it shares with this one), CUDA's allocator (``max_memory_allocated``/``reserved``)
        and NVML's samples."""
        peaks: dict[str, Any] = {}
        try:
            import resource

            scale = 1 if sys.platform == "darwin" else 1024  # bytes on macOS, KiB on Linux
            peaks["rss_peak_bytes"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * scale
        except (ImportError, OSError):
            pass
        if self._device is not None and self._device.type == "cuda" and torch.cuda.is_initialized():
            peaks["cuda_max_allocated_bytes"] = torch.cuda.max_memory_allocated(self._device)
            peaks["cuda_max_reserved_bytes"] = torch.cuda.max_memory_reserved(self._device)
        if self._sampler is not None:
            peaks.update(self._sampler.stats())
        return peaks


def _at_exit() -> None:
    """The process ends: the latest attempt's tail ends here."""
    if _CURRENT:
        clock = _CURRENT.pop()
        clock.finish()
        if clock.recorder is not None:
            clock.recorder.close_note()  # (closed at teardown already, unless killed inside fit)
