"""Shared test helpers: run ``train`` in a subprocess (the real entry point) or in-process."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
DIGITS = str(REPO / "configs" / "experiment" / "digits.yaml")


def quiet_args(root: Path, epochs: int = 1) -> list[str]:
    """Flags for a short, quiet digits run writing under ``root``."""
    return [
        "--trainer.default_root_dir", str(root),
        "--trainer.max_epochs", str(epochs),
        "--trainer.enable_progress_bar", "false",
        "--trainer.enable_model_summary", "false",
    ]


def run_train(*args: str, cwd: Path | None = None, env: dict[str, str] | None = None, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    """Run ``python -m trainer_cli ARGS`` and return the finished process (text output)."""
    full_env = {**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})}
    full_env.pop("TRAINER_CLI_RUN_DIR", None)
    return subprocess.run(
        [sys.executable, "-m", "trainer_cli", *args], cwd=cwd or REPO, env=full_env,
        capture_output=True, text=True, timeout=timeout,
    )


@pytest.fixture(autouse=True)
def _restore_global_state(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test starts without a run directory inherited through the environment."""
    monkeypatch.delenv("TRAINER_CLI_RUN_DIR", raising=False)
