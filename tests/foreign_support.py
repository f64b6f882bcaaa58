"""What the tests on the user project in ``tests/foreign`` share (see ``tests/foreign/README.md``)."""

from __future__ import annotations

import os
from pathlib import Path

from support import REPO

FOREIGN = REPO / "tests" / "foreign"
MODEL, DATA = "lit_foreign.model.SmallNet", "lit_foreign.data.BlobData"
SUPPORT = Path(__file__).with_name("bad_input_support.py")  # many `train` command lines in one process


def foreign_env() -> dict[str, str]:
    """The environment with ``lit_foreign`` importable, as the user's own project is."""
    path = os.pathsep.join(p for p in (str(FOREIGN), os.environ.get("PYTHONPATH")) if p)
    env = {**os.environ, "PYTHONPATH": path, "PYTHONUNBUFFERED": "1"}
    env.pop("TRAINER_CLI_RUN_DIR", None)
    return env
