"""SIGTERM and Ctrl-C (SIGINT) in a ``train fit`` process: recorded, then acted on by every rank at
the same step boundary.

The stop contract:

1. From the first moment of ``train`` (:func:`install`, called first thing in ``main()``) SIGTERM
   and SIGINT are *blocked* in every thread, and one thread of ours takes them with
   :func:`signal.sigwait` and records them. No signal handler runs for them at all: no collective
   and no I/O happens inside a handler.
2. While training runs (:func:`arm`, from :class:`trainer_cli.runtime.checkpointing.InterruptCheckpoint`)
   the record waits for the end of the current training batch. There every rank takes part in one
   all-reduce of the records (:func:`agree`), so a signal sent to one rank or to all of them stops
   every rank at the same step; each raises Lightning's ``SIGTERMException``, every rank saves
   ``checkpoints/last.ckpt`` together, and the process exits 143 (SIGTERM) or 130 (Ctrl-C) with
   the line saying how to resume (:meth:`trainer_cli.runtime.run.Run.stopped`).
3. Before training (parsing, building) a signal stops the process at once (a ``KeyboardInterrupt``
   in the main thread); a second Ctrl-C while a stop waits for its step aborts at once.

Why blocked rather than handled (the Lightning workaround, kept to this module): Lightning's
signal connector installs its own SIGTERM handler whenever ``fit`` runs, composed with any handler
already there, with no switch to leave it out. Its handler broadcasts a tensor to the other ranks
from inside the handler (``_sigterm_notifier_fn``, Lightning PR #20825): interrupting a rank that
is in another collective, it pairs mismatched collectives and hangs the run (seen: one rank in the
handler's broadcast, the other in ``trainer.save_checkpoint``). A blocked signal never reaches any
handler, Lightning's included, so ``trainer.received_sigterm`` stays False and Lightning's own stop
paths stay idle. Nothing private of Lightning is used; ``tests/test_stop_signals.py`` checks it
against the installed Lightning (both ends of the supported range run the suite).

Threads started after :func:`install` (torch's, gloo's) and processes started from it (DDP ranks
launched by Lightning, DataLoader workers) inherit the blocked mask; DDP ranks run ``main()`` and
take the signals with their own thread, workers leave them pending and end with their rank.

On Slurm, each task also notes what stopped it in ``$TRAINER_CLI_TASK_RECORDS/<SLURM_PROCID>``
(a signal, with its time, or an error of its own) and when its training started
(:data:`trainer_cli.job.task_output.STARTED`):
the batch script's ``batch end`` tells a step that Slurm killed from the training failing by it
(:func:`trainer_cli.schedulers.slurm.batch.step_verdict`), and a step that ended before training from both.
Standard library only: importing it is free.
"""

from __future__ import annotations

import _thread
import os
import signal
import threading
import time
from typing import Any

from trainer_cli.job import context
from trainer_cli.job.task_output import ENV_TASK_RECORDS

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)
EXIT_CODES: dict[int | None, int] = {signal.SIGTERM: 143, signal.SIGINT: 130}  # 128 + the signal, as shells report it
NAMES: dict[int | None, str] = {signal.SIGTERM: "SIGTERM", signal.SIGINT: "Ctrl-C"}
_ORDER: dict[int, int] = {signal.SIGINT: 1, signal.SIGTERM: 2}  # agreed by max: SIGTERM (Slurm, the system) over Ctrl-C

_lock = threading.Lock()
_state: dict[str, Any] = {
    "installed": False,
    "armed": False,
    "finished": False,
    "received": [],
    "agreed": None,
    "key": None,
    "requeue": False,
}


def install() -> bool:
    """Block SIGTERM and SIGINT in this (main) thread and every thread and process started from it,
    and take them with a thread of ours from now on. Returns whether it is installed (main thread only)."""
    if _state["installed"]:
        return True
    if threading.current_thread() is not threading.main_thread():
        return False
    signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
    threading.Thread(target=_take_signals, name="trainer-cli-stop-signals", daemon=True).start()
    _state["installed"] = True
    return True


def start_forkserver() -> None:
    """Start multiprocessing's forkserver and its resource tracker (once per process) with
    ``SIGUSR1`` and ``SIGUSR2`` blocked, then give this thread back its signal mask.

    Slurm's ``--signal=SIGUSR1@N`` (``slurm/*.sbatch.j2``) and ``scancel -s USR1`` signal every
    process of a job step. Both programs, and the DataLoader workers forked from the server
    (``trainer_cli.data.base``), inherit the blocked signals and so outlive them (a worker forked
    from its rank has the rank's handler instead); with the default action they would die, and the
    rank would fail on its next batch rather than save its checkpoint and requeue. Restoring the
    mask also undoes the resource tracker's start, which unblocks SIGTERM and SIGINT in the calling
    thread: :func:`install` keeps them blocked.
    """
    from multiprocessing import forkserver

    before = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGUSR1, signal.SIGUSR2})
    try:
        forkserver.ensure_running()
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, before)


def installed() -> bool:
    """Whether :func:`install` took the signals over in this process."""
    return bool(_state["installed"])


def _take_signals() -> None:
    while True:
        _received(signal.sigwait(STOP_SIGNALS))


def _rank_zero() -> bool:
    job = context.current()  # the scheduler's rank, then torch.distributed's (Lightning's own DDP processes)
    return job.rank == 0 and all(os.environ.get(name, "0") in ("", "0") for name in ("LOCAL_RANK", "RANK"))


def _received(signum: int) -> None:
    """Record ``signum`` (our thread, not a signal handler); before training, or a second Ctrl-C
    while a stop waits for its step: stop the main thread at once."""
    with _lock:
        earlier = list(_state["received"])
        _state["received"].append(signum)
        at_once = not _state["armed"] and not _state["finished"]
        abort = _state["armed"] and signum == signal.SIGINT and signal.SIGINT in earlier
    note(f"signal {signal.Signals(signum).name}")
    if signum == signal.SIGINT and _rank_zero() and (_state["armed"] or at_once):
        if abort:
            print("\nCtrl-C again: aborting at once (no checkpoint)", flush=True)
        elif _state["armed"]:
            print(
                "\nCtrl-C: saving a checkpoint at the end of this batch (press Ctrl-C again to abort at once)",
                flush=True,
            )
        else:
            print("\nCtrl-C: stopping (no batch trained yet, nothing to save)", flush=True)
    if at_once or abort:
        _thread.interrupt_main()  # a KeyboardInterrupt in the main thread; the cause is the record


def arm() -> None:
    """Training runs: from now on a signal waits for the step boundary all ranks agree on (:func:`agree`)."""
    with _lock:
        _state["armed"], _state["agreed"], _state["key"] = True, None, None


def disarm(finished: bool = False) -> None:
    """Training is over: a signal stops the process at once again, or (``finished``: the verb is
    done, the process ends) is only recorded."""
    with _lock:
        _state["armed"] = False
        _state["finished"] = _state["finished"] or finished


def pending() -> int | None:
    """The strongest stop signal this process received (SIGTERM over SIGINT), None when none."""
    received = [s for s in _state["received"] if s in _ORDER]
    return max(received, key=_ORDER.__getitem__) if received else None


def agree(trainer: Any, key: Any) -> int | None:
    """The stop signal every rank acts on at this step boundary, or None: the records of all ranks
    reduced by one all-reduce (max) that every rank reaches at the same point. The same collective
    carries Slurm's SIGUSR1 record (:mod:`trainer_cli.job.requeue_signal`): whether any rank got
    it is kept for :func:`take_requeue`. A second call with the same ``key`` returns the same
    answer without another collective (two callbacks, one boundary).

    Args:
        trainer: The Lightning trainer (its strategy reduces across ranks).
        key: What identifies this boundary (epoch and batch index): equal on every rank.
    """
    from trainer_cli.job import requeue_signal

    if key is not None and _state["key"] == key:
        return _state["agreed"]
    mine = pending()
    codes = [_ORDER.get(mine, 0) if mine is not None else 0, int(requeue_signal.take())]
    if trainer.world_size > 1:
        import torch

        flags = torch.tensor([float(c) for c in codes], device=trainer.strategy.root_device)
        codes = [int(c) for c in trainer.strategy.reduce(flags, reduce_op="max").tolist()]
    agreed = next((s for s, order in _ORDER.items() if order == codes[0]), None)
    _state["key"], _state["agreed"] = key, agreed
    _state["requeue"] = _state.get("requeue", False) or bool(codes[1])
    return agreed


def take_requeue() -> bool:
    """Whether the ranks agreed on a SIGUSR1 (:func:`agree`) since the last call (the answer is cleared)."""
    requeue, _state["requeue"] = bool(_state.get("requeue")), False
    return requeue


def cause() -> int | None:
    """The signal that stopped this process: the one the ranks agreed on, else the one it received."""
    return _state["agreed"] or pending()


def note(what: str) -> None:
    """Append ``what`` and the time to this task's record under ``$TRAINER_CLI_TASK_RECORDS`` (set
    by the sbatch script; elsewhere nothing is written). Never raises."""
    folder = os.environ.get(ENV_TASK_RECORDS)
    if not folder:
        return
    try:
        with open(os.path.join(folder, str(context.current().rank)), "a") as record:
            record.write(f"{time.time():.3f} {what}\n")
    except OSError:
        pass
