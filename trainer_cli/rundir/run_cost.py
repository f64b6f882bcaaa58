"""A run's cost: what every attempt of the jobs that ran in its directory was allocated
(:mod:`trainer_cli.job.cost`), from the engine's accounting (:meth:`trainer_cli.job.scheduler.Scheduler.accounting`:
Slurm's ``sacct``) where there is one, else estimated from the run's own records.

A run's jobs (:func:`job_ids`) are those its ``job.json`` names (the job ``train submit`` queued and
those it resubmitted itself from; a sweep trial's task ``<array id>_<i>``) and those its
``history.jsonl`` records a fit start of (a job submitted into the run again, a cross-validation
fold's task). One ``accounting`` call per engine answers for every run listed (:func:`costs`). A row of a
job id the scheduler gave out before (a fresh state directory counts from 1 again, the database keeps the old
jobs) that ended before the run existed is not the run's.

Without accounting the attempts come from the run's records (:func:`spans`): the batch script's start
of each attempt (``job.json`` ``starts``), the fit starts in ``history.jsonl`` of the jobs submitted
into the run before (rank 0's, once the set-up and imports are done: those attempts' first seconds
are missed), the end of each attempt that restarted in ``restarts.jsonl`` and the job's end in
``job.json``; they are priced at the resources the job asked for (``job.json``: nodes, tasks and GPUs
per node, CPUs per task).

A run of a scheduler that keeps no accounting (:data:`~trainer_cli.job.scheduler.WITHOUT_ACCOUNTING`;
``job.json``'s ``scheduler``, else the attempt records' own) is read from its attempt records alone
(:func:`record_attempts`): source ``records``, never the engine's accounting.

Which scheduler a start ran under is what its records say (:func:`trainer_cli.job.scheduler.recorded_job`);
what each process held is ``job.json``'s ``nodes``, ``ntasks_per_node``, ``gpus_per_node`` and
``cpus_per_process``, which every engine's submission writes.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trainer_cli.job import cost as job_cost
from trainer_cli.job import jobstate
from trainer_cli.job import restarts as restarts_log
from trainer_cli.job.scheduler import DEFAULT_SCHEDULER, WITHOUT_ACCOUNTING, recorded_job
from trainer_cli.rundir import attempts as attempts_mod
from trainer_cli.rundir import history

if TYPE_CHECKING:
    from trainer_cli.job.scheduler import Scheduler

REUSED_SLACK_S = 600
"""An accounting row that ended this long before the run's first record is another job that had its id."""


def _scheduler(record: dict[str, Any]) -> str:
    """The engine that ran a run's jobs: ``job.json``'s ``scheduler`` (a line without it is the default's)."""
    return str(record.get("scheduler") or DEFAULT_SCHEDULER)


def _job_starts(run_dir: Path, scheduler: str) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """The fit starts of ``run_dir`` in a job of ``scheduler`` (its ``history.jsonl`` records, each with
    the job it names), oldest first."""
    starts = ((r, recorded_job(r)) for r in history.read(run_dir) if r.get("verb", "fit") == "fit")
    return [(r, job) for r, job in starts if job is not None and job.get("scheduler") == scheduler]


def job_ids(run_dir: Path, record: dict[str, Any] | None = None) -> list[str]:
    """The jobs that ran ``run_dir``: those its ``job.json`` names, as the engine's accounting takes them
    (a sweep trial's task as ``<array id>_<i>``), and those its ``history.jsonl`` records of its engine."""
    record = jobstate.read(run_dir) if record is None else record
    ids = _submitted_ids(record) + [str(job["job_id"]) for _, job in _job_starts(run_dir, _scheduler(record))]
    return list(dict.fromkeys(ids))


def _submitted_ids(record: dict[str, Any]) -> list[str]:
    """The jobs a run's ``job.json`` names, when the submitter wrote it (not a fold's task's own)."""
    if not (record.get("submitted") and record.get("job_id")) or record.get("scheduler") in WITHOUT_ACCOUNTING:
        return []
    if record.get("array_task") is not None:  # a sweep trial: its task (the array's id names every task)
        return [f"{record['job_id']}_{record['array_task']}"]
    return [*map(str, record.get("resubmitted_from") or []), str(record["job_id"])]


def _first_record(run_dir: Path, record: dict[str, Any]) -> float | None:
    """The earliest time the run's records name (its submission, its first start)."""
    starts = _job_starts(run_dir, _scheduler(record))
    found = [job_cost.parse_time(t) for t in (record.get("submitted"), starts[0][0].get("time") if starts else None)]
    return min((t for t in found if t is not None), default=None)


def _requested(record: dict[str, Any]) -> dict[str, float]:
    """What each attempt asked for (``job.json``): CPUs, GPUs and nodes; empty when not recorded."""
    nodes = record.get("nodes")
    if not isinstance(nodes, int) or nodes < 1:
        return {}
    tasks = int(record.get("ntasks_per_node") or 1)
    cpus_per_task = _cpus_per_process(record)
    gpus = int(record.get("gpus_per_node") or 0) * nodes
    return {"node": float(nodes), "cpu": float(nodes * tasks * cpus_per_task), **({"gpu": float(gpus)} if gpus else {})}


def spans(run_dir: Path, record: dict[str, Any] | None = None) -> list[tuple[str, float, float | None]]:
    """``(job id, start, end)`` of each attempt of the run, from its own records (see the module's
    description), oldest first; end None for an attempt running now."""
    record = jobstate.read(run_dir) if record is None else record
    starts = _job_starts(run_dir, _scheduler(record))
    fits = [(str(job["job_id"]), job_cost.parse_time(r.get("time"))) for r, job in starts]
    ends = sorted(t for t in (job_cost.parse_time(e.get("time")) for e in restarts_log.read(run_dir)) if t is not None)
    batch = [job_cost.parse_time(t) for t in record.get("starts") or [record.get("started")]]
    attempts: dict[float, str] = {t: str(record.get("job_id") or "") for t in batch if t is not None}
    unclaimed = set(attempts)
    for job, fit in fits:  # a fit start is the attempt's whose batch script started last before it
        if fit is None:
            continue
        owner = max((t for t in attempts if t <= fit), default=None)
        if owner in unclaimed and not any(owner < t < fit for t in ends):
            attempts[owner] = job
            unclaimed.discard(owner)
        else:  # an attempt of a submission whose job.json was replaced since: its fit start alone
            attempts[fit] = job
    found = sorted(((job, t) for t, job in attempts.items()), key=lambda a: a[1])
    state = str(record.get("state") or "")
    ended = job_cost.parse_time(record.get("ended"))
    out: list[tuple[str, float, float | None]] = []
    for i, (job, start) in enumerate(found):
        later = found[i + 1][1] if i + 1 < len(found) else None
        end = next((t for t in ends if start < t and (later is None or t <= later)), None)
        if end is None and later is not None:  # restarted by the scheduler (a node failure): until the next start
            end = later
        if end is None:  # the latest attempt
            end = ended if ended is not None and ended >= start and state not in ("RUNNING", "PENDING") else None
            if end is None and state not in ("RUNNING", "PENDING"):
                end = start  # ended, but not recorded: nothing known past its start
        out.append((job, start, end))
    return out


def recorded_scheduler(run_dir: Path, record: dict[str, Any] | None = None) -> str | None:
    """The scheduler of :data:`~trainer_cli.job.scheduler.WITHOUT_ACCOUNTING` whose jobs ran ``run_dir``:
    ``job.json``'s ``scheduler``, else the one its attempt records name (a fit started in such a job by hand);
    None for any other run."""
    record = jobstate.read(run_dir) if record is None else record
    if record.get("scheduler"):
        return str(record["scheduler"]) if record["scheduler"] in WITHOUT_ACCOUNTING else None
    if record.get("submitted"):  # submitted to the default engine (its record predates the scheduler field)
        return None
    named = (recorded_job(a) for a in attempts_mod.read(run_dir))
    found = (str(j["scheduler"]) for j in named if j is not None and j.get("scheduler") in WITHOUT_ACCOUNTING)
    return next(found, None)


def _cpus_per_process(record: dict[str, Any]) -> float:
    """The CPUs each process (a task, a worker) held: ``job.json``'s ``cpus_per_process``, as the engine's
    submission recorded it; 1 where not recorded."""
    given = record.get("cpus_per_process")
    return float(given) if isinstance(given, (int, float)) and given > 0 else 1.0


def record_attempts(
    run_dir: Path, job_ids: Sequence[str] | None = None, record: dict[str, Any] | None = None
) -> list[job_cost.Attempt]:
    """Each start of the worker group of ``run_dir``'s jobs of a scheduler without accounting
    (:data:`~trainer_cli.job.scheduler.WITHOUT_ACCOUNTING`; ``job_ids``: those jobs only), from the ranks'
    attempt records (:mod:`trainer_cli.rundir.attempts`, the lines that share an ``attempt`` id), oldest first: from
    its first rank's process start to its last rank's end (a killed rank's last sign), holding each
    rank's CPUs (:func:`_cpus_per_process`), a GPU per rank where a rank allocated CUDA memory, and
    its nodes. ``COMPLETED`` where every rank completed, ``RUNNING`` for the latest start of a job
    running now with a rank still open, ``CANCELLED`` where a rank was stopped, else ``FAILED``; each
    start waited from the run's submission or the end of the start before it."""
    record = jobstate.read(run_dir) if record is None else record
    scheduler = recorded_scheduler(run_dir, record)
    if scheduler is None:
        return []
    groups: dict[str, list[dict[str, Any]]] = {}
    for line in attempts_mod.read(run_dir):
        named = recorded_job(line)
        job = str(named["job_id"]) if named is not None and named.get("scheduler") == scheduler else ""
        if job and (job_ids is None or job in job_ids):
            groups.setdefault(str(line.get("attempt") or job), []).append(line)
    cpus = _cpus_per_process(record)
    running = str(record.get("state") or "") in ("RUNNING", "PENDING")
    ordered = sorted(groups.values(), key=lambda lines: min(float(a["started"]) for a in lines))
    out: list[job_cost.Attempt] = []
    previous_end = job_cost.parse_time(record.get("submitted"))
    for index, lines in enumerate(ordered):
        start = min(float(a["started"]) for a in lines)
        end = max(float(a["end"]) for a in lines)
        ranks = len({a.get("rank") for a in lines})
        state = attempts_mod.state(lines, running and index == len(ordered) - 1)
        gpus = ranks if any((a.get("memory") or {}).get("cuda_max_allocated_bytes") for a in lines) else 0
        tres = {"cpu": ranks * cpus, "node": float(len({a.get("node") for a in lines}))}
        if gpus:
            tres["gpu"] = float(gpus)
        wait = None if previous_end is None or previous_end > start else start - previous_end
        job = str((recorded_job(lines[0]) or {})["job_id"])
        out.append(job_cost.Attempt(job, state, start, end - start, tres, wait))
        previous_end = end
    return out


def records_cost(run_dir: Path, record: dict[str, Any] | None = None, now: float | None = None) -> job_cost.Cost:
    """The cost of a run of a scheduler without accounting (:func:`record_attempts`): ``records``;
    ``none`` before any record of a start (and not submitted), with the wait so far while it is pending."""
    record = jobstate.read(run_dir) if record is None else record
    found = record_attempts(run_dir, record=record)
    if not found and not record.get("submitted"):
        return job_cost.Cost()
    waiting = None
    submitted = job_cost.parse_time(record.get("submitted"))
    if not found and record.get("state") == "PENDING" and submitted is not None:
        waiting = max((time.time() if now is None else now) - submitted, 0.0)
    return job_cost.Cost(job_cost.RECORDS, found, waiting)


def estimate(run_dir: Path, now: float | None = None) -> job_cost.Cost:
    """The run's cost from its own records (:func:`spans`) at the resources it asked for: estimated;
    ``none`` for a run no job started."""
    record = jobstate.read(run_dir)
    found = spans(run_dir, record)
    if not found and not record.get("submitted"):
        return job_cost.Cost()
    return job_cost.estimate(
        found, _requested(record), job_cost.parse_time(record.get("submitted")), str(record.get("state") or ""), now
    )


def _accounting(engines: Mapping[str, Scheduler] | None, name: str, ids: Sequence[str]) -> list[job_cost.Attempt]:
    """What engine ``name`` of ``engines`` accounts of ``ids`` (one call); empty without that engine, without
    ids, or where it keeps no accounting."""
    engine = (engines or {}).get(name)
    return (engine.accounting(list(ids)) or []) if engine is not None and ids else []


def costs(
    run_dirs: Sequence[Path],
    extra_ids: Sequence[Sequence[str]] = (),
    now: float | None = None,
    engines: Mapping[str, Scheduler] | None = None,
) -> list[job_cost.Cost]:
    """The cost of each run of ``run_dirs`` (:func:`job_ids`, and ``extra_ids[i]`` for run ``i``): from the
    accounting of the engine that ran its jobs (of ``engines``, by ``job.json``'s ``scheduler``, the default's
    where it names none; one ``accounting`` call per engine for all the runs) where it knows a
    job of the run, else estimated (:func:`estimate`; also without ``engines``); a run of a scheduler without
    accounting from its attempt records (:func:`records_cost`), no engine asked."""
    records = [jobstate.read(d) for d in run_dirs]
    recorded = [recorded_scheduler(d, rec) is not None for d, rec in zip(run_dirs, records)]
    wanted = [
        [] if recorded[i] else list(dict.fromkeys([*job_ids(d, rec), *(extra_ids[i] if i < len(extra_ids) else [])]))
        for i, (d, rec) in enumerate(zip(run_dirs, records))
    ]
    names = [_scheduler(rec) for rec in records]
    asked: dict[str, list[str]] = {}
    for name, ids in zip(names, wanted):
        asked.setdefault(name, []).extend(ids)
    said = {name: _accounting(engines, name, list(dict.fromkeys(ids))) for name, ids in asked.items()}
    out = []
    for run_dir, record, ids, by_records, name in zip(run_dirs, records, wanted, recorded, names):
        if by_records:
            out.append(records_cost(run_dir, record, now))
            continue
        first = _first_record(run_dir, record)
        # an array the submitter queued for the run (cross-validation folds) counts every task; an array task's
        # job id in history.jsonl, which may be the array's own id, names that task alone
        arrays = set(_submitted_ids(record))
        mine = [
            a
            for a in said[name]
            if (a.job_id in ids or (a.raw_id and a.raw_id in ids) or a.job_id.split("_")[0] in arrays)
            and (first is None or a.end is None or a.end >= first - REUSED_SLACK_S)
        ]
        out.append(job_cost.of_attempts(mine) if mine else estimate(run_dir, now))
    return out


def cost(run_dir: Path, extra_ids: Sequence[str] = (), engines: Mapping[str, Scheduler] | None = None) -> job_cost.Cost:
    """The cost of one run (:func:`costs`)."""
    return costs([run_dir], [list(extra_ids)], engines=engines)[0]


def worker_trial_costs(
    trial_dirs: Sequence[Path], array_id: str, workers: int, engines: Mapping[str, Scheduler] | None = None
) -> list[job_cost.Cost]:
    """The cost of each trial of a sweep of workers (an array of ``workers`` tasks of the default engine, each
    training several trials one after another), estimated: the time of the trial's processes (rank 0's
    attempt records, :mod:`trainer_cli.rundir.attempts`: process start to end, in the task its ``task``
    names) priced at what that task's allocation held then (the accounting of ``engines``' default engine:
    one call for every task; without accounting what the trial's job asked for). The task's time between
    trials (asking and telling the study, the batch script) is in no trial's."""
    rows = _accounting(engines, DEFAULT_SCHEDULER, [f"{array_id}_{i}" for i in range(workers)])
    out = []
    for trial_dir in trial_dirs:
        requested = _requested(jobstate.read(trial_dir))
        spans = []
        for process in (a for a in attempts_mod.read(trial_dir) if a.get("rank") == 0):
            named = recorded_job(process) or {}
            task = str(named.get("task") or named.get("job_id") or "")  # <array>_<task>; an older record: the
            own = ("job_id",) if named.get("task") else ("raw_id", "job_id")  # array's id, one task's raw id
            started = float(process["started"])
            held = next(
                (
                    r
                    for r in rows
                    if task in (getattr(r, name) for name in own)
                    and r.start is not None
                    and r.start - 1 <= started <= (r.end if r.end is not None else float("inf"))
                ),
                None,
            )
            state = held.state if held else ("RUNNING" if process.get("open") else "ENDED")
            tres = dict(held.tres) if held and held.tres else dict(requested)
            spans.append(job_cost.Attempt(held.job_id if held else task, state, started, process["wall_s"], tres))
        out.append(job_cost.Cost(job_cost.ESTIMATED, spans) if spans else job_cost.Cost())
    return out
