"""What Slurm says of submitted jobs (the engine's ``describe``): states, restarts, the script each runs.

One ``scontrol show job -o`` call per query, whatever the number of jobs (every job the controller
still knows: queued, running, and finished ones for ``MinJobAge``, 300 s by default) and, only for
the jobs it no longer knows, one ``sacct -D -X -j id1,id2,...`` where accounting is on (each job's newest
attempt; the query :mod:`trainer_cli.schedulers.slurm.accounting` reads every attempt with). A job id Slurm
reuses (a fresh state directory counts from 1 again) is matched on the script the job runs
(``<run>/submit.sbatch``), never on the id alone.

Each answer says in words what the job's DETAIL cell shows beyond its state (:attr:`JobStatus.why`):
the nodes it runs on, why it waits (:mod:`trainer_cli.schedulers.slurm.pending`: the reason, what to do and
its estimated start) or why it ended (the exit code of a failure, the time limit, a preemption, a node
failure, out of memory, cancelled).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from trainer_cli.job.status import FROM_ACCOUNTING, JobStatus, exit_cause
from trainer_cli.schedulers.slurm import commands as slurm_commands
from trainer_cli.schedulers.slurm.accounting import newest_rows, query_sacct
from trainer_cli.schedulers.slurm.output import array_task_ids, job_state, time_limit_s
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
_RUNNING = ("RUNNING", "COMPLETING", "CONFIGURING")


def describe(job_ids: Sequence[str]) -> dict[str, JobStatus]:
    """What Slurm says of each job id (an array task as ``<array id>_<i>``), in one ``scontrol`` call and one
    ``sacct`` call for the ids the controller has forgotten (:func:`query_slurm`); an id Slurm knows not is
    absent. ``JobStatus.run_dir`` names the folder of the script the job runs (a reused id runs another's)."""
    found = query_slurm([(job_id, None) for job_id in dict.fromkeys(job_ids)])
    return {job_id: status for (job_id, _), status in found.items()}


def query_slurm(jobs: Sequence[tuple[str, Path | None]]) -> dict[tuple[str, str], JobStatus]:
    """Status of each ``(job id, script it runs)``, keyed so (a script None: ``(job id, "")``, whatever
    script the job runs): one ``scontrol show job -o`` call for all, and one ``sacct`` call for the ids
    the controller has forgotten (where accounting is on). An id whose Slurm job runs another script (a
    reused id) is not that job. Array jobs: the tasks' states are summed up (``RUNNING x2, PENDING x1``)."""
    wanted = {(job_id, "" if script is None else str(script)) for job_id, script in jobs}
    ids = {job_id for job_id, _ in wanted}
    found: dict[tuple[str, str], list[dict[str, str]]] = {}
    for f in slurm_commands.show_jobs() or []:
        array, task = f.get("ArrayJobId"), f.get("ArrayTaskId", "")
        keys = [(array if array in ids else f.get("JobId", ""), f.get("Command", ""))]
        # a task of an array (or a pending range of them: "0-3%2"),
        # asked for as "<array id>_<task id>" (a sweep's trial)
        if array:
            keys += [(f"{array}_{t}", f.get("Command", "")) for t in array_task_ids(task)]
        for key in keys:
            for asked in dict.fromkeys([key, (key[0], "")]):  # for its script, or for any
                if asked in wanted:
                    found.setdefault(asked, []).append(f)
    out = {key: _summarise(entries) for key, entries in found.items()}
    # sacct's rows name array tasks by their own ids: a task not in scontrol is read from its job.json
    missing = {job_id: script for job_id, script in wanted if (job_id, script) not in out and "_" not in job_id}
    if missing:  # sacct has no script to match on: its rows are taken for ids scontrol no longer knows
        rows: dict[str, list[dict[str, str]]] = {}
        every = query_sacct(missing) or []
        for raw, row in newest_rows(every).items():
            job_id = raw.split("_")[0]
            if job_id in missing and not any(k[0] == job_id for k in out):
                rows.setdefault(job_id, []).append(
                    {
                        "JobState": row.state,
                        "RunTime": row.elapsed,
                        "Restarts": str(sum(r.raw_id == raw and r.state == "REQUEUED" for r in every)),
                        "ExitCode": row.exit_code,
                        "NodeList": row.nodes,
                    }
                )
        for job_id, entries in rows.items():
            out[(job_id, missing[job_id])] = _summarise(entries, source=FROM_ACCOUNTING)
    return out


def _summarise(entries: list[dict[str, str]], source: str = "scontrol") -> JobStatus:
    states = [job_state(e) for e in entries]
    if len(entries) == 1:
        state = states[0]
    else:
        state = ", ".join(f"{s} x{states.count(s)}" for s in dict.fromkeys(states))
    restarts = max(int(e["Restarts"]) if str(e.get("Restarts")).isdigit() else 0 for e in entries)
    elapsed = max((e.get("RunTime", "-") for e in entries), key=lambda t: time_limit_s(t) or 0)
    scripts = {e["Command"] for e in entries if e.get("Command", "").startswith("/")}
    run_dir = str(Path(scripts.pop()).parent) if len(scripts) == 1 else ""
    nodes = _node_list(entries)
    return JobStatus(state, restarts, elapsed, source, why(entries), nodes, run_dir)


def _node_list(entries: list[dict[str, str]]) -> str:
    """The nodes of ``entries`` (``scontrol``'s ``NodeList`` fields, each once, in order), comma-joined."""
    return ",".join(dict.fromkeys(e.get("NodeList", "") for e in entries if e.get("NodeList", "") not in _NO_VALUE))


def ended_cause(fields: dict[str, str]) -> str:
    """Why an ended job ended, from its ``scontrol show job`` fields (``ExitCode=1:0``: ``failed: exit code 1``;
    ``0:9``: killed by signal 9)."""
    state = fields.get("JobState", "")
    preempted = fields.get("PreemptTime", "None") not in _NO_VALUE
    if state == "COMPLETED":
        return ""
    if state == "FAILED":
        return exit_cause(*fields.get("ExitCode", "").partition(":")[::2])
    if state == "CANCELLED" and preempted:
        return "preempted (cancelled)"
    if state in _ENDED:
        return _ENDED[state].format(TimeLimit=fields.get("TimeLimit", "?"), NodeList=fields.get("NodeList", "?"))
    return state.lower().replace("_", " ")


def why(entries: list[dict[str, str]]) -> str:
    """What a job's DETAIL cell says beyond its state (:attr:`JobStatus.why`), from its ``scontrol show job``
    fields (an array's: one per task record): the nodes its running tasks are on, why its first pending one
    waits; once none pends or runs, why the first that did not complete ended."""
    pending = [e for e in entries if e.get("JobState") == "PENDING"]
    running = [e for e in entries if e.get("JobState") in _RUNNING]
    parts: list[str] = []
    nodes = _node_list(running)
    if nodes:
        parts.append(f"on {nodes}")
    if pending:
        parts.append(why_pending(pending[0]))
    if not pending and not running:
        ended = [e for e in entries if e.get("JobState") not in ("COMPLETED", None)]
        cause = ended_cause(ended[0]) if ended else ""
        if cause:
            parts.append(cause)
    return "; ".join(parts)
