"""`train submit` on a real local Slurm cluster (scripts/local-slurm): multi-node CPU DDP over gloo,
test-after-fit chaining, `train jobs`, shell-injection safety, and requeue + resume.

Skipped with the reason where the cluster cannot start, failed instead under CI=true.
"""

from __future__ import annotations

import contextlib
import io
import json
import re
import subprocess
from pathlib import Path

import pytest
import torch

from conftest import DIGITS, quiet_args
from slurm_support import (
    LOCAL_PROFILE, job_id_from, scontrol_job, slurm_cluster, train_submit, wait_for_file, wait_for_state,  # noqa: F401
)
from trainer_cli.launch import jobs

SHORT = ["--trainer.limit_train_batches", "5", "--trainer.limit_val_batches", "2", "--slurm.time", "00:10:00"]


def _submit(root: Path, nodes: int, devices: int, *extra: str) -> tuple[str, Path, str]:
    code, out = train_submit(
        "--config", DIGITS, "--config", LOCAL_PROFILE, *quiet_args(root, epochs=1), *SHORT,
        "--trainer.num_nodes", str(nodes), "--trainer.devices", str(devices), *extra,
    )
    assert code == 0, out
    run_dir = Path(next(line.split(":", 1)[1].strip() for line in out.splitlines() if line.startswith("Run directory:")))
    return job_id_from(out), run_dir, out


@pytest.fixture(scope="module")
def ddp_jobs(slurm_cluster: None, tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[str, Path, str]]:  # noqa: F811
    """1 node x 2 tasks (with a test job after it) and 2 nodes x 2 tasks, queued together, finished."""
    submitted = {
        "1x2": _submit(tmp_path_factory.mktemp("one_node"), 1, 2, "--slurm.test_after_fit", "true"),
        "2x2": _submit(tmp_path_factory.mktemp("two_nodes"), 2, 2),
    }
    for job_id, _, _ in submitted.values():
        wait_for_state(job_id, timeout_s=420)
    return submitted


@pytest.mark.parametrize("shape,world", [("1x2", 2), ("2x2", 4)])
def test_ddp_job_completes_with_every_rank(ddp_jobs: dict[str, tuple[str, Path, str]], shape: str, world: int) -> None:
    job_id, run_dir, _ = ddp_jobs[shape]
    log = run_dir / f"slurm-{job_id}.log"
    text = log.read_text()
    assert scontrol_job(job_id)["JobState"] == "COMPLETED", text[-3000:]
    ranks = set(re.findall(rf"GLOBAL_RANK: (\d+), MEMBER: \d+/{world}", text))
    assert ranks == {str(r) for r in range(world)}, text[-3000:]
    assert f"world size             {world} = 2 devices x {world // 2} nodes" in text
    if shape == "2x2":
        assert "node[1-2]" in scontrol_job(job_id)["NodeList"]
    assert (run_dir / "checkpoints" / "last.ckpt").is_file()
    assert list(run_dir.glob("events.out.tfevents.*"))
    assert torch.load(run_dir / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=False)["global_step"] == 5
    assert [p.name for p in run_dir.parent.iterdir()] == [run_dir.name], "one run directory for all ranks"
    record = json.loads((run_dir / "job.json").read_text())
    assert record["job_id"] == job_id and record["nodes"] == world // 2


def test_test_job_runs_after_fit_on_best_checkpoint(ddp_jobs: dict[str, tuple[str, Path, str]]) -> None:
    fit_id, run_dir, out = ddp_jobs["1x2"]
    test_id = job_id_from(out, "Test job id:")
    assert wait_for_state(test_id, timeout_s=300) == "COMPLETED", (run_dir / f"slurm-{test_id}.log").read_text()[-3000:]
    assert f"afterok:{fit_id}" in (run_dir / "test.sbatch").read_text()
    text = (run_dir / f"slurm-{test_id}.log").read_text()
    assert "testing " + str(run_dir / "checkpoints" / "best-") in text
    assert "test/acc" in text


def test_train_jobs_lists_states(ddp_jobs: dict[str, tuple[str, Path, str]]) -> None:
    job_id, run_dir, _ = ddp_jobs["2x2"]
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert jobs.main(["--root", str(run_dir.parents[1])]) == 0
    line = next(row for row in out.getvalue().splitlines() if row.startswith(job_id + " "))
    assert "COMPLETED" in line and str(run_dir / f"slurm-{job_id}.log") in line


INJECT = "q'uo\"te;$(touch PWNED_subst)`touch PWNED_tick`;touch PWNED_semi"


def test_hostile_values_execute_nothing(slurm_cluster: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: F811
    """A job name, run directory and setup line full of shell syntax render into a script that, run by
    Slurm, executes none of it (the template's `run` block is replaced so no training runs)."""
    monkeypatch.chdir(tmp_path)
    template = tmp_path / "probe.sbatch.j2"
    template.write_text(
        '{% extends "ddp.sbatch.j2" %}\n{% block run %}\n'
        'printf "%s" "$SLURM_JOB_NAME" > {{ (run_dir ~ "/job_name.txt")|q }}\n'
        "printf '%s' {{ run_dir|q }} > {{ (run_dir ~ \"/run_dir.txt\")|q }}\n{% endblock %}\n"
    )
    root = tmp_path / f"root {INJECT}"
    # a setup line is split into words like a shell does (quotes group words), then run as one command
    setup = "echo setup-says \"q'uo\" 'te;$(touch PWNED_subst)' `touch PWNED_tick`;touch PWNED_semi $(touch PWNED_dollar)\ntouch PWNED_newline"
    code, out = train_submit(
        "--config", DIGITS, "--config", LOCAL_PROFILE, "--trainer.default_root_dir", str(root), "--name", f"n{INJECT}",
        "--slurm.job_name", INJECT, "--slurm.template", str(template), "--slurm.setup", json.dumps([setup]),
        "--slurm.time", "00:02:00",
    )
    assert code == 0, out
    job_id = job_id_from(out)
    run_dir = root / f"n{INJECT}" / "version_0"
    assert wait_for_state(job_id, timeout_s=120) == "COMPLETED", (run_dir / f"slurm-{job_id}.log").read_text()
    assert (run_dir / "job_name.txt").read_text() == INJECT
    assert (run_dir / "run_dir.txt").read_text() == str(run_dir)
    log = (run_dir / f"slurm-{job_id}.log").read_text()
    assert "setup-says q'uo te;$(touch PWNED_subst) `touch PWNED_tick`;touch PWNED_semi $(touch PWNED_dollar) touch PWNED_newline" in log
    assert not [p for p in tmp_path.rglob("PWNED*")], "nothing of the hostile values ran"


def _steps(event_file: Path, tag: str) -> list[int]:
    from tensorboard.backend.event_processing.event_file_loader import EventFileLoader

    return [ev.step for ev in EventFileLoader(str(event_file)).Load() for v in ev.summary.value if v.tag == tag]


def test_usr1_checkpoints_requeues_and_resumes(slurm_cluster: None, tmp_path: Path) -> None:  # noqa: F811
    """`scancel -s USR1` mid-training (what `--signal=SIGUSR1@N` does before the time limit): Lightning
    saves an hpc checkpoint and requeues; the restart resumes from it, in the same run directory and
    TensorBoard version, and completes."""
    epochs, batches = 40, 5
    job_id, run_dir, _ = _submit(tmp_path, 1, 2, "--trainer.max_epochs", str(epochs), "--trainer.log_every_n_steps", "1")
    wait_for_file(run_dir / "checkpoints" / "last.ckpt", timeout_s=300)  # training is under way
    subprocess.run(["scancel", "-s", "USR1", job_id], check=True, timeout=30)
    wait_for_file(run_dir / "hpc_ckpt_1.ckpt", timeout_s=120)
    wait_for_state(job_id, {"PENDING"}, timeout_s=120)
    subprocess.run(["scontrol", "update", f"JobId={job_id}", "StartTime=now"], check=True, timeout=30)  # skip the 120 s hold
    assert wait_for_state(job_id, timeout_s=400) == "COMPLETED", (run_dir / f"slurm-{job_id}.log").read_text()[-3000:]
    assert scontrol_job(job_id)["Restarts"] == "1"

    log = (run_dir / f"slurm-{job_id}.log").read_text()
    assert "restart 0 on" in log and "restart 1 on" in log, "one log, appended across the restart"
    assert f"Restored all states from the checkpoint at {run_dir / 'hpc_ckpt_1.ckpt'}" in log
    assert [p.name for p in run_dir.parent.iterdir()] == [run_dir.name], "the same run directory"
    saved_at = torch.load(run_dir / "hpc_ckpt_1.ckpt", map_location="cpu", weights_only=False)["global_step"]
    assert 0 < saved_at < epochs * batches
    files = sorted(run_dir.glob("events.out.tfevents.*"), key=lambda p: (int(p.name.split(".")[3]), p.name))
    resumed = _steps(files[-1], "train/loss")
    assert min(resumed) >= saved_at - 1, "the restart continues from the checkpoint, not from step 0"
    # logged steps are 0-based, and a mid-epoch restart may log the step it resumed at once more
    assert max(resumed) in {epochs * batches - 1, epochs * batches}
    last = torch.load(run_dir / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=False)
    assert last["global_step"] == epochs * batches, "the resumed run completed every step"


def test_cv_folds_run_as_a_job_array_then_aggregate(slurm_cluster: None, tmp_path: Path) -> None:  # noqa: F811
    """`--slurm.cv_folds 2`: one array task per fold, each its own run directory, then the aggregate
    job (afterok on the whole array) writes the table of both folds."""
    _, run_dir, out = _submit(tmp_path, 1, 1, "--slurm.cv_folds", "2")
    array_id = job_id_from(out)
    aggregate_id = re.search(r"^Aggregate:\s+job (\d+)", out, re.M).group(1)  # type: ignore[union-attr]
    assert "--array=0-1" not in (run_dir / "submit.sbatch").read_text()  # given to sbatch, not in the script
    assert wait_for_state(aggregate_id, timeout_s=420) == "COMPLETED", (run_dir / f"slurm-{aggregate_id}.log").read_text()[-3000:]
    for fold in (0, 1):
        assert (run_dir / "cv" / f"fold_{fold}" / "checkpoints" / "last.ckpt").is_file()
        assert json.loads((run_dir / "cv" / f"fold_{fold}" / "cv_fold.json").read_text())["fold"] == fold
    summary = json.loads((run_dir / "cv" / "cv_results.json").read_text())
    assert 0.0 <= summary["mean"]["val/acc"] <= 1.0
    assert array_id != aggregate_id
