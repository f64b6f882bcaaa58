"""What the tasks of a step said on stderr before they failed, for the one line that names a failure
before training (:func:`trainer_cli.schedulers.slurm.batch.end_of_step`).

The batch script (``slurm/fit_step.j2``) passes srun's stderr (the tasks' stderr and srun's own
messages) through ``python -m trainer_cli.job.task_output`` (``exec 2> >(...)`` around the ``srun``
line, then ``wait`` for it): every byte goes on to the script's stderr (the job's log) at once,
unchanged, and the first :data:`KEPT_BYTES` are kept in ``$TRAINER_CLI_TASK_RECORDS/srun.stderr``
(emptied with that folder at the start of each step): a failure before training says its cause in
the first lines. The copy ignores the signals Slurm sends a job (it lives exactly as long as srun's
stderr) and exits 0.

:func:`first_error` reads the cause from it: the last line a task wrote before srun's first own
message after it (``srun: error: node1: task 0: Exited with exit code 1``, printed when the first
task ends; ``--kill-on-bad-exit`` then ends the others). srun forwards the tasks' lines and prints its
own as they reach it, so a task's line may follow srun's first message (Slurm 24.11 often); the
cancellation slurmstepd prints for the tasks killed after it is Slurm's, like srun's own. Standard
library only.
"""

from __future__ import annotations

import os
import re
import signal
import sys
from pathlib import Path

ENV_TASK_RECORDS = "TRAINER_CLI_TASK_RECORDS"
"""Set by the sbatch script: the folder where each task notes what stopped it (one file per task,
:func:`trainer_cli.job.stop_signals.note`), and where srun's stderr is kept (:data:`FILE_NAME`)."""
STARTED = "fit start"
"""A task's note when its training process starts (Lightning's ``setup`` of fit): a step none of
whose tasks noted it ended before training (:func:`trainer_cli.schedulers.slurm.batch.end_of_step`)."""
FILE_NAME = "srun.stderr"
KEPT_BYTES = 64 * 1024
_SRUN = "srun: "  # srun's own messages; slurmstepd's (execve of a missing program) are the task's
_CANCELLED = re.compile(r"slurmstepd(-\S+)?: error: \*\*\* (STEP|JOB) ")
"""slurmstepd's note that Slurm cancelled the step or job (``*** STEP 10.0 ON node1 CANCELLED AT ...``,
after ``--kill-on-bad-exit`` or a time limit): Slurm's own message, never a task's cause."""
_IGNORED = ("SIGTERM", "SIGINT", "SIGHUP", "SIGUSR1", "SIGUSR2", "SIGQUIT")


def copy(source: int, target: int, kept: Path) -> None:
    """Copy ``source`` to ``target`` until its end, keeping its first :data:`KEPT_BYTES` in ``kept``;
    a write that fails (a full disk, a log gone) never stops the copy."""
    try:
        keep = open(kept, "wb")  # noqa: SIM115 - open until the source ends
    except OSError:
        keep = None
    room = KEPT_BYTES
    while chunk := os.read(source, 65536):
        try:
            view = memoryview(chunk)
            while view:
                view = view[os.write(target, view) :]
        except OSError:
            pass
        if keep is not None and room > 0:
            try:
                keep.write(chunk[:room])
                keep.flush()
            except OSError:
                pass
            room -= len(chunk)
    if keep is not None:
        keep.close()


def first_error(text: str) -> str | None:
    """The cause of a step's failure in its stderr ``text``: the last line a task wrote before srun's
    first own message that follows it; without a task's line, srun's first error (or first message);
    None when nothing was said."""
    lines = [line.rsplit("\r", 1)[-1].strip() for line in text.splitlines()]
    last_task, srun_lines = None, []
    for line in filter(None, lines):
        if line.startswith(_SRUN) or _CANCELLED.match(line):
            if last_task is not None:
                return last_task
            srun_lines.append(line)
        else:
            last_task = line
    return (
        last_task
        or next((line for line in srun_lines if line.startswith("srun: error")), None)
        or next(iter(srun_lines), None)
    )


def read_first_error(folder: Path | None) -> str | None:
    """:func:`first_error` of the step's stderr kept in ``folder`` (``$TRAINER_CLI_TASK_RECORDS``); None
    without it."""
    if folder is None:
        return None
    try:
        text = (Path(folder) / FILE_NAME).read_bytes().decode(errors="replace")
    except OSError:
        return None
    return first_error(text)


def main() -> int:
    """``python -m trainer_cli.job.task_output``: stdin to stderr, its head kept in
    ``$TRAINER_CLI_TASK_RECORDS/srun.stderr`` (nowhere without it); 0 always."""
    for name in _IGNORED:
        signal.signal(getattr(signal, name), signal.SIG_IGN)
    folder = os.environ.get(ENV_TASK_RECORDS)
    try:
        copy(0, 2, Path(folder) / FILE_NAME if folder else Path(os.devnull))
    except BaseException:  # noqa: BLE001 - srun's exit code must stay the pipeline's
        try:  # the rest still reaches the log
            while chunk := os.read(0, 65536):
                os.write(2, chunk)
        except BaseException:  # noqa: BLE001, S110 - nothing more can be done
            pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
