"""Where the bundled ``configs/`` and ``slurm/`` folders live: next to the package in an
installed wheel, at the repository root in a clone (or an editable install)."""

from __future__ import annotations

from pathlib import Path

from trainer_cli.errors import UserError

_PACKAGE_DIR = Path(__file__).resolve().parent


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


def resolve_config_path(value: str) -> Path:
    """Find a config file given on the command line.

    Tried in order: ``value`` as a path (relative to the working directory); the same relative
    path inside the bundled root (so ``configs/experiment/digits.yaml`` works from any directory
    once the wheel is installed); ``configs/<value>`` and ``configs/<value>.yaml`` (so
    ``experiment/digits`` works too).

    Raises:
        UserError: when no candidate exists; the message lists where it looked.
    """
    raw = Path(value).expanduser()
    candidates = [raw]
    if not raw.is_absolute():
        candidates += [bundled_root() / raw, configs_dir() / raw]
        if raw.suffix not in {".yaml", ".yml"}:
            candidates += [configs_dir() / raw.with_name(raw.name + ".yaml")]
    for candidate in candidates:
        if candidate.is_file():
            return candidate.resolve()
    if raw.is_dir():
        raise UserError(f"--config {value}: is a directory, expected a YAML file")
    group = raw.parent.name
    hint = ""
    group_dir = configs_dir() / group
    if group and group_dir.is_dir():
        from trainer_cli.errors import did_you_mean

        names = [p.stem for p in sorted(group_dir.glob("*.yaml"))]
        hint = did_you_mean(raw.stem, names) or f" Files in configs/{group}/: {', '.join(names)}."
    raise UserError(f"config file not found: {value} (looked in the working directory and in {bundled_root()}).{hint}")
