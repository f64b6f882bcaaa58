"""``train jobs`` and ``train cancel``: the runs submitted from here, their Slurm jobs and states.

``train submit`` appends one JSON line per run to ``<trainer.default_root_dir>/submissions.jsonl``
(default ``runs/``). ``train jobs`` asks Slurm once per call, whatever the number of jobs:
``scontrol show job -o`` (every job the controller still knows: queued, running, and finished ones
for ``MinJobAge``, 300 s by default) and, only for the jobs it no longer knows, one
``sacct -j id1,id2,...`` where accounting is on. A job id Slurm reuses (a fresh state directory
counts from 1 again) is matched on the script the job runs (``<run>/submit.sbatch``), never on the
id alone. Once Slurm has forgotten a job, its state and restarts are the ones the job recorded in
``<run>/job.json`` (:mod:`trainer_cli.launch.jobstate`); a job that resubmitted itself is followed
to its new id there. Per job the table shows state, restarts (with their causes, from
``<run>/restarts.jsonl``: ``2 (1 time limit, 1 preempted)``), elapsed time, a DETAIL in words
(:mod:`trainer_cli.launch.job_detail`: why a pending job waits, what to do and Slurm's estimated
start; a running job's nodes; an ended job's cause; then the last epoch line of its log, ``epoch
3/10 val/acc 0.9850 7.8 steps/s``) and the log path.

A sweep (``train submit --sweep``) is listed one row per trial (``<array id>_<i>``), and ``train
jobs SWEEP_DIR`` prints its table of trials (:mod:`trainer_cli.sweeps.results`).
``train jobs --tail RUN`` prints a run's log and follows it while the job is queued or running;
``train cancel RUN`` cancels every job of a run (fit, test, a cross-validation array and its
aggregate job). RUN is a run directory or a job id.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trainer_cli.errors import UserError
from trainer_cli.history import read_json_lines
from trainer_cli.launch import jobstate
from trainer_cli.launch import restarts as restarts_log
from trainer_cli.launch.job_detail import detail
from trainer_cli.launch.options import time_limit_s
from trainer_cli.launch.pending import array_task_ids, job_fields
from trainer_cli.tables import print_table

REGISTRY_NAME = "submissions.jsonl"
DEFAULT_ROOT = "runs"
UNKNOWN = "UNKNOWN"
# the job-id keys of a registry record, with the script each job runs and its label in the table
JOB_KEYS = (("job_id", "submit.sbatch", ""), ("test_job_id", "test.sbatch", " (test)"), ("aggregate_job_id", "cv_aggregate.sbatch", " (cv aggregate)"))
ACTIVE_STATES = {"PENDING", "RUNNING", "CONFIGURING", "COMPLETING", "REQUEUED", "RESIZING", "SUSPENDED", "REQUEUE_HOLD", "REQUEUE_FED"}
TAIL_BYTES = 16384  # of a log read for its last epoch line


def register(root: Path, record: dict[str, Any]) -> None:
    """Append a submitted job to ``root``'s registry."""
    root.mkdir(parents=True, exist_ok=True)
    keep = ("job_id", "test_job_id", "aggregate_job_id", "job_name", "run_dir", "log", "submitted", "trials")
    with open(root / REGISTRY_NAME, "a") as registry:
        registry.write(json.dumps({k: record.get(k) for k in keep}) + "\n")


def read_registry(root: Path) -> list[dict[str, Any]]:
    """The jobs submitted under ``root``, oldest first (an unreadable line is skipped)."""
    return read_json_lines(root / REGISTRY_NAME)


def _run(cmd: list[str]) -> str:
    """stdout of ``cmd``; empty when it is missing, fails or hangs."""
    if shutil.which(cmd[0]) is None:
        return ""
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return ""
    return proc.stdout if proc.returncode == 0 else ""


@dataclass
class JobStatus:
    """What Slurm (or the run directory) says of one job."""

    state: str = UNKNOWN
    restarts: int = 0
    elapsed: str = "-"
    source: str = "none"
    """Where the figures came from: scontrol, sacct, job.json or none."""
    entries: list[dict[str, str]] = field(default_factory=list)
    """The job's fields (``scontrol show job``: one per array task record), for its DETAIL cell."""


def query_slurm(jobs: list[tuple[str, Path]]) -> dict[tuple[str, str], JobStatus]:
    """Status of each ``(job id, script it runs)``, keyed so: one ``scontrol show job -o`` call for
    all, and one ``sacct`` call for the ids the controller has forgotten (where accounting is on).
    An id whose Slurm job runs another script (a reused id) is not that job. Array jobs: the tasks'
    states are summed up (``RUNNING x2, PENDING x1``)."""
    wanted = {(job_id, str(script)) for job_id, script in jobs}
    ids = {job_id for job_id, _ in wanted}
    found: dict[tuple[str, str], list[dict[str, str]]] = {}
    for line in _run(["scontrol", "show", "job", "-o"]).splitlines():
        f = job_fields(line)
        array, task = f.get("ArrayJobId"), f.get("ArrayTaskId", "")
        keys = [(array if array in ids else f.get("JobId", ""), f.get("Command", ""))]
        if array:  # a task of an array (or a pending range of them: "0-3%2"), asked for as "<array id>_<task id>" (a sweep's trial)
            keys += [(f"{array}_{t}", f.get("Command", "")) for t in array_task_ids(task)]
        for key in keys:
            if key in wanted:
                found.setdefault(key, []).append(f)
    out = {key: _summarise(entries) for key, entries in found.items()}
    # sacct's rows name array tasks by their own ids: a task not in scontrol is read from its job.json
    missing = {job_id: script for job_id, script in wanted if (job_id, script) not in out and "_" not in job_id}
    if missing:  # sacct has no script to match on: its rows are taken for ids scontrol no longer knows
        text = _run(["sacct", "-X", "-n", "-P", "-j", ",".join(sorted(missing)), "-o", "JobIDRaw,State,Elapsed,ExitCode,NodeList"])
        rows: dict[str, list[dict[str, str]]] = {}
        for line in text.splitlines():
            raw, state, elapsed, exit_code, nodes = (line.split("|") + [""] * 5)[:5]
            job_id = raw.split("_")[0]
            if job_id in missing and not any(k[0] == job_id for k in out):
                rows.setdefault(job_id, []).append({
                    "JobState": state.split()[0] if state else UNKNOWN, "RunTime": elapsed, "Restarts": "0", "ExitCode": exit_code, "NodeList": nodes,
                })
        for job_id, entries in rows.items():
            out[(job_id, missing[job_id])] = _summarise(entries, source="sacct")
    return out


def _summarise(entries: list[dict[str, str]], source: str = "scontrol") -> JobStatus:
    states = [e.get("JobState", UNKNOWN) for e in entries]
    if len(entries) == 1:
        state = states[0]
    else:
        state = ", ".join(f"{s} x{states.count(s)}" for s in dict.fromkeys(states))
    restarts = max(int(e.get("Restarts", "0") or 0) for e in entries)
    elapsed = max((e.get("RunTime", "-") for e in entries), key=lambda t: time_limit_s(t) or 0)
    return JobStatus(state, restarts, elapsed, source, entries)


def with_run_record(status: JobStatus | None, job_id: str, run_dir: Path) -> JobStatus:
    """Slurm's status, completed from ``run_dir/job.json`` for a job Slurm no longer knows."""
    recorded = jobstate.read(run_dir)
    if str(recorded.get("job_id")) != job_id:
        recorded = {}
    if status is not None and status.source == "scontrol":
        return status
    if recorded:
        state = str(recorded.get("state") or UNKNOWN)
        restarts = int(recorded.get("restarts") or 0)
        if status is not None:  # sacct knows the state, the run directory the restarts
            return JobStatus(status.state, max(restarts, status.restarts), status.elapsed, "sacct", status.entries)
        exit_code = recorded.get("exit_code")
        return JobStatus(state, restarts, "-", "job.json", [{"JobState": state, "ExitCode": f"{exit_code}:0" if exit_code is not None else ""}])
    return status or JobStatus()


def last_epoch_line(log: Path) -> str:
    """The last ``epoch N/M ...`` line of a job's log (its progress), shortened; '-' without one."""
    try:
        with open(log, "rb") as f:
            f.seek(0, 2)
            f.seek(max(f.tell() - TAIL_BYTES, 0))
            text = f.read().decode(errors="replace")
    except OSError:
        return "-"
    lines = [line for line in re.split(r"[\r\n]", text) if line.startswith("epoch ")]
    if not lines:
        return "-"
    words = lines[-1].split()
    keep = words[:2] + [f"{k} {v}" for k, v in zip(words[2::2], words[3::2]) if k in ("val/acc", "val/loss")]
    if words[-1] == "steps/s":  # the speed of that epoch (trainer_cli.callbacks.progress.EpochLineProgress)
        keep.append(f"{words[-2]} steps/s")
    return " ".join(keep)


def job_rows(records: list[dict[str, Any]]) -> list[tuple[str, ...]]:
    """One table row per job of ``records``: job, state, restarts, elapsed, progress, name, log."""
    jobs = []
    for rec in records:
        for key, script, _ in JOB_KEYS:
            if rec.get(key):
                jobs.append((_current_id(rec, key), Path(rec["run_dir"]) / script))
        jobs += [(f"{rec['job_id']}_{i}", Path(rec["run_dir"]) / JOB_KEYS[0][1]) for i in range(int(rec.get("trials") or 0))]
    slurm = query_slurm(jobs)
    rows = []
    for rec in records:
        run_dir = Path(rec["run_dir"])
        if rec.get("trials"):  # a sweep (train submit --sweep): one row per trial, its own task of the array
            rows += _trial_rows(rec, slurm)
            continue
        for key, script, label in JOB_KEYS:
            if not rec.get(key):
                continue
            job_id = _current_id(rec, key)
            log = run_dir / f"slurm-{job_id}.log"
            status = with_run_record(slurm.get((job_id, str(run_dir / script))), job_id, run_dir)
            restarts = restarts_cell(status, job_id, run_dir) if key == "job_id" else str(status.restarts)
            progress = detail(status.entries, status.state, last_epoch_line(log))
            rows.append((job_id, status.state, restarts, status.elapsed, progress, f"{rec.get('job_name')}{label}", str(log)))
    return rows


def _current_id(rec: dict[str, Any], key: str) -> str:
    """The job id of ``rec[key]`` now: for the fit job, the job it resubmitted itself as (if it did)."""
    return jobstate.follow(Path(rec["run_dir"]), str(rec[key])) if key == "job_id" else str(rec[key])


def restarts_cell(status: JobStatus, job_id: str, run_dir: Path) -> str:
    """The RESTARTS of a fit job with their causes (:func:`trainer_cli.launch.restarts.summary`):
    Slurm's count of the job plus those of the jobs it was resubmitted from."""
    recorded = jobstate.read(run_dir)
    recorded = recorded if str(recorded.get("job_id")) == job_id else {}
    total = status.restarts + (0 if status.source == "job.json" else int(recorded.get("prior_restarts") or 0))
    chain = [*map(str, recorded.get("resubmitted_from") or []), job_id]
    return restarts_log.summary(restarts_log.read(run_dir), chain, total)


def _trial_rows(rec: dict[str, Any], slurm: dict[tuple[str, str], JobStatus]) -> list[tuple[str, ...]]:
    """A sweep's rows: per trial ``<array id>_<i>``, its task's state (its ``job.json`` once Slurm
    forgot it), progress and log in ``<sweep>/trial_<i>``."""
    from trainer_cli.launch.sweep import task_log

    sweep_dir, job_id = Path(rec["run_dir"]), str(rec["job_id"])
    script = str(sweep_dir / JOB_KEYS[0][1])
    rows = []
    for i in range(int(rec["trials"])):
        log = task_log(sweep_dir, job_id, i)
        status = with_run_record(slurm.get((f"{job_id}_{i}", script)), job_id, log.parent)
        progress = detail(status.entries, status.state, last_epoch_line(log))
        rows.append((f"{job_id}_{i}", status.state, str(status.restarts), status.elapsed, progress, f"{rec.get('job_name')} (trial {i})", str(log)))
    return rows


def find_run(root: Path, run: str) -> dict[str, Any]:
    """The newest registry record of ``run`` (a run directory or one of its job ids).

    Raises:
        UserError: when no job submitted under ``root`` matches.
    """
    records = read_registry(root)
    target = Path(run).resolve() if not run.isdigit() else None
    for rec in reversed(records):
        ids = {str(rec.get(k)) for k, _, _ in JOB_KEYS if rec.get(k)} | {_current_id(rec, "job_id")}
        if run in ids or (target is not None and Path(rec["run_dir"]).resolve() == target):
            return rec
    known = ", ".join(sorted({str(r.get("job_id")) for r in records[-10:]})) or "none"
    raise UserError(f"{run}: no job submitted under {root} has this run directory or job id (recent jobs: {known}); `train jobs` lists them")


def tail(root: Path, run: str, poll_s: float = 1.0) -> int:
    """Print the log of ``run``'s fit job and follow it while the job is queued or running (into
    the job it resubmits itself as, if it does)."""
    rec = find_run(root, run)
    job_id, run_dir = _current_id(rec, "job_id"), Path(rec["run_dir"])
    if rec.get("trials"):
        from trainer_cli.launch.sweep import task_log

        raise UserError(f"{run}: a sweep of {rec['trials']} trials, one log each (e.g. {task_log(run_dir, job_id, 0)}); "
                        f"`train sweep-results {run_dir}` tells how each trial is doing")
    log, script = run_dir / f"slurm-{job_id}.log", run_dir / "submit.sbatch"
    position = 0
    while True:
        if log.is_file():
            with open(log, "rb") as f:
                f.seek(position)
                chunk = f.read()
                position += len(chunk)
            sys.stdout.write(chunk.decode(errors="replace"))
            sys.stdout.flush()
        status = with_run_record(query_slurm([(job_id, script)]).get((job_id, str(script))), job_id, run_dir)
        if not any(state in ACTIVE_STATES for state in re.findall(r"[A-Z_]+", status.state)):
            print(f"[train jobs --tail: job {job_id} is {status.state}]", file=sys.stderr)
            if _current_id(rec, "job_id") == job_id:
                return 0
            job_id, position = _current_id(rec, "job_id"), 0  # resubmitted (its script said so as it ended)
            log = run_dir / f"slurm-{job_id}.log"
            print(f"[train jobs --tail: the run goes on as job {job_id}]", file=sys.stderr)
            continue
        time.sleep(poll_s)


def cancel(args: list[str]) -> int:
    """``train cancel RUN [--root DIR]``: cancel every job of a run (fit, test, cv array and aggregate).

    Raises:
        UserError: for an unknown run, or when scancel is missing or refuses.
    """
    parser = argparse.ArgumentParser(prog="train cancel", description="Cancel the Slurm jobs of a run submitted with `train submit`.")
    parser.add_argument("run", help="the run directory or one of its job ids")
    parser.add_argument("--root", default=DEFAULT_ROOT, help="trainer.default_root_dir the run was submitted with (default: runs)")
    opts = parser.parse_args(args)
    rec = find_run(Path(opts.root), opts.run)
    ids = [_current_id(rec, k) for k, _, _ in JOB_KEYS if rec.get(k)]
    if shutil.which("scancel") is None:
        raise UserError("scancel not found: run `train cancel` where Slurm is installed")
    proc = subprocess.run(["scancel", *ids], capture_output=True, text=True, timeout=60)
    if proc.returncode != 0:
        raise UserError(f"scancel {' '.join(ids)} failed: {proc.stderr.strip() or proc.stdout.strip()}")
    print(f"cancelled job(s) {', '.join(ids)} of {rec['run_dir']}")
    return 0


def main(args: list[str]) -> int:
    """``train jobs [--root DIR] [--last N] [--tail RUN] [SWEEP_DIR]``: print a table of submitted jobs
    (or follow one run's log, or print a sweep's table of trials); returns the exit code.

    Raises:
        UserError: when ``--root`` is not a directory, or ``--tail`` names no submitted run.
    """
    parser = argparse.ArgumentParser(prog="train jobs", description=__doc__.split("\n")[0])
    parser.add_argument("--root", default=DEFAULT_ROOT, help="trainer.default_root_dir the jobs were submitted with (default: runs)")
    parser.add_argument("--last", type=int, default=20, help="show the newest N runs (default: 20)")
    parser.add_argument("--tail", metavar="RUN", help="print RUN's log (a run directory or job id) and follow it while the job runs")
    parser.add_argument("sweep", nargs="?", metavar="SWEEP_DIR", help="a sweep directory: its table of trials, as `train sweep-results` (CSV and JSON written)")
    opts = parser.parse_args(args)
    if opts.sweep:
        from trainer_cli.sweeps.results import report

        report(Path(opts.sweep))
        return 0
    root = Path(opts.root)
    if not root.is_dir():
        raise UserError(f"--root {root}: no such directory (submit a job first, or name the trainer.default_root_dir you used)")
    if opts.tail:
        return tail(root, opts.tail)
    records = read_registry(root)[-opts.last :]
    if not records:
        print(f"no jobs submitted under {root}")
        return 0
    print_table(job_rows(records), header=("JOB", "STATE", "RESTARTS", "ELAPSED", "DETAIL", "NAME", "LOG"))
    return 0
