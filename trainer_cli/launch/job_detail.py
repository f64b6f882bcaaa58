"""The DETAIL cell of ``train jobs``: what a job is doing, or why not, in words.

What the job's engine says of it beyond its state (:attr:`trainer_cli.job.status.JobStatus.why`: the nodes it
runs on, why it waits and what to do, or why it ended; Slurm's from the fields of the ``scontrol show job``
line ``train jobs`` already read, :mod:`trainer_cli.schedulers.slurm.states`), then the last epoch line of
its log with its steps per second; a completed job shows its last epoch line alone. Once the engine has
forgotten the job, the cause is the one ``<run>/job.json`` recorded.
"""

from __future__ import annotations

from trainer_cli.job.status import JobStatus


def detail(status: JobStatus, progress: str) -> str:
    """The DETAIL cell of one job.

    Args:
        status: What its engine (or its ``job.json``) says of it.
        progress: The last epoch line of its log, or ``-``.
    """
    parts = [status.why] if status.why else []
    if status.source in ("none", "job.json") and status.state == "PENDING" and progress == "-":
        parts.append("queued (its scheduler does not know the job yet, or no longer)")
    if progress != "-" or not parts:
        parts.append(progress)
    return "; ".join(parts)
