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

An earlier record kept when a resume changed the config (``config.prev-<N>.yaml``,
:func:`trainer_cli.rundir.history.rewrite_config`) is the earlier file byte for byte, its launcher settings
beside it as ``launcher.prev-<N>.yaml`` (:func:`launcher_path`). The values the links gave when the
classes were built are the one thing written into an existing ``config.yaml`` in place (:func:`fill`): a
submitted run or a sweep trial is frozen before its classes are built, and its job records them when its
fit starts, as a local run does; they are not the user's settings, so no earlier record is kept for them.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from trainer_cli.atomic import write_atomic
from trainer_cli.rundir import layout

LAUNCHER_FILE = layout.LAUNCHER_FILE
LAUNCHER_KEYS = ("name", "run_dir", "resume_schedule", "resume_force", "param_groups", "float32_matmul_precision")
"""The top-level keys trainer-cli adds to LightningCLI's (``TrainerCLI.add_core_arguments_to_parser``)."""
LINKED_HEADER = "# Linked from the data module: "
"""The header line of a record naming the values the links gave (:func:`linked_line`)."""
SET_HEADER = "# Set by trainer-cli for this run directory (was -> now in the values below):"
"""The header line of a local run's record above the values the launcher set for its run directory
(:func:`set_lines`: each key with the value it had before, ``#   KEY: VALUE`` or ``#   KEY (why): VALUE``)."""
SET_ITEM = "#   "
_ABSENT: Any = object()  # no value at a dotted key (_dotted)
LAUNCHER_HEADER = (
    "# trainer-cli's own settings of this run, read with config.yaml beside it (which holds what LightningCLI\n"
    "# reads): `train fit --config config.yaml` and a resume take both.\n"
)


@dataclass
class Record:
    """A run's record as a value: its header (comment lines) and its config as a tree, the text made
    from it only where a file is written (:func:`write`). ``body`` is the tree's text as the parser
    dumped it, kept while the tree is unchanged; ``tree`` is None for a dump that is not a YAML
    mapping (a parser in jsonnet mode), whose ``body`` is written as it is."""

    header: list[str]
    tree: dict[str, Any] | None
    body: str | None = None

    @classmethod
    def of_text(cls, text: str) -> Record:
        """A record given as text (a sweep trial's, a submitted job's): the tree read from it once."""
        return cls([], tree_of(text), text)

    def text(self) -> str:
        """The whole record as one text: the header, then the body (dumped from the tree where it changed)."""
        body = self.body if self.body is not None or self.tree is None else yaml.safe_dump(self.tree, sort_keys=False)
        return "".join(line + "\n" for line in self.header) + (body or "")

    def leading_comments(self) -> list[str]:
        """The header and the comment lines the body starts with (a parser's ``dump_header``)."""
        lines = list(self.header)
        for line in (self.body or "").splitlines() if self.body is not None else []:
            if not line.startswith("#"):
                break
            lines.append(line)
        return lines


def as_record(record: Record | str) -> Record:
    """``record`` as a :class:`Record` (a text is read once)."""
    return record if isinstance(record, Record) else Record.of_text(record)


_FILE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def tree_of(text: str, loader: Any = yaml.SafeLoader) -> dict[str, Any] | None:
    """The YAML mapping of ``text``, or None when it is not one."""
    try:
        tree = yaml.load(text, Loader=loader)
    except yaml.YAMLError:
        return None
    return tree if isinstance(tree, dict) else None


def _split_text(text: str) -> tuple[list[str], dict[str, Any] | None]:
    """The leading comment lines of a record file and its YAML tree (None when not a YAML mapping)."""
    return _header_of(text), tree_of(text)


def split(record: Record | str) -> tuple[str, str | None]:
    """``(config.yaml text, launcher.yaml text or None)`` of a record: :data:`LAUNCHER_KEYS` move to
    the second. A record that is not YAML (a parser in jsonnet mode) is kept whole."""
    record = as_record(record)
    tree = record.tree
    if tree is None or not any(key in tree for key in LAUNCHER_KEYS):
        return record.text(), None
    header = record.leading_comments()
    launcher = {key: tree[key] for key in LAUNCHER_KEYS if key in tree}
    rest = {key: value for key, value in tree.items() if key not in LAUNCHER_KEYS}
    config = "\n".join(header) + ("\n" if header else "") + yaml.safe_dump(rest, sort_keys=False)
    return config, LAUNCHER_HEADER + yaml.safe_dump(launcher, sort_keys=False)


def write(config_file: Path, record: Record | str) -> None:
    """Write the record (a :class:`Record`, or its text) as ``config_file`` (LightningCLI's part) and
    ``launcher.yaml`` beside it (the launcher's part), each replaced atomically; a stale
    ``launcher.yaml`` of a record that has no launcher keys is removed."""
    config, launcher = split(record)
    config_file.parent.mkdir(parents=True, exist_ok=True)
    beside = launcher_path(config_file)
    if launcher is not None:
        write_atomic(beside, launcher)
    else:
        beside.unlink(missing_ok=True)
    write_atomic(config_file, config)


def read(config_file: Path, launcher: bool = True, configured: bool = False) -> dict[str, Any] | None:
    """The record of ``config_file`` as one tree (``launcher.yaml`` beside it merged in, unless not
    ``launcher``: what LightningCLI reads), or None when the file is missing or not a YAML mapping. The
    one reader of a run's record files (with libyaml's loader where there is one: ``train runs`` reads
    many). With ``configured`` (what ``train runs`` compares), the values the launcher set for the run's
    directory are given as they were configured (:func:`_configured`).

    Raises:
        OSError: for a file that cannot be read.
    """
    if not config_file.is_file():
        return None
    text = config_file.read_text()
    tree = tree_of(text, _FILE_LOADER)
    if configured and tree is not None:
        _configured(text, tree)
    beside = launcher_path(config_file)
    if tree is not None and launcher and beside.is_file():
        settings = tree_of(beside.read_text(), _FILE_LOADER)
        tree.update({k: v for k, v in (settings or {}).items() if k in LAUNCHER_KEYS})
    return tree


def set_lines(was: dict[str, Any]) -> list[str]:
    """The header lines naming the values the launcher set for a run's directory, each with the value it
    had before (``was``: ``{key: value}``, a key possibly followed by `` (why)``); read back by
    :func:`read` with ``configured``."""
    return [SET_HEADER, *(f"{SET_ITEM}{key}: {value!r}" for key, value in sorted(was.items()))]


def _configured(text: str, tree: dict[str, Any]) -> None:
    """Put back into ``tree`` (the record ``text``'s) the values the launcher set for the run's directory
    (the loggers' ``save_dir``/``name``/``version``, ``trainer.default_root_dir``) as they were configured,
    read from the record's header (:func:`set_lines`), so that a local run (whose record holds the pointed
    values) and a submitted run of the same config (whose record holds the configured ones) differ in no
    key the user set alike. A value the header does not give as a Python literal stays as recorded."""
    for _, key, was in _set_items(text):
        parents, _, leaf = key.rpartition(".")
        section = _dotted(tree, parents) if parents else tree
        if isinstance(section, dict) and leaf in section:
            section[leaf] = was


def _set_items(text: str) -> list[tuple[str, str, Any]]:
    """The values the launcher set for the run's directory as the record ``text``'s header names them
    (:func:`set_lines`): ``(key as written, with its `` (why)``; dotted key; value before)``. A value the
    header does not give as a Python literal is left out."""
    lines = iter(_header_of(text))
    if SET_HEADER not in lines:  # (read up to it: its items follow)
        return []
    items = []
    for line in lines:
        if not line.startswith(SET_ITEM):
            break
        rest = line.removeprefix(SET_ITEM)
        key = rest.split(" ", 1)[0].split(":", 1)[0]
        value = rest[len(key) :]
        label = key
        if value.startswith(" ("):  # `KEY (why): VALUE`, the why possibly holding ': '
            label = key + value[: value.find("):") + 1]
            value = value[value.find("):") + 1 :]
        try:
            items.append((label, key, ast.literal_eval(value.removeprefix(": "))))
        except (ValueError, SyntaxError):
            continue
    return items


def _header_of(text: str) -> list[str]:
    """The comment lines a record's text starts with."""
    header = []
    for line in text.splitlines():
        if not line.startswith("#"):
            break
        header.append(line)
    return header


def still_set(config_file: Path, tree: dict[str, Any] | None, now: dict[str, Any]) -> dict[str, Any]:
    """The values the launcher set for the run's directory on a later start of the run whose record is
    ``config_file``: ``now`` (what it set this time, ``{key: value before}`` as :func:`set_lines` takes it)
    and the values the record names (:func:`set_lines`) that ``tree`` (this start's config, ``now``
    applied) still holds as the record does, each with the value it had before it was set. A resume
    parses the record, where those values stand as they were set: setting them again changes nothing,
    yet they are the launcher's, not the user's."""
    if tree is None or not config_file.is_file():
        return now
    text = config_file.read_text()
    stored = tree_of(text, _FILE_LOADER)
    if stored is None:
        return now
    set_now = {label.split(" ", 1)[0] for label in now}
    kept = {
        label: was
        for label, key, was in _set_items(text)
        if key not in set_now and (value := _dotted(stored, key)) is not _ABSENT and value == _dotted(tree, key)
    }
    return {**kept, **now}


def _dotted(tree: Any, key: str) -> Any:
    """The value at the dotted ``key`` of ``tree`` (a list's items by index), ``_ABSENT`` where there is none."""
    for part in key.split("."):
        if isinstance(tree, list) and part.isdigit() and int(part) < len(tree):
            tree = tree[int(part)]
        elif isinstance(tree, dict) and part in tree:
            tree = tree[part]
        else:
            return _ABSENT
    return tree


def launcher_path(config_file: Path) -> Path:
    """Where the launcher's settings of ``config_file`` are: ``launcher.yaml`` beside ``config.yaml``,
    ``launcher.prev-<N>.yaml`` beside an earlier record ``config.prev-<N>.yaml``."""
    name = config_file.name
    if name.startswith("config.") and name != "config.yaml":
        return config_file.with_name("launcher." + name.removeprefix("config."))
    return config_file.with_name(LAUNCHER_FILE)


def launcher_file(config_file: str | Path) -> Path | None:
    """The launcher's settings that belong to a run's ``config_file`` (``config.yaml`` or an earlier
    ``config.prev-<N>.yaml``, :func:`launcher_path`); None for another file or when there are none."""
    path = Path(config_file)
    if not (path.name == "config.yaml" or (path.name.startswith("config.prev-") and path.suffix == ".yaml")):
        return None
    beside = launcher_path(path)
    return beside if beside.is_file() else None


def pins_own_folder(config_file: Path) -> bool:
    """Whether the launcher settings of a run's ``config_file`` hold ``run_dir`` naming the folder the file
    is in (a run an earlier ``train submit`` froze, a sweep trial of then)."""
    beside = launcher_file(config_file)
    settings = tree_of(beside.read_text(), _FILE_LOADER) if beside is not None else None
    pinned = (settings or {}).get("run_dir")
    if not pinned or not isinstance(pinned, str):
        return False
    try:
        return Path(pinned).resolve() == config_file.parent.resolve()
    except OSError:
        return False


def linked_line(linked: dict[str, Any]) -> str:
    """The header line naming the values the links gave (``{dotted key: value}``)."""
    return LINKED_HEADER + ", ".join(f"{k}={v!r}" for k, v in linked.items())


def recorded_links(config_file: Path) -> dict[str, Any]:
    """The values the links gave a run, as its record ``config_file`` names them (:func:`linked_line`:
    ``{dotted key: value}``); empty for a file without that line. A value the line does not give as a
    Python literal is left out."""
    try:
        header = _header_of(config_file.read_text())
    except (OSError, UnicodeDecodeError):
        return {}
    line = next((line for line in header if line.startswith(LINKED_HEADER)), None)
    linked: dict[str, Any] = {}
    for item in re.split(r", (?=[A-Za-z_][\w.]*=)", line.removeprefix(LINKED_HEADER)) if line else []:
        key, _, value = item.partition("=")
        try:
            linked[key] = ast.literal_eval(value)
        except (ValueError, SyntaxError):
            continue
    return linked


def fill(config_file: Path, linked: dict[str, Any]) -> bool:
    """Write the values the links gave when the classes were built (``{dotted key: value}``) into the
    existing record ``config_file``, in place, with the header line naming them (:func:`linked_line`);
    the rest of the record and ``launcher.yaml`` are left as they are. A key whose section holds a
    ``class_path`` without that key (a record in another form than this start's) is left alone.

    Returns:
        Whether the file was rewritten (False: it held these values already, or it is not YAML).
    """
    if not linked or not config_file.is_file():
        return False
    header, tree = _split_text(config_file.read_text())
    if tree is None:
        return False
    changed = False
    for key, value in linked.items():
        section, leaf = _section(tree, key)
        if section is not None and (leaf not in section or section[leaf] != value):
            section[leaf] = value
            changed = True
    if not changed:
        return False
    header = [line for line in header if not line.startswith(LINKED_HEADER)] + [linked_line(linked)]
    write_atomic(config_file, "\n".join(header) + "\n" + yaml.safe_dump(tree, sort_keys=False))
    return True


def keep_linked(stored: dict[str, Any], new: dict[str, Any], targets: Iterable[str]) -> None:
    """Put into ``new``, a config tree of the run whose record is ``stored`` parsed before its classes
    are built (a resubmission), the values ``stored`` holds at the link ``targets`` (dotted keys the
    links fill when the classes are built, :func:`fill`): the parse does not know them, so their
    absence is no change of the run (the job records them again when it builds the classes)."""
    for key in targets:
        before, leaf = _section(stored, key)
        section, _ = _section(new, key)
        if before is not None and leaf in before and section is not None:
            section[leaf] = before[leaf]


def _section(tree: dict[str, Any], key: str) -> tuple[dict[str, Any] | None, str]:
    """The section of ``tree`` that holds the dotted ``key``, and the key's last part; the section is
    None where ``tree`` has no such section, or where it holds a ``class_path`` without that key (a
    record in another form than ``key``'s)."""
    *parents, leaf = key.split(".")
    section: Any = tree
    for part in parents:
        section = section.get(part) if isinstance(section, dict) else None
    if not isinstance(section, dict) or (leaf not in section and "class_path" in section):
        return None, leaf
    return section, leaf
