"""Exact mid-epoch resume beyond one single-process loader: 2-process CPU DDP (gloo) with 2 loader
workers per rank (started by forkserver on Python < 3.12, whose fork can deadlock a worker under
DDP: ``trainer_cli.data.base.FORK_CAN_DEADLOCK``), and one process with 2 workers (fork).

Digits, deterministic, 2 epochs of 8 batches per process (``limit_train_batches``), a checkpoint
every 2 optimizer steps. The run is SIGKILLed (with its other rank or its workers) once its
newest checkpoint lies in the middle of the second epoch, resumed with ``--ckpt_path last``, and
must end bitwise equal to the same run left alone: weights, optimizer and scheduler state.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from resume_support import every_n_steps_config, final_state, global_step, kill_group, kill_when, load, same_tensors, start_train, stops_itself_at
from support import CONFIGS, DIGITS, quiet_args, run_train

from trainer_cli.data.base import FORK_CAN_DEADLOCK

STEPS_PER_EPOCH = 8  # limit_train_batches: digits has 10 batches of 64 per process under 2-process DDP, 20 in one
EVERY = 2
SETUPS = {
    "ddp_cpu_sim+num_workers=2": ["--config", str(CONFIGS / "strategy" / "ddp_cpu_sim.yaml"), "--data.init_args.num_workers", "2"],
    "num_workers=2": ["--data.init_args.num_workers", "2"],
}


def fit_args(root: Path, tmp: Path, setup: str) -> list[str]:
    return [
        "fit", "--config", DIGITS, *SETUPS[setup], "--config", every_n_steps_config(tmp, EVERY), *quiet_args(root, 2),
        "--trainer.deterministic", "true", "--trainer.limit_train_batches", str(STEPS_PER_EPOCH),
        "--trainer.limit_val_batches", "2",
    ]


# the killed run stops itself after batch 5 of its second epoch (step 14), before that step's checkpoint
STOP_MID_EPOCH = stops_itself_at(1, 5)


# make test's 12 minutes: the DDP case (about 150 s of CPU on 2 cores) is in the long tier, which CI runs; in
# make test a DDP run preempted mid-epoch resumes bitwise equal under Slurm
# (test_slurm_restarts.py::test_preempted_ddp_job_resumes_bitwise_equal_to_the_job_left_alone), and the
# loader workers' exact resume is the single-process case here
LONG = {"ddp_cpu_sim+num_workers=2"}


@pytest.mark.parametrize("setup", [pytest.param(s, marks=pytest.mark.long) if s in LONG else s for s in SETUPS])
def test_sigkill_mid_epoch_then_resume_is_bitwise_equal(tmp_path: Path, setup: str) -> None:
    # the run left alone goes on beside the one that is killed and resumed
    reference_root = tmp_path / "reference"
    reference_proc = start_train(*fit_args(reference_root, tmp_path, setup), own_group=True)
    try:
        root = tmp_path / "runs"
        last = root / "digits" / "version_0" / "checkpoints" / "last.ckpt"
        proc = start_train(*fit_args(root, tmp_path, setup), *STOP_MID_EPOCH, own_group=True)
        try:  # SIGKILL, the other rank / the workers too, with the group stopped at a mid-epoch checkpoint
            kill_when(proc, lambda: (lambda s: s is not None and s > STEPS_PER_EPOCH and s % STEPS_PER_EPOCH != 0)(global_step(last)), group=True)
        finally:
            kill_group(proc)
        step = global_step(last)
        assert step is not None and STEPS_PER_EPOCH < step < 2 * STEPS_PER_EPOCH and step % STEPS_PER_EPOCH, f"killed at step {step}"
        assert load(last)["DigitsDataModule"]["train_loader"], "the checkpoint holds no training loader position"

        resumed = run_train(*fit_args(root, tmp_path, setup), *STOP_MID_EPOCH, "--ckpt_path", "last", timeout=300)
        assert resumed.returncode == 0, resumed.stderr[-3000:]
        by_forkserver = "DataLoader workers start by forkserver" in resumed.stdout
        assert by_forkserver == (FORK_CAN_DEADLOCK and setup.startswith("ddp")), resumed.stdout[-3000:]
        out, _ = reference_proc.communicate(timeout=300)
        assert reference_proc.returncode == 0, out[-3000:]
    finally:
        kill_group(reference_proc)
    reference = final_state(reference_root / "digits" / "version_0")
    assert sorted(p.name for p in (root / "digits").iterdir()) == ["version_0"]  # resumed in place
    state = final_state(root / "digits" / "version_0")
    assert state["step"] == reference["step"] == 2 * STEPS_PER_EPOCH
    assert same_tensors(state["model"], reference["model"]), f"{setup}: weights differ after a resume at step {step}"
    assert same_tensors(state["optimizer"], reference["optimizer"]), f"{setup}: optimizer state differs"
    assert same_tensors(state["scheduler"], reference["scheduler"]), f"{setup}: scheduler state differs"
