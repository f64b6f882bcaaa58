"""Fixtures every test gets. The shared helpers (paths, ``run_train``, fake datasets, TensorBoard
scalars) live in :mod:`support`."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def _restore_global_state(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test starts without a run directory inherited through the environment."""
    monkeypatch.delenv("TRAINER_CLI_RUN_DIR", raising=False)
