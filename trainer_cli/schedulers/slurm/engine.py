"""Slurm behind the scheduler seam: :class:`SlurmScheduler` answers
:class:`~trainer_cli.job.scheduler.Scheduler` with the launcher's own Slurm code, nothing copied.

- ``render``: the plan ``train submit --dry-run`` prints (:func:`trainer_cli.schedulers.slurm.fit_job.plan` and
  :func:`~trainer_cli.schedulers.slurm.fit_job.dry_run_text`), nothing written, nothing queued;
- ``submit``: the same plan made for real (the run folder allocated, its config frozen, the code
  snapshot taken) and queued with sbatch (:func:`trainer_cli.schedulers.slurm.fit_job.submit`, which calls
  :func:`trainer_cli.schedulers.slurm.sbatch.run_sbatch` and records the job in ``<run>/job.json`` and the registry);
- ``describe``: :func:`trainer_cli.schedulers.slurm.states.describe`, one ``scontrol show job`` call for any number
  of ids and one ``sacct`` call for those the controller has forgotten;
- ``logs``: the job's log, ``<run>/slurm-<id>.log`` (where scontrol says its ``StdOut`` is, else the
  run folder the registry keeps for the id);
- ``cancel``: ``scancel`` (:func:`trainer_cli.schedulers.slurm.commands.scancel`); a job that ended, or that
  Slurm does not know, is left as it is;
- ``accounting``: each attempt from ``sacct -D`` (:func:`trainer_cli.schedulers.slurm.accounting.accounting`),
  as :class:`~trainer_cli.job.cost.Attempt` values; None where the site keeps no accounting;
- ``cluster``: ``ClusterName``.

A fit run only: a sweep's array is rendered and queued by ``train submit --sweep``
(:mod:`trainer_cli.schedulers.slurm.sweep`).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from trainer_cli.config.request import Request
from trainer_cli.config.spec import RunSpec
from trainer_cli.errors import UserError
from trainer_cli.job.cost import Attempt
from trainer_cli.job.scheduler import JobDraft
from trainer_cli.job.status import JobStatus, is_active
from trainer_cli.schedulers.slurm import accounting as slurm_accounting
from trainer_cli.schedulers.slurm import commands as slurm_commands
from trainer_cli.schedulers.slurm import states as slurm_states
from trainer_cli.schedulers.slurm.commands import SlurmCommandError, sbatch_words
from trainer_cli.schedulers.slurm.sbatch import LOG_PATTERN
from trainer_cli.schedulers.submissions import read_registry

if TYPE_CHECKING:  # the submit library is imported when a job is rendered or queued, not for train jobs
    from trainer_cli.config.spec import ParseFit

ENDED = ("already completing or completed", "invalid job id")
"""scancel's answers for a job that has ended or that Slurm does not know: nothing to cancel."""


@dataclass(frozen=True)
class SlurmDraft(JobDraft):
    """A Slurm job as ``train submit --dry-run`` shows it, with the run it was rendered from.

    Attributes:
        spec: The run (:class:`~trainer_cli.config.spec.RunSpec`): :meth:`SlurmScheduler.submit` plans it
            again for real (the run folder allocated then, as ``train submit`` after its ``--dry-run``).
    """

    spec: RunSpec | None = None


class SlurmScheduler:
    """The Slurm engine (see the module docstring).

    Args:
        parse: How ``train fit ARGS`` is composed and checked (default: the launcher's own,
            :func:`trainer_cli.schedulers.run_plan.parse_fit`).
        poll_s: How often ``logs(follow=True)`` looks at the log and the job's state.
    """

    name = "slurm"

    def __init__(self, parse: ParseFit | None = None, poll_s: float = 1.0) -> None:
        self._given_parse = parse
        self.poll_s = poll_s

    def cluster(self) -> str | None:
        """This Slurm's ``ClusterName`` (None where Slurm cannot be asked)."""
        return slurm_commands.cluster_name()

    def _parse(self) -> ParseFit:
        """The parse function of the fit run (the launcher's unless one was given)."""
        from trainer_cli.schedulers.run_plan import parse_fit

        return self._given_parse or parse_fit()

    def spec(self, request: Request) -> RunSpec:
        """The run the ``train submit`` command line ``request`` asks for, parsed by this engine's parse.

        Raises:
            UserError: for a bad config file or a config the parse refuses.
        """
        from trainer_cli.schedulers.slurm import fit_job

        return fit_job.spec_of(request, self._parse())

    def render(self, spec: RunSpec) -> SlurmDraft:
        """The job ``train submit --dry-run`` shows for the run ``spec`` (:meth:`spec`); nothing written,
        nothing queued.

        Raises:
            UserError: for a bad Slurm option, a resource mismatch, a template error, or a sweep.
        """
        if spec.sweep:
            raise UserError("a sweep is one job array: `train submit --sweep ... --dry-run` shows it")
        from trainer_cli.schedulers.slurm import fit_job, secrets

        job = fit_job.plan(spec, True, echo=False)
        text = f"{job.finished} Nothing was queued." if job.finished else fit_job.dry_run_text(job)
        command = sbatch_words(job.script, *job.sbatch_options)
        return SlurmDraft(
            self.name,
            job.job_name,
            "\n".join([*job.notes, text]),
            tuple(secrets.masked_words(command, job.slurm)),
            None,
            secrets.masked(job.slurm),
            spec=spec,
        )

    def submit(self, draft: JobDraft) -> str:
        """Plan ``draft``'s request for real (run folder, frozen config, code snapshot) and queue it with
        sbatch; returns the job id (the registry and ``<run>/job.json`` record it).

        Raises:
            UserError: for a draft this engine did not render, a run already finished, or a job sbatch
                refuses (nothing is left of the run folder made for it).
        """
        if not isinstance(draft, SlurmDraft) or draft.spec is None:
            raise UserError(f"a {draft.scheduler} job draft: Slurm submits the drafts it rendered")
        from trainer_cli.schedulers.slurm import fit_job

        job = fit_job.plan(draft.spec, False)
        if job.finished:
            job.discard()
            raise UserError(f"{job.finished} Nothing was queued.")
        warning = job.slurm.signal_delay_warning()
        if warning:
            print(f"warning: {warning}", file=sys.stderr)
        return fit_job.submit(job)

    def describe(self, job_ids: Sequence[str]) -> dict[str, JobStatus]:
        """What Slurm says of each job id (an array task as ``<array id>_<i>``), in one ``scontrol`` call
        and one ``sacct`` call for the ids the controller has forgotten; an id Slurm knows not is absent.
        ``JobStatus.run_dir`` names the folder of the script the job runs (a reused id runs another's)."""
        return slurm_states.describe(job_ids)

    def log_file(self, job_id: str) -> Path | None:
        """Where the job logs: scontrol's ``StdOut`` while Slurm knows the job, else
        ``<run>/slurm-<id>.log`` of the run the registry keeps for the id; None where neither says."""
        known = slurm_commands.show_job(job_id).get("StdOut")
        if known and known.startswith("/"):
            return Path(known)
        for rec in reversed(read_registry()):
            if str(rec.get("job_id")) == job_id and rec.get("run_dir"):
                return self.output_file(Path(rec["run_dir"]), job_id)
        return None

    def output_file(self, folder: Path, job_id: str) -> Path:
        """``<folder>/slurm-<id>.log``: the batch script's ``--output`` (``slurm-%j.log``; an array task's
        ``slurm-%A_%a.log``, its id ``<array id>_<i>``)."""
        return folder / LOG_PATTERN.replace("%j", job_id)

    def logs(self, job_id: str, follow: bool = False) -> Iterator[str]:
        """The lines of the job's log (:meth:`log_file`), from the first; with ``follow``, until the
        job has ended (polled every ``poll_s``). None while the log does not exist yet."""
        log = self.log_file(job_id)
        position, rest = 0, ""
        while True:
            status = self.describe([job_id]).get(job_id) if follow else None
            if log is not None and log.is_file():
                with open(log, "rb") as f:
                    f.seek(position)
                    chunk = f.read()
                position += len(chunk)
                *lines, rest = (rest + chunk.decode(errors="replace")).split("\n")
                yield from lines
            ended = status is None or not is_active(status.state)
            if ended:
                if rest:
                    yield rest
                return
            time.sleep(self.poll_s)

    def cancel(self, job_id: str) -> None:
        """``scancel JOB``; a job that ended, or that Slurm does not know, is left as it is.

        Raises:
            UserError: when scancel is missing or refuses otherwise.
        """
        try:
            slurm_commands.scancel(job_id, timeout=60)
        except SlurmCommandError as err:
            if err.missing:
                raise UserError("scancel not found: cancel where Slurm is installed") from None
            if not any(answer in err.message.lower() for answer in ENDED):
                raise UserError(f"scancel {job_id} failed: {err.message}") from None

    def accounting(self, job_ids: Sequence[str]) -> list[Attempt] | None:
        """Every attempt of the jobs, in the order they started (a requeued one too: ``sacct -D``), those pending
        now last; None where the site keeps no accounting (``sacct`` missing, refusing or not answering)."""
        return slurm_accounting.accounting(job_ids) if job_ids else []
