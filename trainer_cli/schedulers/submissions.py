"""The registry of submitted jobs: one per user, ``$XDG_STATE_HOME/trainer-cli/submissions.jsonl``
(``~/.local/state/trainer-cli/`` where ``XDG_STATE_HOME`` is unset), never in the user's repository.

``train submit`` and ``python main.py submit`` (a fit run, its test and cross-validation jobs, or a
sweep) append one JSON line per submission under the registry's lock
(:func:`trainer_cli.atomic.append_line`), with the root the run was submitted under
(``trainer.default_root_dir``, a script's logger folder) and the engine the job went to
(``scheduler``: ``slurm`` or ``ray``; a line without it is Slurm's); ``train jobs`` and ``train cancel`` read
it, newest last: without flags the user's jobs of the cluster each engine is on now (each line keeps
its cluster: Slurm's ``ClusterName``, a Ray job's address; :func:`of_cluster`), those under one root with
``--root``. The
registries an earlier version wrote into the root itself (``<root>/submissions.jsonl``) are read
too, so the jobs they list still show.

The registry stays small whatever the number of submissions: once it passes :data:`ROTATE_BYTES`
(about 3,000 submissions), ``register`` renames it, under its lock, to the next archive segment
``submissions.<N>.jsonl`` beside it (N counting up) and the next submission starts a new one. A
listing of the newest jobs (``train jobs --last N``) reads the segments newest first, only as many as
hold the N jobs it shows (:func:`read_registry`; the jobs of other clusters it counts are those of the
segments read); looking a run up (``train jobs RUN``, ``train cancel``) reads them all.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from trainer_cli.atomic import append_line, locked, read_json_lines
from trainer_cli.job.scheduler import DEFAULT_SCHEDULER

REGISTRY_NAME = "submissions.jsonl"
STATE_ENV = "XDG_STATE_HOME"
STATE_DIR = "trainer-cli"
LEGACY_ROOTS = ("runs", ".")
"""Where an earlier version's registry may be, seen from the working directory: ``train submit``'s
default root, and a script's project root (its logger's default ``save_dir``)."""
RECORD_KEYS = (
    "job_id",
    "test_job_id",
    "aggregate_job_id",
    "job_name",
    "run_dir",
    "log",
    "submitted",
    "trials",
    "workers",
    "cluster",
    "scheduler",
)
"""What a registry line keeps of a submission's record (with ``root``); ``scheduler``: the engine that
runs the job (:data:`trainer_cli.job.scheduler.SCHEDULER_NAMES`), absent from older lines (Slurm's:
:func:`scheduler_of`)."""
ROTATE_BYTES = 1 << 20
"""The registry's size past which it becomes an archive segment (see the module docstring)."""
_SEGMENT = re.compile(r"submissions\.(\d+)\.jsonl")


def registry_file() -> Path:
    """The user's registry: ``$XDG_STATE_HOME/trainer-cli/submissions.jsonl``, else under ``~/.local/state``."""
    state = os.environ.get(STATE_ENV, "")
    base = Path(state) if os.path.isabs(state) else Path.home() / ".local" / "state"  # a relative one: invalid (XDG)
    return base / STATE_DIR / REGISTRY_NAME


def register(root: Path, record: dict[str, Any]) -> None:
    """Append a job submitted under ``root`` to the user's registry. ``record`` names its engine
    (``scheduler``; none: Slurm's) and the cluster it went to (``cluster``, as the engine's
    :meth:`~trainer_cli.job.scheduler.Scheduler.cluster` says it: Slurm's ``ClusterName``, a Ray cluster's
    address; none where the engine did not say, and then the job is listed on every cluster)."""
    file = registry_file()
    file.parent.mkdir(parents=True, exist_ok=True)
    record = {"scheduler": DEFAULT_SCHEDULER} | record
    line = {k: record.get(k) for k in RECORD_KEYS} | {"root": str(Path(root).absolute())}
    append_line(file, json.dumps(line))
    if file.stat().st_size >= ROTATE_BYTES:
        _rotate(file)


def scheduler_of(rec: dict[str, Any]) -> str:
    """The engine that runs the job of registry line ``rec``: its ``scheduler``, Slurm for a line without one."""
    return str(rec.get("scheduler") or DEFAULT_SCHEDULER)


def segments(file: Path) -> list[Path]:
    """The archive segments of the registry ``file``, oldest first."""
    return [p for _, p in _numbered(file)]


def _numbered(file: Path) -> list[tuple[int, Path]]:
    found = [(int(m.group(1)), p) for p in file.parent.glob("submissions.*.jsonl") if (m := _SEGMENT.fullmatch(p.name))]
    return sorted(found)


def _rotate(file: Path) -> None:
    """Rename the registry to the next archive segment, under its lock (an append waits for it, then starts a
    new registry); nothing when another process rotated it already."""
    with locked(file):
        if not file.is_file() or file.stat().st_size < ROTATE_BYTES:
            return
        number = max((n for n, _ in _numbered(file)), default=0) + 1
        file.rename(file.with_name(f"submissions.{number}.jsonl"))


def _under(rec: dict[str, Any], root: Path) -> bool:
    """Whether ``rec`` was submitted under ``root`` (its recorded root, or its run directory inside it)."""
    if rec.get("root") and Path(rec["root"]).resolve() == root:
        return True
    return bool(rec.get("run_dir")) and root in Path(rec["run_dir"]).resolve().parents


def read_registry(
    root: Path | None = None, enough: Callable[[list[dict[str, Any]]], bool] | None = None
) -> list[dict[str, Any]]:
    """The jobs the user submitted, oldest first (an unreadable line is skipped): under ``root``
    only when given. An earlier version's registry in ``root`` (or, without one, in
    :data:`LEGACY_ROOTS` of the working directory) adds its jobs.

    Args:
        root: Only the jobs submitted under this folder.
        enough: Whether the jobs read so far (the registry's newest) are all the caller needs: the archive
            segments are read newest first until it says so (default: every segment is read).
    """
    legacy = [Path(root)] if root is not None else [Path(r) for r in LEGACY_ROOTS]
    records = [r for folder in legacy for r in read_json_lines(folder / REGISTRY_NAME)]
    where = Path(root).resolve() if root is not None else None
    mine: list[dict[str, Any]] = []
    for file in [registry_file(), *reversed(segments(registry_file()))]:
        if enough is not None and enough(mine):
            break
        read = read_json_lines(file)
        mine = [r for r in read if where is None or _under(r, where)] + mine
    seen = {(str(r.get("job_id")), r.get("run_dir")) for r in mine}
    records = [r for r in records if (str(r.get("job_id")), r.get("run_dir")) not in seen] + mine
    return sorted(records, key=lambda r: str(r.get("submitted") or ""))  # stable: lines without a time first


def of_cluster(
    records: list[dict[str, Any]], clusters: Mapping[str, str | None] | None
) -> tuple[list[dict[str, Any]], dict[str, int]]:
    """``records`` split by the cluster they were submitted to: those of the cluster their own engine is on
    here (``clusters``: ``{engine: cluster}``, :func:`trainer_cli.schedulers.current_clusters`; a Slurm
    job's ``ClusterName``, a Ray job's address), with those whose cluster is unknown (older lines, a Slurm
    that did not say, an engine not asked here), and the count of the others per cluster. All of them when
    ``clusters`` is None (``--all-clusters``)."""
    if clusters is None:
        return records, {}
    kept: list[dict[str, Any]] = []
    hidden: dict[str, int] = {}
    for rec in records:
        other, here = rec.get("cluster"), clusters.get(scheduler_of(rec))
        if other and here and other != here:
            hidden[other] = hidden.get(other, 0) + 1
        else:
            kept.append(rec)
    return kept, hidden
