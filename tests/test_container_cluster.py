"""Jobs in containers (`--slurm.container.*`) on the real local cluster: Charliecloud's ch-run with a
Debian image the test builds (tests/container_support.py), the project's venv and its base
interpreter bound in. A 2-task DDP job in the image completes; the same job preempted once
(`scancel -s USR1`) is requeued by the batch script on the host and resumes bitwise equal to the job
left alone. The launcher's own steps of the batch script run on the host by Debian's bare `python3`
(no trainer-cli, no filelock), from the run's copy of them (<run>/.launcher). A job submitted without
USER whose image is missing fails in its first allocation, naming the image (not requeued).

Skipped with the reason where the cluster or the image cannot be had, failed instead under CI=true.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from container_support import charliecloud_or_skip, ensure_tools, mount_points
from slurm_support import (  # noqa: F401 - slurm_cluster is a fixture
    sacct_attempts,
    scontrol_job,
    slurm_cluster,
    wait_for_file,
    wait_for_requeue,
    wait_for_state,
)
from support import REPO
from test_slurm_cluster import _submit

from trainer_cli.job import restarts
from trainer_cli.launch import jobs
from trainer_cli.schedulers.slurm.container import HELPERS_DIR
from trainer_cli.schedulers import engines


def _container_args(image: Path) -> list[str]:
    """ch-run with the venv (resolved: a symlink in a work tree) and its base interpreter bound at
    themselves; the image's own python3 is Debian's 3.11, so a base interpreter in /usr is not bound."""
    venv, base = Path(sys.prefix).resolve(), Path(sys.base_prefix).resolve()
    mounts = [str(venv)] + ([str(base)] if not str(base).startswith("/usr") else [])
    mount_points(image, REPO, *mounts)  # ch-run binds onto directories the image has
    return [
        "--slurm.container.runtime", "charliecloud", "--slurm.container.image", str(image),
        "--slurm.container.mounts", "[" + ", ".join(mounts) + "]",
        "--slurm.container.env", '{"MPLCONFIGDIR": "/tmp"}',  # the image's $HOME is read-only
        "--slurm.python", str(Path(sys.prefix) / "bin" / "python"),
        "--slurm.container.helper_python", "/usr/bin/python3",  # Debian's: no trainer-cli of its own
    ]  # fmt: skip


@pytest.fixture(scope="module")
def image() -> Path:
    """The Debian image (built once, cached), with USER set: ch-run refuses to run without it."""
    os.environ.setdefault("USER", "root")
    return charliecloud_or_skip()


def test_a_job_whose_container_cannot_start_fails_after_one_allocation(
    slurm_cluster: None,  # noqa: F811
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Submitted from an environment without USER (a cron job, a CI runner, a service) with an image
    that is not there: the batch script gives ch-run the USER it needs, then ch-run fails in both
    tasks within a second, before any training. The job ends FAILED after one allocation, not
    requeued as if preempted; its log and `train jobs` name the first task's error."""
    why = ensure_tools()
    if why:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(why)
        pytest.skip(why)
    monkeypatch.delenv("USER", raising=False)  # sbatch passes the submitting environment to the job
    missing = tmp_path / "no-such-image"
    job_id, run_dir, _ = _submit(
        tmp_path, 2, 1, "--slurm.container.runtime", "charliecloud", "--slurm.container.image", str(missing),
        "--slurm.python", str(Path(sys.prefix) / "bin" / "python"), "--slurm.container.helper_python", "/usr/bin/python3",
    )  # fmt: skip
    log = run_dir / f"slurm-{job_id}.log"
    assert wait_for_state(job_id, timeout_s=120) == "FAILED", log.read_text()[-3000:]
    assert [row["State"] for row in sacct_attempts(job_id, 1)] == ["FAILED"]  # one allocation: no requeue
    assert scontrol_job(job_id)["Restarts"] == "0" and restarts.read(run_dir) == []
    text = log.read_text()
    cause = f"]: error: can't stat: {missing}: No such file or directory"
    said = [line for line in text.splitlines() if "before any task started training" in line]
    assert len(said) == 1 and cause in said[0] and "not restarted" in said[0], text[-3000:]
    assert "$USER not set" not in text and "stopped by Slurm" not in text, text[-3000:]
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert jobs.main(["--root", str(tmp_path)], engines()) == 0
    row = next(line for line in out.getvalue().splitlines() if line.startswith(job_id))
    assert " FAILED " in row and "failed before training: ch-run[" in row and cause in row, row


@pytest.mark.long  # two DDP jobs of 2 tasks each, one requeued: about 2 minutes on 2 cores
def test_preempted_ddp_job_in_a_charliecloud_image_resumes_bitwise_equal(
    slurm_cluster: None,  # noqa: F811
    image: Path,
    tmp_path: Path,
) -> None:
    from resume_support import final_state, same_tensors

    if subprocess.run(["/usr/bin/python3", "-c", "import filelock"], capture_output=True).returncode == 0:
        pytest.skip("the host's /usr/bin/python3 has filelock: the run's copy of the job steps would not be proven")
    epochs, batches = 10, 4
    exact = ["--trainer.max_epochs", str(epochs), "--trainer.limit_train_batches", str(batches),
             "--trainer.limit_val_batches", "1", "--trainer.deterministic", "true", "--data.init_args.num_workers", "2",
             *_container_args(image)]  # fmt: skip
    reference_id, reference_dir, _ = _submit(tmp_path / "reference", 2, 1, *exact)
    job_id, run_dir, _ = _submit(tmp_path / "preempted", 2, 1, *exact)
    script = (run_dir / "submit.sbatch").read_text()
    binds = re.findall(r" --bind=(\S+):(\S+)", script)  # the work tree, or a folder above it (a clone under /tmp: /tmp)
    assert any(src == dst and REPO.is_relative_to(src) for src, dst in binds), binds
    assert "srun --kill-on-bad-exit=1 --immediate=600 ch-run --bind=" in script, script
    assert f"--set-env=MPLCONFIGDIR=/tmp {image} --" in script, script
    assert (run_dir / HELPERS_DIR / "trainer_cli" / "job" / "jobstate.py").is_file()
    wait_for_file(run_dir / "checkpoints" / "last.ckpt", timeout_s=300)
    subprocess.run(["scancel", "-s", "USR1", job_id], check=True, timeout=30)
    try:
        wait_for_requeue(job_id)
    except subprocess.CalledProcessError:  # `StartTime=now` too late: Slurm's hold (30 s here) was over, it started
        assert scontrol_job(job_id)["JobState"] in ("RUNNING", "COMPLETING", "COMPLETED"), scontrol_job(job_id)
    log = run_dir / f"slurm-{job_id}.log"
    assert wait_for_state(job_id, timeout_s=300) == "COMPLETED", log.read_text()[-3000:]
    reference_log = reference_dir / f"slurm-{reference_id}.log"
    assert wait_for_state(reference_id, timeout_s=300) == "COMPLETED", reference_log.read_text()[-3000:]
    assert scontrol_job(reference_id)["Restarts"] == "0" and scontrol_job(job_id)["Restarts"] == "1"
    text = log.read_text()
    # both ranks ran in the image (Debian's /etc/os-release there, this host's Python bound in)
    assert "GLOBAL_RANK: 1, MEMBER: 2/2" in text and "Traceback" not in text, text[-3000:]
    assert "Matplotlib created a temporary cache" not in text, "--slurm.container.env did not reach the tasks"
    saved = torch.load(run_dir / "hpc_ckpt_1.ckpt.used", map_location="cpu", weights_only=False)
    assert batches < saved["global_step"] < epochs * batches, f"not mid-run: step {saved['global_step']}"
    # the ranks could not ask scontrol in the image; the batch script asked on the host: a preemption, not capped
    assert re.search(r"SIGUSR1 at step \d+ \(preempted, \d+ s left\): saved .*; requeueing job", text), text[-3000:]
    assert f"Resuming {run_dir} from {run_dir / 'hpc_ckpt_1.ckpt.used'} (step {saved['global_step']}," in text

    reference, resumed = final_state(reference_dir), final_state(run_dir)
    assert resumed["step"] == reference["step"] == epochs * batches
    assert same_tensors(resumed["model"], reference["model"]), f"weights differ after a requeue at step {saved['global_step']}"
    assert all(torch.equal(a, b) for a, b in zip(resumed["model"].values(), reference["model"].values()))
    assert same_tensors(resumed["optimizer"], reference["optimizer"]), "optimizer state differs"
