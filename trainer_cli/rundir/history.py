"""A run's history: one record per start of the run, and its config as it is now.

Every start of a run in its directory (a new run, a resume, an extension or shortening, a Slurm requeue, a
resubmission, and a ``validate``/``test``/``predict`` from one of its checkpoints) appends one
JSON line to ``<run>/history.jsonl``::

    {"time": "2026-11-25T06:12:03+00:00", "verb": "fit", "kind": "extension",
     "checkpoint": ".../checkpoints/last.ckpt", "global_step": 600,
     "changes": ["trainer.max_epochs: 20 -> 25"],
     "job": {"scheduler": "slurm", "job_id": "41", "restart_count": 0},
     "why": "--ckpt_path last: the newest complete checkpoint by global step"}

A resume that replays and skips data (a plain, not resumable ``DataLoader`` stopped mid-epoch: the
epoch's data starts again from its beginning) adds ``"inexact": {"epoch": 1, "batches_replayed": 3,
"batches_skipped": 3}`` (``epoch``: Lightning's index, from 0); ``train jobs RUN`` and ``train runs``
report it (:func:`inexact_starts`).

``kind`` is ``new``, ``resume``, ``extension`` (``trainer.max_epochs`` or ``max_steps`` raised),
``shortening`` (lowered, none raised),
``requeue`` (a later attempt of the job it runs in: :attr:`JobContext.attempt` > 0) or ``resubmission``
(another job of the same scheduler than the run's last start); for the other verbs it is the verb. A
start in a job names it in ``job`` (:data:`trainer_cli.job.scheduler.JOB_FIELD`: its scheduler, job id and
attempt; :func:`trainer_cli.job.scheduler.recorded_job` reads it). ``changes`` are the
``resume:`` lines printed for it (:func:`trainer_cli.rundir.resume.compare_for_resume`). ``why`` is the
rule that chose the checkpoint (:func:`trainer_cli.rundir.policy.resume_checkpoint`), for a start that
loads one.

``config.yaml`` always describes the run as it is now: a resume that changes the config keeps the
earlier file beside it as ``config.prev-<N>.yaml`` (byte for byte, its ``launcher.yaml`` as
``launcher.prev-<N>.yaml``) and rewrites ``config.yaml`` with the new values (atomically: written to a
temporary file and renamed over it), so ``train fit --config <run>/config.yaml`` builds the run as it
now goes on. The values the links gave when the classes were built are not a change of the config:
a run frozen before they were known (a submitted run, a sweep trial) gets them written in place when
its fit starts (:func:`trainer_cli.rundir.record.fill`), with no earlier record kept and no change
listed. How one start resumed (``ckpt_path``, ``resume_force``, ``resume_schedule``,
:data:`trainer_cli.rundir.resume.RESUME_OPTIONS`) is recorded here, not carried into the config.
Written by global rank 0 only.
"""

from __future__ import annotations

import json
import shutil
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from trainer_cli.atomic import append_line, read_json_lines
from trainer_cli.job import context as job_context
from trainer_cli.job.context import JobContext
from trainer_cli.job.scheduler import JOB_FIELD, recorded_job
from trainer_cli.rundir import layout, live, record
from trainer_cli.rundir.layout import CONFIG_FILE, read_checkpoint_progress
from trainer_cli.rundir.resume import RESUME_OPTIONS

HISTORY_FILE = layout.HISTORY_FILE
PREVIOUS_CONFIG = "config.prev-{n}.yaml"
LENGTH_KEYS = ("trainer.max_epochs", "trainer.max_steps")  # a change of these: an extension (or a shortening)


def read(run_dir: Path) -> list[dict[str, Any]]:
    """The records of ``run_dir/history.jsonl``, oldest first."""
    return read_json_lines(run_dir / HISTORY_FILE)


def start_kind(
    verb: str | None,
    resumed: bool,
    changes: list[str],
    previous: list[dict[str, Any]],
    context: JobContext | None = None,
) -> str:
    """What this start of the run is (see the module's description); ``context``: the job it runs in
    (:func:`trainer_cli.job.context.current` by default)."""
    if verb not in ("fit", None):
        return str(verb)
    if not resumed:
        return "new"
    job = context or job_context.current()
    if job.attempt > 0:
        return "requeue"
    jobs = (recorded_job(r) for r in reversed(previous))
    last_job = next((j["job_id"] for j in jobs if j is not None and j.get("scheduler") == job.scheduler), None)
    if job.job_id and last_job and job.job_id != last_job:
        return "resubmission"
    longer = [_longer(line) for line in changes if line.split(":", 1)[0] in LENGTH_KEYS]
    if longer:
        return "extension" if any(longer) or None in longer else "shortening"
    return "resume"


def _longer(change: str) -> bool | None:
    """Whether a ``trainer.max_epochs: 20 -> 25`` line (:func:`trainer_cli.rundir.resume.describe_change`)
    makes the run longer (None, -1: no limit); None where it cannot tell."""
    import ast
    import math

    try:
        old, new = (ast.literal_eval(v.strip()) for v in change.split(":", 1)[1].split("->"))
    except (ValueError, SyntaxError):
        return None
    old, new = (math.inf if v is None or v == -1 else v for v in (old, new))
    return None if not all(isinstance(v, (int, float)) for v in (old, new)) else bool(new > old)


def append(
    run_dir: Path,
    verb: str | None,
    ckpt_path: Any,
    changes: list[str],
    options: dict[str, Any] | None = None,
    why: str | None = None,
    inexact: dict[str, int] | None = None,
    context: JobContext | None = None,
) -> dict[str, Any]:
    """Append this start's record to ``run_dir/history.jsonl`` (one line, flushed to disk); returns it.
    ``options``: how a resume resumed (``resume_schedule``, ``resume_force``), recorded for a resume only;
    ``why``: the rule that chose its checkpoint; ``inexact``: a resume that replays and skips data (its
    ``epoch``, ``batches_replayed``, ``batches_skipped``: a plain DataLoader stopped mid-epoch);
    ``context``: the job it runs in (:func:`trainer_cli.job.context.current` by default)."""
    job = context or job_context.current()
    ckpt = Path(str(ckpt_path)) if ckpt_path and Path(str(ckpt_path)).is_file() else None
    progress = read_checkpoint_progress(ckpt) if ckpt is not None else None
    record: dict[str, Any] = {
        "time": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "verb": verb or "fit",
        "kind": start_kind(verb, ckpt is not None, changes, read(run_dir), job),
        "checkpoint": str(ckpt) if ckpt is not None else None,
        "global_step": progress.global_step if progress is not None else 0,
        "changes": list(changes),
    }
    if ckpt is not None and options:
        record["options"] = options
    if ckpt is not None and why:
        record["why"] = why
    if ckpt is not None and inexact:
        record["inexact"] = inexact
    if job.in_job:
        record[JOB_FIELD] = {"scheduler": job.scheduler, "job_id": job.job_id, "restart_count": job.attempt}
    if live.enter(run_dir):  # every later write of this process into the run shows as its marker
        record[live.FIELD] = True
    append_line(run_dir / HISTORY_FILE, json.dumps(record))
    return record


def inexact_starts(records: list[dict[str, Any]]) -> list[str]:
    """The resumes of ``records`` (:func:`read`) that replayed and skipped data (``inexact``: a plain
    DataLoader stopped mid-epoch), one short text each: ``epoch 2: 3 batches replayed, 3 skipped``
    (epochs counted from 1, as the resume line says them)."""
    return [
        f"epoch {int(i.get('epoch', 0)) + 1}: {i.get('batches_replayed')} batches replayed, "
        f"{i.get('batches_skipped')} skipped"
        for r in records
        if isinstance(i := r.get("inexact"), dict)
    ]


def rewrite_config(run_dir: Path, text: record.Record | str) -> Path:
    """Write the record ``text`` (a :class:`trainer_cli.rundir.record.Record` or its text) as
    ``run_dir/config.yaml`` and ``launcher.yaml``
    (:func:`trainer_cli.rundir.record.write`), the previous record kept as it was written, byte for
    byte: ``config.prev-<N>.yaml`` (the next free N; what the stock script reads) and its launcher
    settings as ``launcher.prev-<N>.yaml`` (:func:`trainer_cli.rundir.record.launcher_path`). Returns where the
    config was kept."""
    config_file = run_dir / CONFIG_FILE
    n = 1
    while (run_dir / PREVIOUS_CONFIG.format(n=n)).exists():
        n += 1
    previous = run_dir / PREVIOUS_CONFIG.format(n=n)
    launcher, launcher_kept = record.launcher_path(config_file), record.launcher_path(previous)
    launcher_kept.unlink(missing_ok=True)  # a stale one: this N's config was never kept
    if launcher.is_file():
        shutil.copy2(launcher, launcher_kept)
    shutil.copy2(config_file, previous)
    record.write(config_file, text)
    return previous


def as_resumed(start: record.Record, stored: dict[str, Any] | None) -> record.Record | None:
    """A run's new ``config.yaml`` record from this start's (:meth:`trainer_cli.runtime.run.Run.record`):
    the values of :data:`trainer_cli.rundir.resume.RESUME_OPTIONS` put back to the stored config's (this
    start's ``--ckpt_path last`` resolved to a file must not make a later start load that file).
    None for a record that is not YAML (a parser in jsonnet mode)."""
    if start.tree is None:
        return None
    header = [line for line in start.leading_comments() if line.split(":", 1)[0].strip("# ") not in RESUME_OPTIONS]
    tree = dict(start.tree)
    for key in RESUME_OPTIONS:
        if key in (stored or {}):
            tree[key] = (stored or {})[key]
        else:  # a config from before the option: its default
            tree.pop(key, None)
    header.insert(1, "# Rewritten on resume (config.prev-<N>.yaml: the earlier ones; history.jsonl: each start).")
    return record.Record(header, tree)


def record_start(
    run_dir: Path,
    verb: str | None,
    ckpt_path: Any,
    changes: list[str],
    start: record.Record | str,
    why: str | None = None,
    inexact: dict[str, int] | None = None,
) -> bool:
    """This start of the run in its directory (global rank 0): ``config.yaml`` rewritten when the
    config changed on resume (:func:`rewrite_config`), and the history record appended. ``start``:
    this start's record (:meth:`trainer_cli.runtime.run.Run.record`). Returns whether it rewrote
    ``config.yaml``. ``inexact``: as :func:`append`."""
    start = record.as_record(start)
    config_file = run_dir / CONFIG_FILE
    rewritten = False
    if changes and config_file.is_file() and verb in ("fit", None):
        new = as_resumed(start, record.read(config_file))
        if new is not None:
            rewrite_config(run_dir, new)
            rewritten = True
    tree = start.tree or {}
    options = {k: tree[k] for k in RESUME_OPTIONS if k in tree and k.startswith("resume_")}
    append(run_dir, verb, ckpt_path, changes, options, why, inexact)
    return rewritten
