"""``train submit``: the run that ``train fit`` would start, as a Slurm job.

1. The fit arguments are composed and type-checked exactly as ``train fit`` does
   (:func:`trainer_cli.cli.parse_config`), on the submitting machine; nothing is built.
2. Resources come from the trainer and are checked (:mod:`trainer_cli.launch.resources`).
3. The run directory is allocated and the resolved config frozen into ``<run>/config.yaml``
   with ``run_dir`` set, so every restart of a requeued job writes into the same directory
   and the same TensorBoard version.
4. The sbatch script is rendered (:mod:`trainer_cli.launch.render`) to ``<run>/submit.sbatch``
   and queued; its log is ``<run>/slurm-<jobid>.log``; ``<run>/job.json`` and the registry read
   by ``train jobs`` record the job id.
"""

from __future__ import annotations

import json
import shlex
import shutil
import subprocess
import sys
from dataclasses import asdict
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from trainer_cli.errors import UserError
from trainer_cli.launch.options import SlurmOptions, parse_slurm_options, slurm_help, split_args
from trainer_cli.launch.render import render
from trainer_cli.launch.resources import Resources, derive

SCRIPT_NAME = "submit.sbatch"
TEST_SCRIPT_NAME = "test.sbatch"
LOG_PATTERN = "slurm-%j.log"
JOB_FILE = "job.json"

HELP = """\
usage: train submit [--config FILE ...] [--key.sub value ...] [--slurm.KEY value ...] [--dry-run]

Queue `train fit` as a Slurm job (one task per device, multi-node DDP), after composing and
type-checking the config here. Resources come from the trainer: --nodes = trainer.num_nodes,
--ntasks-per-node = trainer.devices, GPUs per node = devices on a GPU.

examples:
  train submit --config configs/experiment/digits.yaml --config configs/slurm/local.yaml \\
      --trainer.num_nodes 2 --trainer.devices 2 --dry-run
  train submit --config configs/experiment/cifar10_resnet18.yaml --config configs/slurm/example_gpu.yaml \\
      --trainer.num_nodes 4 --trainer.devices 8 --slurm.time 04:00:00 --slurm.test_after_fit true
  train jobs

  --dry-run             print the script and the sbatch command; create nothing, queue nothing

Every `train fit` option is accepted (`train fit --help`). Slurm options (a `slurm:` section in a
--config file, e.g. configs/slurm/<site>.yaml, or --slurm.KEY flags):

"""


def _next_run_dir(root: Path, name: str) -> Path:
    """The directory :func:`trainer_cli.rundir.allocate` would create next, without creating it."""
    from trainer_cli.rundir import _versions

    versions = _versions(root / name)
    return root / name / f"version_{versions[-1][0] + 1 if versions else 0}"


def _env(slurm: SlurmOptions) -> dict[str, str]:
    env: dict[str, str] = {}
    if slurm.nccl_debug:
        env["NCCL_DEBUG"] = slurm.nccl_debug
    if slurm.nccl_socket_ifname:
        env["NCCL_SOCKET_IFNAME"] = slurm.nccl_socket_ifname
    return env | {str(k): str(v) for k, v in slurm.env.items()}


def script_context(
    slurm: SlurmOptions, resources: Resources, run_dir: Path, job_name: str, workdir: Path, dependency: str | None
) -> dict[str, Any]:
    """The values a template may use (all documented in ``slurm/ddp.sbatch.j2``)."""
    gpus = resources.gpus_per_node
    return {
        "slurm": slurm,
        "job_name": job_name,
        "nodes": resources.nodes,
        "ntasks_per_node": resources.ntasks_per_node,
        "gpus_per_node": gpus,
        "gpus_request": f"{slurm.gpu_type}:{gpus}" if slurm.gpu_type else str(gpus),
        "dependency": dependency,
        "workdir": str(workdir),
        "run_dir": str(run_dir),
        "log_pattern": str(run_dir / LOG_PATTERN),
        "config": str(run_dir / "config.yaml"),
        "python": slurm.python_executable,
        "env": _env(slurm),
    }


def _sbatch(script: Path) -> str:
    """Queue ``script``; returns the job id.

    Raises:
        UserError: when sbatch is missing or refuses the job (its message included).
    """
    if shutil.which("sbatch") is None:
        raise UserError("sbatch not found: run `train submit` where Slurm is installed (or start a local cluster: scripts/local-slurm start)")
    proc = subprocess.run(["sbatch", "--parsable", str(script)], capture_output=True, text=True, timeout=120)
    if proc.returncode != 0:
        raise UserError(f"sbatch refused {script}: {proc.stderr.strip() or proc.stdout.strip()}")
    return proc.stdout.strip().split(";")[0]


def main(args: list[str]) -> int:
    """``train submit ARGS``; returns the exit code.

    Raises:
        UserError: for a bad config or Slurm option, a resource mismatch, or a refused job; the run
            directory made for it is removed again.
    """
    if any(a in ("-h", "--help") for a in args):
        print(HELP + slurm_help())
        return 0
    fit_args, layers, own = split_args(args)
    dry_run = "--dry-run" in own
    slurm = parse_slurm_options(layers)
    from trainer_cli.cli import DEFAULT_ROOT_DIR, parse_config

    parser, config = parse_config("fit", fit_args, expand=False)
    resources = derive(config.trainer, slurm)
    root = Path(config.trainer.default_root_dir or DEFAULT_ROOT_DIR)
    job_name = slurm.job_name or config.name

    created = False
    if config.run_dir:
        run_dir = Path(config.run_dir).absolute()
    elif dry_run:
        run_dir = _next_run_dir(root, config.name).absolute()
    else:
        from trainer_cli.rundir import allocate

        run_dir, created = allocate(root, config.name).absolute(), True
    config.run_dir = str(run_dir)
    frozen = parser.dump(config, skip_none=False)

    def render_test(dependency: str) -> str:
        test_resources = Resources(1, 1, 1 if resources.accelerator == "gpu" else 0, resources.accelerator)
        return render("test", script_context(slurm, test_resources, run_dir, f"{job_name}-test", Path.cwd(), dependency))

    script = run_dir / SCRIPT_NAME
    queued = False
    try:
        script_text = render(slurm.template, script_context(slurm, resources, run_dir, job_name, Path.cwd(), slurm.dependency))
        test_text = render_test("afterok:<fit job id>") if slurm.test_after_fit else None
        if dry_run:
            print(f"# run directory (not created): {run_dir}\n# {script}:\n{script_text}")
            if test_text is not None:
                print(f"# {run_dir / TEST_SCRIPT_NAME}, queued after the fit job:\n{test_text}")
            print(f"# world size {resources.world_size}: {resources.nodes} node(s) x {resources.ntasks_per_node} task(s)")
            print(f"# the sbatch command (not run):\n{shlex.join(['sbatch', '--parsable', str(script)])}")
            return 0
        run_dir.mkdir(parents=True, exist_ok=True)
        config_file = run_dir / "config.yaml"
        if not config_file.exists():  # resubmitting into an existing run keeps the config it started with
            from trainer_cli.rundir import write_git_info

            config_file.write_text(frozen)
            write_git_info(run_dir)
        script.write_text(script_text)
        job_id = _sbatch(script)
        queued = True
    except BaseException:
        if created and not queued:
            shutil.rmtree(run_dir, ignore_errors=True)  # nothing of a refused submission is left
        raise
    record: dict[str, Any] = {
        "job_id": job_id,
        "job_name": job_name,
        "run_dir": str(run_dir),
        "script": str(script),
        "log": str(run_dir / LOG_PATTERN.replace("%j", job_id)),
        "nodes": resources.nodes,
        "ntasks_per_node": resources.ntasks_per_node,
        "gpus_per_node": resources.gpus_per_node,
        "submitted": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "command": sys.argv,
        "slurm": asdict(slurm),
    }
    print(f"Run directory: {run_dir}\nScript:        {script}\nJob id:        {job_id}\nLog:           {record['log']}")
    if slurm.test_after_fit:
        test_script = run_dir / TEST_SCRIPT_NAME
        test_script.write_text(render_test(f"afterok:{job_id}"))
        record["test_job_id"] = _sbatch(test_script)
        print(f"Test job id:   {record['test_job_id']} (starts when {job_id} succeeds)")
    (run_dir / JOB_FILE).write_text(json.dumps(record, indent=2) + "\n")
    from trainer_cli.launch.jobs import register

    register(root, record)
    return 0
