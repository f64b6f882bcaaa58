"""Run ``train`` with its stdout on a pseudo-terminal, as in an interactive shell."""

from __future__ import annotations

import fcntl
import os
import pty
import struct
import subprocess
import sys
import tempfile
import termios
from pathlib import Path

from tests.support import REPO


def run_train_in_terminal(*args: str, timeout_s: float = 600) -> tuple[int, str, str]:
    """``python -m trainer_cli ARGS`` with stdout on a pty; returns (exit code, stdout, stderr)."""
    env = {k: v for k, v in os.environ.items() if k != "TRAINER_CLI_RUN_DIR"} | {"PYTHONUNBUFFERED": "1"}
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 160, 0, 0))  # 24 x 160: else 0 columns, no bar
    with tempfile.TemporaryFile() as err:  # a file, not a pipe: nothing blocks while we read the pty
        proc = subprocess.Popen(
            [sys.executable, "-m", "trainer_cli", *args], cwd=Path(REPO), env=env,
            stdin=subprocess.DEVNULL, stdout=slave, stderr=err,
        )
        os.close(slave)
        chunks = []
        while True:
            try:
                data = os.read(master, 65536)
            except OSError:  # EIO: the child's side is closed
                break
            if not data:
                break
            chunks.append(data)
        os.close(master)
        code = proc.wait(timeout=timeout_s)
        err.seek(0)
        stderr = err.read().decode(errors="replace")
    return code, b"".join(chunks).decode(errors="replace"), stderr
