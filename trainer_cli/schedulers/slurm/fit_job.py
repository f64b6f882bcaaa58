"""A ``train fit`` run as a Slurm job: planned, written and queued (the library of ``train submit``).

1. The fit arguments are composed and type-checked exactly as ``train fit`` does, on the submitting
   machine, by the parse function the caller gives (:func:`trainer_cli.runtime.verbs.parse_config` with the
   launcher's CLI, or a user's TrainerCLI subclass for ``python main.py submit``); nothing is built.
2. Resources come from the trainer and are checked (:mod:`trainer_cli.schedulers.resources`).
3. The run directory is allocated and the resolved config frozen into ``<run>/config.yaml``
   (``run_dir`` unset, as a local run's: used as ``--config`` elsewhere it starts a new run); the job
   names its folder (``--run_dir "$run_dir"``), so every restart of a requeued job writes into the
   same directory and the same TensorBoard version. Resubmitted into an existing run (``--config
   <run>/config.yaml`` of a submitted run: :mod:`trainer_cli.schedulers.resubmission`), the new values
   (other resources, more epochs) are checked as a resume checks them, each change printed in one
   line, and written with ``ckpt_path: last`` once the run holds a checkpoint (a resubmitted run
   always resumes) into the job's own input ``<run>/job_config.yaml``, which its script reads; the
   job's start resumes the run as a local resume does: ``config.yaml`` rewritten (the previous one
   kept as ``config.prev-<N>.yaml``), the changes in ``history.jsonl``.
4. The sbatch script is rendered (:mod:`trainer_cli.schedulers.slurm.render`) to ``<run>/submit.sbatch``
   and queued; its log is ``<run>/slurm-<jobid>.log``; ``<run>/job.json`` and the registry read
   by ``train jobs`` (:mod:`trainer_cli.schedulers.submissions`) record the job id.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from dataclasses import dataclass, fields
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from trainer_cli.atomic import update_json
from trainer_cli.config import spec as run_spec
from trainer_cli.config.request import Request, command_line
from trainer_cli.config.spec import ParseFit, RunSpec
from trainer_cli.errors import UserError
from trainer_cli.job import jobstate
from trainer_cli.rundir.layout import CONFIG_FILE
from trainer_cli.schedulers import resubmission, run_plan, snapshot
from trainer_cli.schedulers.resources import Resources, derive
from trainer_cli.schedulers.run_plan import RunPlan
from trainer_cli.schedulers.script_entry import code_line
from trainer_cli.schedulers.slurm import secrets, sizing
from trainer_cli.schedulers.slurm import states as slurm_states
from trainer_cli.schedulers.slurm.cluster import check_resources
from trainer_cli.schedulers.slurm.commands import cluster_name, sbatch_words
from trainer_cli.schedulers.slurm.container import data_paths
from trainer_cli.schedulers.slurm.options import SECTION, SlurmOptions
from trainer_cli.schedulers.slurm.render import render
from trainer_cli.schedulers.slurm.reservations import refuse_maintenance
from trainer_cli.schedulers.slurm.sbatch import (
    AGGREGATE_SCRIPT_NAME,
    LOG_PATTERN,
    SCRIPT_NAME,
    TEST_SCRIPT_NAME,
    prepare_run,
    run_sbatch,
    script_context,
)
from trainer_cli.schedulers.slurm.slurm_args import parse_slurm_options, slurm_help
from trainer_cli.schedulers.submissions import register

_USAGE = "usage: {entry} submit [--config FILE ...] [--key.sub value ...] [--slurm.KEY value ...] {modes}\n"
_ABOUT = """
Queue `{entry} fit` as a Slurm job (one task per device, multi-node DDP), after composing and
type-checking the config here. Resources come from the trainer: --nodes = trainer.num_nodes,
--ntasks-per-node = trainer.devices, GPUs per node = devices on a GPU.
"""
_EXAMPLES = """
examples:
  train submit --config configs/experiment/digits.yaml --config configs/slurm/local.yaml \\
      --trainer.num_nodes 2 --trainer.devices 2 --dry-run
  train submit --config configs/experiment/cifar10_resnet18.yaml --config configs/slurm/example_gpu.yaml \\
      --trainer.num_nodes 4 --trainer.devices 8 --slurm.time 04:00:00 --slurm.test_after_fit true
  train submit --config configs/experiment/digits.yaml --config configs/slurm/local.yaml \\
      --sweep optimizer.init_args.lr=1e-3,1e-2 --sweep 'trainer.max_epochs=range(1,4)' --slurm.array_parallelism 2
  train jobs
"""
_SWEEP = """
  --sweep KEY=VALUES    a sweep: one job array, a task per trial, each its own run directory under
                        <root>/<name>/sweep_<N>/ (the syntax: `train sweep-results --help`)"""
_DRY_RUN = """
  --dry-run             print the script and the sbatch command; create nothing, queue nothing"""
_CHECK = """
  --check               only check: config, resources and what this cluster's partitions and nodes
                        offer (scontrol); create nothing, queue nothing"""
_OPTIONS = """

Every `{entry} fit` option is accepted (`{entry} fit --help`). Slurm options (a `slurm:` section in a
--config file, e.g. configs/slurm/<site>.yaml, or --slurm.KEY flags):

"""
HELP = (_USAGE + _ABOUT + _EXAMPLES + _SWEEP + _DRY_RUN + _CHECK + _OPTIONS).format(
    entry="train", modes="[--dry-run | --check]"
)
"""``train submit --help``, before the Slurm options' own
(:func:`trainer_cli.schedulers.slurm.slurm_args.slurm_help`)."""


@dataclass(kw_only=True)
class Plan(RunPlan):
    """A Slurm job ready to queue: the run placed (:class:`~trainer_cli.schedulers.run_plan.RunPlan`: its run
    directory, frozen config, what the job runs) with its Slurm options, resources and rendered script(s)."""

    script_text: str
    """The rendered sbatch script of the fit job."""
    slurm: SlurmOptions
    resources: Resources

    @property
    def script(self) -> Path:
        """Where the script is written: ``<run>/submit.sbatch``."""
        return self.run_dir / SCRIPT_NAME

    @property
    def sbatch_options(self) -> list[str]:
        """Options given to sbatch beside the script: the fold array of a cross-validation."""
        return [f"--array=0-{self.slurm.cv_folds - 1}"] if self.slurm.cv_folds else []

    def aggregate_script_text(self, dependency: str) -> str:
        """The job that aggregates a cross-validation's folds, one task, after ``dependency``."""
        one = Resources(1, 1, 0, "cpu")
        context = script_context(self.slurm, one, self.run_dir, f"{self.job_name}-cv", Path.cwd(), dependency)
        return render("cv_aggregate", context)

    def test_script_text(self, dependency: str) -> str:
        """The ``train test`` job on the best checkpoint, one device, starting after ``dependency``."""
        res = self.resources
        one = Resources(1, 1, 1 if res.accelerator == "gpu" else 0, res.accelerator)
        context = script_context(self.slurm, one, self.run_dir, f"{self.job_name}-test", Path.cwd(), dependency)
        return render("test", context)


def spec_of(request: Request, parse: ParseFit, fixed: Mapping[str, type] | None = None, verb: str = "fit") -> RunSpec:
    """The spec of the submission ``request`` (:func:`trainer_cli.config.spec.build`, the ``slurm:`` section
    and ``--slurm.*`` flags taken out as the engine's options), parsed by ``parse``.

    Raises:
        UserError: for a bad config file or a config the parse refuses.
    """
    return run_spec.build(request, parse, SECTION, fixed, verb, check_engine=parse_slurm_options)


def plan(spec: RunSpec, dry_run: bool, script: str | None = None, echo: bool = True) -> Plan:
    """Check and render the run ``spec`` (built by :func:`spec_of`) as a Slurm job; allocates the run directory
    unless ``dry_run``. With ``script`` (a user's script with TrainerCLI) the job runs that script with the
    spec's verb (empty for one built with ``run=False``). The run is placed as every engine places it
    (:func:`trainer_cli.schedulers.run_plan.place`), after the checks against this cluster (its partitions,
    accounts and maintenance) and the sizing.
    ``echo``: print the plan's notes (:attr:`Plan.notes`: the sizing block, ``resubmit: into the newest run``)
    once it is made, so that a refused plan prints its error alone; else they are only kept.

    Raises:
        UserError: for a bad Slurm option, a resource mismatch or a template error
            (nothing is left on disk).
    """
    slurm = parse_slurm_options(list(spec.engine_layers))
    if slurm.array_workers is not None:
        raise UserError(f"--slurm.array_workers {slurm.array_workers} without --sweep: workers train a sweep's trials")
    config = spec.config  # (a copy: the plan fills in what the job needs)
    where = run_plan.locate(spec, script)
    resources = derive(config.trainer, slurm)
    check_resources(slurm, resources, config, dry_run)
    notes: list[str] = []

    note = notes.append  # printed once the plan is made: a refused one says only why

    links = run_plan.instantiate_links(spec.parser)
    for line in sizing.apply(slurm, resources, config, where.root, links, spec.fixed if script else None):
        note(line)
    if not dry_run:
        refuse_maintenance(slurm.partition, slurm.time)
    job_name = slurm.job_name or run_plan.default_job_name(spec, script)
    run = run_plan.place(spec, where, dry_run, job_name, script, slurm.snapshot_off(), note)
    try:
        if run.resubmitted:
            resubmission.refuse_a_live_job(run.run_dir, {"slurm": slurm_states.describe})
        template = "cv" if slurm.cv_folds and slurm.template == "ddp" else slurm.template
        data = data_paths(config.get("data"), Path.cwd()) if slurm.container.runtime else []
        context_values = script_context(slurm, resources, run.run_dir, job_name, Path.cwd(), slurm.dependency, data)
        if run.entry is not None:  # a user's script with TrainerCLI (`python main.py submit`): the job runs it
            context_values["entry"] = run.entry.words
            context_values["fit_verb"] = spec.verb
        if run.resubmitted:  # the job reads its own input
            context_values["config"] = str(run.job_config)
        placed = {f.name: getattr(run, f.name) for f in fields(RunPlan)}
        job = Plan(**placed, script_text=render(template, context_values), slurm=slurm, resources=resources)
        job.notes = notes
        if slurm.test_after_fit:
            job.test_script_text("afterok:1")  # a template error shows now, not after the fit job is queued
        if slurm.cv_folds:
            job.aggregate_script_text("afterok:1")
    except BaseException:
        run.discard()
        raise
    if echo and notes:
        print("\n".join(notes))
    return job


def submit_help(entry: str | None = None) -> str:
    """:data:`HELP`, or for a user's script run as ``entry`` (``python main.py``) its own: its usage and
    options, without ``train``'s examples and what a script's submit does not take (``--sweep``, ``--check``)."""
    if entry is None:
        return HELP
    return (_USAGE + _ABOUT + _DRY_RUN + _OPTIONS).format(entry=entry, modes="[--dry-run]")


def _train_submit_hint(script: str, fixed: Mapping[str, type], sweep: bool) -> str:
    """How ``train submit`` names the classes a user's script fixes (``--model main.MyModel``, the
    script's folder on ``PYTHONPATH``), and what it leaves behind; empty when the script fixes none."""
    if not fixed:
        return ""
    import os

    module = Path(script).stem
    flags = " ".join(
        f"--{key} {module if cls.__module__ == '__main__' else cls.__module__}.{cls.__qualname__}"
        for key, cls in fixed.items()
    )
    folder = os.path.relpath(Path(script).parent) if Path(script).parent != Path.cwd() else "."
    metric = (
        "; a sweep's metric: a ModelCheckpoint with a monitor, or --sweep_metric NAME --sweep_direction "
        "maximize|minimize"
        if sweep
        else ""
    )
    return (
        f", naming your classes: `PYTHONPATH={folder} train submit {flags} ...` (the script's own arguments, "
        f"links and trainer defaults do not apply there{metric})"
    )


def main(request: Request, parse: ParseFit, script: str | None = None, fixed: Mapping[str, type] | None = None,
         script_verb: str = "fit") -> int:  # fmt: skip
    """``train submit ARGS`` for a fit run, parsed by ``parse``; returns the exit code. ``script``: a
    user's script with TrainerCLI (``python main.py submit ARGS``), which the job then runs;
    ``fixed``: the sections whose class that script fixes, with the class (``{"model": MyModel}``,
    :func:`trainer_cli.config.class_flags.place_class_flags`); ``script_verb``: the verb the script takes (empty
    for one built with ``run=False``).

    Raises:
        UserError: for a bad config or Slurm option, a resource mismatch, or a refused job; the run
            directory made for it is removed again.
    """
    if request.helps:
        print(submit_help(request.entry if script else None) + slurm_help())
        return 0
    if script and (request.sweep or request.check or request.has_prefix("slurm.cv_folds")):
        raise UserError(
            "from a script, submit takes a fit run only (no --sweep, --check or --slurm.cv_folds yet): use `train "
            f"submit` for those{_train_submit_hint(script, fixed or {}, request.sweep)}"
        )
    run = spec_of(request, parse, fixed, script_verb)
    job = plan(run, run.dry_run, script=script)
    if job.finished:  # as `train fit` says it, before anything is written or queued
        print(f"{job.finished} Nothing was queued.")
        return 0
    warning = job.slurm.signal_delay_warning()
    if warning:
        print(f"warning: {warning}", file=sys.stderr)
    if run.dry_run:
        print(dry_run_text(job))
        return 0
    submit(job)
    return 0


def dry_run_text(job: Plan) -> str:
    """What ``train submit --dry-run`` prints after the plan's notes: the resubmission's changes, the
    script(s), the world size, the sbatch command and the code line; the code snapshot is checked
    first (a dry run refuses what the submission would), nothing is written.

    Raises:
        UserError: for a snapshot the submission would refuse.
    """
    code = (
        snapshot.preview(Path.cwd(), job.run_dir, job.slurm.snapshot_limit(), [job.root])
        if job.slurm.snapshot
        else None
    )
    lines = [f"resubmit: {change} (dry run: {job.run_dir / CONFIG_FILE} not changed)" for change in job.changes]
    lines.append(f"# run directory (not created): {job.run_dir}\n# {job.script}:\n{job.script_text}")
    if job.slurm.test_after_fit:
        lines.append(
            f"# {job.run_dir / TEST_SCRIPT_NAME}, queued after the fit "
            f"job:\n{job.test_script_text('afterok:<fit job id>')}"
        )
    if job.slurm.cv_folds:
        lines.append(
            f"# {job.run_dir / AGGREGATE_SCRIPT_NAME}, queued after every "
            f"fold:\n{job.aggregate_script_text('afterok:<array job id>')}"
        )
    res = job.resources
    lines.append(
        f"# world size {res.world_size}: {res.nodes} node(s) x {res.ntasks_per_node} task(s), {res.gpus_per_node} "
        "GPU(s) per node"
    )
    words = sbatch_words(job.script, *job.sbatch_options)
    lines.append(f"# the sbatch command (not run):\n{secrets.shown_command(words, job.slurm)}")
    lines.append(code_line(job.entry, job.slurm.snapshot_off(), code, "# "))
    return "\n".join(lines)


def submit(job: Plan) -> str:
    """Write the run directory's files, queue the job (and its test job); returns the fit job's id.

    Raises:
        UserError: when sbatch is missing or refuses the fit job (the run directory made for it
            is removed again).
    """
    run_dir = job.run_dir
    try:
        job.freeze()
        code = (
            snapshot.take(Path.cwd(), run_dir, job.slurm.snapshot_limit(), [job.root]) if job.slurm.snapshot else None
        )
        if job.entry is not None and job.entry.live is None and not job.entry.path.is_file():
            raise UserError(f"the code snapshot in {run_dir} holds no copy of {job.entry.script}: nothing was queued")
        prepare_run(job.slurm, run_dir)
        job.script.write_text(job.script_text)
        job_id = run_sbatch(job.script, *job.sbatch_options, slurm=job.slurm)
    except BaseException:
        job.discard()  # nothing of a refused submission is left
        raise
    job.print_changes()
    record: dict[str, Any] = {
        "job_id": job_id,
        "job_name": job.job_name,
        "run_dir": str(run_dir),
        "script": str(job.script),
        "log": str(run_dir / LOG_PATTERN.replace("%j", job_id)),
        "nodes": job.resources.nodes,
        "ntasks_per_node": job.resources.ntasks_per_node,
        "gpus_per_node": job.resources.gpus_per_node,
        "cpus_per_process": job.slurm.cpus_per_task or 1,  # each task's (the run's cost: rundir.run_cost)
        "submitted": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "command": secrets.masked_words(command_line(), job.slurm),  # a secret's value: NAME=*** (launch.secrets)
        "slurm": secrets.masked(job.slurm),
    }
    print(
        f"Run directory: {run_dir}\nScript:        {job.script}\nJob id:        {job_id}\nLog:           "
        f"{record['log']}"
    )
    print(code_line(job.entry, job.slurm.snapshot_off(), code))
    if job.slurm.test_after_fit:
        test_script = run_dir / TEST_SCRIPT_NAME
        test_script.write_text(job.test_script_text(f"afterok:{job_id}"))
        record["test_job_id"] = run_sbatch(test_script, slurm=job.slurm)
        print(f"Test job id:   {record['test_job_id']} (starts when {job_id} succeeds)")
    if job.slurm.cv_folds:
        aggregate_script = run_dir / AGGREGATE_SCRIPT_NAME
        aggregate_script.write_text(job.aggregate_script_text(f"afterok:{job_id}"))
        record["aggregate_job_id"] = run_sbatch(aggregate_script, slurm=job.slurm)
        print(f"Folds:         job array {job_id}_[0-{job.slurm.cv_folds - 1}] -> {run_dir / 'cv'}/fold_<i>")
        print(
            f"Aggregate:     job {record['aggregate_job_id']} (starts when every fold succeeds) -> "
            f"{run_dir / 'cv'}/cv_results.csv"
        )
    # the job may have started already and recorded itself: one locked read-modify-write keeps what it wrote
    record = update_json(
        run_dir / jobstate.JOB_FILE,
        lambda started: (started if started.get("job_id") == job_id else {"state": "PENDING", "restarts": 0}) | record,
    )
    register(job.root, record | {"cluster": cluster_name()})
    return job_id
