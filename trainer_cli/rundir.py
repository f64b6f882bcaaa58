"""Run directories: ``<default_root_dir>/<name>/version_<N>``, created atomically, never reused.

Every rank of a run must agree on one directory: the process that allocates it exports
``TRAINER_CLI_RUN_DIR`` so DDP processes Lightning launches from it use the same one, and ranks
started together by ``srun`` (several Slurm tasks, no explicit ``run_dir``) share
``job_<SLURM_JOB_ID>``.
"""

from __future__ import annotations

import fnmatch
import os
import re
import subprocess
import zipfile
from dataclasses import dataclass
from pathlib import Path

from trainer_cli.errors import UserError

ENV_RUN_DIR = "TRAINER_CLI_RUN_DIR"
VERSION_PREFIX = "version_"
LAST_CKPT = Path("checkpoints") / "last.ckpt"


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


def allocate(root: Path, name: str, prefix: str = VERSION_PREFIX) -> Path:
    """Create and return a new ``root/name/<prefix>N`` (N one past the highest; ``version_N`` by
    default, ``sweep_N`` for a sweep); race-free (mkdir is atomic)."""
    parent = experiment_dir(root, name)
    try:
        parent.mkdir(parents=True, exist_ok=True)
    except OSError as err:  # read-only, a file in the way, a full disk
        raise UserError(
            f"cannot create the run directory under --trainer.default_root_dir {root}: {parent}: {err.strerror or err}; "
            "choose a writable folder with --trainer.default_root_dir DIR"
        ) from None
    versions = _versions(parent, prefix)
    n = versions[-1][0] + 1 if versions else 0
    while True:
        candidate = parent / f"{prefix}{n}"
        try:
            candidate.mkdir()
            return candidate
        except FileExistsError:
            n += 1
        except OSError as err:
            raise UserError(
                f"cannot create the run directory {candidate}: {err.strerror or err}; "
                "choose a writable folder with --trainer.default_root_dir DIR"
            ) from None


def slurm_shared_run_dir(root: Path, name: str) -> Path | None:
    """``root/name/job_<id>`` when this process is one of several tasks ``srun`` started together."""
    job = os.environ.get("SLURM_JOB_ID")
    if job and int(os.environ.get("SLURM_NTASKS", "1")) > 1 and "SLURM_PROCID" in os.environ:
        return experiment_dir(root, name) / f"job_{job}"
    return None


def git_description(path: Path) -> str | None:
    """``<commit>`` (plus `` (dirty)``) of the git checkout holding ``path``, or None outside one."""
    try:
        commit = subprocess.run(
            ["git", "-C", str(path), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(path), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True, text=True, timeout=10, check=True,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return commit + (" (dirty)" if dirty else "")


def write_git_info(run_dir: Path) -> None:
    """Record the git commit of the project code and of the working directory in ``run_dir/git.txt``."""
    lines = []
    seen = set()
    for label, where in (("trainer_cli", Path(__file__).resolve().parent), ("cwd", Path.cwd())):
        desc = git_description(where)
        if desc and desc not in seen:
            seen.add(desc)
            lines.append(f"{label}: {desc}")
    if lines:
        (run_dir / "git.txt").write_text("\n".join(lines) + "\n")


# -- a run's checkpoints ---------------------------------------------------------------------------
HPC_PATTERN = "hpc_ckpt_*.ckpt"
USED_SUFFIX = ".used"  # a consumed hpc checkpoint: Lightning's own hpc lookup must not pick it again


@dataclass(frozen=True)
class RunCheckpoint:
    """One resumable checkpoint of a run: its file, global step and epochs finished."""

    path: Path
    global_step: int
    epochs_done: int


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
        progress = ckpt.get("loops", {}).get("fit_loop", {}).get("epoch_progress", {}).get("current", {})
        epochs = int(progress.get("processed", ckpt.get("epoch", 0)))
    except Exception:  # any unreadable file is "not a checkpoint to resume"
        return None
    return RunCheckpoint(path, step, epochs)


def run_checkpoints(run_dir: Path) -> list[RunCheckpoint]:
    """The complete resumable checkpoints of ``run_dir``, oldest first (by global step).

    Candidates: ``checkpoints/last.ckpt`` (written after every epoch and by an interrupt) and the
    Slurm requeue checkpoints ``hpc_ckpt_N.ckpt`` in the run directory (consumed ones,
    ``hpc_ckpt_N.ckpt.used``, included: a run that crashed right after resuming from one still has
    it as its newest state). On equal steps ``last.ckpt`` sorts last (preferred).
    """
    hpc = {f.name.removesuffix(USED_SUFFIX) for f in run_dir.glob(HPC_PATTERN + "*")}
    files = []
    for name in sorted(hpc):  # another rank may be retiring it right now: either name will do
        files += [f for f in (run_dir / name, run_dir / (name + USED_SUFFIX)) if f.is_file()][:1]
    found = [c for c in (read_checkpoint_progress(f) for f in [*files, run_dir / LAST_CKPT] if f.is_file()) if c is not None]
    return sorted(found, key=lambda c: c.global_step)  # stable: last.ckpt stays last among equals


def newest_checkpoint(run_dir: Path) -> RunCheckpoint | None:
    """The newest complete checkpoint of ``run_dir`` by global step (what every resume takes), or None."""
    found = run_checkpoints(run_dir)
    return found[-1] if found else None


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
        chosen = RunCheckpoint(chosen.path.with_name(chosen.path.name + USED_SUFFIX), chosen.global_step, chosen.epochs_done)
    return chosen


def newest_resumable(root: Path, name: str) -> Path | None:
    """The newest ``root/name/version_N`` holding a complete resumable checkpoint, if any."""
    for _, run in reversed(_versions(experiment_dir(root, name))):
        if newest_checkpoint(run) is not None:
            return run
    return None


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


def _checkpoint_states(path: Path) -> list[dict]:
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
