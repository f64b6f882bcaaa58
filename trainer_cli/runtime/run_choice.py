"""Which directory a start of a run goes to and which checkpoint it resumes from (rules 1-3 of
:mod:`trainer_cli.runtime.run`), as :class:`trainer_cli.runtime.run.Run` applies
:mod:`trainer_cli.rundir.policy` to a LightningCLI run: the changes a resume makes listed (and
refused where they would not resume correctly), ``--ckpt_path last|best`` resolved to its file.
:func:`choose` returns what it chose as a value (:class:`Choice`), which the run applies."""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from jsonargparse import Namespace
from lightning.fabric.utilities.rank_zero import rank_zero_only

from trainer_cli.job import context as job_context
from trainer_cli.rundir import layout
from trainer_cli.rundir import policy as rundir
from trainer_cli.rundir.record import LAUNCHER_KEYS
from trainer_cli.rundir.resume import compare_for_resume, describe_overrides, stored_config
from trainer_cli.runtime.lightning_folders import DEFAULT_ROOT_DIR, lightning_log_root
from trainer_cli.runtime.run_record import in_form_of, pop_dotted

LIGHTNING_CHOICES = ("last", "best", "hpc", "registry")  # --ckpt_path values Lightning resolves itself


def is_checkpoint_file(ckpt_path: Optional[str]) -> bool:
    """Whether ``--ckpt_path`` names a local file (not ``last``/``best``/... nor a URL)."""
    return bool(ckpt_path) and ckpt_path not in LIGHTNING_CHOICES and "://" not in str(ckpt_path)


@dataclass(frozen=True)
class Choice:
    """Where a start of a run goes and what it resumes (:func:`choose`)."""

    path: Path | None
    """The run directory; None for a user's script's new run (Lightning's, bound when the Trainer is built)."""
    created: bool
    """Whether this start made it (only then is it ever removed)."""
    made_from: Path | None = None
    """The highest folder this start made (``path`` or above it)."""
    resumed_because: str | None = None
    """The rule that chose the checkpoint (:func:`trainer_cli.rundir.policy.resume_checkpoint`), for
    ``history.jsonl``."""
    changes: list[str] = field(default_factory=list)
    """The config changes this resume (or evaluation) makes (:mod:`trainer_cli.rundir.resume`)."""
    inexact: dict[str, int] | None = None
    """A resume that replays and skips data (:func:`_say_if_behind`), for ``history.jsonl``."""
    checked: str | None = None
    """A checkpoint file read whole to choose it (not checked again)."""


def choose(
    cfg: Namespace, trains: bool, follows_lightning: bool, tree: dict[str, Any] | None, link_targets: set[str]
) -> Choice:
    """Rules 1-3 of :mod:`trainer_cli.runtime.run` for the parsed ``cfg`` (its ``ckpt_path`` set to the
    checkpoint a resume loads). ``tree``: this start's config as dumped (compared with the run's record);
    ``link_targets``: the model keys links fill when the classes are built (not compared).

    Raises:
        UserError: for nothing to resume, or a change a resume refuses.
        SystemExit: 0 when ``--ckpt_path last`` names a finished run.
    """
    root = Path(cfg.trainer.get("default_root_dir") or DEFAULT_ROOT_DIR)
    name = cfg.name
    if follows_lightning:
        root, name = lightning_log_root(cfg)
    ckpt = cfg.get("ckpt_path")
    placed = rundir.plan(root, name, ckpt, cfg.run_dir, lightning_chooses=follows_lightning)  # rules 1-3
    if placed.path is None or not placed.existing:  # a new run (or Lightning's, bound later: bind_to_log_dir)
        return Choice(placed.path, placed.created, placed.made_from)
    run_dir, child = (
        placed.path,
        placed.kind == "inherited",
    )  # child: a DDP process launched by the rank that chose it
    # a --ckpt_path the run's config.yaml holds from its first start (not in a job: there it is train submit's
    # decision)
    carried = (
        trains
        and bool(ckpt)
        and not job_context.current().in_job
        and (stored_config(run_dir) or {}).get("ckpt_path") == ckpt
    )
    resume = rundir.resume_checkpoint(run_dir, ckpt, trains=trains, named=bool(cfg.run_dir), carried=carried)
    changes: list[str] = []
    if not child and (resume is not None or not trains):  # before anything is renamed
        stored, current = _comparable(tree, link_targets, run_dir)
        if not stored:
            changes = []
        elif trains:
            changes = compare_for_resume(stored, current, run_dir, force=bool(cfg.get("resume_force")))
            for change in changes:
                print(f"resume: {change} (changed since the run started)", flush=True)
        else:  # an evaluation of the run: what it gives otherwise is recorded (history.jsonl), not refused
            changes = describe_overrides(stored, current)
    if resume is None:
        return Choice(run_dir, placed.created, placed.made_from, None, changes)
    cfg.ckpt_path, inexact, checked = _checkpoint_of(trains, cfg, run_dir, resume, announce=not child)
    return Choice(run_dir, placed.created, placed.made_from, resume.why, changes, inexact, checked)


def _comparable(
    tree: dict[str, Any] | None, link_targets: set[str], run_dir: Path
) -> tuple[dict[str, Any] | None, dict[str, Any]]:
    """The run's stored record and this start's config, in forms to compare: the classes a script
    fixes as the stored form has them, the values links fill when the classes are built left out
    (the checkpoint's tensors decide those), and the launcher's keys left out where the run's record
    has none (a run a stock LightningCLI script started)."""
    current = copy.deepcopy(tree) if tree is not None else {}
    stored = in_form_of(current, stored_config(run_dir))  # a `train fit` run resumed by a script fixing classes
    for key in link_targets:
        for tree in (stored or {}, current):
            pop_dotted(tree, key)
    for key in LAUNCHER_KEYS:
        if stored is not None and key not in stored:
            current.pop(key, None)
    return stored, current


def _checkpoint_of(
    trains: bool, cfg: Namespace, run_dir: Path, resume: rundir.Resume, announce: bool
) -> tuple[str, dict[str, int] | None, str | None]:
    """The checkpoint ``resume`` loads (:func:`trainer_cli.rundir.policy.resume_checkpoint`): ``last``/``best``
    resolved to their file, a file as given; with how inexactly it resumes (:func:`_say_if_behind`) and
    the file read whole to choose it (None: not read). A finished run is not trained again (one line,
    exit 0); a chosen hpc checkpoint is retired; a damaged newest checkpoint passed over is named, and a
    training start behind the run's progress says how many steps it repeats."""
    if resume.which == "file":
        given = str(cfg.ckpt_path)
        local = is_checkpoint_file(given) and resume.path.is_file()
        start = layout.read_checkpoint_progress(resume.path) if local else None
        return given, _say_if_behind(trains, run_dir, start, announce), None
    if resume.which == "best":
        if announce:
            print(f"Using the best checkpoint of {run_dir}: {resume.path}", flush=True)
        inexact = _say_if_behind(trains, run_dir, layout.read_checkpoint_progress(resume.path), announce)
        return str(resume.path), inexact, None
    newest = resume.progress
    assert newest is not None  # read to choose it
    if trains:
        finished = rundir.finished_line(run_dir, newest, cfg.trainer.get("max_epochs"), cfg.trainer.get("max_steps"))
        if finished:
            print(finished, flush=True)
            raise SystemExit(0)
        # global rank 0 renames; the other ranks load it by its new name
        newest = layout.retire_hpc_checkpoints(run_dir, newest, rename=announce and rank_zero_only.rank == 0)  # type: ignore[attr-defined]
    if announce and rank_zero_only.rank == 0:  # type: ignore[attr-defined]
        for damaged in resume.skipped:
            print(f"{damaged} is damaged (truncated or corrupt): passed over for the newest complete checkpoint")
        doing = "Resuming" if trains else "Using the newest checkpoint of"
        print(
            f"{doing} {run_dir} from {newest.path} (step {newest.global_step}, {newest.epochs_done} epochs done)",
            flush=True,
        )
    inexact = _say_if_behind(trains, run_dir, newest, announce)
    return str(newest.path), inexact, str(newest.path)  # read (its progress) just now


def _say_if_behind(
    trains: bool, run_dir: Path, start: layout.RunCheckpoint | None, announce: bool
) -> dict[str, int] | None:
    """One line when a training start from ``start`` is behind the step the run reached
    (:func:`trainer_cli.rundir.policy.repeated_steps`): how many steps it trains again; one when it
    resumes inexactly (:attr:`trainer_cli.rundir.layout.RunCheckpoint.inexact_batches`: a plain
    ``DataLoader`` stopped mid-epoch), returned for ``history.jsonl`` (None: exact)."""
    batches = start.inexact_batches if trains and start is not None else 0
    inexact = None
    if batches:  # Lightning's epoch index (0-based), as the checkpoint's "epoch"
        assert start is not None
        inexact = {"epoch": start.epochs_done, "batches_replayed": batches, "batches_skipped": batches}
    if not (trains and announce and start is not None and rank_zero_only.rank == 0):  # type: ignore[attr-defined]
        return inexact
    if inexact:
        print(
            f"resume: inexact: stopped {batches} batch(es) into epoch {start.epochs_done + 1} and the training "
            f"DataLoader is not resumable (no state_dict/load_state_dict; torchdata's StatefulDataLoader is): "
            f"the epoch's data starts again from its beginning, so {batches} batch(es) of it are replayed and "
            f"{batches} skipped",
            flush=True,
        )
    repeats, reached = rundir.repeated_steps(run_dir, start)
    if repeats:
        print(
            f"resume: from step {start.global_step}, behind the run's progress (step {reached}): "
            f"it repeats {repeats} steps",
            flush=True,
        )
    return inexact
