"""Jobs in containers: ``--slurm.container.*`` (:class:`ContainerOptions`) and what it puts in the
sbatch script (:func:`launch_words`).

Every ``srun`` that starts a job's tasks runs them in the image, each runtime in its own way:

- Apptainer / Singularity: ``apptainer exec --nv --bind SRC:DST ... --pwd DIR IMAGE python ...``;
  the host's environment passes in; its starter forwards signals to the task.
- Pyxis (enroot): ``srun --container-image=IMAGE --container-mounts=... --container-workdir=DIR``;
  GPUs through enroot's hooks; the task is the container's process, so Slurm signals it directly.
- podman / podman-hpc: ``podman run --rm --init --network=host --ipc=host -v SRC:DST -e NAME ... IMAGE``,
  GPUs by CDI (``--device nvidia.com/gpu=all``) or podman-hpc's ``--gpu``; ``run`` proxies the
  signals it gets to the container, whose init (``--init``) passes them on.
- Charliecloud: ``ch-run -b SRC:DST ... -c DIR IMAGE -- python ...``; ch-run execs the command (the
  task is the process Slurm signals); GPUs by ``ch-fromhost --nvidia IMAGE`` done once beforehand.

The launcher's own steps of the batch script (the job's record, the restart decision:
:mod:`trainer_cli.schedulers.slurm.batch`; the stall watchdog: :mod:`trainer_cli.job`) call ``scontrol``,
``scancel`` and ``sbatch``, which an image does not have, so they run on the host, by
:attr:`ContainerOptions.helper_python`, from a copy of those modules the run holds (:func:`install_helpers`:
``<run>/.launcher``, standard library and filelock): the host's Python needs no launcher of its own.

Mounted in every task: the run directory (the code snapshot is in it), the directory submitted from
(or its git work tree: the snapshot's links into it), the data paths of the config's ``data:``
section, and :attr:`ContainerOptions.mounts`.
"""

from __future__ import annotations

import re
import shutil
from collections.abc import Collection, Iterable
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any, Optional

from trainer_cli.errors import UserError, did_you_mean
from trainer_cli.schedulers.slurm import JOB_STEPS

RUNTIMES = ("apptainer", "singularity", "pyxis", "podman", "podman-hpc", "charliecloud")
FLAG = "--slurm.container"
HELPERS_DIR = ".launcher"
"""The run's copy of the launcher's job steps (:func:`install_helpers`)."""
PODMAN_ENV = ("SLURM_*", "TRAINER_CLI_*", "NCCL_*", "MASTER_ADDR", "MASTER_PORT", "PYTHONUNBUFFERED",
              "SRUN_CPUS_PER_TASK", "CUDA_VISIBLE_DEVICES", "USER")  # fmt: skip
"""What podman passes in from the host (it passes nothing by default); ``NAME*`` is every name with that start."""
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


@dataclass
class ContainerOptions:
    """The image every task of the job runs in (``--slurm.container.*``); empty runtime: no container."""

    runtime: Optional[str] = None
    """apptainer, singularity, pyxis (srun --container-image), podman, podman-hpc or charliecloud
    (ch-run). Empty: tasks run on the host."""
    image: Optional[str] = None
    """The image: a .sif file or a docker:// URI (apptainer), an enroot image or registry name
    (pyxis), an image name (podman), a directory or SquashFS image (charliecloud)."""
    mounts: list[str] = field(default_factory=list)
    """More paths bound into the container, each SRC or SRC:DST (absolute), SRC:DST:ro read-only
    (not charliecloud). The run directory, the directory submitted from and the config's data paths
    are bound already. Charliecloud binds only onto a directory the image has: mkdir -p IMAGE/DST."""
    env: dict[str, str] = field(default_factory=dict)
    """Environment variables set inside the container (values taken literally), over the image's own.
    The job's environment (--slurm.env, Slurm's SLURM_*) passes in as well. A secret (--slurm.secrets, or a
    name like *_KEY, *TOKEN*) is never written: it passes in from the job's environment by name."""
    workdir: Optional[str] = None
    """Absolute directory the tasks start in, inside the container. Empty: the job's own (the code snapshot,
    or the directory submitted from)."""
    options: list[str] = field(default_factory=list)
    """Further options of the runtime, one word each, put before the image (pyxis: srun options, e.g.
    --container-remap-root)."""
    helper_python: str = "python3"
    """The host's Python (3.10 or newer) that runs the launcher's own steps of the batch script (the
    job's record, restarts, the watchdog: they call scontrol and sbatch, which an image lacks). It
    needs no packages: the run holds a copy of those steps (<run>/.launcher)."""

    def __post_init__(self) -> None:
        problems = []
        runtime = self.runtime
        if runtime is not None and runtime not in RUNTIMES:
            hint = did_you_mean(runtime, RUNTIMES)
            problems.append(f"{FLAG}.runtime {runtime}: not a container runtime; choose {', '.join(RUNTIMES)}.{hint}")
        if runtime in RUNTIMES and not self.image:
            problems.append(f"{FLAG}.runtime {runtime}: give the image too ({FLAG}.image)")
        if not runtime:
            given = [name for name in ("image", "mounts", "env", "workdir", "options") if getattr(self, name)]
            if given:
                problems.append(
                    f"{FLAG}.{given[0]} without {FLAG}.runtime: choose one of {', '.join(RUNTIMES)}, or drop it"
                )
        for mount in self.mounts:
            problem = _mount_problem(mount, runtime)
            if problem:
                problems.append(f"{FLAG}.mounts {mount}: {problem}")
        for name in self.env:
            if not _ENV_NAME.fullmatch(str(name)):
                problems.append(f"{FLAG}.env: {name!r} is not an environment variable name (letters, digits, _)")
        if self.workdir and not self.workdir.startswith("/"):
            problems.append(f"{FLAG}.workdir {self.workdir}: must be an absolute path inside the container")
        if problems:
            raise UserError("; ".join(problems))


def _mount_problem(mount: str, runtime: str | None) -> str | None:
    parts = str(mount).split(":")
    if len(parts) > 3 or not parts[0]:
        return "write SRC, SRC:DST or SRC:DST:ro"
    for what, path in zip(("SRC", "DST"), parts[:2]):
        if not path.startswith("/"):
            return f"{what} {path!r} must be an absolute path (e.g. /scratch/data:/data)"
    if len(parts) == 3:
        if runtime == "charliecloud":
            return "ch-run takes no mount options (SRC or SRC:DST)"
        if parts[2] not in ("ro", "rw"):
            return f"mount option {parts[2]!r}: ro or rw"
    return None


def _mount(mount: str) -> tuple[str, str, str]:
    parts = str(mount).split(":")
    return parts[0], parts[1] if len(parts) > 1 else parts[0], parts[2] if len(parts) > 2 else ""


def _in_image(image: Path, path: str) -> Path:
    return image / path.lstrip("/")


def _bound(paths: Iterable[Path], image: str, runtime: str) -> list[tuple[str, str, str]]:
    """The launcher's own mounts (each path at itself), outermost first, one left out when a mount
    above it holds it already. A Charliecloud directory image binds a path at the deepest directory
    of it the image has (ch-run binds only onto an existing directory).

    Raises:
        UserError: a Charliecloud directory image that has no directory above a path but ``/``.
    """
    targets: set[str] = set()
    directory = Path(image) if runtime == "charliecloud" and Path(image).is_dir() else None
    for path in {str(p) for p in paths}:
        place = PurePosixPath(path)
        if directory is not None:
            while place != place.parent and not _in_image(directory, str(place)).is_dir():
                place = place.parent
            if str(place) == "/":
                raise UserError(
                    f"{FLAG}.image {image}: it has no directory to bind {path} at, and ch-run binds only onto one "
                    f"(the image is read-only): mkdir -p {directory}/{path.lstrip('/')}"
                )
        targets.add(str(place))
    chosen: list[str] = []
    for target in sorted(targets, key=lambda t: (len(t), t)):  # outermost first: a bind inside one is left out
        if not any(target.startswith(c.rstrip("/") + "/") for c in chosen):
            chosen.append(target)
    return [(c, c, "") for c in chosen]


def _check_charliecloud_mounts(container: ContainerOptions) -> None:
    image = Path(str(container.image))
    if not image.is_dir():
        return  # a SquashFS image, or one not on this machine: ch-run says it in the job
    if not (image / "etc" / "hosts").is_file():  # ch-run binds the host's file onto the image's, when it has one
        raise UserError(
            f"{FLAG}.image {image}: it has no /etc/hosts, so the job's node names would not resolve in it (DDP waits "
            f"forever for its first node): touch {image}/etc/hosts (ch-run binds the host's onto it)"
        )
    for mount in container.mounts:
        _, dst, _ = _mount(mount)
        if not _in_image(image, dst).is_dir():
            raise UserError(
                f"{FLAG}.mounts {mount}: the image has no directory {dst}, and ch-run binds only onto one "
                f"(the image is read-only): mkdir -p {image}/{dst.lstrip('/')}"
            )


def launch_words(
    container: ContainerOptions,
    paths: Iterable[Path],
    workdir: str,
    gpus: int,
    env_names: Iterable[str],
    secret: Collection[str] = (),
) -> tuple[list[str], list[str]]:
    """``(srun options, words before python)`` that start a job's task in the container.

    ``paths``: what is mounted at itself (run directory, submit directory, data paths); ``workdir``:
    the job's directory; ``gpus``: GPUs per node; ``env_names``: the job's own variables (podman
    passes in only what it is told); ``secret``: the names of :attr:`ContainerOptions.env` whose
    values are in the job's environment (:mod:`trainer_cli.schedulers.slurm.secrets`), never in these words: they
    pass in by name (podman ``--env=NAME``, pyxis ``--container-env``) or with the host's environment,
    which apptainer, singularity and ch-run pass in (unless ``--cleanenv`` / ``--unset-env`` in
    :attr:`ContainerOptions.options`).

    Raises:
        UserError: for a Charliecloud directory image lacking a mount point.
    """
    runtime, image = str(container.runtime), str(container.image)
    if runtime == "charliecloud":
        _check_charliecloud_mounts(container)
    mounts = _bound(paths, image, runtime) + [_mount(m) for m in container.mounts]
    cwd = container.workdir or workdir
    spec = [f"{src}:{dst}" + (f":{opt}" if opt else "") for src, dst, opt in mounts]
    options = list(container.options)
    given = {k: v for k, v in container.env.items() if k not in secret}  # with their values in the script
    if runtime in ("apptainer", "singularity"):
        words = [runtime, "exec"] + (["--nv"] if gpus else [])
        words += [f"--bind={','.join(spec)}", f"--pwd={cwd}"] + [f"--env={k}={v}" for k, v in given.items()]
        return [], words + options + [image]
    if runtime == "pyxis":
        srun = [f"--container-image={image}", f"--container-mounts={','.join(spec)}", f"--container-workdir={cwd}"]
        if container.env:
            srun.append(f"--container-env={','.join(container.env)}")  # exported by the script, over the image's
        return srun + options, []
    if runtime in ("podman", "podman-hpc"):
        words = [runtime, "run", "--rm", "--init", "--network=host", "--ipc=host"]
        if gpus:
            words += ["--gpu"] if runtime == "podman-hpc" else ["--device=nvidia.com/gpu=all"]
        words += [f"--volume={s}" for s in spec] + [f"--workdir={cwd}"]
        names = list(dict.fromkeys([*PODMAN_ENV, *env_names]))
        words += [f"--env={n}" for n in names] + [f"--env={k}={v}" for k, v in given.items()]
        return [], words + options + [image]
    words = ["ch-run"] + [f"--bind={s}" for s in spec] + [f"--cd={cwd}"]
    words += [f"--set-env={k}={v}" for k, v in given.items()]
    return [], words + options + [image, "--"]


def data_paths(data: Any, submit_dir: Path) -> list[Path]:
    """The paths a config's ``data:`` section names that exist here (a file's folder; a relative one
    read from ``submit_dir``), to be mounted: every string value in it, at any depth."""
    found: list[Path] = []
    stack = [data.as_dict() if hasattr(data, "as_dict") else data]
    while stack:
        value = stack.pop()
        if isinstance(value, dict):
            stack += list(value.values())
        elif isinstance(value, (list, tuple)):
            stack += list(value)
        elif isinstance(value, str) and "/" in value and "\n" not in value:
            path = (submit_dir / Path(value).expanduser()).resolve()
            if path.exists() and path != Path("/"):
                found.append(path if path.is_dir() else path.parent)
    return found


def helper_words(container: ContainerOptions, run_dir: Path) -> list[str]:
    """The command that runs the launcher's job steps on the host (``-m trainer_cli.schedulers.slurm.batch``,
    ``-m trainer_cli.job...`` follows):
    :attr:`ContainerOptions.helper_python` with the run's copy of them first on its path."""
    return ["env", f"PYTHONPATH={run_dir / HELPERS_DIR}", container.helper_python]


def install_helpers(run_dir: Path) -> Path:
    """Copy the launcher's job steps into ``<run>/.launcher`` (replacing an earlier copy): the
    package's ``__init__``, :mod:`trainer_cli.atomic`, :mod:`trainer_cli.errors`, :mod:`trainer_cli.job`
    and Slurm's in-job steps (:data:`trainer_cli.schedulers.slurm.JOB_STEPS`, with the ``__init__`` of their
    folders): standard library and filelock only, and filelock itself; returns the folder."""
    import filelock

    target = run_dir / HELPERS_DIR
    shutil.rmtree(target, ignore_errors=True)
    source = Path(__file__).resolve().parents[2]  # the trainer_cli package (this is schedulers/slurm/container.py)
    package = target / "trainer_cli"
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    shutil.copytree(source / "job", package / "job", ignore=ignore)
    inits = ["__init__.py", "schedulers/__init__.py", "schedulers/slurm/__init__.py"]
    for name in [*inits, "atomic.py", "errors.py", *(f"schedulers/slurm/{step}.py" for step in JOB_STEPS)]:
        (package / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source / name, package / name)
    shutil.copytree(Path(filelock.__file__).parent, target / "filelock", ignore=ignore)
    return target
