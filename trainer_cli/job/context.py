"""The job a process runs in, read once from its scheduler's environment (:class:`JobContext`).

The only reader of ``SLURM_*`` (and of the variables the Ray engine gives its workers) outside the
code that renders Slurm's scripts: everything else gets the values from :func:`current`, or from a
``JobContext`` passed down (``tests/test_job_context.py`` holds every other module to it).

:func:`current` keeps the context it built while the variables it was built from (:data:`NAMES`)
keep their values, and builds it again once one changed: a process that changes them itself (a
test's ``monkeypatch.setenv``, a child of the suite's fork server given another environment) never
sees a stale job, and a job's process, whose scheduler set them before it started, reads them once.
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
SLURM_NAMES = (
    "SLURM_JOB_ID",
    "SLURM_JOB_NAME",
    "SLURM_RESTART_COUNT",
    "SLURM_PROCID",
    "SLURM_NTASKS",
    "SLURM_NPROCS",
    "SLURM_LOCALID",
    "SLURM_NODEID",
    "SLURM_ARRAY_JOB_ID",
    "SLURM_ARRAY_TASK_ID",
    "SLURMD_NODENAME",
    "SLURM_JOB_NODELIST",
    "SLURM_NTASKS_PER_NODE",
)
"""The Slurm variables :meth:`JobContext.from_env` reads."""
RAY_NAMES = (
    RAY_ENV,
    RAY_ATTEMPT_ENV,
    "RANK",
    "WORLD_SIZE",
    "LOCAL_RANK",
    "NODE_RANK",
    "GROUP_RANK",
    "LOCAL_WORLD_SIZE",
)
"""The variables of a worker of the Ray engine :meth:`JobContext.from_env` reads."""
INTERACTIVE_JOB_NAMES = ("bash", "interactive")
"""The names of a Slurm job that is an interactive allocation (as Lightning's ``SLURMEnvironment.detect()``
judges them): nothing requeues it."""
NAMES = SLURM_NAMES + RAY_NAMES
"""Every variable :meth:`JobContext.from_env` reads: the key of :func:`current`'s kept context."""


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
            (``SIGUSR1`` in a Slurm batch job, as the launcher's ``--signal`` asks), or None (outside a
            job, in an interactive allocation, on a scheduler that warns none: Ray).
        job_name: The job's name (Slurm's ``SLURM_JOB_NAME``: ``bash`` or ``interactive`` for an
            interactive allocation, as Lightning's ``SLURMEnvironment`` judges it); None where none.
        node_name: The scheduler's name of this node (``SLURMD_NODENAME``); None where it gives none.
        node_list: The job's nodes as the scheduler writes them (``SLURM_JOB_NODELIST``); None where none.
        tasks_per_node: The processes on this node (``SLURM_NTASKS_PER_NODE``'s first figure, the Ray
            engine's ``LOCAL_WORLD_SIZE``); None where the scheduler does not say.
        step_rank_given: Whether the scheduler gave this process a rank (``SLURM_PROCID``: set for the
            tasks ``srun`` starts and for the batch script), not the default 0.
        world_size_given: Whether the scheduler said the job's number of processes (``SLURM_NTASKS``
            is unset in a batch job submitted without ``--ntasks``/``--ntasks-per-node``), not the
            default 1.
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
    job_name: str | None = None
    node_name: str | None = None
    node_list: str | None = None
    tasks_per_node: int | None = None
    step_rank_given: bool = False
    world_size_given: bool = False

    @property
    def in_job(self) -> bool:
        """Whether the process runs in a scheduler's job."""
        return self.job_id is not None

    @property
    def own_id(self) -> str | None:
        """The id that names this job alone, as the scheduler's commands take it (Slurm's ``scontrol
        requeue``, ``show job``, its accounting of the task): ``<array id>_<task id>`` for a task of a job
        array (the array's bare id names every task of it), else :attr:`job_id`; None outside a job."""
        array, task = self.array_job_id, self.array_task_id
        return f"{array}_{task}" if array and task is not None else self.job_id

    @property
    def multi_task(self) -> bool:
        """Whether the process is one of several that the scheduler started together for the job (each
        with its rank: Slurm's ``srun`` tasks, the Ray engine's workers)."""
        return self.in_job and self.step_rank_given and self.world_size > 1

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> JobContext:
        """The context that ``env`` (``os.environ`` by default) describes; it reads :data:`NAMES` only."""
        env = os.environ if env is None else env

        def number(*names: str, default: int = 0) -> int:
            for name in names:
                text = env.get(name, "")
                if text.strip().lstrip("-").isdigit():
                    return int(text)
            return default

        if env.get("SLURM_JOB_ID"):
            task = env.get("SLURM_ARRAY_TASK_ID", "")
            per_node = env.get("SLURM_NTASKS_PER_NODE", "").split("(")[0].split(",")[0]
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
                requeue_signal=None if env.get("SLURM_JOB_NAME") in INTERACTIVE_JOB_NAMES else signal.SIGUSR1,
                job_name=env.get("SLURM_JOB_NAME"),
                node_name=env.get("SLURMD_NODENAME") or None,
                node_list=env.get("SLURM_JOB_NODELIST") or None,
                tasks_per_node=int(per_node) if per_node.isdigit() else None,
                step_rank_given="SLURM_PROCID" in env,
                world_size_given=number("SLURM_NTASKS", "SLURM_NPROCS", default=-1) >= 0,
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
                tasks_per_node=number("LOCAL_WORLD_SIZE") if env.get("LOCAL_WORLD_SIZE") else None,
                step_rank_given="RANK" in env,
                world_size_given=number("WORLD_SIZE", default=-1) >= 0,
            )
        return cls()


_CURRENT: tuple[tuple[str | None, ...], JobContext] | None = None


def current() -> JobContext:
    """This process's context: read from ``os.environ`` on the first call, and kept while the variables
    it was read from (:data:`NAMES`) keep their values (the module's description says why)."""
    global _CURRENT
    key = tuple(os.environ.get(name) for name in NAMES)
    if _CURRENT is None or _CURRENT[0] != key:
        _CURRENT = (key, JobContext.from_env())
    return _CURRENT[1]
