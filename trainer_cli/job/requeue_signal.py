"""The scheduler's requeue signal, recorded from the first moment of a ``train`` process.

A scheduler that warns a job before it stops it to requeue it names the signal in the process's
:class:`~trainer_cli.job.context.JobContext` (``requeue_signal``; None for a scheduler that warns none,
as Ray, and for an interactive allocation). Slurm sends SIGUSR1 before a job's time limit
(``#SBATCH --signal=SIGUSR1@N``) or when an operator preempts it
(``scancel -s USR1``). Its default action kills the process (exit code 138), and
Lightning installs its own handler only once the trainer runs, seconds after start-up: a signal in
between killed every rank with nothing saved. :func:`install` is called first thing in
``train``'s ``main()``, before anything slow is imported; its handler only records the signal.
:class:`trainer_cli.callbacks.requeue.SynchronizedRequeue` acts on the record once the
trainer can (a checkpoint, then the batch script requeues the job). Standard library only: importing it is free.

No private Lightning member is touched for this. Lightning's signal connector installs its SIGUSR1
handler (a checkpoint and ``scontrol requeue`` inside the handler) only when the signal has none
yet, ``signal.getsignal(SIGUSR1)`` being ``SIG_DFL`` (Lightning-AI/pytorch-lightning PR #9566,
kept by PR #14626 that made the signal configurable; still so in 2.6). Installing ours first, with
the standard ``signal`` module, is what keeps Lightning's out: ``tests/test_restarts.py`` checks it
against the installed Lightning through a real ``Trainer.fit``.
"""

from __future__ import annotations

import signal
import time
from typing import Any

from trainer_cli.job import context

_state: dict[str, Any] = {"installed": None, "received": False, "requeued": False, "at": None}


def expected() -> bool:
    """Whether this process runs in a job its scheduler warns with a signal before it stops the job to
    requeue it (:attr:`~trainer_cli.job.context.JobContext.requeue_signal`: a Slurm batch job's task, not
    an interactive ``srun --pty bash``)."""
    return context.current().requeue_signal is not None


def _record(signum: int, frame: Any) -> None:
    _state["received"] = True
    _state["at"] = time.time()


def install() -> bool:
    """Record the job's requeue signal from now on where one is :func:`expected`; returns whether the
    handler is installed. Elsewhere every signal keeps its default action."""
    number = context.current().requeue_signal
    if _state["installed"] is None and number is not None:
        signal.signal(number, _record)
        _state["installed"] = number
    return _state["installed"] is not None


def uninstall() -> None:
    """Give the signal its default action back (the process runs without requeue on the signal)."""
    if _state["installed"] is not None:
        signal.signal(_state["installed"], signal.SIG_DFL)
        _state["installed"] = None


def ignore_from_now() -> None:
    """Once the verb is done: ignore the signal from here to the process's end. Python gives caught
    signals their default action back while it shuts down, and SIGUSR1's kills the process, so a
    late signal (the time limit's warning right as training ends) would fail a finished job."""
    if _state["installed"] is not None:
        signal.signal(_state["installed"], signal.SIG_IGN)
        _state["installed"] = None


def installed() -> bool:
    """Whether :func:`install` installed the recording handler (and it was not uninstalled)."""
    return _state["installed"] is not None


def take() -> bool:
    """Whether the signal arrived since the last call (the record is cleared)."""
    received, _state["received"] = _state["received"], False
    return bool(received)


def received_at() -> float | None:
    """``time.time()`` when the signal last arrived (None: never); kept by :func:`take`. How much
    time the job had left then tells the time limit's warning from a preemption
    (:mod:`trainer_cli.job.restarts`)."""
    return _state["at"]


def mark_requeued() -> None:
    """Note that this job restarts (its batch script requeues or resubmits it): the run resumes."""
    _state["requeued"] = True


def requested() -> bool:
    """Whether this process saved its checkpoint on SIGUSR1 and stopped training for a restart
    (:func:`mark_requeued`): it exits :data:`trainer_cli.job.jobstate.EXIT_REQUEUE`."""
    return bool(_state["requeued"])


def requeue_in_progress() -> bool:
    """Whether this process's job is being requeued, so that its stop is not the end of the run:
    it requeued itself (:func:`mark_requeued`), or its scheduler is requeueing it by itself (Slurm: a
    node failure, ``scontrol requeue``; :func:`trainer_cli.job.scheduler.in_job_side`). The second case
    is said in one line here, once."""
    if _state["requeued"]:
        return True
    if not expected():
        return False
    from trainer_cli.job.scheduler import in_job_side  # standard library only, too

    side = in_job_side(context.current())
    line = side.requeued_by_itself(context.current()) if side is not None else None
    if line:
        _state["requeued"] = True
        if context.current().rank == 0:  # once for the job, not once per rank
            print(f"trainer-cli: {line}", flush=True)
    return bool(_state["requeued"])
