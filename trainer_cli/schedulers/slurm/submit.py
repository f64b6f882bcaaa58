"""``train submit``: the run that ``train fit`` would start, as a Slurm job (a verb).

A fit run is planned, written and queued by :mod:`trainer_cli.schedulers.slurm.fit_job`, its arguments parsed
by :func:`trainer_cli.runtime.verbs.parse_config`; ``--sweep`` flags make it a job array
(:mod:`trainer_cli.schedulers.slurm.sweep`); ``--check`` checks everything and queues nothing.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import Any

from trainer_cli.config.request import Request
from trainer_cli.config.spec import RunSpec
from trainer_cli.errors import UserError
from trainer_cli.job.scheduler import SCHEDULER_NAMES
from trainer_cli.schedulers import refuse_other_engines_options
from trainer_cli.schedulers.run_plan import parse_fit, script_verb
from trainer_cli.schedulers.slurm import fit_job
from trainer_cli.schedulers.slurm.cluster import UNCHECKED, check_against_cluster
from trainer_cli.schedulers.slurm.fit_job import Plan
from trainer_cli.schedulers.slurm.reservations import refuse_maintenance


def spec(request: Request, cli: Any = None, fixed: Mapping[str, type] | None = None) -> RunSpec:
    """The run ``train submit ARGS`` asks for (:func:`trainer_cli.schedulers.slurm.fit_job.spec_of`), parsed by the
    launcher's LightningCLI or by a user's TrainerCLI ``cli`` (its class with its constructor arguments;
    ``fixed``: the sections whose class it fixes, :func:`from_script`), whose job runs its verb.

    Raises:
        UserError: for a bad config file or a config the parse refuses.
    """
    return fit_job.spec_of(request, parse_fit(cli), fixed, script_verb(cli) if cli is not None else "fit")


def plan(
    request: Request,
    dry_run: bool,
    cli: Any = None,
    script: str | None = None,
    fixed: Mapping[str, type] | None = None,
) -> Plan:
    """Parse, check and render ``train submit ARGS`` (:func:`spec`, :func:`trainer_cli.schedulers.slurm.fit_job.plan`);
    allocates the run directory unless ``dry_run``. With a user's script (its TrainerCLI ``cli``, ``script``
    and the sections whose class it fixes, ``fixed``: :func:`from_script`), the plan's
    :attr:`~trainer_cli.schedulers.run_plan.RunPlan.entry` says what the job's ranks run
    (:func:`trainer_cli.schedulers.script_entry.script_entry`, for every engine).

    Raises:
        UserError: for a bad config or Slurm option, a resource mismatch or a template error
            (nothing is left on disk).
    """
    return fit_job.plan(spec(request, cli, fixed), dry_run, script)


def main(request: Request) -> int:
    """``train submit ARGS``; returns the exit code.

    Raises:
        UserError: for a bad config or Slurm option, a resource mismatch, or a refused job; the run
            directory made for it is removed again.
    """
    refuse_other_engines_options(request, "slurm")
    if not request.helps:
        if request.sweep:  # one job array, a task per trial (trainer_cli.schedulers.slurm.sweep)
            from trainer_cli.schedulers.slurm.sweep import main as submit_sweep

            return submit_sweep(request)
        if request.check:
            return check(request)
    return fit_job.main(request, parse_fit())


def from_script(
    request: Request, cli: tuple[type, tuple[Any, ...], dict[str, Any]], script: str, fixed: Mapping[str, type]
) -> int:
    """``python main.py submit ARGS`` (:attr:`trainer_cli.cli.TrainerCLI.script_verbs`, with ``--scheduler slurm``
    or none): a fit run of a user's script, parsed by its own TrainerCLI ``cli`` (its class with its constructor
    arguments), the job running ``script``; ``fixed``: the sections whose class the script fixes
    (:func:`trainer_cli.schedulers.slurm.fit_job.main`). ``--scheduler ray`` is the Ray engine's
    (:func:`trainer_cli.schedulers.ray.submit.from_script`, chosen by the package face).

    Raises:
        UserError: for a bad config or Slurm option, a resource mismatch, or a refused job; for
            ``--scheduler`` naming no engine.
    """
    engine = request.last("scheduler")
    if engine not in (None, "slurm"):
        raise UserError(f"--scheduler {engine}: not an engine; choose one of {', '.join(SCHEDULER_NAMES)}")
    return fit_job.main(request, parse_fit(cli), script=script, fixed=fixed, script_verb=script_verb(cli))


def check(request: Request) -> int:
    """``train submit --check ARGS``: every check of a submission (config, resources, the cluster's
    partitions and nodes), nothing written or queued; returns 0 when the job would be accepted.

    Raises:
        UserError: for the first kind of problem found, naming each value (as a submission would).
    """
    job = plan(request, dry_run=True)
    warning = check_against_cluster(job.slurm, job.resources)
    if warning:
        print(f"warning: {warning}", file=sys.stderr)
    refuse_maintenance(job.slurm.partition, job.slurm.time)
    res = job.resources
    assert job.slurm.cpus_per_task is not None  # filled in by the plan (check_resources)
    print(
        f"check passed{' (config and resources only)' if warning and warning.startswith(UNCHECKED) else ''}: "
        f"{res.nodes} node(s) x {res.ntasks_per_node} task(s), "
        f"{res.gpus_per_node} GPU(s) and {job.slurm.cpus_per_task * res.ntasks_per_node} CPU(s) per node, "
        f"partition {job.slurm.partition or '(default)'}, time {job.slurm.time}; nothing written or queued"
    )
    return 0
