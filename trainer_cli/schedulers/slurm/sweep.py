"""``train submit ... --sweep KEY=VALUES``: a sweep queued as one Slurm job array, a task per trial.

1. Every trial is composed and type-checked here (:mod:`trainer_cli.sweeps.plan`); one bad value
   fails the submission, naming the trial, before anything is written or queued.
2. The trials share one resource request (nodes, tasks, GPUs from the trainer, as
   ``train submit``), checked against the cluster.
3. The sweep directory is written (``sweep.json``, ``trial_<i>/config.yaml`` with its ``run_dir``)
   and the script rendered from ``slurm/sweep.sbatch.j2`` (``#SBATCH --array=0-<N-1>[%P]``, P from
   ``--slurm.array_parallelism``): task ``i`` trains ``trial_<i>`` as a plain fit job would, logs to
   ``trial_<i>/slurm-<array id>_<i>.log`` and, preempted, requeues itself alone and resumes.
4. ``sweep.json``, each trial's ``job.json`` and the registry of ``train jobs`` get the array's id.

With ``--slurm.array_workers N`` the array is N workers instead (``slurm/sweep_workers.sbatch.j2``,
:mod:`trainer_cli.schedulers.slurm.sweep_worker`): each asks the sweep's Optuna study for a trial, trains it, tells
it and asks again until the study holds ``--sweep_trials`` trials (a grid: every point); any
``--sweep_sampler``, ``--sweep_pruner`` and ``--sweep_storage`` apply.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone
from functools import partial
from pathlib import Path
from typing import Any

from trainer_cli.atomic import update_json
from trainer_cli.config.before_parse import check_top_level_keys
from trainer_cli.config.request import SWEEP_OPTIONS, Request, command_line
from trainer_cli.config.spec import split
from trainer_cli.errors import UserError
from trainer_cli.job import jobstate
from trainer_cli.schedulers import snapshot
from trainer_cli.schedulers.resources import Resources, derive
from trainer_cli.schedulers.slurm import secrets
from trainer_cli.schedulers.slurm.cluster import check_resources
from trainer_cli.schedulers.slurm.commands import SlurmCommandError, cluster_name, sbatch_words, show_config
from trainer_cli.schedulers.slurm.container import data_paths
from trainer_cli.schedulers.slurm.options import AUTO, SECTION, SlurmOptions
from trainer_cli.schedulers.slurm.render import render
from trainer_cli.schedulers.slurm.sbatch import LOG_PATTERN as JOB_LOG
from trainer_cli.schedulers.slurm.sbatch import (
    SCRIPT_NAME,
    prepare_run,
    run_sbatch,
    script_context,
    slurm_filename_pattern,
)
from trainer_cli.schedulers.slurm.slurm_args import parse_slurm_options
from trainer_cli.schedulers.submissions import register
from trainer_cli.sweeps import plan as sweep_plan
from trainer_cli.sweeps import study as sweep_study
from trainer_cli.sweeps.space import take_sweep_args

TEMPLATE = "sweep"
WORKERS_TEMPLATE = "sweep_workers"
WORKERS_FLAG = "--slurm.array_workers"
WORKERS_LOG = "workers/slurm-%A_%a.log"
LOG_PATTERN = "trial_%3a/slurm-%A_%a.log"  # %3a: the task id padded to 3 digits, as trial_name()


def _shared_resources(sweep: sweep_plan.Sweep, slurm: SlurmOptions) -> Resources:
    """The one resource request of every trial.

    Raises:
        UserError: when trials ask for different nodes, tasks or GPUs (one job array has one shape),
            or the trainer and the Slurm options disagree.
    """
    found = [(derive(t.config.trainer, slurm), t) for t in sweep.trials or sweep.checked]
    first, _ = found[0]
    for resources, trial in found[1:]:
        if resources != first:
            raise UserError(
                f"sweep {trial.label()}: {resources.nodes} node(s) x {resources.ntasks_per_node} task(s), "
                f"{resources.gpus_per_node} GPU(s) "
                f"per node, but trial 0 has {first.nodes} x {first.ntasks_per_node}, {first.gpus_per_node}: the trials "
                "of one job array "
                "share one resource request; sweep other options, or submit separate sweeps"
            )
    return first


def max_array_size() -> int | None:
    """This cluster's ``MaxArraySize`` (task ids run 0..MaxArraySize-1), from ``scontrol show config``;
    None when Slurm cannot be asked."""
    try:
        value = show_config().get("MaxArraySize") or ""
    except SlurmCommandError:
        return None
    return int(value) if value.isdigit() else None


def _array(n: int, slurm: SlurmOptions) -> str:
    return f"0-{n - 1}" + (f"%{slurm.array_parallelism}" if slurm.array_parallelism else "")


def _script(
    sweep: sweep_plan.Sweep, slurm: SlurmOptions, resources: Resources, job_name: str, workers: int | None = None
) -> str:
    """The sweep's sbatch script (``slurm/sweep.sbatch.j2``, or ``--slurm.template``).

    Raises:
        UserError: for a template error, or a template that renders no ``#SBATCH --array`` line.
    """
    data = data_paths(sweep.base.get("data"), Path.cwd()) if slurm.container.runtime else []
    context = script_context(slurm, resources, sweep.sweep_dir, job_name, Path.cwd(), slurm.dependency, data)
    context |= {
        "sweep_dir": str(sweep.sweep_dir),
        "array": _array(workers or len(sweep.trials), slurm),
        "log_pattern": slurm_filename_pattern(sweep.sweep_dir) + "/" + (WORKERS_LOG if workers else LOG_PATTERN),
    }
    own = WORKERS_TEMPLATE if workers else TEMPLATE
    text = render(own if slurm.template == "ddp" else slurm.template, context)
    if f"#SBATCH --array={context['array']}" not in text:
        raise UserError(
            f"--slurm.template {slurm.template}: renders no `#SBATCH --array` line, so a sweep would run as one job; "
            'a sweep\'s template starts {% extends "sweep.sbatch.j2" %}'
        )
    return text


@dataclass
class SweepJob:
    """A sweep ready to queue: its trials and directory, the shared resources and the rendered script."""

    sweep: sweep_plan.Sweep
    slurm: SlurmOptions
    resources: Resources
    job_name: str
    script_text: str
    """The rendered script for the sweep directory planned (re-rendered if another one is allocated)."""
    workers: int | None = None
    """``--slurm.array_workers``: the array's tasks are workers of the study (None: a task per trial)."""


def plan(request: Request, dry_run: bool) -> SweepJob:
    """Parse and check ``train submit ARGS`` with ``--sweep`` flags; writes nothing.

    Args:
        request: The command line after ``submit``.
        dry_run: Do not ask this cluster about the job (the script may be for another one).

    Raises:
        UserError: for a bad sweep flag, a trial's bad value (named), trials with different
            resources, what the cluster cannot run, or a template error.
    """
    space, _ = take_sweep_args(request)
    if space is None:
        raise UserError("no --sweep flag: nothing to sweep")
    fit_args, layers, provenance = split(request.without(*SWEEP_OPTIONS), SECTION)
    slurm = parse_slurm_options(layers)
    workers = slurm.array_workers
    if workers is None and (not space.is_grid or space.pruner != "none" or space.storage):
        raise UserError(
            "train submit --sweep with --sweep_sampler other than grid, --sweep_pruner or --sweep_storage: the study "
            f"needs workers that ask it for trials; add {WORKERS_FLAG} N"
        )
    if workers is not None and slurm.container.runtime:
        raise UserError(
            f"{WORKERS_FLAG} with --slurm.container.runtime: the workers ask the study from the batch script, outside "
            "the image; drop one (a grid --sweep without workers runs in containers)"
        )
    if slurm.cv_folds or slurm.test_after_fit:
        raise UserError("--sweep with --slurm.cv_folds or --slurm.test_after_fit: a sweep runs plain fits; choose one")
    autos = [f"--slurm.{key} auto" for key in ("time", "mem") if getattr(slurm, key) == AUTO]
    if autos:
        raise UserError(
            f"--sweep with {' and '.join(autos)}: a sweep's trials differ in length and shape; give the value "
            "(`train submit` of one trial with auto prints what it measured)"
        )
    if slurm.requeue_mode == "resubmit":
        raise UserError(
            "--sweep with --slurm.requeue_mode resubmit: the tasks of a job array requeue one by one; drop one"
        )
    check_top_level_keys("fit", fit_args, provenance)  # before Lightning's import
    count, limit = workers or len(space.trials()), None if dry_run else max_array_size()
    if limit is not None and count > limit:  # before parsing every trial (a quarter second each)
        raise UserError(
            f"the sweep has {count} trials; this cluster's job arrays hold at most {limit} tasks (MaxArraySize): "
            "sweep fewer values, or split the sweep"
        )
    sweep = sweep_plan.plan(space, fit_args, provenance)
    resources = _shared_resources(sweep, slurm)
    check_resources(slurm, resources, (sweep.trials or sweep.checked)[0].config, dry_run)
    job_name = slurm.job_name or sweep.name
    if workers is not None:
        metric, direction = sweep_study.objective(space, sweep.base.as_dict())
        sweep.study = sweep_study.describe(space, sweep.sweep_dir, sweep.name, metric, direction)
    script = _script(sweep, slurm, resources, job_name, workers)
    return SweepJob(sweep, slurm, resources, job_name, script, workers)


def main(request: Request) -> int:
    """``train submit FIT_ARGS --sweep KEY=VALUES ... [--slurm.KEY value ...] [--dry-run | --check]``.

    Raises:
        UserError: as :func:`plan`, or for a refused job; nothing is left on disk then.
    """
    check, dry_run = request.check, request.dry_run
    job = plan(request, dry_run=dry_run and not check)
    sweep, res = job.sweep, job.resources
    n = len(sweep.trials)
    if job.workers is not None:
        return _workers_main(job, check, dry_run)
    if check:
        print(
            f"check passed: {n} trial(s), each {res.nodes} node(s) x {res.ntasks_per_node} task(s); nothing written or "
            "queued"
        )
        return 0
    if dry_run:
        print(f"# sweep directory (not created): {sweep.sweep_dir}")
        for trial in sweep.trials:
            print(
                f"#   {sweep_plan.trial_name(trial.index)}: "
                f"{' '.join(f'--{k} {v}' for k, v in trial.overrides.items())}"
            )
        print(f"# {sweep.sweep_dir / SCRIPT_NAME}:\n{job.script_text}")
        words = sbatch_words(sweep.sweep_dir / SCRIPT_NAME)
        print(f"# the sbatch command (not run):\n{secrets.shown_command(words, job.slurm)}")
        return 0
    return submit(sweep, job.slurm, res, job.job_name)


def _workers_main(job: SweepJob, check: bool, dry_run: bool) -> int:
    """``train submit --sweep ... --slurm.array_workers N``: check, show or queue the workers' array."""
    sweep, res, workers = job.sweep, job.resources, job.workers
    assert workers is not None and sweep.study is not None
    trials = len(sweep.trials) if sweep.space.is_grid else sweep.space.trials_per_point
    what = f"{trials} trial(s) ({sweep.space.sampler} sampler, pruner {sweep.space.pruner}) by {workers} worker(s)"
    if check:
        print(f"check passed: {what}, each trial {res.nodes} node(s) x {res.ntasks_per_node} task(s); nothing written")
        return 0
    if dry_run:
        print(f"# sweep directory (not created): {sweep.sweep_dir}: {what}")
        print(f"# {sweep.sweep_dir / SCRIPT_NAME}:\n{job.script_text}")
        words = sbatch_words(sweep.sweep_dir / SCRIPT_NAME)
        print(f"# the sbatch command (not run):\n{secrets.shown_command(words, job.slurm)}")
        return 0
    space, study = sweep.space, sweep.study
    sweep_plan.write(
        sweep,
        {
            "sweep_args": space.as_args(),
            "base_args": sweep.fit_args.tokens(),
            "workers": workers,
            **_command(job.slurm),
        },
        study_of=lambda where: sweep_study.describe(space, where, sweep.name, study["metric"], study["direction"]),
    )

    def prepare() -> str:
        (sweep.sweep_dir / "workers").mkdir()
        assert sweep.study is not None
        sweep_study.create(sweep.study, space)
        return _script(sweep, job.slurm, res, job.job_name, workers)

    job_id, script, code = _queue(sweep, prepare, job.slurm)
    submitted = datetime.now(timezone.utc).isoformat(timespec="seconds")
    sweep_plan.write_record(
        sweep,
        {
            "sweep_args": space.as_args(),
            "base_args": sweep.fit_args.tokens(),
            "workers": workers,
            "job_id": job_id,
            "array": _array(workers, job.slurm),
            "script": str(script),
            "submitted": submitted,
            **_command(job.slurm),
        },
    )
    print(f"Sweep directory: {sweep.sweep_dir} ({what}; study {sweep.study['name']})")
    print(f"Script:          {script}")
    print(f"Job id:          {job_id} (array {job_id}_[{_array(workers, job.slurm)}], one task per worker)")
    print(f"Logs:            {sweep.sweep_dir}/workers/slurm-{job_id}_<task>.log")
    if code is not None:
        print(f"Code:            {code.root} ({code.files} files at {code.commit[:12]})")
    print(f"Results:         train sweep-results {sweep.sweep_dir}")
    register(
        sweep.root,
        {
            "job_id": job_id,
            "job_name": job.job_name,
            "run_dir": str(sweep.sweep_dir),
            "workers": workers,
            "submitted": submitted,
            "cluster": cluster_name(),
            "log": str(sweep.sweep_dir / WORKERS_LOG.replace("%A", job_id).replace("%a", "<i>")),
        },
    )
    return 0


def _command(slurm: SlurmOptions) -> dict[str, Any]:
    """``sweep.json``'s record of the command run, each secret's value masked
    (:mod:`trainer_cli.schedulers.slurm.secrets`)."""
    return {"command": secrets.masked_words(command_line(), slurm)}


def _pending_unless_started(job_id: str, record: dict[str, Any], started: dict[str, Any]) -> dict[str, Any]:
    """A trial's job record: ``record`` over what its task recorded if it started already, else PENDING."""
    return started | ({"state": "PENDING", "restarts": 0} if started.get("job_id") != job_id else {}) | record


def _queue(
    sweep: sweep_plan.Sweep, script_text: Callable[[], str], slurm: SlurmOptions
) -> tuple[str, Path, snapshot.Snapshot | None]:
    """Write the sweep's batch script (``script_text()``, after any preparation it does), take the
    code snapshot and queue it; ``(job id, script, snapshot)``. On any failure the sweep directory
    written so far is removed again, so a refused sweep leaves nothing."""
    try:
        text = script_text()
        code = (
            snapshot.take(Path.cwd(), sweep.sweep_dir, slurm.snapshot_limit(), [sweep.root]) if slurm.snapshot else None
        )
        script = sweep.sweep_dir / SCRIPT_NAME
        prepare_run(slurm, sweep.sweep_dir)
        script.write_text(text)
        return run_sbatch(script, slurm=slurm), script, code
    except BaseException:
        sweep_plan.remove(sweep)
        raise


def submit(sweep: sweep_plan.Sweep, slurm: SlurmOptions, resources: Resources, job_name: str) -> int:
    """Write the sweep directory, queue its job array and record the job id; returns 0.

    Raises:
        UserError: when sbatch is missing or refuses the job (the sweep directory is removed again).
    """
    sweep_plan.write(sweep, _command(slurm))
    # the script is rendered once the directory is allocated: it may be a later one than planned
    job_id, script, code = _queue(sweep, lambda: _script(sweep, slurm, resources, job_name), slurm)
    n = len(sweep.trials)
    submitted = datetime.now(timezone.utc).isoformat(timespec="seconds")
    sweep_plan.write_record(
        sweep,
        {"job_id": job_id, "array": _array(n, slurm), "script": str(script), "submitted": submitted, **_command(slurm)},
    )
    for trial in sweep.trials:
        run_dir = sweep.trial_dir(trial)
        trial_record = {
            "job_id": job_id,
            "array_task": trial.index,
            "job_name": job_name,
            "run_dir": str(run_dir),
            "script": str(script),
            "log": str(run_dir / JOB_LOG.replace("%j", f"{job_id}_{trial.index}")),  # trial_%3a/slurm-%A_%a.log
            "nodes": resources.nodes,
            "ntasks_per_node": resources.ntasks_per_node,
            "gpus_per_node": resources.gpus_per_node,
            "cpus_per_process": slurm.cpus_per_task or 1,
            "submitted": submitted,
        }
        # a task may have started already and recorded itself: one locked read-modify-write keeps what it wrote
        update_json(run_dir / jobstate.JOB_FILE, partial(_pending_unless_started, job_id, trial_record))
    print(f"Sweep directory: {sweep.sweep_dir} ({n} trial(s): trial_000 .. {sweep_plan.trial_name(n - 1)})")
    print(f"Script:          {script}")
    print(f"Job id:          {job_id} (array {job_id}_[{_array(n, slurm)}], one task per trial)")
    print(f"Logs:            {sweep.sweep_dir}/trial_<i>/slurm-{job_id}_<i>.log")
    if code is not None:
        state = "with uncommitted changes" if code.dirty else "clean"
        print(f"Code:            {code.root} ({code.files} files at {code.commit[:12]}, {state})")
    print(f"Results:         train sweep-results {sweep.sweep_dir}")
    record: dict[str, Any] = {
        "job_id": job_id,
        "job_name": job_name,
        "run_dir": str(sweep.sweep_dir),
        "trials": n,
        "submitted": submitted,
        "cluster": cluster_name(),
        "log": str(sweep.sweep_dir / LOG_PATTERN.replace("%3a", "<i>").replace("%A", job_id).replace("%a", "<i>")),
    }
    register(sweep.root, record)
    return 0
