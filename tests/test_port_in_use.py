"""A local DDP run whose rendezvous port (``MASTER_PORT``) another process holds: one line naming the
port and how to choose another, exit code 2, no traceback from any rank, no rank left waiting and no
run directory left behind. The real ``train fit`` with 2 CPU processes (gloo, Lightning's subprocess
launcher) against a port this test listens on."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
from pathlib import Path

from support import CONFIGS, DIGITS, quiet_args, run_train


def _processes_naming(text: str) -> list[int]:
    """The processes whose command line holds ``text`` (a rank that outlived the command)."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        if text.encode() in cmdline:
            found.append(int(pid))
    return found


def test_ddp_rendezvous_port_in_use_is_one_line(tmp_path: Path) -> None:
    root = tmp_path / "runs"
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as held:  # another program's server on the port
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = str(held.getsockname()[1])
        try:
            done = run_train(
                "fit",
                "--config",
                DIGITS,
                "--config",
                str(CONFIGS / "strategy" / "ddp_cpu_sim.yaml"),
                *quiet_args(root),
                "--trainer.limit_train_batches",
                "2",
                "--trainer.limit_val_batches",
                "1",
                env={"MASTER_PORT": port},
                timeout=60,
            )
            left = _processes_naming(str(root))  # rank 1, waiting for a rendezvous that never comes
        except subprocess.TimeoutExpired:  # rank 0 ended, but rank 1 still holds its output: it waits
            raise AssertionError(
                f"train fit did not end in 60 s: processes of the run {_processes_naming(str(root))}"
            ) from None
        finally:
            for pid in _processes_naming(str(root)):
                os.kill(pid, signal.SIGKILL)
    output = done.stdout + done.stderr
    assert done.returncode == 2, output[-3000:]
    assert "Traceback" not in output, output[-3000:]
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert errors == [done.stderr.strip().splitlines()[-1]], output[-3000:]  # one line, the last
    assert f"port {port} (MASTER_PORT) on 127.0.0.1 (MASTER_ADDR) is already in use" in errors[0], errors
    assert "unset MASTER_PORT" in errors[0] and "set MASTER_PORT to a free one" in errors[0], errors
    assert not left, f"processes of the run left running: {left}"
    assert not list(root.rglob("run.json")), "the run directory of a run that never started is left"
