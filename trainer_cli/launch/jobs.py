"""``train jobs`` and ``train cancel``: the runs you submitted, their jobs and states.

Each job's state comes from its own engine (the registry line's ``scheduler``; a line without one is
Slurm's) through the scheduler seam (:class:`trainer_cli.job.scheduler.Scheduler`): one ``describe``
call per engine per view, whatever the number of jobs, and ``cancel`` per job. The engines are given
by the caller (``{name: engine}``: the entry point builds it from :mod:`trainer_cli.schedulers`).

``train submit`` and ``python main.py submit`` append one JSON line per run to the user's registry
(:mod:`trainer_cli.schedulers.submissions`, outside any repository): ``train jobs`` lists the jobs the
user submitted, from any folder, to the cluster each engine says it is on here (its ``cluster()``: Slurm's
``ClusterName``, a Ray cluster's address; it says how many of other clusters it leaves out, ``--all-clusters``
lists them too), ``--root DIR`` those under one ``trainer.default_root_dir``. It
asks each engine once per call, whatever the number of jobs, and reads ``<run>/job.json`` for the jobs
Slurm has forgotten (:mod:`trainer_cli.job.status`); a job that resubmitted itself is followed
to its new id there. Per job the table shows state, restarts (with their causes, from
``<run>/restarts.jsonl``: ``2 (1 time limit, 1 preempted)``), elapsed time, a DETAIL in words
(:mod:`trainer_cli.launch.job_detail`: why a pending job waits, what to do and Slurm's estimated
start; a running job's nodes; an ended job's cause; then the last epoch line of its log, ``epoch
3/10 val/acc 0.9850 7.8 steps/s``) and the log path.

``train jobs RUN`` (a run directory or job id) shows that run's jobs and what they cost over every
attempt, requeues included: allocated GPU-hours (CPU- and node-hours where no GPU was allocated) from
``sacct`` where there is accounting, else estimated from the run's own records, and the queue wait
beside it (:mod:`trainer_cli.rundir.run_cost`); then its goodput: the share of that allocated time
spent in training steps the final model keeps, and each badput bucket in seconds and percent, the
steps redone, the peak memory (:func:`trainer_cli.rundir.goodput.allocated`), and it writes
``<run>/timeline.svg``, a picture of the attempts and their buckets. ``--json`` prints the same as
JSON (``cost`` and ``goodput``).

A sweep (``train submit --sweep``) is listed one row per trial (``<array id>_<i>``), and ``train
jobs SWEEP_DIR`` prints its table of trials (:mod:`trainer_cli.sweeps.results`).
``train jobs --tail RUN`` prints a run's log and follows it while the job is queued or running;
``train cancel RUN`` cancels every job of a run (fit, test, a cross-validation array and its
aggregate job). RUN is a run directory or a job id; for ``--tail`` also one task of a sweep's array
(``<array id>_<i>``, a trial's or a worker's, or a trial's run directory).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from trainer_cli.atomic import read_json
from trainer_cli.errors import UserError
from trainer_cli.job import jobstate
from trainer_cli.job import restarts as restarts_log
from trainer_cli.job.cost import Cost
from trainer_cli.job.scheduler import Scheduler
from trainer_cli.job.status import JobStatus, is_active, last_epoch_line, with_run_record
from trainer_cli.launch.job_detail import detail
from trainer_cli.rundir import goodput, run_cost
from trainer_cli.schedulers import current_clusters
from trainer_cli.schedulers.submissions import of_cluster, read_registry, registry_file, scheduler_of
from trainer_cli.sweeps.plan import SWEEP_FILE, trial_name
from trainer_cli.tables import print_table

# the job-id keys of a registry record (the fit job, the test job after it, a cross-validation's aggregate),
# with each job's label in the table
JOB_KEYS = (
    ("job_id", ""),
    ("test_job_id", " (test)"),
    ("aggregate_job_id", " (cv aggregate)"),
)


Engines = Mapping[str, Scheduler]
"""The engines a view asks, by name (:data:`trainer_cli.job.scheduler.SCHEDULER_NAMES`)."""
States = dict[tuple[str, str], JobStatus]
"""What the engines say of a view's jobs, keyed ``(job id, run folder)``: an id whose engine's job runs
in another folder (an id Slurm reused) is absent."""


def describe(records: list[dict[str, Any]], engines: Engines) -> States:
    """What each record's engine says of its jobs (fit, test, cv aggregate, a sweep's tasks): one
    ``describe`` call per engine, whatever the number of jobs; a job of an engine not in ``engines``
    is absent (its run folder's record is shown)."""
    asked: dict[str, dict[str, set[str]]] = {}  # engine -> job id -> the run folders that name it
    for rec in records:
        ids = [current_id(rec, key) for key, _ in JOB_KEYS if rec.get(key)]
        ids += [f"{rec['job_id']}_{i}" for i in range(int(rec.get("trials") or rec.get("workers") or 0))]
        for job_id in ids:
            asked.setdefault(scheduler_of(rec), {}).setdefault(job_id, set()).add(str(Path(rec["run_dir"])))
    states: States = {}
    for name, jobs in asked.items():
        if name not in engines:
            continue
        for job_id, status in engines[name].describe(list(jobs)).items():
            for run_dir in jobs.get(job_id, ()):
                if status.is_of(run_dir):
                    states[(job_id, run_dir)] = status
    return states


def output_file(rec: dict[str, Any], engines: Engines, folder: Path, job_id: str) -> Path:
    """The file job ``job_id`` of ``rec`` writes its output to in ``folder`` (its engine's
    :meth:`~trainer_cli.job.scheduler.Scheduler.output_file`); without its engine here, the log its registry
    line names."""
    engine = engines.get(scheduler_of(rec))
    return engine.output_file(folder, job_id) if engine is not None else Path(rec.get("log") or folder)


def job_rows(records: list[dict[str, Any]], engines: Engines) -> list[tuple[str, ...]]:
    """One table row per job of ``records``: job, state, restarts, elapsed, progress, name, log."""
    said = describe(records, engines)
    rows: list[tuple[str, ...]] = []
    for rec in records:
        run_dir = Path(rec["run_dir"])
        if rec.get("trials"):  # a sweep (train submit --sweep): one row per trial, its own task of the array
            rows += _trial_rows(rec, said, engines)
            continue
        if rec.get("workers"):  # a sweep's workers (--slurm.array_workers): one row per worker
            rows += _worker_rows(rec, said, engines)
            continue
        for key, label in JOB_KEYS:
            if not rec.get(key):
                continue
            job_id = current_id(rec, key)
            log = output_file(rec, engines, run_dir, job_id)
            status = with_run_record(said.get((job_id, str(run_dir))), job_id, run_dir)
            restarts = (
                restarts_cell(status, job_id, run_dir, scheduler_of(rec)) if key == "job_id" else str(status.restarts)
            )
            progress = detail(status, last_epoch_line(log))
            if key == "job_id" and (stalled := stall_note(run_dir, job_id)):
                progress = f"{stalled}; {progress}"
            if key == "job_id" and (failure := failure_note(run_dir, job_id)):
                progress = f"{failure}; {progress}"
            rows.append(
                (job_id, status.state, restarts, status.elapsed, progress, f"{rec.get('job_name')}{label}", str(log))
            )
    return rows


def stall_note(run_dir: Path, job_id: str) -> str:
    """The latest stall of the job (:mod:`trainer_cli.schedulers.slurm.watchdog`), or '': ``stalled (restart 0): rank 1
    on node2 at step 57, no step for 31 s, excluded node2; stacks in <run>/stalls/12-restart0``."""
    stall = jobstate.read(run_dir).get("stall")
    if not isinstance(stall, dict) or str(stall.get("job_id")) != job_id:
        return ""
    who = ", ".join(f"rank {r} on {n}" for r, n in zip(stall.get("ranks") or [], stall.get("nodes") or []))
    excluded = f", excluded {','.join(stall['exclude'])}" if stall.get("exclude") else ""
    return (
        f"stalled (restart {stall.get('restart')}): {who} at step {stall.get('step')}, no step for "
        f"{stall.get('idle_s')} s{excluded}; stacks in {stall.get('stacks')}"
    )


def failure_note(run_dir: Path, job_id: str) -> str:
    """Why the job ended FAILED in words, as it recorded it (``error`` in ``<run>/job.json``: a failure
    before training names its first task's error, a failed resubmission sbatch's), or ''."""
    record = jobstate.read(run_dir)
    if str(record.get("job_id")) != job_id or record.get("state") != "FAILED":
        return ""
    return str(record.get("error") or "")


def current_id(rec: dict[str, Any], key: str) -> str:
    """The job id of ``rec[key]`` now: for the fit job, the job it resubmitted itself as (if it did)."""
    return jobstate.follow(Path(rec["run_dir"]), str(rec[key])) if key == "job_id" else str(rec[key])


def restarts_cell(status: JobStatus, job_id: str, run_dir: Path, scheduler: str | None = None) -> str:
    """The RESTARTS of a fit job with their causes (:func:`trainer_cli.job.restarts.summary`):
    the count of its engine (``scheduler``) of the job plus those of the jobs it was resubmitted from."""
    recorded = jobstate.read(run_dir)
    recorded = recorded if str(recorded.get("job_id")) == job_id else {}
    total = status.restarts + (0 if status.source == "job.json" else int(recorded.get("prior_restarts") or 0))
    chain = [*map(str, recorded.get("resubmitted_from") or []), job_id]
    return restarts_log.summary(restarts_log.read(run_dir), chain, total, scheduler)


def task_output(rec: dict[str, Any], engines: Engines, index: int) -> Path:
    """Where task ``index`` of a sweep's array writes its output: in its trial's folder, or a worker's in
    ``<sweep>/workers``."""
    sweep_dir, task_id = Path(rec["run_dir"]), f"{rec['job_id']}_{index}"
    folder = sweep_dir / trial_name(index) if rec.get("trials") else sweep_dir / "workers"
    return output_file(rec, engines, folder, task_id)


def _trial_rows(rec: dict[str, Any], said: States, engines: Engines) -> list[tuple[str, ...]]:
    """A sweep's rows: per trial ``<array id>_<i>``, its task's state (its ``job.json`` once the engine
    forgot it), progress and log in ``<sweep>/trial_<i>``."""
    sweep_dir, job_id = Path(rec["run_dir"]), str(rec["job_id"])
    rows: list[tuple[str, ...]] = []
    for i in range(int(rec["trials"])):
        log = task_output(rec, engines, i)
        status = with_run_record(said.get((f"{job_id}_{i}", str(sweep_dir))), job_id, sweep_dir / trial_name(i))
        progress = detail(status, last_epoch_line(log))
        if failure := failure_note(log.parent, job_id):
            progress = f"{failure}; {progress}"
        rows.append(
            (
                f"{job_id}_{i}",
                status.state,
                str(status.restarts),
                status.elapsed,
                progress,
                f"{rec.get('job_name')} (trial {i})",
                str(log),
            )
        )
    return rows


def _worker_rows(rec: dict[str, Any], said: States, engines: Engines) -> list[tuple[str, ...]]:
    """The rows of a sweep's workers: per worker ``<array id>_<i>``, its task's state and the trial it
    trains (:mod:`trainer_cli.schedulers.slurm.sweep_worker`), its log in ``<sweep>/workers``."""
    sweep_dir, job_id = Path(rec["run_dir"]), str(rec["job_id"])
    rows: list[tuple[str, ...]] = []
    for i in range(int(rec["workers"])):
        log = task_output(rec, engines, i)
        status = said.get((f"{job_id}_{i}", str(sweep_dir)))
        flight = read_json(sweep_dir / "workers" / f"task_{i}.json")
        trial = f"trial {flight['trial']}" if "trial" in flight else "-"
        state = status.state if status is not None else "-"
        elapsed = status.elapsed if status is not None else "-"
        restarts = str(status.restarts) if status is not None else "-"
        rows.append((f"{job_id}_{i}", state, restarts, elapsed, trial, f"{rec.get('job_name')} (worker {i})", str(log)))
    return rows


def _where(root: Path | None) -> str:
    """How a message names the jobs searched: ``under ROOT``, or the user's."""
    return f"submitted under {root}" if root is not None else "you submitted"


def find_run(root: Path | None, run: str) -> dict[str, Any]:
    """The newest registry record of ``run`` (a run directory or one of its job ids), among the jobs
    submitted under ``root`` (None: every job of the user's).

    Raises:
        UserError: when no job matches.
    """
    records = read_registry(root)
    target = Path(run).resolve() if not run.isdigit() else None
    for rec in reversed(records):
        ids = {str(rec.get(k)) for k, _ in JOB_KEYS if rec.get(k)} | {current_id(rec, "job_id")}
        if run in ids or (target is not None and Path(rec["run_dir"]).resolve() == target):
            return rec
    known = ", ".join(sorted({str(r.get("job_id")) for r in records[-10:]})) or "none"
    raise UserError(
        f"{run}: no job {_where(root)} has this run directory or job id (recent jobs: {known}); `train jobs` lists them"
    )


def sweep_task(root: Path | None, run: str) -> tuple[dict[str, Any], int] | None:
    """The sweep record and task index when ``run`` names one array task of a sweep submitted under
    ``root`` (None: any of the user's): ``<array id>_<i>`` (a trial's task or a worker, as ``train
    jobs`` lists them) or, with a task per trial, the trial's run directory; else None."""
    named = re.fullmatch(r"(\d+)_(\d+)", run)
    target = None if named else Path(run).resolve()
    for rec in reversed(read_registry(root)):
        count = int(rec.get("trials") or rec.get("workers") or 0)
        if not count or not rec.get("job_id"):
            continue
        if named and named[1] == str(rec["job_id"]) and int(named[2]) < count:
            return rec, int(named[2])
        if target is not None and rec.get("trials"):
            for i in range(count):
                if (Path(rec["run_dir"]) / trial_name(i)).resolve() == target:
                    return rec, i
    return None


def _tail_task(rec: dict[str, Any], index: int, engines: Engines, poll_s: float) -> int:
    """Print the log of task ``index`` of a sweep's array (a trial's fit, or a worker's) and follow
    it while the task is queued or running."""
    job_id = str(rec["job_id"])
    task_id = f"{job_id}_{index}"
    trial = bool(rec.get("trials"))
    log = task_output(rec, engines, index)
    position = 0
    while True:
        position = _print_from(log, position)
        status = _state(rec, task_id, engines)
        if trial:
            status = with_run_record(status, job_id, log.parent)
        state = status.state if status is not None else "UNKNOWN"
        if not is_active(state):
            print(f"[train jobs --tail: task {task_id} is {state}]", file=sys.stderr)
            return 0
        time.sleep(poll_s)


def _print_from(log: Path, position: int) -> int:
    """Print ``log`` from byte ``position`` on (nothing while it does not exist); returns the new position."""
    if not log.is_file():
        return position
    with open(log, "rb") as f:
        f.seek(position)
        chunk = f.read()
    sys.stdout.write(chunk.decode(errors="replace"))
    sys.stdout.flush()
    return position + len(chunk)


def _state(rec: dict[str, Any], job_id: str, engines: Engines) -> JobStatus | None:
    """What ``rec``'s engine says of its job ``job_id`` (None: nothing, or a job of another run)."""
    engine = engines.get(scheduler_of(rec))
    status = engine.describe([job_id]).get(job_id) if engine is not None else None
    return status if status is not None and status.is_of(Path(rec["run_dir"])) else None


def tail(root: Path | None, run: str, engines: Engines, poll_s: float = 1.0) -> int:
    """Print the log of ``run``'s fit job and follow it while the job is queued or running (into
    the job it resubmits itself as, if it does); of one task of a sweep's array for a task id
    (``<array id>_<i>``) or a trial's run directory."""
    task = sweep_task(root, run)
    if task is not None:
        return _tail_task(*task, engines, poll_s)
    rec = find_run(root, run)
    job_id, run_dir = current_id(rec, "job_id"), Path(rec["run_dir"])
    if rec.get("trials"):
        raise UserError(
            f"{run}: a sweep of {rec['trials']} trials, one log each (e.g. {task_output(rec, engines, 0)}): follow "
            f"one with `train jobs --tail {job_id}_0`; `train sweep-results {run_dir}` tells how each trial is doing"
        )
    if rec.get("workers"):
        raise UserError(
            f"{run}: a sweep of {rec['workers']} workers, one log each (e.g. {task_output(rec, engines, 0)}): "
            f"follow one with `train jobs --tail {job_id}_0`; `train sweep-results {run_dir}` tells how each trial "
            "is doing"
        )
    log = output_file(rec, engines, run_dir, job_id)
    position = 0
    while True:
        position = _print_from(log, position)
        status = with_run_record(_state(rec, job_id, engines), job_id, run_dir)
        if not is_active(status.state):
            print(f"[train jobs --tail: job {job_id} is {status.state}]", file=sys.stderr)
            if current_id(rec, "job_id") == job_id:
                return 0
            job_id, position = current_id(rec, "job_id"), 0  # resubmitted (its script said so as it ended)
            log = output_file(rec, engines, run_dir, job_id)
            print(f"[train jobs --tail: the run goes on as job {job_id}]", file=sys.stderr)
            continue
        time.sleep(poll_s)


HEADER = ("JOB", "STATE", "RESTARTS", "ELAPSED", "DETAIL", "NAME", "LOG")


def show_run(root: Path | None, run: str, engines: Engines, as_json: bool = False) -> int:
    """``train jobs RUN``: the jobs of one run (a run directory or job id; a sweep's task
    ``<array id>_<i>``) and what they cost over every attempt (:mod:`trainer_cli.rundir.run_cost`),
    as a table and a cost block, or as JSON.

    Raises:
        UserError: when no job submitted under ``root`` has this run directory or job id.
    """
    task = sweep_task(root, run)
    spent: Cost | None
    if task is not None and task[0].get("trials"):  # one trial of a sweep: its task of the array
        rec, index = task
        run_dir = Path(rec["run_dir"]) / trial_name(index)
        rows = [r for r in job_rows([rec], engines) if r[0] == f"{rec['job_id']}_{index}"]
        spent = run_cost.cost(run_dir, [f"{rec['job_id']}_{index}"], engines)
    else:
        rec = find_run(root, run)
        run_dir = Path(rec["run_dir"])
        rows = job_rows([rec], engines)
        sweep = bool(rec.get("trials") or rec.get("workers"))  # its trials' costs: train sweep-results
        spent = None if sweep else run_cost.cost(run_dir, engines=engines)
    measured = goodput.allocated(run_dir, spent) if spent is not None else None
    picture = _timeline(run_dir, measured) if measured is not None else None
    if as_json:
        jobs_json = [dict(zip((h.lower() for h in HEADER), row)) for row in rows]
        figures = spent.as_json() if spent is not None else None
        shares = goodput.as_json(measured) | {"timeline": picture} if measured is not None else None
        print(json.dumps({"run_dir": str(run_dir), "jobs": jobs_json, "cost": figures, "goodput": shares}, indent=2))
        return 0
    print_table(rows, header=HEADER)
    if spent is None or measured is None:
        print(f"cost: per trial and the sweep's total: train sweep-results {run_dir}")
    else:
        print("\n".join(spent.block() + goodput.block(measured)))
        if picture:
            print(f"timeline: {picture}")
    return 0


def _timeline(run_dir: Path, measured: dict[str, Any]) -> str | None:
    """Write ``<run>/timeline.svg`` (:func:`trainer_cli.plots.plot_timeline`); its path, or None where
    there is nothing to draw or the run directory is not writable (said on stderr)."""
    from trainer_cli.plots import TIMELINE_SVG, plot_timeline

    rows = goodput.timeline_rows(measured)
    if not rows:
        return None
    path = run_dir / TIMELINE_SVG
    try:
        plot_timeline(rows, f"{run_dir}: each attempt's allocated time", path)
    except OSError as err:
        print(f"timeline not written: {path}: {err.strerror or err}", file=sys.stderr)
        return None
    return str(path)


def root_option(root: str | None) -> Path | None:
    """``--root DIR`` as a path (None when not given).

    Raises:
        UserError: when it names no directory.
    """
    if root is None:
        return None
    if not Path(root).is_dir():
        raise UserError(
            f"--root {root}: no such directory (name the trainer.default_root_dir you submitted with, or leave --root "
            "out for every job you submitted)"
        )
    return Path(root)


def main(args: list[str], engines: Engines) -> int:
    """``train jobs [--root DIR] [--last N] [--tail RUN] [RUN [--json] | SWEEP_DIR]``: print a table of the
    jobs the user submitted (or follow one run's log, or show one run's jobs and cost, or print a sweep's
    table of trials); returns the exit code.

    Raises:
        UserError: when ``--root`` is not a directory, ``--tail`` or RUN names no submitted run, or
            ``--json`` comes without RUN.
    """
    parser = argparse.ArgumentParser(prog="train jobs", description=__doc__.split("\n")[0])
    parser.add_argument(
        "--root", help="only the jobs submitted under this trainer.default_root_dir (default: every job you submitted)"
    )
    parser.add_argument("--last", type=int, default=20, help="show the newest N runs (default: 20)")
    parser.add_argument(
        "--all-clusters",
        action="store_true",
        help="list the jobs of every cluster you submitted to (default: the cluster Slurm's clients here talk to)",
    )
    parser.add_argument(
        "--tail", metavar="RUN", help="print RUN's log (a run directory or job id) and follow it while the job runs"
    )
    parser.add_argument(
        "run",
        nargs="?",
        metavar="RUN",
        help="a run directory or job id: its jobs, what they cost (allocated GPU-, CPU- and node-hours over "
        "every attempt, from sacct where there is accounting) and its goodput (the share of that time in training "
        "steps the final model keeps, each badput bucket; <run>/timeline.svg drawn); a sweep directory: its table "
        "of trials, as "
        "`train sweep-results` (CSV and JSON written)",
    )
    parser.add_argument("--json", action="store_true", help="with RUN: print its jobs, cost and goodput as JSON")
    opts = parser.parse_args(args)
    if opts.json and not opts.run:
        raise UserError(
            "--json prints one run's jobs and cost: name the run, `train jobs RUN --json` (a run directory or job id)"
        )
    root = root_option(opts.root)
    if opts.run and (Path(opts.run) / SWEEP_FILE).is_file():
        from trainer_cli.sweeps.results import report

        report(Path(opts.run), engines)
        return 0
    if opts.run:
        return show_run(root, opts.run, engines, opts.json)
    if opts.tail:
        return tail(root, opts.tail, engines)
    # each engine's jobs of the cluster it is on here; --root names the jobs wanted
    clusters = current_clusters(engines) if not opts.all_clusters and root is None else None
    records = read_registry(root, lambda read: len(of_cluster(read, clusters)[0]) >= opts.last)
    records, hidden = of_cluster(records, clusters)
    records = records[-opts.last :]
    others = (
        f"{sum(hidden.values())} job(s) of other clusters not shown "
        f"({', '.join(f'{name}: {n}' for name, n in sorted(hidden.items()))}): train jobs --all-clusters"
        if hidden
        else ""
    )
    if not records:
        print(f"no jobs {_where(root)} (train submit records them in {registry_file()})")
    else:
        print_table(job_rows(records, engines), header=HEADER)
    if others:
        print(others)
    return 0
