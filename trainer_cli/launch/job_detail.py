"""The DETAIL cell of ``train jobs``: what a job is doing, or why not, in words.

- pending: Slurm's reason in words, what to do, and its estimated start (:mod:`trainer_cli.schedulers.slurm.pending`);
- running: its nodes, and the last epoch line of its log with its steps per second;
- ended: the cause (exit code of a failure, time limit, preemption, node failure, out of memory,
  cancelled) then the last epoch line; a completed job shows its last epoch line alone.

The figures come from the fields of the job's ``scontrol show job`` line that ``train jobs`` already
read (no further Slurm call), or from ``<run>/job.json`` once Slurm has forgotten the job.
"""

from __future__ import annotations

from collections.abc import Sequence

from trainer_cli.schedulers.slurm.pending import why_pending

_ENDED = {
    "TIMEOUT": "hit its time limit ({TimeLimit}): resubmit with a longer --slurm.time",
    "PREEMPTED": "preempted",
    "NODE_FAIL": "a node failed ({NodeList})",
    "OUT_OF_MEMORY": "out of memory: ask for more --slurm.mem",
    "BOOT_FAIL": "its node did not boot",
    "DEADLINE": "missed its deadline",
    "CANCELLED": "cancelled",
}
_NO_VALUE = ("", "None", "(null)", "Unknown")


def exit_cause(exit_code: str) -> str:
    """``failed: exit code 1`` from Slurm's ``ExitCode=1:0`` (``killed by signal 9`` for ``0:9``)."""
    code, _, signal = exit_code.partition(":")
    if code not in ("", "0"):
        return f"failed: exit code {code}"
    if signal not in ("", "0"):
        return f"failed: killed by signal {signal}"
    return "failed"


def ended_cause(fields: dict[str, str]) -> str:
    """Why an ended job ended, from its ``scontrol show job`` fields (or a ``job.json`` made to look so)."""
    state = fields.get("JobState", "")
    preempted = fields.get("PreemptTime", "None") not in _NO_VALUE
    if state == "COMPLETED":
        return ""
    if state == "FAILED":
        return exit_cause(fields.get("ExitCode", ""))
    if state == "CANCELLED" and preempted:
        return "preempted (cancelled)"
    if state in _ENDED:
        return _ENDED[state].format(TimeLimit=fields.get("TimeLimit", "?"), NodeList=fields.get("NodeList", "?"))
    return state.lower().replace("_", " ")


def detail(entries: Sequence[dict[str, str]], state: str, progress: str) -> str:
    """The DETAIL cell of one job (or an array's tasks, one ``entries`` item each).

    Args:
        entries: Its ``scontrol show job`` fields (one per array task record); empty when Slurm
            no longer knows the job.
        state: The state shown in the STATE column (Slurm's, or the one ``job.json`` recorded).
        progress: The last epoch line of its log, or ``-``.
    """
    pending = [e for e in entries if e.get("JobState") == "PENDING"]
    running = [e for e in entries if e.get("JobState") in ("RUNNING", "COMPLETING", "CONFIGURING")]
    parts: list[str] = []
    if running:
        nodes = ",".join(
            dict.fromkeys(e.get("NodeList", "") for e in running if e.get("NodeList", "") not in _NO_VALUE)
        )
        if nodes:
            parts.append(f"on {nodes}")
    if pending:
        parts.append(why_pending(pending[0]))
    if not entries and state == "PENDING" and progress == "-":
        parts.append("queued (Slurm does not know the job yet, or no longer)")
    if not pending and not running:
        ended = [e for e in entries if e.get("JobState") not in ("COMPLETED", None)]
        cause = ended_cause(ended[0]) if ended else ""
        if cause:
            parts.append(cause)
    if progress != "-" or not parts:
        parts.append(progress)
    return "; ".join(parts)
