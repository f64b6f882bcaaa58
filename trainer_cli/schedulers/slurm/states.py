"""What Slurm says of submitted jobs (the engine's ``describe``): states, restarts, the script each runs.

One ``scontrol show job -o`` call per query, whatever the number of jobs (every job the controller
still knows: queued, running, and finished ones for ``MinJobAge``, 300 s by default) and, only for
the jobs it no longer knows, one ``sacct -D -X -j id1,id2,...`` where accounting is on (each job's newest
attempt; the query :mod:`trainer_cli.schedulers.slurm.accounting` reads every attempt with). A job id Slurm
reuses (a fresh state directory counts from 1 again) is matched on the script the job runs
(``<run>/submit.sbatch``), never on the id alone.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from trainer_cli.job import slurm_commands
from trainer_cli.job.slurm_output import array_task_ids, job_state, time_limit_s
from trainer_cli.job.status import JobStatus
from trainer_cli.schedulers.slurm.accounting import newest_rows, query_sacct


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
            out[(job_id, missing[job_id])] = _summarise(entries, source="sacct")
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
    return JobStatus(state, restarts, elapsed, source, entries, run_dir)
