"""A job's sbatch script: the values its template gets, its file names, and queueing it.

Rendering itself (templates, quoting) is :mod:`trainer_cli.schedulers.slurm.render`; ``sbatch`` runs through
:mod:`trainer_cli.schedulers.slurm.commands`. Used by ``train submit`` for a fit run
(:mod:`trainer_cli.schedulers.slurm.fit_job`) and for a sweep (:mod:`trainer_cli.schedulers.slurm.sweep`).
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

from trainer_cli.errors import UserError
from trainer_cli.rundir.layout import CONFIG_FILE
from trainer_cli.rundir.policy import test_after_fit_args
from trainer_cli.schedulers import snapshot
from trainer_cli.schedulers.resources import Resources
from trainer_cli.schedulers.slurm import container, secrets
from trainer_cli.schedulers.slurm.commands import SlurmCommandError
from trainer_cli.schedulers.slurm.commands import sbatch as run_sbatch_command
from trainer_cli.schedulers.slurm.options import SlurmOptions
from trainer_cli.schedulers.slurm.render import Quoted, quote_shell

SCRIPT_NAME = "submit.sbatch"
TEST_SCRIPT_NAME = "test.sbatch"
AGGREGATE_SCRIPT_NAME = "cv_aggregate.sbatch"
LOG_PATTERN = "slurm-%j.log"


def _env(slurm: SlurmOptions) -> dict[str, str]:
    env: dict[str, str] = {}
    if slurm.nccl_debug:
        env["NCCL_DEBUG"] = slurm.nccl_debug
    if slurm.nccl_socket_ifname:
        env["NCCL_SOCKET_IFNAME"] = slurm.nccl_socket_ifname
    return env | {str(k): str(v) for k, v in slurm.env.items()}


def slurm_filename_pattern(path: Path) -> str:
    """``path`` as the literal start of an sbatch ``--output`` pattern: ``%`` doubled (else Slurm
    expands ``%u``, ``%j``... in it and the log lands elsewhere).

    Raises:
        UserError: for a backslash in the path (it turns off every replacement, ``%j`` included).
    """
    if "\\" in str(path):
        raise UserError(
            f"run directory {path}: a backslash in the path stops Slurm naming the log by job id; choose a --name or "
            "--trainer.default_root_dir without one"
        )
    return str(path).replace("%", "%%")


def script_context(
    slurm: SlurmOptions,
    resources: Resources,
    run_dir: Path,
    job_name: str,
    submit_dir: Path,
    dependency: str | None,
    data: Iterable[Path] = (),
) -> dict[str, Any]:
    """The values a template may use (all documented in ``slurm/ddp.sbatch.j2``). With
    ``slurm.snapshot`` inside a git work tree the job starts in the code snapshot
    (:mod:`trainer_cli.schedulers.snapshot`), then changes to ``submit_dir``. With a container
    (``slurm.container``) its tasks start in the image, ``data`` (the config's data paths) mounted
    with the run directory and the directory submitted from (:mod:`trainer_cli.schedulers.slurm.container`)."""
    gpus = resources.gpus_per_node
    in_snapshot = snapshot.planned(submit_dir, run_dir) if slurm.snapshot else None
    workdir = str(in_snapshot or submit_dir)
    secret = list(secrets.values(slurm))  # checked now: a secret given nowhere is one line before anything is written
    env = {k: v for k, v in _env(slurm).items() if k not in secret}  # secrets: sbatch's environment, not the script
    srun_words: list[str] = []
    prefix: list[str] = []
    helper = quote_shell(slurm.python_executable)
    if slurm.container.runtime:
        top = (snapshot.work_tree(submit_dir) if in_snapshot else None) or submit_dir  # the snapshot links into it
        mounts = [run_dir, top, *data]
        srun_words, prefix = container.launch_words(slurm.container, mounts, workdir, gpus, [*env, *secret], secret)
        if slurm.container.runtime == "pyxis":  # pyxis takes the values from the job's environment (--container-env)
            env |= {str(k): str(v) for k, v in slurm.container.env.items() if k not in secret}
        helper = Quoted(" ".join(quote_shell(w) for w in container.helper_words(slurm.container, run_dir)))
    return {
        "container": bool(slurm.container.runtime),
        "container_srun": srun_words,  # srun options (pyxis)
        "container_prefix": prefix,  # the words before python in every srun that starts tasks
        "helper": helper,  # runs `-m trainer_cli.job.*` (the launcher's steps) in the batch script, quoted
        "workdir": workdir,
        "snapshot": in_snapshot is not None,
        # the work tree's other folders on sys.path at submit (a src layout installed editable), as their copies
        "import_paths": [str(run_dir / snapshot.CODE_DIR / p) for p in snapshot.import_paths(submit_dir)]
        if in_snapshot
        else [],
        "submit_dir": str(submit_dir),
        "slurm": slurm,
        "job_name": job_name,
        "nodes": resources.nodes,
        "ntasks_per_node": resources.ntasks_per_node,
        "gpus_per_node": gpus,
        "gpus_request": f"{slurm.gpu_type}:{gpus}" if slurm.gpu_type else str(gpus),
        "dependency": dependency,
        "run_dir": str(run_dir),
        "log_pattern": slurm_filename_pattern(run_dir) + "/" + LOG_PATTERN,
        "config": str(run_dir / CONFIG_FILE),
        "test_args": test_after_fit_args(run_dir / CONFIG_FILE),  # the test job's (test.sbatch.j2)
        "python": slurm.python_executable,
        "entry": ["-m", "trainer_cli"],  # what python runs: `train`, or a user's script (plan)
        "fit_verb": "fit",  # the verb it takes: none for a user's script built with run=False (plan)
        "env": env,
        # names only: their values come from sbatch's environment (trainer_cli.schedulers.slurm.secrets)
        "secrets": secret,
    }


def run_sbatch(script: Path, *options: str, slurm: SlurmOptions | None = None) -> str:
    """Queue ``script`` (with extra sbatch ``options``); returns the job id. The secrets of ``slurm``
    (:mod:`trainer_cli.schedulers.slurm.secrets`) go in sbatch's environment, which it passes to the job.

    Raises:
        UserError: when sbatch is missing or refuses the job (its message included).
    """
    try:
        return run_sbatch_command(script, *options, env=secrets.sbatch_environment(slurm))
    except SlurmCommandError as err:
        if err.missing:
            raise UserError(
                "sbatch not found: run `train submit` where Slurm is installed (or start a local cluster: "
                "scripts/local-slurm start)"
            ) from None
        raise UserError(f"sbatch refused {script}: {err.message}") from None


def prepare_run(slurm: SlurmOptions, run_dir: Path) -> None:
    """What a job's run directory needs before its script is queued: with a container, the run's
    copy of the launcher's job steps (:func:`trainer_cli.schedulers.slurm.container.install_helpers`)."""
    if slurm.container.runtime:
        container.install_helpers(run_dir)
