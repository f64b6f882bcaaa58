"""A user's own script with TrainerCLI submits itself to the real local Slurm cluster: the job runs
the script with the frozen config, is preempted (SIGUSR1), requeued, resumes and completes."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import torch
from slurm_support import LOCAL_PROFILE, job_id_from, slurm_cluster, wait_for_file, wait_for_requeue, wait_for_state  # noqa: F401
from test_dropin import FOREIGN, _script


@pytest.mark.long  # make test's 12 minutes (29 s): a script's job is test_hw_submit.py::test_script_job_runs_the_snapshot_with_its_data_and_train_jobs_lists_it,
# a requeue and resume test_slurm_cluster.py::test_usr1_checkpoints_requeues_and_resumes
def test_users_script_job_requeues_and_resumes(slurm_cluster: None, tmp_path: Path) -> None:  # noqa: F811
    epochs = 40  # 8 steps an epoch: seconds of training left when the signal comes
    out = _script(tmp_path, "submit", "--config", LOCAL_PROFILE, "--trainer.devices", "1", "--trainer.num_nodes", "1",
                  "--data.n_labels", "3", "--trainer.max_epochs", str(epochs), "--trainer.enable_progress_bar", "false")
    assert out.returncode == 0, out.stderr[-3000:]
    job_id = job_id_from(out.stdout)
    run_dir = tmp_path / "foreign_logs" / "blobs" / "version_0"  # where `python main.py fit` puts it: the script's logger
    wait_for_file(run_dir / "checkpoints" / "last.ckpt", timeout_s=300)
    subprocess.run(["scancel", "-s", "USR1", job_id], check=True, timeout=30)
    wait_for_requeue(job_id)
    log = lambda: (run_dir / f"slurm-{job_id}.log").read_text()  # noqa: E731
    assert wait_for_state(job_id, timeout_s=400) == "COMPLETED", log()[-3000:]
    assert f"{FOREIGN / 'main.py'} fit --config" in (run_dir / "submit.sbatch").read_text()
    assert "restart 1 on" in log() and f"Resuming {run_dir}" in log()
    assert "Logs go to the run directory" not in log(), "the script's logger already logs there"
    assert list((run_dir).glob("metrics.csv")), "the CSVLogger of the script's trainer_defaults, in the run directory"
    last = torch.load(run_dir / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=False)
    assert last["global_step"] == epochs * 8 and last["hyper_parameters"]["num_classes"] == 3
