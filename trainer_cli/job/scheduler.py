"""The scheduler seam: what every engine that runs a submitted run (Slurm, Ray) answers.

The shape TorchX's ``Scheduler``, NeMo-Run's executors and submitit's ``Executor`` converged on:
``render`` is pure (what ``train submit --dry-run`` prints), ``submit`` queues the draft and returns
the job id, ``describe`` says what the engine knows of jobs (one call for many), ``logs`` reads a
job's output (``output_file`` names the file it goes to), ``cancel`` is idempotent, ``accounting``
lists each attempt of a job with what it held and for how long, ``cluster`` names the cluster the
engine is on here. Requeue, resume, goodput, cost
and ``train jobs``/``train runs`` work on the :class:`~trainer_cli.job.status.JobStatus` and
:class:`~trainer_cli.job.cost.Attempt` values an engine returns, whatever produced them.

Engines: :data:`SCHEDULER_NAMES` (``slurm``, the default, and ``ray``); the registry of submitted jobs
keeps each job's engine (``scheduler`` in its line; a line without it is Slurm's).
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from trainer_cli.job.context import JobContext
from trainer_cli.job.cost import Attempt
from trainer_cli.job.status import JobStatus

DEFAULT_SCHEDULER = "slurm"
SCHEDULER_NAMES = ("slurm", "ray")
"""The engines ``train submit --scheduler NAME`` accepts, the default first."""
WITHOUT_ACCOUNTING = ("ray",)
"""The engines that keep no accounting of their jobs: a run's cost is read from its attempt records
(:func:`trainer_cli.rundir.run_cost.record_attempts`), never asked of the engine."""
IN_JOB = {"slurm": "trainer_cli.schedulers.slurm.in_job"}
"""Each engine's in-job side (:class:`InJobSide`): what a process inside one of its jobs asks the engine of
that job. Standard library only at import, as the job's own steps. An engine without one (Ray: it restarts
a job's workers only when they failed) has nothing to ask."""
JOB_FIELD = "job"
"""The field of a run's start records (``history.jsonl``, ``attempts/rank<N>.jsonl``) that names the job
the start ran in: ``{"scheduler", "job_id", ...}``, null outside a job (:func:`recorded_job`)."""


def recorded_job(record: Mapping[str, Any]) -> dict[str, Any] | None:
    """The job a start record names (its :data:`JOB_FIELD`, with its ``scheduler``), None outside a job;
    a record written before that field was kept the job under its scheduler's name."""
    job = record.get(JOB_FIELD)
    if isinstance(job, dict) and job.get("job_id"):
        return job
    named = next((n for n in SCHEDULER_NAMES if isinstance(record.get(n), dict) and record[n].get("job_id")), None)
    return {"scheduler": named, **record[named]} if named else None


@dataclass(frozen=True)
class JobDraft:
    """A job as an engine would submit it, before anything is queued (pure data).

    Attributes:
        scheduler: The engine's name (:data:`SCHEDULER_NAMES`).
        job_name: The job's name as the engine shows it.
        text: What ``--dry-run`` prints: the sbatch script, or the Ray job's entrypoint and runtime
            environment.
        command: The command each task (Slurm) or worker (Ray) runs, as words.
        run_dir: The run folder the job writes into; None for a dry run, which allocates none.
        options: The engine's own options (``--slurm.*``, ``--ray.*``), resolved.
    """

    scheduler: str
    job_name: str
    text: str
    command: tuple[str, ...] = ()
    run_dir: Path | None = None
    options: Mapping[str, Any] = field(default_factory=dict)


@runtime_checkable
class Scheduler(Protocol):
    """An engine that runs submitted runs (see the module docstring)."""

    name: str

    def cluster(self) -> str | None:
        """The cluster this engine submits to from here, as the registry of submitted jobs records a job's
        ``cluster`` (``train jobs`` lists the jobs of the cluster each engine is on); None where the engine
        cannot say (its jobs are then listed whatever cluster they went to)."""
        ...

    def render(self, spec: Any) -> JobDraft:
        """The job ``spec`` (the parsed, checked run) would be, queued nothing (pure)."""
        ...

    def submit(self, draft: JobDraft) -> str:
        """Queue ``draft``; returns the job id.

        Raises:
            UserError: when the engine refuses the job (nothing is left queued).
        """
        ...

    def describe(self, job_ids: Sequence[str]) -> dict[str, JobStatus]:
        """What the engine says of each job id (one query for all); an id it does not know is absent."""
        ...

    def output_file(self, folder: Path, job_id: str) -> Path:
        """The file in ``folder`` that job ``job_id`` writes its output to (pure: no query): a run's job in its
        run folder, an array task (``<array id>_<i>``) in its trial's folder or its sweep's ``workers``."""
        ...

    def logs(self, job_id: str, follow: bool = False) -> Iterator[str]:
        """The job's output lines, from the first; with ``follow``, until the job ends."""
        ...

    def cancel(self, job_id: str) -> None:
        """Stop the job; a job that already ended (or is unknown) is left as it is (idempotent)."""
        ...

    def accounting(self, job_ids: Sequence[str]) -> list[Attempt] | None:
        """Every attempt of the jobs, in the order they started: when it ran, for how long and what it held
        (one pending now last, its start None and its wait so far); one call for many ids. None where the
        engine keeps no accounting here (a run's cost is then estimated from its own records)."""
        ...


class InJobSide(Protocol):
    """What a process inside a job asks its engine of that job (:data:`IN_JOB`)."""

    def requeued_by_itself(self, job: JobContext) -> str | None:
        """A line saying the engine is requeueing ``job`` by itself (Slurm: a node failure, ``scontrol
        requeue``), so that the process's stop is not the run's end; None when it is not, or when the
        engine cannot be asked."""
        ...

    def cause_of_signal(self, job: JobContext, signalled_at: float | None) -> tuple[str, int | None]:
        """Why the engine sent ``job`` its requeue signal (:attr:`~trainer_cli.job.context.JobContext.requeue_signal`)
        at ``signalled_at`` (``time.time()``; None: now): ``(cause, seconds the job had left)``, the cause one
        of :mod:`trainer_cli.job.restarts` (time limit, preempted, unknown where the engine cannot be asked)."""
        ...


def in_job_side(job: JobContext) -> InJobSide | None:
    """The in-job side of the engine ``job`` runs under (:data:`IN_JOB`); None outside a job or for an
    engine without one."""
    name = IN_JOB.get(job.scheduler or "")
    return importlib.import_module(name) if name else None  # type: ignore[return-value]
