"""Freezing a run at its first start (step 3 of :mod:`trainer_cli.rundir.policy`, which re-exports
these): ``config.yaml`` and ``launcher.yaml`` (:mod:`trainer_cli.rundir.record`) written once, and
``git.txt``, the code the run first trained with."""

from __future__ import annotations

import subprocess
from pathlib import Path

from trainer_cli.rundir import record
from trainer_cli.rundir.layout import CONFIG_FILE, GIT_FILE


def freeze(run_dir: Path, config_text: record.Record | str) -> bool:
    """Freeze a run at its first start: ``run_dir/config.yaml`` (the record ``config_text``, a
    :class:`trainer_cli.rundir.record.Record` or its text, written atomically)
    and ``git.txt``, unless the run has its config already (a later start that changes it keeps
    the earlier one beside it: :func:`trainer_cli.rundir.history.rewrite_config`). Used by ``train fit``
    (global rank 0, when the verb starts), ``train submit`` and every sweep trial.

    Returns:
        Whether it wrote them (False: the run was frozen before).
    """
    config_file = run_dir / CONFIG_FILE
    if config_file.exists():
        record_code(run_dir)
        return False
    run_dir.mkdir(parents=True, exist_ok=True)
    record.write(config_file, config_text)  # config.yaml and launcher.yaml beside it
    record_code(run_dir)
    return True


def record_code(run_dir: Path) -> None:
    """``git.txt`` (:func:`write_git_info`) for a run that has none and has saved no checkpoint yet:
    the code of its first training, whoever made the directory (the launcher, ``train submit``, the
    user, Lightning's logger). A run that trained without one keeps none: the code it trained with
    is not known."""
    if not (run_dir / GIT_FILE).exists() and not any(run_dir.rglob("*.ckpt")):
        write_git_info(run_dir)


def git_description(path: Path) -> str | None:
    """``<commit>`` (plus `` (dirty)``) of the git checkout holding ``path``, or None outside one."""
    try:
        commit = subprocess.run(
            ["git", "-C", str(path), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(path), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return commit + (" (dirty)" if dirty else "")


def write_git_info(run_dir: Path) -> None:
    """Record the git commit of the project code and of the working directory in ``run_dir/git.txt``."""
    lines = []
    seen = set()
    for label, where in (("trainer_cli", Path(__file__).resolve().parents[1]), ("cwd", Path.cwd())):
        desc = git_description(where)
        if desc and desc not in seen:
            seen.add(desc)
            lines.append(f"{label}: {desc}")
    if lines:
        (run_dir / GIT_FILE).write_text("\n".join(lines) + "\n")
