"""Hydra's view of a config root: where a config file's root is and what is searched after it, the root
config (``train.yaml``) whose ``defaults:`` list names a group, and the files of a defaults list Hydra
computed. Shared by composing one file (:mod:`trainer_cli.config.compose`) and by ordering a layer
against earlier ones (:mod:`trainer_cli.config.layer_order`)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from trainer_cli.config.paths import configs_dir, group_names
from trainer_cli.config.yaml_files import load_yaml_file


def has_defaults_list(data: Any) -> bool:
    """True when a loaded YAML document is a Hydra primary config with a ``defaults:`` list."""
    return isinstance(data, dict) and isinstance(data.get("defaults"), list)


def config_root_of(path: Path) -> Path:
    """The config root of a config file: the folder above its group folder when the file's folder
    is named like a bundled group (``myconfigs/experiment/x.yaml`` -> ``myconfigs``), else its folder."""
    path = path.resolve()
    bundled = configs_dir().resolve()
    if path.is_relative_to(bundled):
        return bundled
    return path.parent.parent if path.parent.name in group_names() else path.parent


def search_roots(path: Path, roots: Sequence[Path] = ()) -> list[Path]:
    """Where a composed file's ``defaults:`` entries are looked up, first match wins: the file's
    own config root (:func:`config_root_of`), the user roots, then the bundled ``configs/`` (so a
    user group file wins over a bundled one of the same name, for a bundled experiment too)."""
    own, bundled = config_root_of(path), configs_dir().resolve()
    return list(dict.fromkeys([*([own] if own != bundled else []), *(Path(r).resolve() for r in roots), bundled]))


def files_of(merged: Sequence[Any], search: Sequence[Path], given: dict[str, Path]) -> list[tuple[Path, str]]:
    """The files of Hydra's defaults list ``merged`` (its ``ResultDefault`` entries, in merge order), each with
    its package; Hydra's own ``hydra/`` configs left out. A config is the first file of that name in the
    ``search`` roots, or the file ``given`` for its name."""
    sources: list[tuple[Path, str]] = []
    for entry in merged:
        if not entry.config_path or (entry.package or "").startswith("hydra") or entry.config_path.startswith("hydra/"):
            continue
        found = [r / f"{entry.config_path}.yaml" for r in search if (r / f"{entry.config_path}.yaml").is_file()]
        if entry.config_path in given:
            found = [given[entry.config_path]]
        if found:
            sources.append((found[0], entry.package or ""))
    return sources


HYDRA_LOGGING = ["hydra/hydra_logging=none", "hydra/job_logging=none"]


def searchpath(search: Sequence[Path]) -> list[str]:
    """The Hydra override that searches the roots after the first of ``search`` (none for one root)."""
    quoted = ",".join("'file://" + str(r).replace("\\", "\\\\").replace("'", "\\'") + "'" for r in search[1:])
    return [f"hydra.searchpath=[{quoted}]"] if len(search) > 1 else []


TEMPLATE_PRIMARIES = ("train.yaml",)  # tried first, then the root's other top-level files


def entry_group(key: Any) -> str:
    """The group a ``defaults:`` entry's key names: ``override /trainer`` -> ``trainer``, ``optional x`` -> ``x``."""
    return str(key).replace("override ", "").replace("optional ", "").strip().lstrip("/")


def root_config_of(root: Path, group: str) -> tuple[str, list[str]] | None:
    """The top-level file of config root ``root`` (``train.yaml`` first, then the others by name) whose own
    ``defaults:`` list names ``group`` (``- experiment: null``): the root config Hydra composes that group's
    options into. Returns its name and the groups its list names, in its order; None when no file names it."""
    files = sorted(root.glob("*.yaml"), key=lambda f: (f.name not in TEMPLATE_PRIMARIES, f.name))
    for file in files:
        data = load_yaml_file(file)
        names = [
            entry_group(k)
            for e in (data.get("defaults") if has_defaults_list(data) else [])
            if isinstance(e, dict)
            for k in e
        ]
        if group in names:
            return file.stem, names
    return None
