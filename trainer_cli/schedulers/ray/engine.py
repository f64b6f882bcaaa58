"""The Ray engine behind the scheduler seam (:class:`trainer_cli.job.scheduler.Scheduler`).

A run is one Ray job (Ray's job submission API, the cluster's job server): its entrypoint is the driver
(:mod:`trainer_cli.schedulers.ray.driver`), which starts ``trainer.num_nodes`` x ``trainer.devices``
workers and restarts their group after a lost worker; its working directory is the run's code snapshot
(``<run>/code``, the snapshot rules of Slurm's jobs: :mod:`trainer_cli.schedulers.snapshot`), which Ray ships
to the cluster; the entries the snapshot links (git-ignored data, the virtual environment) are left out
of the upload. The run folder itself is where the submitting machine put it: the workers write there, as
Slurm's tasks do, so it must be on a disk every node sees.
"""

from __future__ import annotations

import shlex
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trainer_cli.errors import UserError
from trainer_cli.job import jobstate
from trainer_cli.job.cost import Attempt
from trainer_cli.job.scheduler import JobDraft
from trainer_cli.job.status import JobStatus
from trainer_cli.rundir import run_cost
from trainer_cli.rundir.layout import CONFIG_FILE
from trainer_cli.schedulers.ray.driver import LOG_PATTERN
from trainer_cli.schedulers.ray.options import RayOptions
from trainer_cli.schedulers.snapshot import Snapshot

STATES = {
    "PENDING": "PENDING",
    "RUNNING": "RUNNING",
    "SUCCEEDED": "COMPLETED",
    "FAILED": "FAILED",
    "STOPPED": "CANCELLED",
}
"""Ray's job states as ``train jobs`` shows them (Slurm's words)."""
FOLLOW_POLL_S = 1.0


@dataclass(frozen=True)
class RayJob:
    """What the Ray engine renders: the planned run and where its code is shipped from.

    Attributes:
        run_dir: The run folder (allocated by ``train submit``'s plan; not created for a dry run).
        job_id: The Ray job's submission id.
        job_name: The run's name.
        num_nodes: ``trainer.num_nodes``.
        devices: ``trainer.devices`` (workers per node).
        accelerator: ``cpu`` or ``gpu``.
        snapshot: The code snapshot shipped as the working directory (None: the submitting folder itself).
        submit_dir: The folder ``train submit`` ran in (relative paths of the config mean it).
        entry: What each rank's ``python`` runs before its verb: ``-m trainer_cli`` (``train``), or a user's
            script (:attr:`trainer_cli.schedulers.script_entry.ScriptEntry.words`, as its Slurm job runs it).
        verb: The verb the rank runs it with (``fit``; none for a script built with ``run=False``).
        chdir: The folder each rank starts in (a user's script's, as its Slurm job's ``--chdir``: the
            snapshot's copy of the submitting folder, else that folder); None: the job's working directory.
        import_paths: The work tree's folders on ``sys.path`` at submit, relative to the snapshot's top
            (:func:`trainer_cli.schedulers.snapshot.import_paths`): each rank puts their copies first on its
            ``PYTHONPATH``, as a Slurm job does.
        config: The file in ``run_dir`` each rank's fit reads: ``config.yaml``, or a resubmission's job input
            (:data:`trainer_cli.schedulers.resubmission.JOB_CONFIG`).
    """

    run_dir: Path
    job_id: str
    job_name: str
    num_nodes: int
    devices: int
    accelerator: str
    snapshot: Snapshot | None
    submit_dir: Path
    entry: tuple[str, ...] = ("-m", "trainer_cli")
    verb: str = "fit"
    chdir: Path | None = None
    import_paths: tuple[str, ...] = ()
    config: str = CONFIG_FILE

    def rank_command(self, python: str = "python") -> list[str]:
        """What each rank runs (the driver's Python for ``python``), as a Slurm job's fit step."""
        verb = [self.verb] if self.verb else []
        return [python, *self.entry, *verb, "--config", f"{self.run_dir}/{self.config}", "--run_dir", str(self.run_dir)]


class RayScheduler:
    """Runs submitted runs as Ray jobs on the cluster ``options.address`` names."""

    name = "ray"

    def __init__(self, options: RayOptions) -> None:
        self.options = options
        self._client: Any = None

    def cluster(self) -> str | None:
        """The Ray cluster's address as given (``--ray.address`` or ``RAY_ADDRESS``), as a Ray job's
        registry line names it; None without one."""
        return self.options.address or None

    @property
    def client(self) -> Any:
        """Ray's ``JobSubmissionClient`` for the job server (made on first use)."""
        if self._client is None:
            import logging

            from ray.job_submission import JobSubmissionClient

            for name in ["ray", *logging.root.manager.loggerDict]:  # (packaging notes: one per .gitignore)
                if name.startswith("ray"):
                    logging.getLogger(name).setLevel(logging.ERROR)
            try:
                self._client = JobSubmissionClient(self.options.job_server)
            except (ConnectionError, RuntimeError, ValueError) as err:
                raise UserError(f"the Ray cluster at {self.options.address} does not answer: {err}") from None
        return self._client

    def render(self, spec: RayJob) -> JobDraft:
        """The Ray job ``spec`` would be: its entrypoint, runtime environment and workers (pure)."""
        opts = self.options
        command: tuple[str, ...] = (
            "python", "-m", "trainer_cli.schedulers.ray.driver", "--run_dir", str(spec.run_dir),
            "--job_id", spec.job_id, "--num_nodes", str(spec.num_nodes), "--devices", str(spec.devices),
            "--accelerator", spec.accelerator, "--cpus_per_worker", f"{opts.cpus_per_worker:g}",
            "--max_failures", str(opts.max_failures), "--submit_dir", str(spec.submit_dir),
        )  # fmt: skip
        if spec.entry != RayJob.entry or spec.verb != RayJob.verb:  # a user's script (the driver's default: train)
            command += ("--entry", shlex.join(spec.entry), "--verb", spec.verb)
        if spec.chdir is not None:
            command += ("--chdir", str(spec.chdir))
        if spec.config != CONFIG_FILE:  # a resubmission's job input
            command += ("--config", spec.config)
        for path in spec.import_paths:
            command += ("--import_path", path)
        entrypoint = shlex.join(command)
        runtime_env: dict[str, Any] = {}
        if spec.snapshot is not None:
            workdir = Path(spec.snapshot.workdir).relative_to(spec.snapshot.root).as_posix()
            if workdir != ".":
                entrypoint = f"cd {shlex.quote(workdir)} && {entrypoint}"
            runtime_env = {"working_dir": spec.snapshot.root, "excludes": [f"/{p}" for p in spec.snapshot.linked]}
        workers = spec.num_nodes * spec.devices
        lines = [
            f"# Ray job {spec.job_id} on {opts.address}",
            f"entrypoint: {entrypoint}",
            f"runtime_env: {runtime_env}",
            f"workers: {workers} ({spec.num_nodes} node(s) x {spec.devices} {spec.accelerator} worker(s), "
            f"{opts.cpus_per_worker:g} CPU(s) each), each running: {shlex.join(spec.rank_command())}"
            + (f" (in {spec.chdir})" if spec.chdir is not None else ""),
            f"restarts: up to {opts.max_failures} (the worker group restarts from the run's last.ckpt)",
        ]
        options = {
            "entrypoint": entrypoint,
            "runtime_env": runtime_env,
            "workers": workers,
            "cpus_per_worker": opts.cpus_per_worker,
        }
        return JobDraft(self.name, spec.job_name, "\n".join(lines), command, spec.run_dir, options)

    def submit(self, draft: JobDraft) -> str:
        """Queue ``draft`` with the job server; returns its submission id.

        Raises:
            UserError: when the job server refuses it.
        """
        job_id = draft.command[draft.command.index("--job_id") + 1]
        try:
            return str(
                self.client.submit_job(
                    entrypoint=draft.options["entrypoint"],
                    submission_id=job_id,
                    runtime_env=draft.options["runtime_env"] or None,
                    metadata={"run_dir": str(draft.run_dir), "job_name": draft.job_name},
                )
            )
        except (RuntimeError, ValueError, ConnectionError) as err:
            raise UserError(f"the Ray cluster at {self.options.address} refused the job: {err}") from None

    def describe(self, job_ids: Sequence[str]) -> dict[str, JobStatus]:
        """Ray's state of each job (an id it does not know is absent), restarts from the run's job.json."""
        found: dict[str, JobStatus] = {}
        for job_id in job_ids:
            try:
                info = self.client.get_job_info(job_id)
            except RuntimeError:  # not a job of this cluster
                continue
            state = STATES.get(str(info.status), str(info.status))
            restarts = 0
            run_dir = (info.metadata or {}).get("run_dir")
            if run_dir:
                recorded = jobstate.read(Path(run_dir))
                restarts = int(recorded.get("restarts") or 0) if recorded.get("job_id") == job_id else 0
            elapsed = "-"
            if info.start_time:
                end = (info.end_time or time.time() * 1000) / 1000
                elapsed = time.strftime("%H:%M:%S", time.gmtime(max(0.0, end - info.start_time / 1000)))
            said = "" if state in ("RUNNING", "COMPLETED") else str(info.message or "")  # why it waits or ended
            found[job_id] = JobStatus(state, restarts, elapsed, "ray", said)
        return found

    def output_file(self, folder: Path, job_id: str) -> Path:
        """Where the Ray job's ranks append their output in its run folder (:func:`log_file`)."""
        return log_file(folder, job_id)

    def logs(self, job_id: str, follow: bool = False) -> Iterator[str]:
        """The Ray job's output lines (the driver's and every rank's), from the first."""
        seen = 0
        while True:
            lines = str(self.client.get_job_logs(job_id)).splitlines()
            yield from lines[seen:]
            seen = len(lines)
            if not follow or str(self.client.get_job_status(job_id)) in ("SUCCEEDED", "FAILED", "STOPPED"):
                if follow:
                    yield from str(self.client.get_job_logs(job_id)).splitlines()[seen:]
                return
            time.sleep(FOLLOW_POLL_S)

    def cancel(self, job_id: str) -> None:
        """Stop the Ray job; one that ended, or that the cluster does not know, is left as it is."""
        try:
            self.client.stop_job(job_id)
        except RuntimeError:  # unknown to the cluster: nothing to stop
            pass

    def accounting(self, job_ids: Sequence[str]) -> list[Attempt]:
        """Every start of the jobs' worker groups, from their runs' own attempt records (Ray keeps no
        accounting): :func:`trainer_cli.rundir.run_cost.record_attempts`, the reader ``train jobs RUN``
        and ``train runs`` price a Ray run with."""
        out: list[Attempt] = []
        for job_id in job_ids:
            try:
                info = self.client.get_job_info(job_id)
            except RuntimeError:
                continue
            run_dir = (info.metadata or {}).get("run_dir")
            if run_dir:
                out += run_cost.record_attempts(Path(run_dir), [job_id])
        return sorted(out, key=lambda a: a.start or 0.0)


def log_file(run_dir: Path, job_id: str) -> Path:
    """Where the Ray job's ranks append their output in the run folder."""
    return run_dir / LOG_PATTERN.format(job_id=job_id)
