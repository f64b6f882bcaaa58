"""A sweep's Slurm array worker (``train submit --sweep ... --slurm.array_workers N``): each task of the
array asks the study for a trial, trains it, tells its result and asks again, until the study holds
the requested number of trials.

The batch script (``slurm/sweep_workers.sbatch.j2``) loops over two commands of this module::

    python -m trainer_cli.schedulers.slurm.sweep_worker next SWEEP_DIR TASK [RC]
        tells how the last trial ended (RC: its fit's exit code), then prints the next trial's run
        directory ("" when the study is done); exits 75 when the task was requeued (nothing asked)
    python -m trainer_cli.schedulers.slurm.sweep_worker beat SWEEP_DIR TASK
        the trial's heartbeat while it trains (a database study)

(``tell SWEEP_DIR TASK RC`` tells alone.) Telling and asking are one process: each is mostly the
interpreter's start, its imports and its exit (``benchmarks/sweep_overhead.py``), paid once a trial.

``sweep.json`` holds what a worker needs: the sweep flags (``sweep_args``) and the base command
line, its configs composed into it (``base_args``). ``next`` first looks at the task's in-flight
record (``workers/task_<TASK>.json``): a trial the task started and did not tell (the task was
preempted and requeued) is handed back, so its ``train fit`` resumes from the trial's own
checkpoint: not restarted, not asked twice, told once. Otherwise, under a lock (asks are counted
across workers), it asks the study for a new
trial when fewer than the requested number are finished or running, type-checks it with the
sweep's base command line and writes its run directory ``trial_<n>`` (a grid's
trials are written at submission). ``tell`` reads the trial's ``job.json``: a trial whose job
requeued itself is not told (the task runs again); otherwise the study is told COMPLETE with the
trial's best value, PRUNED or FAIL (:func:`trainer_cli.sweeps.study.tell`). A FAIL does not
count as done: workers ask again (at most twice the trials wanted in all).

A worker that died without being requeued (its node lost, its task cancelled, its restarts spent)
leaves a RUNNING trial that nobody will tell. Every ask first looks for such trials
(:func:`reclaim_dead`): an in-flight record names its worker's Slurm job (``<array id>_<task>``),
and a trial still RUNNING whose job Slurm reports ended (or no longer knows) is failed and retried
once with the same values, in a new ``trial_<n>``; a requeued or pending task is alive and keeps its
trial. This serves the journal file, which has no heartbeat, and a database alike; a database study
also has Optuna's heartbeat (``beat``; a trial whose beats stop is failed and retried by
``RetryFailedTrialCallback``), which covers a worker Slurm still shows running.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

from trainer_cli.atomic import locked, update_json
from trainer_cli.config.request import Request
from trainer_cli.errors import UserError
from trainer_cli.job import jobstate
from trainer_cli.job.context import current as job_context
from trainer_cli.sweeps import plan as sweep_plan
from trainer_cli.sweeps import study as sweep_study
from trainer_cli.sweeps.space import take_sweep_args

WORKERS_DIR = "workers"
REQUEUED_STATES = ("REQUEUED", "RESUBMIT", "PENDING")
EXIT_REQUEUED = 75
"""``next`` with an exit code, when the trial's task was requeued: nothing told, nothing asked (the
task starts again and resumes the trial)."""
RETRIED_FROM = "retried_from"
"""The user attribute of a trial retried for a dead worker: the trial it repeats."""


def in_flight_file(sweep_dir: Path, task: str) -> Path:
    return sweep_dir / WORKERS_DIR / f"task_{task}.json"


def _sweep(sweep_dir: Path, record: dict[str, Any]) -> sweep_plan.Sweep:
    """The submitted sweep, ready to type-check more trials (its parser and frozen base command)."""
    from trainer_cli.imports import heavy_import

    with heavy_import():
        from trainer_cli.runtime.verbs import ConfigParser

    space, _ = take_sweep_args(Request.of(record["sweep_args"]))  # the sweep's record, read back
    assert space is not None
    return sweep_plan.Sweep(
        space,
        [],
        sweep_dir.parent.parent,
        record["name"],
        sweep_dir,
        parser=ConfigParser("fit"),
        fit_args=Request.of(record["base_args"], "fit"),  # the record's base command, read back
        study=record["study"],
    )


_opened: dict[tuple[str, str], Any] = {}


def _study(record: dict[str, Any]) -> Any:
    """The sweep's study, opened once a process: ``next SWEEP_DIR TASK RC`` tells and asks with one replay
    of the journal (a journal study reads the lines appended since at each access; a database is asked)."""
    where = (str(record["study"]["storage"]), str(record["study"]["name"]))
    if where not in _opened:
        _opened[where] = sweep_study.load(record["study"])
    return _opened[where]


def _counts(loaded: Any) -> tuple[int, int]:
    """``(trials done or under way, trials asked)``: COMPLETE, PRUNED and RUNNING count as done; a
    FAIL does not (a worker asks again), but asks stop at twice the trials wanted."""
    from optuna.trial import TrialState

    trials = loaded.get_trials(deepcopy=False)
    done = (TrialState.COMPLETE, TrialState.PRUNED, TrialState.RUNNING)
    return sum(t.state in done for t in trials), sum(t.state != TrialState.WAITING for t in trials)


def next_trial(sweep_dir: Path, task: str) -> Path | None:
    """The run directory this task trains next (its in-flight trial first); None when the study is done."""
    flight = in_flight_file(sweep_dir, task)
    if flight.exists():
        return Path(json.loads(flight.read_text())["run_dir"])
    record = sweep_plan.read_record(sweep_dir)
    wanted = int(record["study"]["n_trials"] or len(record["trials"]))
    loaded = _study(record)
    sweep = None
    (sweep_dir / WORKERS_DIR).mkdir(exist_ok=True)
    with locked(sweep_dir / WORKERS_DIR / "asks", timeout_s=600):  # one worker asks at a time
        reclaim_dead(sweep_dir, loaded, task)
        while True:
            if "://" in record["study"]["storage"]:  # trials whose heartbeat stopped: failed (and retried)
                import optuna

                optuna.storages.fail_stale_trials(loaded)
            done, asked_so_far = _counts(loaded)
            if done >= wanted or asked_so_far >= 2 * wanted:
                return None
            loaded.sampler = sweep_study.sampler_for(record["study"], len(loaded.get_trials(deepcopy=False)))
            asked = loaded.ask()
            run_dir = sweep_dir / sweep_plan.trial_name(asked.number)
            sweep = sweep or _sweep(sweep_dir, record)
            overrides = sweep_study.suggest(sweep.space, asked)
            if not run_dir.exists():  # a grid's trials are written at submission; others and retries now
                try:
                    trial = sweep_plan.add_trial(sweep, asked.number, overrides)
                except UserError as refused:
                    sweep_study.fail(loaded, asked.number)
                    print(f"trainer-cli: {refused}", file=sys.stderr, flush=True)
                    continue
                sweep_plan.write_trial(sweep, trial)
                entry = {"index": trial.index, "run_dir": str(run_dir), "overrides": overrides, "values": trial.values}
                _append_trial(sweep_dir, entry)
            in_flight = {"trial": asked.number, "run_dir": str(run_dir), "job": job_context().own_id}
            flight.write_text(json.dumps(in_flight) + "\n")
            return run_dir


def job_alive(job: str) -> bool | None:
    """Whether Slurm still holds ``job`` (pending, running, requeued, suspended, completing: its batch
    script may still tell); False when it ended or Slurm no longer knows it; None when Slurm cannot
    be asked (the controller unreachable, no squeue): nothing is decided then."""
    from trainer_cli.job.status import ACTIVE_STATES
    from trainer_cli.schedulers.slurm import commands as slurm_commands

    try:
        rows = slurm_commands.squeue("state", job)
    except slurm_commands.SlurmCommandError as err:
        return False if "invalid job id" in err.message.lower() else None
    return bool({r.get("State") for r in rows} & ACTIVE_STATES)  # an ended job stays listed for MinJobAge seconds


def reclaim_dead(sweep_dir: Path, loaded: Any, task: str) -> list[int]:
    """Fail, and retry once with the same values, the RUNNING trials whose worker's Slurm job ended
    without telling them (see the module's docstring); returns the trials failed. Called under the
    ask lock. A trial that was a retry already is failed, not retried again."""
    from optuna.trial import TrialState

    trials = {t.number: t for t in loaded.get_trials(deepcopy=False)}
    failed = []
    for path in sorted((sweep_dir / WORKERS_DIR).glob("task_*.json")):
        other = path.stem.removeprefix("task_")
        try:
            in_flight = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        trial, job = trials.get(in_flight.get("trial")), in_flight.get("job")
        if other == task or not job or trial is None or trial.state != TrialState.RUNNING:
            continue
        if job_alive(str(job)) is not False:
            continue
        sweep_study.fail(loaded, trial.number)
        retried = RETRIED_FROM in trial.user_attrs
        if not retried:
            loaded.enqueue_trial(trial.params, user_attrs={RETRIED_FROM: trial.number}, skip_if_exists=False)
        path.rename(path.with_name(f"dead_{path.name}"))
        then = "not retried (it was a retry already)" if retried else "retried once with the same values"
        print(
            f"trainer-cli: worker {task}: trial {trial.number} ({in_flight.get('run_dir')}) of worker {other} was "
            f"never told and its job {job} has ended: failed, {then}",
            file=sys.stderr,
            flush=True,
        )
        failed.append(trial.number)
    return failed


def beat(sweep_dir: Path, task: str) -> int:
    """Beat for this task's in-flight trial every :func:`~trainer_cli.sweeps.study.heartbeat_s` until
    killed (the batch script kills it when the trial's ``train fit`` ends); nothing for a journal study."""
    import time

    record = sweep_plan.read_record(sweep_dir)
    flight = in_flight_file(sweep_dir, task)
    if "://" not in record["study"]["storage"] or not flight.exists():
        return 0
    storage = sweep_study.storage(record["study"]["storage"])
    study_id = storage.get_study_id_from_name(record["study"]["name"])
    trial_id = storage.get_trial_id_from_study_id_trial_number(study_id, json.loads(flight.read_text())["trial"])
    storage.record_heartbeat(trial_id)
    print(f"trainer-cli: worker {task}: heartbeat for trial {trial_id} every {sweep_study.heartbeat_s()} s", flush=True)
    while True:
        time.sleep(sweep_study.heartbeat_s())
        storage.record_heartbeat(trial_id)


def _append_trial(sweep_dir: Path, entry: dict[str, Any]) -> None:
    def change(record: dict[str, Any]) -> dict[str, Any]:
        return record | {"trials": [*record.get("trials", []), json.loads(json.dumps(entry, default=str))]}

    update_json(sweep_dir / sweep_plan.SWEEP_FILE, change)


def tell(sweep_dir: Path, task: str, exit_code: int) -> str:
    """Tell the study how this task's in-flight trial ended; returns the state told, or ``REQUEUED``
    (nothing told: the task runs again and resumes the trial)."""
    from trainer_cli.sweeps.local import failure, trial_value

    flight = in_flight_file(sweep_dir, task)
    if not flight.exists():
        return "NONE"
    in_flight = json.loads(flight.read_text())
    run_dir = Path(in_flight["run_dir"])
    if str(jobstate.read(run_dir).get("state")) in REQUEUED_STATES:
        return "REQUEUED"
    record = sweep_plan.read_record(sweep_dir)
    loaded = _study(record)
    asked = next(t for t in loaded.get_trials(deepcopy=False) if t.number == in_flight["trial"])
    value = trial_value(run_dir, record["study"]["metric"], record["study"]["direction"])
    state = sweep_study.tell(loaded, asked, value, exit_code)
    if state == "FAIL":
        why = failure(run_dir, record["study"]["metric"], exit_code)
        print(f"trainer-cli: worker {task}: trial {asked.number} failed ({why})", file=sys.stderr, flush=True)
    flight.unlink()
    return state


def main(argv: list[str]) -> int:
    """``next SWEEP_DIR TASK [EXIT_CODE]`` | ``beat SWEEP_DIR TASK`` | ``tell SWEEP_DIR TASK EXIT_CODE``;
    see the module docstring."""
    command, sweep_dir, task = argv[0], Path(argv[1]), argv[2]
    if command == "next":
        if len(argv) > 3:  # the last trial's fit ended with this exit code: tell it first
            state = tell(sweep_dir, task, int(argv[3]))
            print(f"trainer-cli: worker {task}: trial told {state}", file=sys.stderr, flush=True)
            if state == "REQUEUED":
                return EXIT_REQUEUED
        run_dir = next_trial(sweep_dir, task)
        print(run_dir or "")
        return 0
    if command == "beat":
        return beat(sweep_dir, task)
    if command == "tell":
        state = tell(sweep_dir, task, int(argv[3]))
        print(f"trainer-cli: worker {task}: trial told {state}", file=sys.stderr, flush=True)
        return 0
    raise SystemExit(f"unknown command {command!r}")


if __name__ == "__main__":
    code = main(sys.argv[1:])
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)  # its files are written and closed: not a second of interpreter teardown per trial
