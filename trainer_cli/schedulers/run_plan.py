"""A submitted run as every engine plans it, before anything engine-specific: the spec read from ``train
submit ARGS`` (:func:`spec`), where its runs go (:func:`locate`), and its run folder placed, its config
frozen and its resumption checked (:func:`place`, a :class:`RunPlan`).

The Slurm engine adds its options, the checks against the cluster, sizing and the sbatch scripts
(:func:`trainer_cli.schedulers.slurm.fit_job.plan`); the Ray engine its job and runtime environment
(:mod:`trainer_cli.schedulers.ray.submit`). Nothing here knows an engine's options.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from trainer_cli.config import spec as run_spec
from trainer_cli.config.before_parse import check_top_level_keys
from trainer_cli.config.keys import Layers
from trainer_cli.config.request import Request
from trainer_cli.config.spec import ParseFit, RunSpec
from trainer_cli.imports import heavy_import
from trainer_cli.rundir.discard import remove_made_folders
from trainer_cli.rundir.freezing import freeze
from trainer_cli.rundir.layout import CONFIG_FILE
from trainer_cli.rundir.policy import finished_line, resume_checkpoint
from trainer_cli.rundir.policy import plan as rundir_plan
from trainer_cli.rundir.resume import stored_config
from trainer_cli.schedulers import resubmission
from trainer_cli.schedulers.script_entry import ScriptEntry, script_entry, script_job_name


def parse_fit(cli: Any = None) -> ParseFit:
    """The launcher's parse of ``train fit ARGS`` (or that of a user's TrainerCLI ``cli``: its
    class with its constructor arguments); Lightning is imported when it parses, not before
    (``train submit --help`` answers without it)."""

    def parse(fit_args: Request, layers: Layers) -> tuple[Any, Any]:
        if cli is None:  # (a user's CLI may add keys of its own) before Lightning's import, as `train fit`
            check_top_level_keys("fit", fit_args, layers)
        with heavy_import():
            from trainer_cli.runtime.verbs import parse_config

        return parse_config("fit", fit_args, expand=False, cli=cli, layers=layers)

    return parse


def script_verb(cli: tuple[type, tuple[Any, ...], dict[str, Any]]) -> str:
    """The verb a user's script's job runs it with: ``fit``, or none for a script built with
    LightningCLI's ``run=False`` (``python main.py --config ...``)."""
    from trainer_cli.runtime.script import script_has_verbs

    return "fit" if script_has_verbs(*cli) else ""


def spec(
    request: Request,
    section: str,
    cli: Any = None,
    fixed: Mapping[str, type] | None = None,
    check_engine: Callable[[list[Any]], object] | None = None,
) -> RunSpec:
    """The run ``train submit ARGS`` asks for (:func:`trainer_cli.config.spec.build`), parsed by the launcher's
    LightningCLI or by a user's TrainerCLI ``cli`` (its class with its constructor arguments; ``fixed``: the
    sections whose class it fixes), whose job runs its verb. ``section``: the engine's own options in the
    config files, taken out before the parse (``slurm``); ``check_engine`` reads them first.

    Raises:
        UserError: for a bad config file, a bad engine section or a config the parse refuses.
    """
    verb = script_verb(cli) if cli is not None else "fit"
    return run_spec.build(request, parse_fit(cli), section, fixed, verb, check_engine=check_engine)


def instantiate_links(parser: Any) -> frozenset[str]:
    """The keys of ``parser``'s links applied when the classes are built (the user's and the launcher's
    data->model links: ``TrainerArgumentParser.link_arguments``), as the verb's config names them."""
    from trainer_cli.config.explain import without_verb

    return frozenset(without_verb(t) for t in getattr(parser, "instantiate_link_targets", ()))


@dataclass(frozen=True)
class Location:
    """Where a submitted run's runs go: ``<root>/<name>/version_<N>``, or for a user's script its
    logger's folders (``identity``: W&B's run id, chosen now)."""

    root: Path
    """``trainer.default_root_dir`` (or the script's logger's save folder): the registry of ``train jobs`` is there."""
    name: str
    """The experiment's name (``name``, or the script's logger's)."""
    identity: Any = None
    """A script's logger's identity (:func:`trainer_cli.runtime.lightning_folders.lightning_identity`), else None."""
    run_dir: str | None = None
    """The run folder the submission names (``--run_dir``), or the submitted run it resubmits into."""


def locate(spec: RunSpec, script: str | None = None) -> Location:
    """Where the run ``spec`` goes; a submission of ``--config <run>/config.yaml`` of a submitted run goes
    into that run (:attr:`Location.run_dir`)."""
    config = spec.config
    run_dir = config.get("run_dir")
    if not run_dir:  # `train submit --config <run>/config.yaml`: a resubmission into that run
        resubmitted = resubmission.submitted_run(spec.request.values("config"))
        run_dir = str(resubmitted) if resubmitted is not None else run_dir
    from trainer_cli.runtime.lightning_folders import (  # (after parse)
        DEFAULT_ROOT_DIR,
        lightning_identity,
        lightning_log_root,
    )

    if script:  # where `python main.py fit` puts the script's runs: its logger's <save_dir>/<name>/version_<N>
        root, name = lightning_log_root(config)
        return Location(Path(root), name, lightning_identity(config), run_dir)
    return Location(Path(config.trainer.default_root_dir or DEFAULT_ROOT_DIR), config.name, None, run_dir)


def default_job_name(spec: RunSpec, script: str | None = None) -> str:
    """A job's name unless its engine's options give one: the experiment's, or after a user's script's runs."""
    return script_job_name(spec.config, Path(script)) if script else spec.config.name


@dataclass
class RunPlan:
    """A submitted run placed: its run folder (allocated unless a dry run), frozen config and what its job
    runs, before an engine renders or queues anything."""

    run_dir: Path
    """The run directory (absolute); not yet created for a dry run."""
    created: bool
    """Whether :func:`place` created ``run_dir`` (so a failed submission removes it)."""
    frozen_config: str
    """``<run>/config.yaml``: the resolved fit config (``run_dir`` unset: the job names its folder); for a
    resubmission into an existing run, the job's own input instead
    (:data:`trainer_cli.schedulers.resubmission.JOB_CONFIG`)."""
    root: Path
    """``trainer.default_root_dir``: the registry of ``train jobs`` lives there."""
    job_name: str
    changes: list[str]
    """Resubmission into an existing run: one line per value its config.yaml changes in."""
    finished: str | None = None
    """Resubmission into a run that already reached its ``max_epochs``/``max_steps``: the line
    saying so (:func:`trainer_cli.rundir.policy.finished_line`); such a job would start only to exit."""
    entry: ScriptEntry | None = None
    """A user's script (``python main.py submit``): which file the job runs."""
    made_from: Path | None = None
    """The highest folder the plan made for ``run_dir`` (:attr:`trainer_cli.rundir.policy.Placement.made_from`)."""
    notes: list[str] = field(default_factory=list)
    """What the plan says before the job (the sizing block, ``resubmit: into the newest run``), one
    line each: printed as it plans, unless told not to (a render)."""
    resubmitted: bool = False
    """Whether the run existed with its ``config.yaml`` (a resubmission): its job reads its own input,
    :data:`trainer_cli.schedulers.resubmission.JOB_CONFIG`, not the run's record."""
    _restore: Callable[[], None] | None = field(default=None, repr=False)

    @property
    def job_config(self) -> Path:
        """The config file the job's ``fit`` reads (``--config``): the run's ``config.yaml``, or a
        resubmission's ``job_config.yaml``."""
        return self.run_dir / (resubmission.JOB_CONFIG if self.resubmitted else CONFIG_FILE)

    def freeze(self) -> None:
        """Write what the job reads (:attr:`job_config`): a new run's frozen ``config.yaml`` and ``git.txt``
        (:func:`trainer_cli.rundir.freezing.freeze`), or a resubmission's job input
        (:func:`trainer_cli.schedulers.resubmission.write_job_config`; :meth:`discard` puts the earlier one back)."""
        freeze(self.run_dir, self.frozen_config)
        if self.resubmitted:
            self._restore = resubmission.write_job_config(self.run_dir, self.frozen_config)

    def print_changes(self) -> None:
        """Say, once the job is queued, what a resubmission changes (one ``resubmit:`` line each) and when."""
        for change in self.changes:
            print(f"resubmit: {change}")
        if self.changes:
            print(
                f"resubmit: the job's start writes these into {self.run_dir / CONFIG_FILE}, as a resume does (the "
                "current one kept as config.prev-<N>.yaml)"
            )

    def discard(self) -> None:
        """Undo the plan of a refused submission: remove the run directory :func:`place` created, and the
        folders it made above it where that leaves them empty; in a run that existed, only the job input
        :meth:`freeze` wrote (the earlier one back): the run is left as it was."""
        if self._restore is not None:
            self._restore()
            self._restore = None
        discard(self.run_dir if self.created else None, self.made_from)


def discard(run_dir: Path | None, made_from: Path | None) -> None:
    """Remove ``run_dir`` (None: nothing), then the folders its plan made above it (up to ``made_from``) left
    empty (:func:`trainer_cli.rundir.discard.remove_made_folders`)."""
    if run_dir is None:
        return
    shutil.rmtree(run_dir, ignore_errors=True)  # (the snapshot's links to live data are removed, not followed)
    if made_from is not None:
        remove_made_folders(run_dir, made_from)


def place(
    spec: RunSpec,
    where: Location,
    dry_run: bool,
    job_name: str,
    script: str | None = None,
    snapshot_off: str | None = None,
    note: Callable[[str], None] = print,
) -> RunPlan:
    """Place the run ``spec`` under ``where`` (:func:`locate`): its run directory (allocated unless
    ``dry_run``, as ``train fit`` would place it: a new version, the newest run with ``ckpt_path``, or the
    folder it names), the resumption its job's first start will make checked now, its config frozen and,
    resubmitted into an existing run, the values that change. With ``script`` (a user's script with
    TrainerCLI) the job runs that script (its copy in the code snapshot; ``snapshot_off``: the engine's option
    that turned it off, None where on) with the spec's verb. ``note`` takes the plan's lines (``resubmit: into
    the newest run``).

    Raises:
        UserError: for a run folder or checkpoint the run cannot use, or a resubmission that changes what
            cannot change (nothing is left on disk).
    """
    parser, config = spec.parser, spec.config
    ckpt = config.get("ckpt_path")
    placed = rundir_plan(
        where.root, where.name, ckpt, where.run_dir, submitting=True, dry_run=dry_run, identity=where.identity
    )
    run_dir, created = placed.path, placed.created
    assert run_dir is not None  # (Lightning chooses only a user's script's run it starts itself)
    run_dir = run_dir.absolute()
    if placed.kind == "resumed":  # as `train fit`: the newest run of the experiment
        note(f"resubmit: into the newest run of {where.name!r}: {run_dir}")
    # resubmitting into an existing run (resume in place): the job's first start resolves its
    # checkpoint by the same rule (rundir.resume_checkpoint); say now if it cannot
    if placed.existing:
        carried = bool(ckpt) and (stored_config(run_dir) or {}).get("ckpt_path") == ckpt  # from its config.yaml
        resume = resume_checkpoint(run_dir, ckpt, in_job=True, carried=carried)
    else:
        resume = None
    try:
        config.run_dir = None  # the job names its folder (--run_dir): the run's config.yaml starts a new run elsewhere
        frozen = parser.dump(config, skip_none=False, skip_link_targets=False)  # as config.yaml records a run
        entry = None
        if script:  # a user's script with TrainerCLI (`python main.py submit`): the job runs it (its snapshot copy)
            module = spec.request.module  # `python -m pkg.train submit`
            entry = replace(script_entry(Path(script), snapshot_off, run_dir, Path.cwd()), module=module)
        changes, frozen = (
            resubmission.config_changes(run_dir, frozen, resume, spec.fixed.get("model"), instantiate_links(parser))
            if not created
            else ([], frozen)
        )
        finished = None
        if resume is not None and resume.progress is not None:
            trainer = config.trainer
            finished = finished_line(run_dir, resume.progress, trainer.get("max_epochs"), trainer.get("max_steps"))
    except BaseException:
        discard(run_dir if created else None, placed.made_from)
        raise
    resubmitted = not created and (run_dir / CONFIG_FILE).is_file()
    return RunPlan(
        run_dir, created, frozen, where.root, job_name, changes, finished, entry, placed.made_from,
        resubmitted=resubmitted,
    )  # fmt: skip
