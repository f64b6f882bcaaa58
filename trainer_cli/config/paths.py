"""Where the bundled ``configs/`` and ``slurm/`` folders live: next to the package in an
installed wheel, at the repository root in a clone (or an editable install)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from trainer_cli.errors import UserError

ENV_CONFIG_PATH = "TRAINER_CLI_CONFIG_PATH"  # user config roots, os.pathsep-separated, after --config_root

_PACKAGE_DIR = Path(__file__).resolve().parents[1]  # trainer_cli/


def bundled_root() -> Path:
    """The folder that holds the bundled ``configs/`` and ``slurm/``."""
    if (_PACKAGE_DIR / "configs").is_dir():  # installed wheel: shipped as package data
        return _PACKAGE_DIR
    return _PACKAGE_DIR.parent  # clone or editable install


def configs_dir() -> Path:
    """The bundled ``configs/`` folder (one sub-folder per config group)."""
    return bundled_root() / "configs"


def slurm_templates_dir() -> Path:
    """The bundled ``slurm/`` folder of Jinja2 sbatch templates."""
    return bundled_root() / "slurm"


def group_names() -> set[str]:
    """The bundled config groups (``model``, ``optimizer``, ``experiment``, ...)."""
    return {p.name for p in configs_dir().iterdir() if p.is_dir()}


def user_config_roots(flag_roots: Sequence[str] = ()) -> list[Path]:
    """The user's config roots, searched before the bundled ``configs/``: every ``--config_root DIR``
    in order, then the entries of ``$TRAINER_CLI_CONFIG_PATH`` (``os.pathsep``-separated).

    A config root is laid out like ``configs/``: one folder per group (``optimizer/myadam.yaml``).

    Raises:
        UserError: for a root that is not a directory.
    """
    roots: list[Path] = []
    env = [(e, f"${ENV_CONFIG_PATH}") for e in os.environ.get(ENV_CONFIG_PATH, "").split(os.pathsep) if e]
    for value, origin in [*((r, "--config_root") for r in flag_roots), *env]:
        root = Path(value).expanduser()
        if not root.is_dir():
            raise UserError(
                f"{origin} {value}: not a directory (a config root holds group folders like optimizer/, model/)"
            )
        if root.resolve() not in roots:
            roots.append(root.resolve())
    return roots


def resolve_config_path(value: str, roots: Sequence[Path] = ()) -> Path:
    """Find a config file given on the command line.

    Tried in order: ``value`` as a path (relative to the working directory); the same relative
    path inside the bundled root (so ``configs/experiment/digits.yaml`` works from any directory
    once the wheel is installed); ``<root>/<value>`` and ``<root>/<value>.yaml`` for each user
    config root in ``roots`` and then the bundled ``configs/`` (so ``experiment/digits`` works too).

    Raises:
        UserError: when no candidate exists; the message lists where it looked.
    """
    raw = Path(value).expanduser()
    candidates = [raw]
    if not raw.is_absolute():
        candidates.append(bundled_root() / raw)
        for root in [*roots, configs_dir()]:
            candidates.append(root / raw)
            if raw.suffix not in {".yaml", ".yml"}:
                candidates.append(root / raw.with_name(raw.name + ".yaml"))
    for candidate in candidates:
        if candidate.is_file():
            return candidate.resolve()
    if raw.is_dir():
        raise UserError(f"--config {value}: is a directory, expected a YAML file")
    group = raw.parent.name
    hint = ""
    group_dirs = [d for d in (root / group for root in [*roots, configs_dir()]) if group and d.is_dir()]
    if group_dirs:
        from trainer_cli.errors import did_you_mean

        names = sorted({p.stem for d in group_dirs for p in d.glob("*.yaml")})
        hint = did_you_mean(raw.stem, names) or f" Files in {group}/: {', '.join(names)}."
    where = ", ".join(str(r) for r in [*roots, bundled_root()])
    raise UserError(f"config file not found: {value} (looked in the working directory and in {where}).{hint}")
