"""A run's directory, from plan to discard: the one place of the policy.

Every verb that starts a run goes through this module: ``train fit``, ``validate``/``test``/
``predict`` (``--run_dir``, ``--ckpt_path last|best``), ``train submit`` (new, resubmitted, dry run),
each sweep trial, each ``train cv`` fold, and the batch scripts (``slurm/ddp.sbatch.j2`` runs
``train fit --config <run>/config.yaml`` at every start of the job, requeues included;
``slurm/test.sbatch.j2`` runs ``train test --ckpt_path best``). The steps, in order:

1. **Plan** (:func:`plan`): where the start goes. A new run gets
   ``<trainer.default_root_dir>/<name>/version_<N>``, made atomically (``mkdir``), never reused
   (:func:`allocate`; :func:`next_dir` for a dry run); ``--run_dir`` names an existing one (a
   submitted job, a resubmission, a sweep trial ``<name>/sweep_<N>/trial_<i>``, a cv fold
   ``<cv dir>/fold_<i>``); ``--ckpt_path last|best`` alone takes the newest run of ``<name>`` with a
   checkpoint (:func:`resumable_run`). Every rank agrees on one directory: the process that
   chose it exports ``TRAINER_CLI_RUN_DIR`` for the DDP processes Lightning launches from it, and
   ranks the scheduler started together (several tasks of a job, no ``--run_dir``:
   :attr:`trainer_cli.job.context.JobContext.multi_task`) share ``job_<job id>``.
2. **Resume** (:func:`resume_checkpoint`): which checkpoint the start loads, and why. **A requeued
   or restarted job resumes from its run's newest complete checkpoint by global step**
   (``checkpoints/last.ckpt`` or ``hpc_ckpt_<N>.ckpt``), whatever ``--ckpt_path`` it was submitted
   with, once it saved one; the hpc ones are then retired
   (:func:`trainer_cli.rundir.layout.retire_hpc_checkpoints`). A run
   that already reached ``max_epochs``/``max_steps`` is not trained again (:func:`finished_line`).
   What may change on resume is :mod:`trainer_cli.rundir.resume`'s to decide.
3. **Freeze** (:func:`freeze`): ``config.yaml`` (the resolved config, atomically) and ``git.txt``
   at the run's first start (``git.txt`` into a directory that existed before too: :func:`record_code`);
   a later start that changes the config keeps the earlier one as
   ``config.prev-<N>.yaml``, and every start is one line of ``history.jsonl``
   (:mod:`trainer_cli.rundir.history`, written by global rank 0 when the verb starts). The writing is
   :mod:`trainer_cli.rundir.freezing`'s (re-exported here).
4. **Discard** (:mod:`trainer_cli.rundir.discard`): a directory a start made is removed again when it
   fails or is stopped before it trained a step or saved a checkpoint, and the folders above it that
   the start made and that are left empty; nothing a run saved is ever
   removed, and a run that trained is kept whatever stopped it
   (:meth:`trainer_cli.runtime.run.Run.remove_if_untrained`).

The file names of a run directory and the readers of its checkpoints are
:mod:`trainer_cli.rundir.layout` (re-exported here). The Lightning-facing part of a run (its loggers,
callbacks, the checkpoint on SIGTERM, the exit codes) is :class:`trainer_cli.runtime.run.Run`, which calls
this module; a job's restarts and their cap are :mod:`trainer_cli.job.jobstate`'s.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trainer_cli.errors import UserError
from trainer_cli.job import context as job_context
from trainer_cli.rundir import history, metrics
from trainer_cli.rundir.identity import RUN_FILE, write_identity
from trainer_cli.rundir.layout import (
    ENV_RUN_DIR,
    HPC_PATTERN,
    LAST_CKPT,
    VERSION_PREFIX,
    RunCheckpoint,
    best_checkpoint,
    best_score,
    damaged_checkpoints,
    newest_checkpoint,
    saved_checkpoints,
)


# -- 1. plan: where a start of a run goes -----------------------------------------------------------
def experiment_dir(root: Path, name: str) -> Path:
    """``root/name``, the folder of an experiment's runs.

    Raises:
        UserError: for a name that would leave ``root`` (absolute, or a ``..`` part) or is empty.
    """
    parts = Path(name).parts
    if not name.strip() or Path(name).is_absolute() or ".." in parts or any(c in name for c in "\0\n\r"):
        raise UserError(
            f"--name {name!r}: an experiment name is a folder inside --trainer.default_root_dir {root}: "
            "no absolute path, no '..', not empty (e.g. --name cifar10_sweep)"
        )
    return root / name


def _versions(parent: Path, prefix: str = VERSION_PREFIX) -> list[tuple[int, Path]]:
    found = []
    if parent.is_dir():
        for child in parent.iterdir():
            match = re.fullmatch(rf"{prefix}(\d+)", child.name)
            if match and child.is_dir():
                found.append((int(match.group(1)), child))
    return sorted(found)


def next_dir(root: Path, name: str, prefix: str = VERSION_PREFIX) -> Path:
    """The directory :func:`allocate` would create next, without creating it (for a dry run)."""
    versions = _versions(experiment_dir(root, name), prefix)
    return root / name / f"{prefix}{versions[-1][0] + 1 if versions else 0}"


def allocate(root: Path, name: str, prefix: str = VERSION_PREFIX, version: str | None = None) -> Path:
    """Create and return a new ``root/name/<prefix>N`` (N one past the highest; ``version_N`` by
    default, ``sweep_N`` for a sweep), or ``root/name/<version>`` (a run id: new, never reused);
    race-free (mkdir is atomic)."""
    parent = experiment_dir(root, name)
    try:
        parent.mkdir(parents=True, exist_ok=True)
    except OSError as err:  # read-only, a file in the way, a full disk
        raise UserError(
            f"cannot create the run directory under --trainer.default_root_dir {root}: {parent}: "
            f"{err.strerror or err}; "
            "choose a writable folder with --trainer.default_root_dir DIR"
        ) from None
    versions = _versions(parent, prefix)
    n = versions[-1][0] + 1 if versions else 0
    while True:
        candidate = parent / (version or f"{prefix}{n}")
        try:
            candidate.mkdir(exist_ok=False)
            return candidate
        except FileExistsError:
            if version:  # a run id is never reused
                raise UserError(f"the run directory {candidate} exists already: it belongs to another run") from None
            n += 1
        except OSError as err:
            raise UserError(
                f"cannot create the run directory {candidate}: {err.strerror or err}; "
                "choose a writable folder with --trainer.default_root_dir DIR"
            ) from None


def shared_run_dir(root: Path, name: str) -> Path | None:
    """``root/name/job_<job id>`` when this process is one of several tasks the scheduler started together
    (:attr:`trainer_cli.job.context.JobContext.multi_task`)."""
    job = job_context.current()
    return experiment_dir(root, name) / f"job_{job.job_id}" if job.multi_task else None


@dataclass(frozen=True)
class Placement:
    """Where a start of a run goes (:func:`plan`)."""

    path: Path | None
    """The run directory; None for a user's script's new run (Lightning's ``log_dir``, known once the Trainer is
    built)."""
    created: bool
    """Whether :func:`plan` made it (only then is it ever removed: :mod:`trainer_cli.rundir.discard`)."""
    kind: str
    """``inherited``, ``named``, ``resumed``, ``shared``, ``new``, ``dry-run`` or ``lightning`` (the rules of
    :func:`plan`)."""
    made_from: Path | None = None
    """The highest folder :func:`plan` made for it (``path`` or a folder above it, absolute); None when it made
    none. A discarded start removes the ones left empty (:func:`trainer_cli.rundir.discard.remove_made_folders`)."""

    @property
    def existing(self) -> bool:
        """Whether the start goes into a run that may exist already (its checkpoint: :func:`resume_checkpoint`)."""
        return self.kind in ("inherited", "named", "resumed")


def plan(
    root: Path,
    name: str,
    ckpt_path: str | None,
    run_dir: str | Path | None,
    submitting: bool = False,
    dry_run: bool = False,
    lightning_chooses: bool = False,
    identity: dict[str, Any] | None = None,
) -> Placement:
    """Where a start of a run goes, the first rule that applies:

    1. ``inherited``: ``TRAINER_CLI_RUN_DIR`` (a DDP process launched by the rank that chose);
    2. ``named``: ``--run_dir`` (a resume in place, a submitted job's every start, a resubmission,
       a sweep trial, whose frozen config names its directory, a cv fold);
    3. ``resumed``: ``--ckpt_path last|best`` alone: the newest run of ``name`` with a checkpoint
       (:func:`resumable_run`);
    4. ``shared``: tasks the scheduler started together: ``<name>/job_<job id>``;
    5. ``dry-run``: the next ``version_<N>``, not created (``train submit --dry-run``);
    6. ``lightning``: a user's script's new run: Lightning's ``log_dir`` (``path`` None);
    7. ``new``: a new ``version_<N>``, created atomically, never reused (:func:`allocate`), or
       ``<name>/<version>`` where the run's logger names its folder (W&B's run id).

    Args:
        submitting: ``train submit`` plans a job's run from the submitting machine (rules 1 and 4
            are the job's own, not this process's).
        identity: A new run's identity where its logger names its folder by the run id (a user's
            script's W&B logger: ``<save_dir>/<project>/<run id>``, where Lightning's ModelCheckpoint
            saves): the run goes to ``root/name/<run id>`` and its ``run.json`` is written now (the job
            logs under that id); None: the next ``version_<N>``.

    Raises:
        UserError: for a bad ``name``, an unwritable root, or nothing to resume (rule 3).
    """
    if run_dir is not None and not str(run_dir).strip():
        raise UserError(
            "--run_dir is empty: give the run directory to use (e.g. --run_dir runs/run/version_0), "
            "or leave --run_dir out (with --ckpt_path last: the newest run)"
        )
    inherited = None if submitting else os.environ.get(ENV_RUN_DIR)
    if inherited or run_dir:
        return Placement(Path(inherited or str(run_dir)), False, "inherited" if inherited else "named")
    if ckpt_path in RUN_CHOICES:
        return Placement(resumable_run(root, name, ckpt_path), False, "resumed")
    shared = None if submitting else shared_run_dir(root, name)
    if shared is not None:
        return Placement(shared, False, "shared")
    version = identity["run_id"] if identity else None
    if dry_run:
        return Placement(experiment_dir(root, name) / version if version else next_dir(root, name), False, "dry-run")
    if lightning_chooses:
        return Placement(None, False, "lightning")
    made = first_missing(experiment_dir(root, name))
    path = allocate(root, name, version=version)
    if identity:
        write_identity(path, identity)
    return Placement(path, True, "new", made or path.absolute())


# -- 2. resume: which checkpoint a start loads, and why ---------------------------------------------
RUN_CHOICES = ("last", "best")  # --ckpt_path values that name a checkpoint of a run


def test_after_fit_args(config: str | Path) -> list[str]:
    """``train``'s arguments of the test that follows a fit, locally (``train fit --test_after_fit``) and
    in a Slurm job (``--slurm.test_after_fit``'s test job): ``test`` with the run's ``config`` on its best
    checkpoint (``--ckpt_path best``, :func:`resume_checkpoint`), on one device: a test spread over
    several ranks repeats samples to give each the same number (Lightning's DistributedSampler). The run is
    the config's folder (``--run_dir``): the record names none."""
    return [
        "test", "--config", str(config), "--run_dir", str(Path(config).parent), "--ckpt_path", "best",
        "--trainer.num_nodes", "1", "--trainer.devices", "1", "--trainer.strategy", "auto",
    ]  # fmt: skip


@dataclass(frozen=True)
class Resume:
    """The checkpoint a start of a run loads (:func:`resume_checkpoint`), and why."""

    path: Path
    """The checkpoint file."""
    which: str
    """``last``, ``best`` or ``file`` (``--ckpt_path`` as given: a file, a URL, or a name Lightning
    resolves itself, ``hpc`` or ``registry``)."""
    why: str
    """The rule that chose it, one line (recorded in ``history.jsonl``)."""
    progress: RunCheckpoint | None = None
    """Its global step and epochs done (read to choose a ``last``)."""
    skipped: tuple[Path, ...] = ()
    """The run's resume checkpoints a ``last`` passed over: there but damaged (truncated, corrupt)."""


def resume_checkpoint(
    run_dir: Path,
    ckpt_path: str | None,
    trains: bool = True,
    named: bool = True,
    in_job: bool | None = None,
    carried: bool = False,
) -> Resume | None:
    """Which checkpoint a start of the run in ``run_dir`` loads, and why; None when it loads none
    (a new run; an evaluation of the config's own weights). Every start uses this rule: ``train
    fit``, ``train validate|test|predict --run_dir``, ``train submit --ckpt_path last|best`` (checked
    on the submitting machine), the batch script's ``train fit`` in a started, requeued or
    resubmitted job, and the test job after a fit (``slurm/test.sbatch.j2``: ``--ckpt_path best``).

    The rules, in order:

    0. **A --ckpt_path FILE|best carried over** from the run's own ``config.yaml`` (``train fit
       --run_dir R``, ``train submit --config R/config.yaml``: the run's first start took it) counts
       only while the run has saved nothing; once it holds a checkpoint, the start is one without
       ``--ckpt_path`` (rule 1), so a run never goes back to where it started.
    1. **A trained run, no --ckpt_path** (a ``--run_dir`` that holds a checkpoint, a start that
       trains): inside a job its newest checkpoint, as ``last`` (a requeued, restarted or
       resubmitted job continues; a run never goes back); elsewhere refused (a run directory is
       never reused).
    2. **A restarted job (requeued on its scheduler's signal) that started from --ckpt_path FILE|best** (a requeue, or a
       resubmission by the job itself) whose run saved a checkpoint since ``train submit`` queued
       it (:func:`restarted_past`): ``last``, not the ``--ckpt_path`` again.
       **An evaluation (validate, test, predict) of a trained run, no --ckpt_path**: its ``best``
       checkpoint, or ``last`` when no ``ModelCheckpoint`` with a monitor saved one (never the
       config's untrained weights).
    3. ``last``: the complete checkpoint with the highest saved global step, ``checkpoints/last.ckpt``,
       an ``hpc_ckpt_<N>.ckpt`` saved on the requeue signal (a consumed ``.used`` one included: a run that
       crashed right after resuming from it has it as its newest state) or any other callback's file in ``checkpoints/``
       holding the training state (a stock LightningCLI run's ``epoch=N-step=M.ckpt``); on equal steps
       the run's own. A damaged one (a ``last.ckpt`` cut short) is passed over (:attr:`Resume.skipped`). Once chosen,
       the hpc ones are retired (:func:`trainer_cli.rundir.layout.retire_hpc_checkpoints`), so Lightning
       never loads a stale one.
    4. ``best``: the best monitored score of the run's ``ModelCheckpoint`` (:func:`best_checkpoint`); where
       no ``ModelCheckpoint`` monitors a metric, its latest file (Lightning's ``best_model_path``), said so.
    5. A file: that file (a URL, Lightning's ``hpc`` or ``registry``: passed on as given).

    Args:
        run_dir: The run directory.
        ckpt_path: ``--ckpt_path`` as given (None, ``last``, ``best`` or a file).
        trains: Whether the start trains (``fit``); rules 0-2 but the evaluation's apply to training only.
        named: Whether ``--run_dir`` named the directory (rules 1 and 2 apply to a named run only:
            a DDP process launched into a new run inherits the directory, not its rules).
        in_job: Whether this start is a job's (default: :func:`trainer_cli.job.context.current`'s
            :attr:`~trainer_cli.job.context.JobContext.in_job`); ``train submit`` plans a job's start.
        carried: Whether ``ckpt_path`` is the one the run's ``config.yaml`` held before this start
            (rule 0). Not in a job's own start: there ``config.yaml`` holds what ``train submit``
            decided by this rule.

    Raises:
        UserError: for rule 1 outside a job, or ``last``/``best`` with no such checkpoint in ``run_dir``.
    """
    in_job = job_context.current().in_job if in_job is None else in_job
    if named and trains and carried and ckpt_path not in (None, "last") and newest_checkpoint(run_dir) is not None:
        ckpt_path = None  # rule 0: the first start's --ckpt_path, not this one's
    why = f"--ckpt_path {ckpt_path}"
    if named and trains and not ckpt_path and newest_checkpoint(run_dir) is not None:
        if not in_job:
            raise UserError(
                f"--run_dir {run_dir} already holds a trained run (a checkpoint); a run directory is never "
                "reused: add --ckpt_path last to resume it, or drop --run_dir to start a new run"
            )
        ckpt_path, why = "last", "a job in its trained run continues from its newest checkpoint"
    elif named and trains and ckpt_path and restarted_past(run_dir):
        ckpt_path, why = "last", f"a restarted job goes on from what it saved, not from --ckpt_path {ckpt_path}"
    elif named and not trains and not ckpt_path:  # an evaluation of a trained run: its weights, not the config's
        best = best_checkpoint(run_dir)  # (reads the newest checkpoint once)
        if best is not None:
            return Resume(
                best,
                "best",
                "an evaluation of a trained run without --ckpt_path uses its best checkpoint: the best monitored score",
            )
        if newest_checkpoint(run_dir) is not None:
            ckpt_path, why = "last", "an evaluation of a trained run without --ckpt_path uses its last checkpoint"
    if not ckpt_path:
        return None
    if ckpt_path == "best":
        best = best_checkpoint(run_dir)
        if best is None:
            raise UserError(
                f"--ckpt_path best: {run_dir} has no best checkpoint (no ModelCheckpoint with a monitor saved one); "
                "use --ckpt_path last or give a checkpoint file"
            )
        if best_score(run_dir) is None:  # Lightning's best_model_path of a ModelCheckpoint without a monitor
            return Resume(best, "best", why + ": no ModelCheckpoint of the run monitors a metric, so its latest file")
        return Resume(best, "best", why + ": the best monitored score")
    if ckpt_path == "last":
        newest = newest_checkpoint(run_dir)
        damaged = tuple(damaged_checkpoints(run_dir))
        if newest is None and damaged:
            raise UserError(
                f"--ckpt_path last: {run_dir} holds no complete checkpoint: "
                + ", ".join(str(f.relative_to(run_dir)) for f in damaged)
                + " is damaged (truncated or corrupt) and no other checkpoint of the run is complete; "
                "give a checkpoint file, or drop --ckpt_path to start it again"
            )
        if newest is None:
            raise UserError(
                f"--ckpt_path last: {run_dir} holds no complete checkpoint; nothing to resume (no {LAST_CKPT}, "
                f"{HPC_PATTERN} or other checkpoint with the training state; drop --ckpt_path to start it again)"
            )
        why += ": the newest complete checkpoint by global step"
        if damaged:
            why += " (" + ", ".join(str(f.relative_to(run_dir)) for f in damaged) + " damaged: passed over)"
        return Resume(newest.path, "last", why, newest, damaged)
    return Resume(Path(ckpt_path), "file", why)


def repeated_steps(run_dir: Path, start: RunCheckpoint) -> tuple[int, int]:
    """How far behind the run's progress a start from ``start`` is: ``(steps it repeats, the furthest
    step the run reached)``, ``(0, ...)`` when it starts where the run got to. The run's progress is the
    highest global step of every complete checkpoint it saved (its ``last.ckpt`` and Slurm ones, and
    any callback's in ``checkpoints/``: :func:`trainer_cli.rundir.layout.saved_checkpoints`), of the
    checkpoints its earlier starts loaded (``history.jsonl``) and of its own metrics record
    (:func:`trainer_cli.rundir.metrics.recorded`: the step a damaged ``last.ckpt`` held)."""
    steps = [c.global_step for c in saved_checkpoints(run_dir)]
    steps += [int(r.get("global_step") or 0) for r in history.read(run_dir) if r.get("verb") in ("fit", None)]
    steps.append(metrics.recorded(run_dir).steps)
    reached = max(steps, default=0)
    return max(reached - start.global_step, 0), reached


def resumable_run(root: Path, name: str, which: str) -> Path:
    """The run ``--ckpt_path last|best`` without ``--run_dir`` resumes: the newest
    ``root/name/version_N`` (or ``root/name/<run id>``) holding a complete checkpoint.

    Raises:
        UserError: when no run of ``name`` has one.
    """
    found = newest_resumable(root, name)
    if found is None:
        raise UserError(
            f"--ckpt_path {which}: no run of {name!r} under {root} has a checkpoint ({LAST_CKPT} or {HPC_PATTERN}); "
            "start one without --ckpt_path first, or give a checkpoint file"
        )
    return found


def newest_resumable(root: Path, name: str) -> Path | None:
    """The newest ``root/name/version_N`` holding a complete resumable checkpoint, if any; where the runs
    of ``name`` are named by their run id (a user's script's W&B runs, ``<project>/<run id>``), the newest
    by its ``run.json`` (written at its first start)."""
    parent = experiment_dir(root, name)
    runs = [run for _, run in _versions(parent)]
    if not runs and parent.is_dir():
        by_id = [(identity.stat().st_mtime_ns, identity.parent) for identity in parent.glob(f"*/{RUN_FILE}")]
        runs = [run for _, run in sorted(by_id)]
    for run in reversed(runs):
        if newest_checkpoint(run) is not None:
            return run
    return None


def restarted_past(run_dir: Path) -> bool:
    """Whether this is a restart of the job of ``run_dir`` that its scheduler requeues on a signal (a
    requeue or resubmission, not its first start) and the run holds a checkpoint written since ``train
    submit`` queued it: the job started from its ``--ckpt_path`` before, and resumes from what it saved since."""
    from datetime import datetime

    from trainer_cli.job import jobstate, requeue_signal

    if not requeue_signal.expected() or jobstate.policy().count == 0:
        return False
    newest = newest_checkpoint(run_dir)
    submitted = jobstate.read(run_dir).get("submitted")
    try:
        return (
            newest is not None
            and bool(submitted)
            and newest.path.stat().st_mtime >= datetime.fromisoformat(str(submitted)).timestamp()
        )
    except (OSError, ValueError):
        return False


def finished_line(
    run_dir: Path, checkpoint: RunCheckpoint, max_epochs: int | None, max_steps: int | None
) -> str | None:
    """One line when ``checkpoint`` already reached ``max_epochs`` or ``max_steps`` (the trainer's), or
    is past them (a resume that lowers them): a resume has nothing to train; None when it has."""
    epochs = 1000 if max_epochs is None and max_steps in (None, -1) else max_epochs  # 1000: Lightning's default
    done = (epochs is not None and epochs != -1 and checkpoint.epochs_done >= epochs) or (
        max_steps is not None and max_steps != -1 and checkpoint.global_step >= max_steps
    )
    if not done:
        return None
    past = (epochs is not None and epochs != -1 and checkpoint.epochs_done > epochs) or (
        max_steps is not None and max_steps != -1 and checkpoint.global_step > max_steps
    )
    if past:  # a resume that lowered the limit below what the run trained
        return (
            f"{run_dir} is already past max_epochs={max_epochs}, max_steps={max_steps} (it trained "
            f"{checkpoint.epochs_done} epochs, step {checkpoint.global_step}): nothing to train, and a resume never "
            "takes a run back. Pass a larger --trainer.max_epochs (or max_steps) to continue it, or start a new run."
        )
    return (
        f"{run_dir} is finished ({checkpoint.epochs_done} epochs, step {checkpoint.global_step}; "
        f"max_epochs={max_epochs}, max_steps={max_steps}): nothing to train. "
        "Pass a larger --trainer.max_epochs (or max_steps) to continue it."
    )


def first_missing(folder: Path) -> Path | None:
    """The highest of ``folder`` and the folders above it that does not exist yet (what making
    ``folder`` with its parents creates), absolute; None when ``folder`` exists."""
    folder = Path(folder).absolute()
    if folder.exists():
        return None
    top = folder
    for parent in folder.parents:
        if parent.exists():
            break
        top = parent
    return top
