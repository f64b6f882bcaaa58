"""The options of ``train submit``'s ``slurm:`` section (the schema): :class:`SlurmOptions`, each
attribute's docstring its help text, checked as a whole in ``__post_init__``; and Slurm's time limits.

Reading them from ``--config`` files and ``--slurm.*`` flags is :mod:`trainer_cli.schedulers.slurm.slurm_args`.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from typing import Optional

from trainer_cli.errors import UserError
from trainer_cli.schedulers.slurm.container import ContainerOptions
from trainer_cli.schedulers.slurm.output import time_limit_s
from trainer_cli.schedulers.snapshot import SNAPSHOT_MAX_MB, Limit

SNAPSHOT_OFF = "--slurm.snapshot false"

SECTION = "slurm"
FLAG_PREFIX = f"--{SECTION}."


@dataclass
class SlurmOptions:
    """What the job asks of Slurm, and how its script is set up. Resources (nodes, tasks, GPUs)
    come from the trainer; the resource fields here only need setting to state them twice."""

    partition: Optional[str] = None
    """Partition (queue); empty: the cluster's default."""
    account: Optional[str] = None
    """Account charged for the job."""
    qos: Optional[str] = None
    """Quality of service."""
    time: str = "01:00:00"
    """Wall-clock limit, as sbatch takes it: MINUTES, HH:MM:SS or D-HH:MM:SS; or auto: sized from an earlier
    run of the same shape (model, data and batch size, devices x nodes, precision) under the same root:
    the time it needs x 1.3 + signal_delay_s + 2 min, whole minutes, within the partition's MaxTime and the
    QOS's MaxWall (guide: Sizing a job from an earlier run). Without such a run, a probe run is suggested."""
    mem: Optional[str] = None
    """Memory per node, as sbatch takes it (e.g. 64G); empty: the partition's default; auto: the peak RSS of
    a rank in an earlier run of the same shape x tasks per node x 1.25, whole GB."""
    mem_per_cpu: Optional[str] = None
    """Memory per CPU (sbatch --mem-per-cpu, e.g. 4G), instead of mem."""
    cpus_per_task: Optional[int] = None
    """CPU cores per task (per device); data loader workers run on them. Empty: the data module's
    num_workers + 1 (1 without num_workers). Exported as SRUN_CPUS_PER_TASK."""
    constraint: Optional[str] = None
    """Node features required (sbatch --constraint), e.g. a100."""
    exclusive: bool = False
    """Ask for whole nodes (sbatch --exclusive)."""
    job_name: Optional[str] = None
    """Job name; empty: the experiment name."""
    mail_user: Optional[str] = None
    """Address for Slurm's mail."""
    mail_type: Optional[str] = None
    """When to mail (e.g. END,FAIL); needs mail_user."""
    gpu_type: Optional[str] = None
    """GPU type in the request (--gpus-per-node=TYPE:N), e.g. a100; empty: any."""
    nodes: Optional[int] = None
    """Nodes; derived from trainer.num_nodes. Set only to state it twice (a contradiction is an error)."""
    ntasks_per_node: Optional[int] = None
    """Tasks per node; derived from trainer.devices. Set only to state it twice (checked)."""
    gpus_per_node: Optional[int] = None
    """GPUs per node; derived from trainer.devices on a GPU. Set only to state it twice (checked)."""
    signal_delay_s: int = 120
    """Seconds before the time limit at which the job gets SIGUSR1 (checkpoint and requeue)."""
    max_restarts: int = 3
    """How many times the job may restart after a time limit or a failure (a step Slurm killed) and
    resume; preemptions (scancel -s USR1, the scheduler's) and Slurm's own requeues do not count."""
    requeue_mode: str = "requeue"
    """How the job restarts after SIGUSR1: requeue (scontrol requeue, same job id) or resubmit (sbatch
    of the same script into the same run, a new job id), for sites where a requeue does not bring
    the job back (preempted jobs cancelled, requeues refused). A failed requeue resubmits too."""
    stall_timeout_s: Optional[int] = None
    """Seconds without a training step on some rank after which the job counts as stalled: the stacks
    of every rank go to <run>/stalls/, the step ends and the job requeues without the node whose rank
    stopped answering (counted against max_restarts). Empty: 20 times the slowest rank's median step
    time, at least 300. Validation, checkpoint writes and the first step are never a stall. 0: off."""
    step_start_timeout_s: int = 600
    """Seconds srun may wait to start the training step's tasks (srun --immediate) before it gives up:
    the job then requeues (counted against max_restarts) instead of holding its nodes until the time
    limit while one of them is still busy or cleaning up after an earlier step. The default leaves
    time for a prolog or a slow node to come up and is short against a time limit. 0: wait as long
    as Slurm wants."""
    dependency: Optional[str] = None
    """Start after other jobs (sbatch --dependency), e.g. afterok:1234."""
    test_after_fit: bool = False
    """Also queue `train test` on the best checkpoint, to start when the fit job succeeds."""
    cv_folds: Optional[int] = None
    """Queue `train cv` instead of `fit`: a job array of one task per fold (0..K-1), then a job that
    aggregates the folds' metrics when every task has succeeded. Empty: a plain fit job."""
    array_parallelism: Optional[int] = None
    """Sweeps (`--sweep`): at most this many trials of the job array run at once (sbatch --array=0-N%P). Empty: no
    limit."""
    array_workers: Optional[int] = None
    """Sweeps (`--sweep`): the job array is this many workers of the sweep's Optuna study instead of a task per
    trial; each asks the study for a trial, trains it and asks again until the study holds --sweep_trials
    trials. Needed for --sweep_sampler other than grid, --sweep_pruner and --sweep_storage. Empty: a task per trial."""
    extra_sbatch: list[str] = field(default_factory=list)
    """Further sbatch options, one per #SBATCH line, e.g. --reservation=big."""
    setup: list[str] = field(default_factory=list)
    """Commands run before training, one per entry (module load cuda/12.4, source /path/venv/bin/activate).
    Each is split into words like a shell does and run as one command: no pipes, `;`, `$VAR` or `$(...)`."""
    setup_raw: Optional[str] = None
    """Your site's own shell, run verbatim before training, after setup (conda activate env,
    module load $MODULES, export X=$SCRATCH/y && ...). Not quoted: it is labelled as such in the script.
    With setup or setup_raw and no python, the job runs the `python` they put on PATH."""
    env: dict[str, str] = field(default_factory=dict)
    """Environment variables exported in the job (values taken literally). A name that looks like a
    credential (`*_KEY`, `*TOKEN*`, `*SECRET*`, `*PASSWORD*`, `*PASSWD*`, `*CREDENTIAL*`, `*_PASS`) is a
    secret: see secrets."""
    secrets: list[str] = field(default_factory=list)
    """Names of secrets the job gets (an API key, a token): in its environment from the start (before
    setup), by sbatch's environment, never written to the script, job.json or any file; the run's files
    and --dry-run show `NAME=***`. A name not in env is taken from the environment of `train submit`
    (export it first). Names that look like credentials (see env) need not be listed."""
    nccl_debug: Optional[str] = None
    """Opt-in NCCL_DEBUG preset (e.g. INFO, WARN)."""
    nccl_socket_ifname: Optional[str] = None
    """Opt-in NCCL_SOCKET_IFNAME preset: the network interface(s) NCCL uses, e.g. ib0 or ^lo,docker."""
    python: Optional[str] = None
    """Python that runs `-m trainer_cli` in the job. Empty: `python3` of the image with a container,
    `python` from PATH when setup or setup_raw is given (the environment they activate), else the one
    running `train submit`."""
    container: ContainerOptions = field(default_factory=ContainerOptions)
    """Run every task in a container image: --slurm.container.runtime, .image, .mounts, .env, .workdir,
    .options, .helper_python (guide: Jobs in containers)."""
    snapshot: bool = True
    """Copy the code of the git work tree you submit from (tracked and untracked-not-ignored files,
    uncommitted changes included; not checkpoints, run folders or earlier snapshots) into <run>/code,
    its git-ignored data linked there; the job and every requeue import your code from there, so
    editing it after submitting changes nothing queued. Off: the job imports the live tree."""
    snapshot_max_mb: float = SNAPSHOT_MAX_MB
    """The most the code snapshot may copy, in MB; over it the submission names the largest files."""
    template: str = "ddp"
    """sbatch template: a name in the bundled slurm/ folder (ddp) or the path of your own Jinja2 file."""

    def __post_init__(self) -> None:
        if isinstance(self.container, dict):  # from a config file, or a run's job.json
            self.container = ContainerOptions(**self.container)
        problems = []
        problems += [
            f"--slurm.secrets: {n!r} is not an environment variable name" for n in self.secrets if not _ENV.fullmatch(n)
        ]
        if self.mem and self.mem_per_cpu:
            problems.append(
                f"--slurm.mem {self.mem} and --slurm.mem_per_cpu {self.mem_per_cpu}: sbatch takes one of them, choose "
                "one"
            )
        if self.snapshot_max_mb <= 0:
            problems.append(f"--slurm.snapshot_max_mb {self.snapshot_max_mb}: must be more than 0")
        for key in ("cpus_per_task", "signal_delay_s", "array_parallelism", "array_workers"):
            if getattr(self, key) is not None and getattr(self, key) < 1:
                problems.append(f"--slurm.{key} {getattr(self, key)}: must be 1 or more")
        if (
            self.time != AUTO
            and str(self.time).strip().upper() not in NO_TIME_LIMIT
            and time_limit_s(self.time) is None
        ):
            problems.append(
                f"--slurm.time {self.time}: not a time limit sbatch takes; use {TIME_FORMATS}, e.g. 04:00:00, or {AUTO}"
            )
        if self.stall_timeout_s is not None and self.stall_timeout_s < 0:
            problems.append(f"--slurm.stall_timeout_s {self.stall_timeout_s}: must be 0 (off) or more")
        if self.step_start_timeout_s < 0:
            problems.append(f"--slurm.step_start_timeout_s {self.step_start_timeout_s}: must be 0 (no timeout) or more")
        if self.max_restarts < 0:
            problems.append(f"--slurm.max_restarts {self.max_restarts}: must be 0 or more")
        if self.cv_folds is not None and self.cv_folds < 2:
            problems.append(f"--slurm.cv_folds {self.cv_folds}: must be 2 or more")
        if self.requeue_mode not in REQUEUE_MODES:
            problems.append(f"--slurm.requeue_mode {self.requeue_mode}: choose {' or '.join(REQUEUE_MODES)}")
        if self.cv_folds is not None and self.requeue_mode == "resubmit":
            problems.append(
                "--slurm.requeue_mode resubmit and --slurm.cv_folds: the tasks of a job array requeue; drop one"
            )
        if self.cv_folds is not None and self.test_after_fit:
            problems.append(
                "--slurm.cv_folds and --slurm.test_after_fit: choose one (cross-validation has no test job)"
            )
        if self.mail_type and not self.mail_user:
            problems.append(f"--slurm.mail_type {self.mail_type}: give --slurm.mail_user too")
        if problems:
            raise UserError("; ".join(problems))

    def snapshot_off(self) -> str | None:
        """The option that turned the job's code snapshot off, as a submission's ``Code:`` line names it
        (``--slurm.snapshot false``); None where the job takes one."""
        return None if self.snapshot else SNAPSHOT_OFF

    def snapshot_limit(self) -> Limit:
        """How much the job's code snapshot may copy, and the options its refusals name."""
        return Limit(self.snapshot_max_mb, "--slurm.snapshot_max_mb", SNAPSHOT_OFF)

    def signal_delay_warning(self) -> str | None:
        """A warning when :attr:`signal_delay_s` is not well below :attr:`time` (at most half of it):
        the job would be told to checkpoint and requeue soon after it starts (Slurm may also send
        the signal up to 60 s early). None when fine or when the time cannot be read."""
        limit_s = time_limit_s(self.time)
        if limit_s is None or self.signal_delay_s * 2 <= limit_s:
            return None
        return (
            f"--slurm.signal_delay_s {self.signal_delay_s} is not well below --slurm.time {self.time} ({limit_s} s): "
            f"the job would checkpoint and requeue itself after {max(limit_s - self.signal_delay_s, 0)} s or less "
            f"(Slurm may signal up to 60 s early); use at most {limit_s // 2} s or a longer --slurm.time"
        )

    @property
    def python_executable(self) -> str:
        """The Python of the job: :attr:`python`; else the image's ``python3`` in a container; else
        ``python`` when setup lines activate an environment (:attr:`setup`, :attr:`setup_raw`); else the
        absolute path of the one running now."""
        import sys

        if self.python:
            return self.python
        if self.container.runtime:
            return "python3"
        return "python" if self.setup or self.setup_raw else os.path.abspath(sys.executable)


REQUEUE_MODES = ("requeue", "resubmit")
_ENV = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
TIME_FORMATS = "MINUTES, MINUTES:SECONDS, HH:MM:SS, D-HH, D-HH:MM or D-HH:MM:SS"
NO_TIME_LIMIT = ("INFINITE", "UNLIMITED")
AUTO = "auto"
"""``--slurm.time auto``, ``--slurm.mem auto``: chosen from an earlier run's measurements
(:mod:`trainer_cli.schedulers.slurm.sizing`)."""
