"""SIGTERM at random instants to a 2-process DDP run on CPU (gloo): every run must end within
``--deadline`` seconds with exit code 143 and a complete ``last.ckpt``.

    python tests/signal_stress.py --runs 20 --to one    # to one rank (rank 0 or rank 1, in turn)
    python tests/signal_stress.py --runs 20 --to all    # to every process of the run, as Slurm sends it

Each run is ``train fit --config configs/experiment/digits.yaml --config
configs/strategy/ddp_cpu_sim.yaml --data.batch_size 16`` (the case of issue 20 that hung 3 runs of 7,
there 4 epochs); the signal comes a random 0-2 s after the first ``last.ckpt``. The run has 20 epochs
(about 0.6 s each here): 4 could end before the signal on a fast machine (a run exited 0 at its
last step 1.8 s after the first ``last.ckpt``), and a run the signal stops costs no more. A run that
has not ended by the deadline is a hang: every rank's Python stack is dumped (``faulthandler``,
through ``PYTHONFAULTHANDLER`` and SIGABRT) and printed, then the run is killed. Prints one line per
run and the tally; exits 1 unless every run passed. ``tests/test_stop_signals.py`` runs a few.
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
ARGS = [
    "fit", "--config", "configs/experiment/digits.yaml", "--config", "configs/strategy/ddp_cpu_sim.yaml",
    "--trainer.max_epochs", "20", "--data.batch_size", "16", "--trainer.enable_progress_bar", "false",
]


@dataclass
class Outcome:
    ok: bool
    line: str
    output: str = ""


def _ranks(main_pid: int) -> list[int]:
    """Rank 0 (the process started) and the ranks Lightning started from it (``LOCAL_RANK`` set)."""
    ranks = [main_pid]
    try:
        children = Path(f"/proc/{main_pid}/task/{main_pid}/children").read_text().split()
    except OSError:
        return ranks
    for child in map(int, children):
        try:
            env = Path(f"/proc/{child}/environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if any(item.startswith(b"LOCAL_RANK=") and item != b"LOCAL_RANK=0" for item in env):
            ranks.append(child)
    return ranks


def one_run(index: int, to: str, deadline_s: float, root: Path, python: str = sys.executable) -> Outcome:
    """One run: start it, wait for the first last.ckpt, signal at a random instant, check the end."""
    run_root = root / f"run_{index}"
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "PYTHONFAULTHANDLER": "1"}
    env.pop("TRAINER_CLI_RUN_DIR", None)
    log = open(run_root.with_suffix(".log"), "w+")
    proc = subprocess.Popen(
        [python, "-m", "trainer_cli", *ARGS, "--trainer.default_root_dir", str(run_root)],
        cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
    )
    last = run_root / "digits" / "version_0" / "checkpoints" / "last.ckpt"
    try:
        start = time.monotonic()
        while not last.exists():
            if proc.poll() is not None:
                return Outcome(False, f"run {index}: ended ({proc.returncode}) before its first last.ckpt", _read(log))
            if time.monotonic() - start > 600:
                return Outcome(False, f"run {index}: no last.ckpt after 600 s", _read(log))
            time.sleep(0.05)
        first_step = None
        delay = random.uniform(0.0, 2.0)
        time.sleep(delay)
        ranks = _ranks(proc.pid)
        if to == "all":
            os.killpg(proc.pid, signal.SIGTERM)
            target = "all"
        else:
            pid = ranks[index % len(ranks)]
            os.kill(pid, signal.SIGTERM)
            target = f"rank {ranks.index(pid)}"
        signalled = time.monotonic()
        try:
            code = proc.wait(timeout=deadline_s)
        except subprocess.TimeoutExpired:
            stacks = _dump_stacks(proc.pid, ranks)
            return Outcome(False, f"run {index}: HANG, SIGTERM to {target} {delay:.2f} s after the first last.ckpt", _read(log) + stacks)
        took = time.monotonic() - signalled
        output = _read(log)
        problems = []
        if code != 143:
            problems.append(f"exit {code}")
        try:
            import torch

            from trainer_cli.runtime.checkpointing import check_checkpoint_file

            check_checkpoint_file(str(last))
            first_step = torch.load(last, map_location="cpu", weights_only=False)["global_step"]
        except Exception as err:  # noqa: BLE001 - any failure to read it back is the finding
            problems.append(f"last.ckpt unreadable: {err}")
        if "Received SIGTERM" in output or "Traceback" in output:
            problems.append("Lightning's SIGTERM line or a traceback in the output")
        line = (f"run {index}: SIGTERM to {target} {delay:.2f} s after the first last.ckpt: exit {code} in {took:.1f} s, "
                f"last.ckpt at step {first_step}")
        return Outcome(not problems, line + ("" if not problems else f"  FAILED: {', '.join(problems)}"), output)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        log.close()


def _read(log: object) -> str:
    log.flush()  # type: ignore[attr-defined]
    log.seek(0)  # type: ignore[attr-defined]
    return log.read()  # type: ignore[attr-defined]


def _dump_stacks(main_pid: int, ranks: list[int]) -> str:
    """SIGABRT to every rank: faulthandler (PYTHONFAULTHANDLER=1) prints all its threads' stacks."""
    for pid in ranks:
        try:
            os.kill(pid, signal.SIGABRT)
        except ProcessLookupError:
            pass
    time.sleep(3)
    return f"\n--- stacks of ranks {ranks} (faulthandler) above ---\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--to", choices=["one", "all"], default="one")
    parser.add_argument("--deadline", type=float, default=30.0, help="seconds a run may take to end after the signal")
    parser.add_argument("--seed", type=int, default=None)
    args = parser.parse_args(argv)
    random.seed(args.seed)
    passed = 0
    with tempfile.TemporaryDirectory(prefix="signal_stress_") as tmp:
        for index in range(args.runs):
            outcome = one_run(index, args.to, args.deadline, Path(tmp))
            print(outcome.line, flush=True)
            if outcome.ok:
                passed += 1
            else:
                print(outcome.output[-6000:], flush=True)
    print(f"tally (SIGTERM to {args.to}): {passed}/{args.runs} ended with exit 143 and a complete last.ckpt within {args.deadline:.0f} s")
    return 0 if passed == args.runs else 1


if __name__ == "__main__":
    sys.exit(main())
