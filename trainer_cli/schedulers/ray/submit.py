"""``train submit --scheduler ray``: the run ``train submit`` sends to Slurm, sent to a Ray cluster.

The run is planned as every engine plans it (:mod:`trainer_cli.schedulers.run_plan`: the config composed and
type-checked here, resources from ``trainer.num_nodes`` x ``trainer.devices``
(:func:`trainer_cli.schedulers.resources.derive`), the run folder allocated and its config frozen), then
rendered and queued by :class:`~trainer_cli.schedulers.ray.engine.RayScheduler` and registered for ``train
jobs`` (``scheduler: ray``). A user's script with TrainerCLI (``python main.py submit --scheduler ray``:
:func:`from_script`) is planned with its own CLI, and its ranks run the script as its Slurm job does. Bad
input (Ray missing or outside the supported versions, the cluster not answering, a ``--slurm.*`` flag) is
refused before anything is written.
"""

from __future__ import annotations

import secrets
import sys
from collections.abc import Mapping
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from trainer_cli.config.request import SLURM, Request, command_line
from trainer_cli.errors import UserError
from trainer_cli.job import jobstate
from trainer_cli.rundir.layout import CONFIG_FILE
from trainer_cli.schedulers import engines, refuse_other_engines_options, resubmission, run_plan, snapshot
from trainer_cli.schedulers.ray import options as ray_options
from trainer_cli.schedulers.ray.engine import RayJob, RayScheduler, log_file
from trainer_cli.schedulers.ray.options import RAY
from trainer_cli.schedulers.resources import derive
from trainer_cli.schedulers.snapshot import Snapshot
from trainer_cli.schedulers.submissions import register

HELP = """\
usage: train submit --scheduler ray [--config FILE ...] [--key.sub value ...] [--ray.KEY value ...] [--dry-run]

Send `train fit` to a Ray cluster as a Ray job: trainer.num_nodes x trainer.devices workers (DDP), the
code snapshot as the job's working directory, the run folder and its records as on Slurm; a lost
worker restarts the group, which resumes from the run's last.ckpt.

examples:
  eval "$(scripts/local-ray env)"      # RAY_ADDRESS=http://127.0.0.1:6391 (the cluster's job server)
  train submit --scheduler ray --config configs/experiment/digits.yaml --trainer.devices 2 --dry-run
  train submit --scheduler ray --config configs/experiment/digits.yaml --trainer.num_nodes 2 \\
      --trainer.accelerator cpu --trainer.strategy ddp --ray.max_failures 2
  python main.py submit --scheduler ray --config config.yaml --trainer.devices 2   # your script's TrainerCLI
  train jobs

options:
  --ray.address URL         the job server, http://HOST:PORT (default: $RAY_ADDRESS)
  --ray.max_failures N      restarts of the worker group before the job fails (default: 3)
  --ray.cpus_per_worker N   Ray CPUs each worker holds (default: 1)
  --dry-run                 print the Ray job (entrypoint, runtime_env, workers); create and submit nothing
"""


def _refuse_other_flags(request: Request) -> None:
    """Raises UserError for flags that belong to Slurm's submissions."""
    refuse_other_engines_options(request, RAY)
    for arg in request:
        name = arg.name or ""
        if name in ("sweep", "check"):
            raise UserError(f"{arg.flag} is not supported with --scheduler ray yet (Slurm only)")


def main(request: Request) -> int:
    """``train submit --scheduler ray ARGS``; returns the exit code.

    Raises:
        UserError: for bad input (see the module's description) or a refused job; nothing is left on disk.
    """
    return _submit(request)


def from_script(
    request: Request, cli: tuple[type, tuple[Any, ...], dict[str, Any]], script: str, fixed: Mapping[str, type]
) -> int:
    """``python main.py submit --scheduler ray ARGS`` (:attr:`trainer_cli.cli.TrainerCLI.script_verbs`): the fit
    run of a user's script, planned with its own TrainerCLI ``cli`` as for Slurm
    (``fixed``: the sections whose class it fixes), sent to Ray;
    each rank runs the script as its Slurm job would (``python main.py fit --config <run>/config.yaml --run_dir
    <run>``, or ``python -m pkg.train ...``: :func:`trainer_cli.schedulers.script_entry.script_entry`).

    Raises:
        UserError: for bad input (see the module's description) or a refused job; nothing is left on disk.
    """
    return _submit(request, (cli, script, fixed))


def _submit(request: Request, script: tuple[Any, str, Mapping[str, type]] | None = None) -> int:
    """Plan, render and queue the run (``script``: a user's script's TrainerCLI, path and fixed classes)."""
    if request.helps:
        print(HELP)
        return 0
    if request.last("scheduler") != RAY:
        raise UserError(f"--scheduler {request.last('scheduler')}: this is the Ray engine")
    _refuse_other_flags(request)
    opts = ray_options.parse(request)
    ray_options.installed_version()
    if not request.dry_run:  # (a dry run may be for a cluster not reachable from here, as Slurm's)
        ray_options.cluster_version(opts)
    fit_request = request.without("scheduler").with_args(
        a for a in request.without("scheduler") if not (a.name or "").startswith(RAY + ".")
    )
    cli, path, fixed = script if script is not None else (None, None, None)
    # the run, read once: the plan and --dry-run render it (a config file's `slurm:` section, a site profile's,
    # is set aside as Slurm's submissions set it aside: --slurm.* flags were refused above)
    run = run_plan.spec(fit_request, SLURM, cli, fixed)
    where = run_plan.locate(run, path)
    res = derive(run.config.trainer)
    plan = run_plan.place(run, where, run.dry_run, run_plan.default_job_name(run, path), path)
    verb = run.verb
    if plan.finished:
        print(f"{plan.finished} Nothing was submitted.")
        return 0
    stamp = datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S")
    job_id = f"{plan.job_name}-{stamp}-{secrets.token_hex(3)}"
    scheduler = RayScheduler(opts)
    if plan.resubmitted:
        found = {**engines(), scheduler.name: scheduler}
        resubmission.refuse_a_live_job(plan.run_dir, {name: engine.describe for name, engine in found.items()})

    def spec(code: Snapshot | None) -> RayJob:
        paths = tuple(snapshot.import_paths(Path.cwd())) if code is not None else ()
        job = RayJob(plan.run_dir, job_id, plan.job_name, res.nodes, res.ntasks_per_node, res.accelerator,
                     code, Path.cwd(), import_paths=paths, config=plan.job_config.name)  # fmt: skip
        if plan.entry is None:  # `train fit` in the job's working directory (the snapshot Ray ships)
            return job
        # a user's script: what its Slurm job runs (plan.entry), where that job starts (#SBATCH --chdir)
        chdir = Path(code.workdir) if code is not None else Path.cwd()
        return replace(job, entry=tuple(plan.entry.words), verb=verb, chdir=chdir)

    if request.dry_run:
        code = snapshot.preview(Path.cwd(), plan.run_dir, roots=[plan.root])
        print(f"# run directory (not created): {plan.run_dir}")
        print(scheduler.render(spec(code)).text)
        print("# nothing was written or submitted")
        return 0
    try:
        plan.freeze()
        code = snapshot.take(Path.cwd(), plan.run_dir, roots=[plan.root])
        if plan.entry is not None and plan.entry.live is None and not plan.entry.path.is_file():
            raise UserError(
                f"the code snapshot in {plan.run_dir} holds no copy of {plan.entry.script}: nothing was submitted"
            )
        draft = scheduler.render(spec(code))
        jobstate.write(plan.run_dir, {"job_id": job_id, "state": "PENDING", "restarts": 0, "scheduler": "ray"})
        scheduler.submit(draft)
    except BaseException:
        plan.discard()  # nothing of a refused submission is left
        raise
    plan.print_changes()
    log = log_file(plan.run_dir, job_id)
    record: dict[str, Any] = {
        "job_id": job_id,
        "job_name": plan.job_name,
        "run_dir": str(plan.run_dir),
        "log": str(log),
        "scheduler": "ray",
        "cluster": opts.address,
        "nodes": res.nodes,
        "ntasks_per_node": res.ntasks_per_node,
        "cpus_per_process": opts.cpus_per_worker,  # each worker's (the run's cost: rundir.run_cost)
        "submitted": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "command": command_line(),
        "ray": {"address": opts.address, "max_failures": opts.max_failures, **draft.options},
    }
    jobstate.update(plan.run_dir, **{k: v for k, v in record.items() if k not in ("command", "run_dir")})
    register(plan.root, record)
    print(
        f"Run directory: {plan.run_dir}\nConfig:        {plan.run_dir / CONFIG_FILE}\nRay job:       {job_id} "
        f"on {opts.address}\nLog:           {log}  (or: ray job logs {job_id})",
        file=sys.stdout,
    )
    return 0
