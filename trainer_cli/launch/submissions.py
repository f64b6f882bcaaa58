"""The registry of submitted jobs: ``<trainer.default_root_dir>/submissions.jsonl`` (default ``runs/``).

``train submit`` (a fit run, its test and cross-validation jobs, or a sweep) appends one JSON line
per submission, under the registry's lock (:func:`trainer_cli.atomic.append_line`); ``train jobs``
and ``train cancel`` read it, newest last.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from trainer_cli.atomic import append_line, read_json_lines

REGISTRY_NAME = "submissions.jsonl"
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
)
"""What a registry line keeps of a submission's record."""


def register(root: Path, record: dict[str, Any]) -> None:
    """Append a submitted job to ``root``'s registry."""
    root.mkdir(parents=True, exist_ok=True)
    append_line(root / REGISTRY_NAME, json.dumps({k: record.get(k) for k in RECORD_KEYS}))


def read_registry(root: Path) -> list[dict[str, Any]]:
    """The jobs submitted under ``root``, oldest first (an unreadable line is skipped)."""
    return read_json_lines(root / REGISTRY_NAME)
