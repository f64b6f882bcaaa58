"""A ``train submit`` into a run that was submitted before (``--config <run>/config.yaml``): which run it is,
and what the new command changes in that run's ``config.yaml``, checked as a resume checks it, for every engine
(:func:`trainer_cli.schedulers.run_plan.place`).

The submission does not rewrite ``config.yaml``: it writes the job's own input, :data:`JOB_CONFIG` (the new
values, and the ``ckpt_path`` the job resumes from), which the job's ``train fit --config <run>/job_config.yaml
--run_dir <run>`` reads. The job's start is then a resume like any other: it lists the changes in
``history.jsonl`` and rewrites ``config.yaml`` as a local ``train fit --run_dir <run> --ckpt_path last`` does
(:func:`trainer_cli.rundir.history.record_start`: header kept, ``ckpt_path`` as the run's record had it, the
previous record kept as ``config.prev-<N>.yaml``), so ``train fit --config <run>/config.yaml`` still starts a
new run.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from trainer_cli.atomic import write_atomic
from trainer_cli.errors import UserError
from trainer_cli.job import jobstate
from trainer_cli.job.scheduler import DEFAULT_SCHEDULER
from trainer_cli.job.status import is_active
from trainer_cli.rundir import record
from trainer_cli.rundir.layout import CONFIG_FILE
from trainer_cli.rundir.policy import Resume

if TYPE_CHECKING:
    from trainer_cli.job.status import JobStatus

Describe = Callable[[Sequence[str]], "dict[str, JobStatus]"]
"""An engine's :meth:`~trainer_cli.job.scheduler.Scheduler.describe`."""

JOB_CONFIG = "job_config.yaml"
"""``<run>/job_config.yaml``: what a resubmitted run's job reads (``--config``), written by the submission."""
JOB_CONFIG_HEADER = (
    "# The input of this run's resubmitted job (train submit): its start resumes the run with these values and\n"
    "# writes them into config.yaml as a resume does. Not a config to start a run from: use config.yaml.\n"
)


def config_changes(
    run_dir: Path,
    frozen: str,
    resume: Resume | None,
    model_class: type | None = None,
    links: frozenset[str] = frozenset(),
) -> tuple[list[str], str]:
    """What a resubmission into ``run_dir`` changes in its config.yaml, and the config its job reads
    (:data:`JOB_CONFIG`).

    The new command's values are checked as any resume checks them
    (:func:`trainer_cli.rundir.resume.compare_for_resume`: no other architecture, optimizer or precision; a
    model change by the tensors of ``resume``, the checkpoint the job will load).
    The job's config has ``ckpt_path: last`` when the run holds a checkpoint and no file was named
    (:func:`trainer_cli.rundir.policy.resume_checkpoint`: a resubmitted run resumes from its newest
    checkpoint); as in a local resume, ``ckpt_path`` is how this start resumes, not a change of the run
    (:data:`trainer_cli.rundir.resume.RESUME_OPTIONS`), and never goes into ``config.yaml``.
    ``model_class``: the model class a user's script fixes (its config.yaml holds the init arguments alone).
    ``links``: the keys links fill when the classes are built: the run's recorded values are kept
    (:func:`trainer_cli.rundir.record.keep_linked`), not compared with a parse that cannot know them, and
    named as the links' in the job's config as in the run's record (:func:`trainer_cli.rundir.record.linked_line`).

    Returns:
        ``(changes, job_config_text)``: one line per changed value, as the job's start lists them.

    Raises:
        UserError: for a change a resume refuses.
    """
    import yaml

    from trainer_cli.rundir.resume import check_config_weights_fit, compare_for_resume

    config_file = run_dir / CONFIG_FILE
    if not config_file.is_file():
        return [], frozen
    old, new = record.read(config_file) or {}, yaml.safe_load(frozen) or {}
    record.keep_linked(old, new, links)
    if resume is not None and resume.which == "last":  # a resubmitted run goes on from its newest checkpoint
        new["ckpt_path"] = "last"
    changes = compare_for_resume(old, new, run_dir, force=bool(new.get("resume_force")))
    if resume is not None and any(
        c.startswith("model.") for c in changes
    ):  # the checkpoint's tensors decide a model change, checked here rather than in the queue
        check_config_weights_fit(
            new.get("model"), resume.path, force=bool(new.get("resume_force")), model_class=model_class
        )
    linked = record.recorded_links(config_file)  # kept above: the links' values, as the run's record names them
    header = record.linked_line(linked) + "\n" if linked else ""
    return changes, header + yaml.safe_dump(new, sort_keys=False)


def refuse_a_live_job(run_dir: Path, found: Mapping[str, Describe]) -> None:
    """Refuse a resubmission into ``run_dir`` while the run's job is still queued or running: a second job
    would write into the same run (its checkpoints, records and logger version) at the same time.

    The job's engine (``found``: each engine's ``describe`` by its name,
    :meth:`trainer_cli.job.scheduler.Scheduler.describe`) is asked only while the run's ``job.json`` says its job
    has not ended (its job writes its end there); an engine not in ``found`` (Ray without its address) or that
    cannot answer does not refuse.

    Raises:
        UserError: naming the job, its state, and what to do (wait, or ``train cancel`` the run first).
    """
    recorded = jobstate.read(run_dir)
    job_id, name = recorded.get("job_id"), str(recorded.get("scheduler") or DEFAULT_SCHEDULER)
    describe = found.get(name)
    if not job_id or not is_active(str(recorded.get("state") or "")) or describe is None:
        return
    current = jobstate.follow(run_dir, str(job_id))  # the job it resubmitted itself as, where it did
    try:
        status = describe([current]).get(current)
    except UserError:  # (the engine cannot be asked now: not refused for what cannot be told)
        return
    if status is None or not status.is_of(run_dir):
        return
    if is_active(status.state):
        raise UserError(
            f"{run_dir} is still in {name} job {current} ({status.state}): a second job would write into the same "
            f"run at the same time. Wait for it to end (train jobs), or cancel it first (train cancel {run_dir}); "
            "nothing was submitted"
        )


def write_job_config(run_dir: Path, text: str) -> Callable[[], None]:
    """Write ``text`` (:func:`config_changes`'s) as ``run_dir``'s :data:`JOB_CONFIG`, under its header;
    returns what puts the file back as it was (an earlier resubmission's, or none) when the submission fails."""
    path = run_dir / JOB_CONFIG
    previous = path.read_text() if path.is_file() else None
    write_atomic(path, JOB_CONFIG_HEADER + text)

    def restore() -> None:
        if previous is None:
            path.unlink(missing_ok=True)
        else:
            write_atomic(path, previous)

    return restore


def submitted_run(configs: list[str]) -> Path | None:
    """The submitted run whose ``config.yaml`` is among the ``--config`` values (the last such), the run a
    ``train submit --config <run>/config.yaml`` resubmits into: a folder that holds a job's record beside it
    (``job.json``: every engine's submission writes one, and the job itself on its start); None where there is
    none (a local run's config starts a new run)."""
    for value in reversed(configs):
        path = Path(value)
        if path.name == CONFIG_FILE and path.is_file():
            if (path.parent / jobstate.JOB_FILE).is_file():
                return path.parent
    return None
