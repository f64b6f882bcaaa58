"""What ``train`` prints: output into a pipe closed early, per-epoch lines when stdout is not a
terminal, no known-irrelevant library noise, rounded metrics."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.conftest import REPO

CLOSED_PIPE_ARGS = [["--help"], ["ls"]]


@pytest.mark.parametrize("args", CLOSED_PIPE_ARGS, ids=" ".join)
def test_reader_gone_early_is_quiet(args: list[str]) -> None:
    """Bug 10: ``train --help | head -3`` ended in a BrokenPipeError traceback."""
    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader is gone before the first write: every write fails
    env = {k: v for k, v in os.environ.items() if k != "TRAINER_CLI_RUN_DIR"}
    try:
        done = subprocess.run(
            [sys.executable, "-m", "trainer_cli", *args], cwd=REPO, env=env, stdout=write_end,
            stderr=subprocess.PIPE, text=True, timeout=120,
        )
    finally:
        os.close(write_end)
    assert done.stderr == ""
    assert done.returncode == 141  # 128 + SIGPIPE, what a shell reports
