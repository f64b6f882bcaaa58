"""The files of a run directory: their names, and its checkpoints read back.

The layout of ``<trainer.default_root_dir>/<name>/version_<N>/`` (the policy that chooses, fills
and removes it: :mod:`trainer_cli.rundir.policy`)::

    config.yaml           the resolved config (CONFIG_FILE): `train fit --config <it>` builds the run again
    launcher.yaml         the launcher's own settings, read with config.yaml (trainer_cli.rundir.record)
    config.prev-<N>.yaml  earlier ones as they were, kept when a resume changed the config (trainer_cli.rundir.history),
    launcher.prev-<N>.yaml  each with its launcher.yaml
    git.txt               the git commit of the code and of the working directory (GIT_FILE)
    history.jsonl         one record per start of the run (trainer_cli.rundir.history.HISTORY_FILE)
    run.json              the run id every logger logs under (trainer_cli.rundir.identity.RUN_FILE)
    metrics.jsonl         the metrics the run logged, one line per validation and epoch end (METRICS_FILE)
    summary.json          what the listings read, kept with the files it came from (trainer_cli.rundir.summary)
    attempts/rank<N>.jsonl  where each start of each rank spent its time, its peak memory (trainer_cli.rundir.attempts)
    checkpoints/last.ckpt written after every epoch and on SIGTERM / Ctrl-C (LAST_CKPT)
    checkpoints/resume.ckpt  the same, where a user's callback writes last.ckpt (RESUME_CKPT: save_last)
    hpc_ckpt_<N>.ckpt     saved on a Slurm SIGUSR1 (HPC_PATTERN); ``.used`` once a resume took it
    job.json, submit.sbatch, slurm-<job>.log   a submitted run's (trainer_cli.job.jobstate, sbatch)
    job_config.yaml       a resubmitted run's job reads it (trainer_cli.schedulers.resubmission.JOB_CONFIG)
    .live.<host>.<pid>    held by each train process writing into the run, removed at its exit (trainer_cli.rundir.live)

Reading a checkpoint here is cheap (memory-mapped, weights only) and never builds anything.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import os
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ENV_RUN_DIR = "TRAINER_CLI_RUN_DIR"  # the run directory, for the DDP processes launched from the rank that chose it
VERSION_PREFIX = "version_"
CONFIG_FILE = "config.yaml"
GIT_FILE = "git.txt"
METRICS_FILE = "metrics.jsonl"  # the run's own record of its logged metrics (trainer_cli.rundir.metrics)
RUN_FILE = "run.json"  # the run id every logger logs under (trainer_cli.rundir.identity)
LAUNCHER_FILE = "launcher.yaml"  # the launcher's own settings beside config.yaml (trainer_cli.rundir.record)
HISTORY_FILE = "history.jsonl"  # one record per start (trainer_cli.rundir.history)
RUN_MARKERS = (RUN_FILE, LAUNCHER_FILE, HISTORY_FILE)
"""The files only the launcher writes into a run directory: a folder holding one is a launcher's run
(:func:`is_run_dir`)."""
LAST_CKPT = Path("checkpoints") / "last.ckpt"
RESUME_CKPT = LAST_CKPT.with_name("resume.ckpt")
"""The launcher's resume checkpoint where a user's callback writes ``last.ckpt`` (a ``save_last`` one:
Lightning rewrites it only when that callback saves a top-k file, so it falls behind the run; the launcher
never writes over it)."""
HPC_PATTERN = "hpc_ckpt_*.ckpt"
USED_SUFFIX = ".used"  # a consumed hpc checkpoint: Lightning's own hpc lookup must not pick it again


def is_run_dir(folder: Path) -> bool:
    """Whether ``folder`` is a launcher's run directory (it holds one of :data:`RUN_MARKERS`): the rule
    ``train runs`` finds runs by and the code snapshot leaves run outputs out by."""
    return any((folder / name).is_file() for name in RUN_MARKERS)


@dataclass(frozen=True)
class RunCheckpoint:
    """One resumable checkpoint of a run: its file, global step and epochs finished."""

    path: Path
    global_step: int
    epochs_done: int
    resumable: bool = field(default=True, compare=False)
    """Whether it holds the training state (a ``save_weights_only`` file holds the weights alone)."""
    batches_into_epoch: int = field(default=0, compare=False)
    """Batches trained of the epoch it stopped in (0: saved at an epoch's end)."""
    loader_resumable: bool = field(default=True, compare=False)
    """Whether it holds the training loaders' position (Lightning saves it for a stateful loader, one with
    ``state_dict``/``load_state_dict`` such as torchdata's ``StatefulDataLoader``; a plain ``DataLoader`` has none)."""

    @property
    def inexact_batches(self) -> int:
        """How many batches of its epoch a resume from it replays, and as many it skips: a plain ``DataLoader``
        saved mid-epoch starts that epoch's data again from its beginning for the batches left (Lightning only
        warns); 0 for an exact resume."""
        return 0 if self.loader_resumable else self.batches_into_epoch


def read_checkpoint_progress(path: Path) -> RunCheckpoint | None:
    """``path``'s global step and finished epochs, read cheaply (memory-mapped, weights only).

    Returns None for a file that is not a complete checkpoint (truncated, corrupt, not a
    Lightning checkpoint), so a run's newest *complete* checkpoint can be chosen.
    """
    import torch

    if not zipfile.is_zipfile(path):
        return None
    try:
        ckpt = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
        step = int(ckpt["global_step"])
        fit_loop = ckpt.get("loops", {}).get("fit_loop", {})
        progress = fit_loop.get("epoch_progress", {}).get("current", {})
        epochs = int(progress.get("processed", ckpt.get("epoch", 0)))
        batches = fit_loop.get("epoch_loop.batch_progress") or {}
        into = 0 if batches.get("is_last_batch", True) else int(batches.get("current", {}).get("processed", 0))
    except Exception:  # any unreadable file is "not a checkpoint to resume"
        return None
    loaders = (fit_loop.get("state_dict") or {}).get("combined_loader")  # the stateful loaders' positions
    return RunCheckpoint(path, step, epochs, "optimizer_states" in ckpt, into, bool(loaders))


def _resume_files(run_dir: Path) -> list[Path]:
    """The run's own resume checkpoints that exist: the Slurm requeue ones, ``checkpoints/resume.ckpt``, then
    ``checkpoints/last.ckpt``."""
    hpc = {f.name.removesuffix(USED_SUFFIX) for f in run_dir.glob(HPC_PATTERN + "*")}
    files = []
    for name in sorted(hpc):  # another rank may be retiring it right now: either name will do
        files += [f for f in (run_dir / name, run_dir / (name + USED_SUFFIX)) if f.is_file()][:1]
    return [*files, *(f for f in (run_dir / RESUME_CKPT, run_dir / LAST_CKPT) if f.is_file())]


def _read_own(path: Path) -> RunCheckpoint | None:
    """:func:`read_checkpoint_progress` of one of the run's resume files; an ``hpc_ckpt_N.ckpt`` that global
    rank 0 retired (renamed ``.used``, :func:`retire_hpc_checkpoints`) between the listing and the read is
    read by its new name (without that, the other ranks of a restarted DDP job could find no checkpoint,
    pass ``ckpt_path=None`` to Lightning, and its hpc lookup name the ``hpc_ckpt_N.ckpt`` that is gone)."""
    found = read_checkpoint_progress(path)
    if found is None and fnmatch.fnmatch(path.name, HPC_PATTERN) and not path.exists():
        used = path.with_name(path.name + USED_SUFFIX)
        found = read_checkpoint_progress(used) if used.is_file() else None
    return found


def run_checkpoints(run_dir: Path) -> list[RunCheckpoint]:
    """The complete resumable checkpoints of ``run_dir``, oldest first (by global step).

    Candidates: ``checkpoints/last.ckpt`` (written after every epoch and by an interrupt; or by a user's
    ``save_last`` callback, the launcher's then being ``checkpoints/resume.ckpt``) and the Slurm requeue
    checkpoints ``hpc_ckpt_N.ckpt`` in the run directory (consumed ones,
    ``hpc_ckpt_N.ckpt.used``, included: a run that crashed right after resuming from one still has
    it as its newest state). On equal steps ``last.ckpt`` sorts last (preferred).
    """
    found = [c for c in map(_read_own, _resume_files(run_dir)) if c is not None]
    return sorted(found, key=lambda c: c.global_step)  # stable: last.ckpt stays last among equals


def damaged_checkpoints(run_dir: Path) -> list[Path]:
    """The run's own resume checkpoints (``checkpoints/last.ckpt``, ``hpc_ckpt_N.ckpt``) that are there
    but do not read as a complete checkpoint (truncated, corrupt)."""
    return [f for f in _resume_files(run_dir) if _read_own(f) is None]


def _other_checkpoints(run_dir: Path) -> list[RunCheckpoint]:
    """The complete checkpoints other callbacks saved in ``run_dir/checkpoints`` (a user's ``ModelCheckpoint``)."""
    own = {f.absolute() for f in _resume_files(run_dir)}
    others = sorted(f for f in (run_dir / LAST_CKPT.parent).glob("*.ckpt") if f.is_file() and f.absolute() not in own)
    return [c for c in map(read_checkpoint_progress, others) if c is not None]


def saved_checkpoints(run_dir: Path) -> list[RunCheckpoint]:
    """Every complete checkpoint of ``run_dir``, oldest first (by global step): its resume checkpoints
    (:func:`run_checkpoints`, preferred on equal steps) and whatever any callback saved in
    ``checkpoints/`` (a user's ``ModelCheckpoint`` files), weights-only files included
    (:attr:`RunCheckpoint.resumable` tells them apart)."""
    return sorted([*_other_checkpoints(run_dir), *run_checkpoints(run_dir)], key=lambda c: c.global_step)


def newest_checkpoint(run_dir: Path) -> RunCheckpoint | None:
    """The newest complete resumable checkpoint of ``run_dir`` by global step (what every resume takes), or None.

    Its resume checkpoints (:func:`run_checkpoints`: ``last.ckpt``, the launcher's ``resume.ckpt``, Slurm's),
    preferred on equal steps, and what any callback saved in ``checkpoints/`` that holds the training state: a
    run whose own ``last.ckpt`` is damaged (:func:`damaged_checkpoints`) or that never had one (a run of stock
    LightningCLI, whose ``ModelCheckpoint`` writes ``epoch=N-step=M.ckpt`` alone) resumes from the newest file it
    saved, by the step saved in it, not by its name. A weights-only file (a user's ``save_last`` one with
    ``save_weights_only``) only where none holds the training state.
    """
    others = [c for c in _other_checkpoints(run_dir) if c.resumable]
    own = [c for c in map(_read_own, _resume_files(run_dir)) if c is not None]
    found = sorted([*others, *own], key=lambda c: (c.resumable, c.global_step))  # stable: own ones last among equals
    return found[-1] if found else None


def best_checkpoint(run_dir: Path) -> Path | None:
    """The best checkpoint of ``run_dir`` by its monitored score, or None.

    Read from the ``ModelCheckpoint`` state (a monitored one; without, as Lightning, the first
    one's latest file) stored in the run's newest checkpoint (its ``best_model_path``, looked up by
    file name under ``run_dir/checkpoints`` when the run was moved); without one, the
    ``best*.ckpt`` file with the best stored score.
    """
    import torch

    newest = newest_checkpoint(run_dir)
    states = _checkpoint_states(newest.path) if newest is not None else []
    monitored = [s for s in states if s.get("monitor")]
    for state in monitored or states[:1]:  # no monitor: Lightning's "best" is the latest it saved
        path = Path(str(state.get("best_model_path") or ""))
        for candidate in (path, run_dir / "checkpoints" / path.name):
            if path.name and candidate.is_file():
                return candidate
    scored = []
    for file in sorted((run_dir / "checkpoints").glob("best*.ckpt")):
        for state in _checkpoint_states(file):
            score = state.get("current_score")
            if isinstance(score, torch.Tensor):
                sign = 1.0 if state.get("mode", "min") == "max" else -1.0
                scored.append((sign * float(score), file))
                break
    return max(scored)[1] if scored else None


@dataclass(frozen=True)
class BestScore:
    """The best monitored score a run reached, as its newest checkpoint's ``ModelCheckpoint`` holds it."""

    monitor: str
    """The metric, e.g. ``val/acc``."""
    mode: str
    """``max`` or ``min``: which way is better."""
    score: float | None
    """The best value so far; None before the first checkpoint with one."""
    epochs_done: int
    """Epochs finished at that checkpoint."""


def best_score(run_dir: Path, monitor: str | None = None) -> BestScore | None:
    """The best score of ``run_dir``'s monitored ``ModelCheckpoint`` (of ``monitor`` when given),
    read from its newest complete checkpoint (memory-mapped: cheap while the run still trains).

    Returns:
        None when the run has no checkpoint yet, or none of its checkpoint callbacks monitors a metric.
    """
    import torch

    newest = newest_checkpoint(run_dir)
    if newest is None:
        return None
    for state in _checkpoint_states(newest.path):
        if state.get("monitor") and (monitor is None or state["monitor"] == monitor):
            score = state.get("best_model_score")
            value = float(score) if isinstance(score, (torch.Tensor, float, int)) else None
            return BestScore(str(state["monitor"]), state["mode"], value, newest.epochs_done)
    return None


def _checkpoint_states(path: Path) -> list[dict[str, Any]]:
    """The states of the ``ModelCheckpoint`` callbacks stored in checkpoint ``path`` (with their ``mode``)."""
    import torch

    try:
        callbacks = torch.load(path, map_location="cpu", weights_only=True, mmap=True).get("callbacks", {})
    except Exception:
        return []
    states = []
    for key, state in callbacks.items():
        if str(key).startswith("ModelCheckpoint") and isinstance(state, dict):
            mode = "max" if "'mode': 'max'" in str(key) else "min"
            states.append({**state, "mode": mode})
    return states


def retire_hpc_checkpoints(run_dir: Path, chosen: RunCheckpoint, rename: bool = True) -> RunCheckpoint:
    """Rename every ``hpc_ckpt_N.ckpt`` of ``run_dir`` to ``hpc_ckpt_N.ckpt.used``; delete the
    ``.used`` ones older than ``chosen`` (superseded: no resume takes them again).

    Called once the resume checkpoint is chosen (and passed to Lightning explicitly): a later
    Lightning hpc lookup (``ckpt_path=None`` under Slurm) can then never load a stale one. The
    numbering of new hpc checkpoints keeps counting up (Lightning counts the ``.used`` names too).

    Args:
        run_dir: The run directory.
        chosen: The checkpoint the resume takes (:func:`newest_checkpoint`).
        rename: False on the other ranks of a job: global rank 0 renames, before the ranks meet
            to load the checkpoint; they only take the new name.

    Returns:
        ``chosen``, with its new path when it is one of the renamed files.
    """
    if rename:
        for file in run_dir.glob(HPC_PATTERN):
            os.replace(file, file.with_name(file.name + USED_SUFFIX))
        for older in run_checkpoints(run_dir):  # consumed before and superseded: never chosen again
            if older.path.name.endswith(USED_SUFFIX) and older.global_step < chosen.global_step:
                older.path.unlink(missing_ok=True)
    if fnmatch.fnmatch(chosen.path.name, HPC_PATTERN):
        chosen = dataclasses.replace(chosen, path=chosen.path.with_name(chosen.path.name + USED_SUFFIX))
    return chosen
