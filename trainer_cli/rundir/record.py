"""A run's record: ``config.yaml``, exactly what LightningCLI with the same classes reads, and the
launcher's own settings beside it in ``launcher.yaml``. The one writer of both, and their one reader.

``config.yaml`` holds the resolved config the Trainer, model, data, callbacks and loggers were built
from (the values links gave included): the user's stock LightningCLI script reads it back
(``python main.py fit --config <run>/config.yaml``). The launcher's own top-level keys
(:data:`LAUNCHER_KEYS`: ``--name``, ``--run_dir``, ``--param_groups``, ...) would make that script
refuse it, so they are written to ``launcher.yaml`` in the same folder. Wherever trainer-cli reads a
run's ``config.yaml`` (``--config <run>/config.yaml``, ``--run_dir <run>``, a resume, a Slurm job's
every start) it reads ``launcher.yaml`` with it (:func:`launcher_file`), so the two files
together build the run again, as the one file did before. A record from before this split (the keys
inline in ``config.yaml``) reads as it did.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from trainer_cli.atomic import write_atomic

LAUNCHER_FILE = "launcher.yaml"
LAUNCHER_KEYS = ("name", "run_dir", "resume_schedule", "resume_force", "param_groups", "float32_matmul_precision")
"""The top-level keys trainer-cli adds to LightningCLI's (``TrainerCLI.add_core_arguments_to_parser``)."""
LAUNCHER_HEADER = (
    "# trainer-cli's own settings of this run, read with config.yaml beside it (which holds what LightningCLI\n"
    "# reads): `train fit --config config.yaml` and a resume take both.\n"
)


def _split_text(text: str) -> tuple[list[str], dict[str, Any] | None]:
    """The leading comment lines of a record and its YAML tree (None when not a YAML mapping)."""
    lines = text.splitlines()
    header = []
    for line in lines:
        if not line.startswith("#"):
            break
        header.append(line)
    try:
        tree = yaml.safe_load(text)
    except yaml.YAMLError:
        return header, None
    return header, tree if isinstance(tree, dict) else None


def split(text: str) -> tuple[str, str | None]:
    """``(config.yaml text, launcher.yaml text or None)`` of a record: :data:`LAUNCHER_KEYS` move to
    the second. A record that is not YAML (a parser in jsonnet mode) is kept whole."""
    header, tree = _split_text(text)
    if tree is None or not any(key in tree for key in LAUNCHER_KEYS):
        return text, None
    launcher = {key: tree.pop(key) for key in LAUNCHER_KEYS if key in tree}
    config = "\n".join(header) + ("\n" if header else "") + yaml.safe_dump(tree, sort_keys=False)
    return config, LAUNCHER_HEADER + yaml.safe_dump(launcher, sort_keys=False)


def write(config_file: Path, text: str) -> None:
    """Write the record ``text`` as ``config_file`` (LightningCLI's part) and ``launcher.yaml`` beside
    it (the launcher's part), each replaced atomically; a stale ``launcher.yaml`` of a record that has
    no launcher keys is removed."""
    config, launcher = split(text)
    config_file.parent.mkdir(parents=True, exist_ok=True)
    beside = config_file.with_name(LAUNCHER_FILE)
    if launcher is not None:
        write_atomic(beside, launcher)
    else:
        beside.unlink(missing_ok=True)
    write_atomic(config_file, config)


def read(config_file: Path) -> dict[str, Any] | None:
    """The record of ``config_file`` as one tree (``launcher.yaml`` beside it merged in), or None
    when the file is missing or not a YAML mapping."""
    if not config_file.is_file():
        return None
    _, tree = _split_text(config_file.read_text())
    if tree is None:
        return None
    beside = config_file.with_name(LAUNCHER_FILE)
    if beside.is_file():
        _, launcher = _split_text(beside.read_text())
        tree.update({k: v for k, v in (launcher or {}).items() if k in LAUNCHER_KEYS})
    return tree


def launcher_file(config_file: str | Path) -> Path | None:
    """The ``launcher.yaml`` that belongs to a run's ``config_file`` (None when there is none)."""
    path = Path(config_file)
    if path.name != "config.yaml":
        return None
    beside = path.with_name(LAUNCHER_FILE)
    return beside if beside.is_file() else None
