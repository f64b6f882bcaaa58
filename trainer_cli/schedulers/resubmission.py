"""A ``train submit`` into a run that was submitted before (``--config <run>/config.yaml``): which run it is,
and what the new command changes in that run's ``config.yaml``, checked as a resume checks it, for every engine
(:func:`trainer_cli.schedulers.run_plan.place`). The submission writes the changes and keeps the previous config.
"""

from __future__ import annotations

from pathlib import Path

from trainer_cli.job import jobstate
from trainer_cli.rundir import record
from trainer_cli.rundir.layout import CONFIG_FILE
from trainer_cli.rundir.policy import Resume


def config_changes(
    run_dir: Path,
    frozen: str,
    resume: Resume | None,
    model_class: type | None = None,
    links: frozenset[str] = frozenset(),
) -> tuple[list[str], str]:
    """What a resubmission into ``run_dir`` changes in its config.yaml, and the config to write.

    The new command's values go into the run's config (the job reads it), checked as any resume
    checks them (:func:`trainer_cli.rundir.resume.compare_for_resume`: no other architecture, optimizer or
    precision; a model change by the tensors of ``resume``, the checkpoint the job will load).
    ``ckpt_path`` becomes ``last`` when the run holds a checkpoint and none was named
    (:func:`trainer_cli.rundir.policy.resume_checkpoint`: a resubmitted run resumes from its newest checkpoint).
    ``model_class``: the model class a user's script fixes (its config.yaml holds the init arguments alone).
    ``links``: the keys links fill when the classes are built: the run's recorded values are kept
    (:func:`trainer_cli.rundir.record.keep_linked`), not compared with a parse that cannot know them.

    Returns:
        ``(changes, config_text)``: one line per changed value (empty: nothing to rewrite).

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
    if old.get("ckpt_path") != new.get("ckpt_path"):
        changes.append(f"ckpt_path: {old.get('ckpt_path')} -> {new.get('ckpt_path')}")
    return changes, yaml.safe_dump(new, sort_keys=False) if changes else frozen


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
