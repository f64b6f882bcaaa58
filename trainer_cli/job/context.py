"""The job a process runs in, read once from its scheduler's environment (:class:`JobContext`).

The only reader of ``SLURM_*`` (and of the variables the Ray engine gives its workers) outside the
code that renders Slurm's scripts: everything else gets the values from :func:`current`, or from a
``JobContext`` passed down.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Mapping
from dataclasses import dataclass

RAY_ENV = "TRAINER_CLI_RAY_JOB"
"""Set by the Ray engine in each worker's environment: ``<job id>`` (its other values below)."""
RAY_ATTEMPT_ENV = "TRAINER_CLI_RAY_ATTEMPT"
"""The worker group's start on the Ray engine: 0 for the first, then one more per restart."""


@dataclass(frozen=True)
class JobContext:
    """Where this process runs: no scheduler (a local run), a Slurm job, or a Ray job.

    Attributes:
        scheduler: ``slurm``, ``ray``, or None outside a job.
        job_id: The scheduler's job id (Slurm's ``SLURM_JOB_ID``, an array task's own id); None outside a job.
        attempt: 0 for the job's first start, one more per requeue or restart.
        rank: This process's global rank (0 where the scheduler says none).
        world_size: The number of processes of the job's step (1 where it says none).
        local_rank: The rank on this node.
        node_rank: The node's index in the job.
        array_job_id: A Slurm array's id (``SLURM_ARRAY_JOB_ID``); None for other jobs.
        array_task_id: The array task's index; None for other jobs.
        requeue_signal: The signal the scheduler sends before it stops the job to requeue it
            (``SIGUSR1`` under Slurm with the launcher's ``--signal``), or None.
    """

    scheduler: str | None = None
    job_id: str | None = None
    attempt: int = 0
    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    node_rank: int = 0
    array_job_id: str | None = None
    array_task_id: int | None = None
    requeue_signal: int | None = None

    @property
    def in_job(self) -> bool:
        """Whether the process runs in a scheduler's job."""
        return self.job_id is not None

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> JobContext:
        """The context that ``env`` (``os.environ`` by default) describes."""
        env = os.environ if env is None else env

        def number(*names: str, default: int = 0) -> int:
            for name in names:
                text = env.get(name, "")
                if text.strip().lstrip("-").isdigit():
                    return int(text)
            return default

        if env.get("SLURM_JOB_ID"):
            task = env.get("SLURM_ARRAY_TASK_ID", "")
            return cls(
                scheduler="slurm",
                job_id=env["SLURM_JOB_ID"],
                attempt=number("SLURM_RESTART_COUNT"),
                rank=number("SLURM_PROCID"),
                world_size=number("SLURM_NTASKS", "SLURM_NPROCS", default=1),
                local_rank=number("SLURM_LOCALID"),
                node_rank=number("SLURM_NODEID"),
                array_job_id=env.get("SLURM_ARRAY_JOB_ID") or None,
                array_task_id=int(task) if task.isdigit() else None,
                requeue_signal=signal.SIGUSR1,
            )
        if env.get(RAY_ENV):
            return cls(
                scheduler="ray",
                job_id=env[RAY_ENV],
                attempt=number(RAY_ATTEMPT_ENV),
                rank=number("RANK"),
                world_size=number("WORLD_SIZE", default=1),
                local_rank=number("LOCAL_RANK"),
                node_rank=number("NODE_RANK", "GROUP_RANK"),
            )
        return cls()


_CURRENT: JobContext | None = None


def current() -> JobContext:
    """This process's context, read from ``os.environ`` on the first call and kept."""
    global _CURRENT
    if _CURRENT is None:
        _CURRENT = JobContext.from_env()
    return _CURRENT
