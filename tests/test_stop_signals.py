"""The stop contract (trainer_cli.job.stop_signals): SIGTERM and Ctrl-C are recorded, never
handled, and every rank stops at the step they agree on; and the batch script's verdict on a step
(trainer_cli.schedulers.slurm.batch.step_verdict): done, failed by itself, asking for a restart, or killed
by Slurm."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import signal_stress
from support import REPO

from trainer_cli.schedulers.slurm import batch

LIGHTNING_NEVER_HANDLES_IT = """
import os, signal, time
from trainer_cli.job import stop_signals
assert stop_signals.install()
import lightning.pytorch as pl
from lightning.pytorch.demos.boring_classes import BoringModel

class Probe(pl.Callback):
    def on_train_start(self, trainer, pl_module):
        stop_signals.arm()  # training runs: a signal waits for a step boundary (InterruptCheckpoint does this in train)

    def on_train_batch_end(self, trainer, *args):
        if trainer.global_step == 2:
            os.kill(os.getpid(), signal.SIGTERM)
            deadline = time.monotonic() + 10
            while stop_signals.pending() is None and time.monotonic() < deadline:
                time.sleep(0.01)
        if trainer.global_step == 4:
            handler = signal.getsignal(signal.SIGTERM)
            print("lightning installed its handler:", callable(handler) and "lightning" in type(handler).__module__)
            print("received_sigterm:", trainer.received_sigterm, "recorded:", stop_signals.pending() == signal.SIGTERM)

trainer = pl.Trainer(max_steps=5, accelerator="cpu", logger=False, enable_checkpointing=False,
                     enable_progress_bar=False, enable_model_summary=False, callbacks=[Probe()])
trainer.fit(BoringModel())
print("fit ended normally")
"""


def test_lightning_installs_its_sigterm_handler_but_it_never_runs() -> None:
    """The workaround, against the installed Lightning: its signal connector still installs a
    SIGTERM handler in ``fit`` (no public switch leaves it out), but the blocked signal never
    reaches it: no broadcast inside a handler, ``trainer.received_sigterm`` stays False, the record
    is ours. (Without the InterruptCheckpoint of a ``train`` run nothing acts on it: fit goes on.)"""
    done = subprocess.run([sys.executable, "-c", LIGHTNING_NEVER_HANDLES_IT], cwd=REPO, capture_output=True, text=True, timeout=300)
    out = done.stdout + done.stderr
    assert done.returncode == 0, out[-3000:]
    assert "lightning installed its handler: True" in out, out[-3000:]
    assert "received_sigterm: False recorded: True" in out and "fit ended normally" in out, out[-3000:]
    assert "Received SIGTERM" not in out


@pytest.mark.parametrize(("index", "to"), [(1, "one"), (0, "all")])
def test_sigterm_to_a_ddp_run_ends_it_with_a_checkpoint(tmp_path: Path, index: int, to: str) -> None:
    """A few runs of tests/signal_stress.py (it runs 20 of each): SIGTERM to rank 1 alone, and to
    every process, at a random instant after the first last.ckpt of a 2-process DDP run: exit 143
    within 30 s, a complete last.ckpt, the resume line, no Lightning SIGTERM line."""
    outcome = signal_stress.one_run(index, to, 30.0, tmp_path)
    assert outcome.ok, f"{outcome.line}\n{outcome.output[-6000:]}"
    assert "Training stopped by SIGTERM at epoch" in outcome.output and "Resume with:" in outcome.output


def _records(*lines: str) -> list[tuple[float, str, str]]:
    return [(float(at), task, what) for at, task, what in (line.split(" ", 2) for line in lines)]


@pytest.mark.parametrize(
    ("code", "records", "verdict"),
    [
        (0, [], "completed"),
        (143, _records("5 1 exit 75", "5.1 0 exit 75", "5.2 1 signal SIGTERM"), "requeue"),
        # rank 0 failed by itself; srun --kill-on-bad-exit then ended rank 1 (srun reports 143 either way)
        (143, _records("5 0 exit 1", "5.5 1 signal SIGTERM", "6 1 exit 143"), "failed"),
        (2, _records("1 0 exit 2", "1 1 exit 2"), "failed"),
        (1, _records("3 0 error", "3.5 1 signal SIGTERM"), "failed"),
        # Slurm stopped rank 1 (a node's cleanup); rank 0 then failed in its collective
        (143, _records("5 1 signal SIGTERM", "6 0 exit 1", "7 1 exit 143"), "killed"),
        (137, [], "killed"),  # killed before Python noted anything (SIGKILL)
        # a SIGUSR1 in the first instant of a task (before its handler): srun reports 128 + 10; the
        # other task, ended by srun --kill-on-bad-exit, notes the SIGTERM
        (138, [], "requeue"),
        (138, _records("1 1 signal SIGTERM"), "requeue"),
        (138, _records("1 0 exit 2", "1.5 1 signal SIGTERM"), "failed"),  # an error of its own came first
        # rank 1 vanished without a note (SIGKILL), rank 0 then failed in its collective
        (143, _records("6 0 exit 1"), "killed"),
        (143, _records("1 0 fit start", "1 1 fit start", "6 0 exit 1"), "killed"),  # a start note tells no end
    ],
)
def test_step_verdict_tells_slurm_killing_the_step_from_the_training_failing(code: int, records: list, verdict: str) -> None:
    assert batch.step_verdict(code, records, tasks=2) == verdict


def test_task_records_are_read_back_in_time_order(tmp_path: Path) -> None:
    (tmp_path / "0").write_text("10.5 exit 1\n")
    (tmp_path / "1").write_text("10.0 signal SIGTERM\nnot a record\n10.7 exit 143\n")
    assert batch.task_records(tmp_path) == [(10.0, "1", "signal SIGTERM"), (10.5, "0", "exit 1"), (10.7, "1", "exit 143")]
    assert batch.step_verdict(143, batch.task_records(tmp_path)) == "killed"
    assert batch.task_records(None) == []  # no folder (not under the sbatch script): nothing
