"""How a run that a signal stopped ends (rule 6 of :mod:`trainer_cli.runtime.run`): the exit code
(143 after SIGTERM, 130 after Ctrl-C) and the line that says how to resume, or that nothing was
saved (the directory this run made is then removed)."""

from __future__ import annotations

from typing import Any

from lightning.fabric.utilities.rank_zero import rank_zero_only

from trainer_cli.runtime.checkpointing import CTRL_C

Run = Any  # trainer_cli.runtime.run.Run, which imports this module (not imported back: no module circle)


def exit_code(run: Run, stop: BaseException, requeued: bool) -> int | None:
    """:meth:`trainer_cli.runtime.run.Run.stopped`: the exit code after ``stop`` ended the verb, the resume
    line printed; None when ``stop`` is not an interrupted training."""
    import signal

    from lightning.pytorch.utilities.exceptions import SIGTERMException

    from trainer_cli.job import stop_signals

    trainer = run.trainer
    if trainer is None or not trainer.interrupted:
        return None
    cause = stop_signals.cause()  # the signal the ranks agreed on, or the one this process got
    if cause is None:
        cause = signal.SIGINT if CTRL_C or not isinstance(stop, SIGTERMException) else signal.SIGTERM
    code = stop_signals.EXIT_CODES[cause]
    if rank_zero_only.rank == 0 and not requeued:  # type: ignore[attr-defined]
        import sys

        print(resume_hint(run, stop_signals.NAMES[cause], trainer), file=sys.stderr, flush=True)
    return code


def resume_hint(run: Run, cause: str, trainer: Any) -> str:
    """The lines after a stop: where the run stopped, what was saved, how to resume it."""
    saved = run.interrupt_checkpoint
    # epochs counted from 1, as the progress lines count them
    stopped = f"\nTraining stopped by {cause} at epoch {trainer.current_epoch + 1}, step {trainer.global_step}"
    if saved is not None and saved.saved:
        where = f"checkpoint saved: {saved.saved}"
    elif run.path is not None and any(run.path.rglob("*.ckpt")):  # kept: it saved something
        # trained but not saved: a KeyboardInterrupt inside a step (a user's script, where the
        # signals are Lightning's) leaves no consistent state to save
        lost = saved is not None and saved.trained
        where = (
            "the steps since its last checkpoint were not saved"
            if lost
            else "nothing trained since its last checkpoint"
        )
    else:
        if rank_zero_only.rank == 0:  # type: ignore[attr-defined]
            run.remove_if_untrained()
        return f"{stopped}, before any batch was trained; nothing was saved (run directory {run.path} removed)."
    return f"{stopped}; {where}.\nResume with:  {run.resume_command.format(path=run.path)}"
