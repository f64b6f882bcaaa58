"""How a run that a signal stopped ends (rule 6 of :mod:`trainer_cli.runtime.run`): the exit code
(143 after SIGTERM, 130 after Ctrl-C) and the line that says how to resume, or that nothing was
saved (the directory this run made is then removed)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from lightning.fabric.utilities.rank_zero import rank_zero_only

from trainer_cli.runtime.checkpointing import CTRL_C

if TYPE_CHECKING:  # trainer_cli.runtime.run imports this module: the type only, no module circle
    from trainer_cli.runtime.run import Run


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
    """The lines after a stop: where the run stopped, what was saved, how to resume it. A run
    directory is removed only when this start made it and trained nothing
    (:meth:`trainer_cli.runtime.run.Run.remove_if_untrained`); a run that trained but saved no
    checkpoint yet (its ``ModelCheckpoint`` saves every N epochs) is kept, and the lines say so."""
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
    elif run.path is None:  # no run directory (fast_dev_run): nothing is kept
        return f"{stopped}; nothing was saved."
    elif rank_zero_only.rank == 0 and run.remove_if_untrained():  # type: ignore[attr-defined]
        return f"{stopped}, before any batch was trained; nothing was saved (run directory {run.path} removed)."
    else:
        return f"{stopped}; {kept_without_checkpoint(run, trainer)}"
    return f"{stopped}; {where}.\nResume with:  {run.entry.resume_command.format(path=run.path)}"


def kept_without_checkpoint(run: Run, trainer: Any) -> str:
    """What a stop or crash of a run that holds no checkpoint kept: its directory (and the files in it
    a user reads: config, events, metrics), whether steps were trained and lost, and how to run it again
    (a new run from its ``config.yaml``: with no checkpoint there is nothing to resume)."""
    path = run.path
    assert path is not None
    files = sorted(p.name for p in path.iterdir() if p.is_file() and not p.name.startswith("."))
    shown = ", ".join(files[:6]) + (f" and {len(files) - 6} more" if len(files) > 6 else "")
    steps = trainer.global_step if trainer is not None else 0
    lost = (
        f"its {steps} trained step(s) were not saved (no checkpoint yet: its checkpoint callbacks had not saved one)"
        if run.trained
        else "nothing was trained"
    )
    kept = f"the run directory {path} is kept" + (f" ({shown})" if shown else "")
    again = ""
    if (path / "config.yaml").is_file():
        again = f"\nRun it again (a new run) with:  {run.entry.command} fit --config {path / 'config.yaml'}"
    return f"{lost}; {kept}.{again}"
