"""The step start timeout on the real local Slurm cluster (scripts/local-slurm): a job whose training
step cannot start, its CPUs held by another step of the job (as a restart finds a node still
cleaning up after the last one: "Requested nodes are busy"), gives up after
`--slurm.step_start_timeout_s` (srun --immediate), requeues itself with that cause instead of
waiting until its time limit, and trains on its next start."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import torch
from slurm_support import (  # noqa: F401 - slurm_cluster is a fixture
    scontrol_job,
    slurm_cluster,
    wait_for_file,
    wait_for_requeue,
    wait_for_state,
)
from test_slurm_cluster import _submit

from trainer_cli.job import restarts


def _hold_the_cpus_on_the_first_start(marker: Path) -> str:
    """A `--slurm.setup_raw` block: on the job's first start only, a step of the job that holds its
    CPUs for a minute, started (its marker written) before the training step asks for them."""
    return (
        'if [ "${SLURM_RESTART_COUNT:-0}" = 0 ]; then\n'
        f'    srun --exact -n1 -c "$SLURM_CPUS_PER_TASK" bash -c \'touch "$0"; exec sleep 60\' {marker} &\n'
        f"    until [ -e {marker} ]; do sleep 0.1; done\n"
        "fi"
    )


def test_a_step_that_cannot_start_requeues_the_job_which_then_trains(slurm_cluster: None, tmp_path: Path) -> None:  # noqa: F811
    timeout_s = 5
    job_id, run_dir, _ = _submit(
        tmp_path, 1, 1, "--slurm.setup_raw", _hold_the_cpus_on_the_first_start(tmp_path / "held"),
        "--slurm.step_start_timeout_s", str(timeout_s), "--slurm.python", sys.executable,  # (setup_raw: else PATH's)
    )
    log = run_dir / f"slurm-{job_id}.log"
    wait_for_state(job_id, {"RUNNING"}, timeout_s=120)
    started = time.monotonic()
    try:
        wait_for_file(run_dir / restarts.EVENTS_FILE, timeout_s=120)  # the first start gave up its step
        requeued_after = time.monotonic() - started
        wait_for_requeue(job_id)
    except AssertionError as err:
        raise AssertionError(f"{err}\n{log.read_text()[-3000:] if log.is_file() else '(no log)'}") from None
    assert wait_for_state(job_id, timeout_s=300) == "COMPLETED", log.read_text()[-3000:]
    text = log.read_text()
    assert f"Unable to create step for job {job_id}: Requested nodes are busy" in text, text[-3000:]
    assert (
        f"trainer-cli: srun started no task of the step within --slurm.step_start_timeout_s ({timeout_s} s): nodes "
        f"busy or still cleaning up; requeueing job {job_id} (restart 1), it resumes on its own"
    ) in text, text[-3000:]
    # the setup, the batch start and srun's 5 s: not the job's 10-minute time limit
    assert requeued_after < timeout_s + 30, f"requeued {requeued_after:.0f} s after the job started\n{text[-3000:]}"
    assert [(e["cause"], e["action"], e["restart"]) for e in restarts.read(run_dir)] == [
        (restarts.STEP_START, "requeue", 1)
    ]
    assert scontrol_job(job_id)["Restarts"] == "1" and f"job {job_id} restart 1 on" in text, text[-3000:]
    last = torch.load(run_dir / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=False)
    assert last["global_step"] == 5  # the one epoch of 5 batches, trained on the second start
