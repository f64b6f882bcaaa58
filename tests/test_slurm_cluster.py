"""`train submit` on a real local Slurm cluster (scripts/local-slurm): multi-node CPU DDP over gloo,
test-after-fit chaining, `train jobs`, shell-injection safety, and requeue + resume (and what the
requeued run cost over its attempts, against sacct).

Skipped with the reason where the cluster cannot start, failed instead under CI=true.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from slurm_support import (  # noqa: F401 - slurm_cluster and slurm_queries are fixtures
    LOCAL_PROFILE,
    counting_slurm_path,
    job_id_from,
    newest_step,
    resume_node,
    scontrol_job,
    slurm_cluster,
    slurm_queries,
    train_submit,
    usr1_at_start,
    wait_for_file,
    wait_for_requeue,
    wait_for_state,
    wait_for_step,
)
from support import DIGITS, USER_MODULE, every_epoch_last_checkpoint, quiet_args, run_train
from test_cost import assert_cost_matches_sacct

from trainer_cli.errors import UserError
from trainer_cli.launch import cancel as cancel_verb
from trainer_cli.launch import jobs
from trainer_cli.schedulers import submissions
from trainer_cli.schedulers import engines

SHORT = ["--trainer.limit_train_batches", "5", "--trainer.limit_val_batches", "2", "--slurm.time", "00:10:00"]


def _submit(root: Path, nodes: int, devices: int, *extra: str) -> tuple[str, Path, str]:
    code, out = train_submit(
        "--config", DIGITS, "--config", LOCAL_PROFILE, *every_epoch_last_checkpoint(root), *quiet_args(root, epochs=1), *SHORT,
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
    assert f"Using the best checkpoint of {run_dir}: {run_dir / 'checkpoints' / 'best-'}" in text, text[-3000:]
    assert "test/acc" in text


def test_train_jobs_lists_states(ddp_jobs: dict[str, tuple[str, Path, str]]) -> None:
    job_id, run_dir, _ = ddp_jobs["2x2"]
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert jobs.main(["--root", str(run_dir.parents[1])], engines()) == 0
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
    """`scancel -s USR1` mid-training (what `--signal=SIGUSR1@N` does before the time limit) on a
    one-task DDP job: an hpc checkpoint mid-epoch, a requeue; the restart resumes from it (one-task
    DDP mid-epoch resume used to die with an IndexError), in the same run directory and TensorBoard
    version, and completes."""
    epochs, batches = 30, 5  # seconds of training left after the first checkpoint: the signal comes before the end
    job_id, run_dir, _ = _submit(tmp_path, 1, 1, "--trainer.max_epochs", str(epochs), "--trainer.log_every_n_steps", "1")
    wait_for_file(run_dir / "checkpoints" / "last.ckpt", timeout_s=300)  # training is under way
    subprocess.run(["scancel", "-s", "USR1", job_id], check=True, timeout=30)
    wait_for_requeue(job_id)
    assert json.loads((run_dir / "job.json").read_text())["state"] == "REQUEUED"
    assert wait_for_state(job_id, timeout_s=400) == "COMPLETED", (run_dir / f"slurm-{job_id}.log").read_text()[-3000:]
    assert scontrol_job(job_id)["Restarts"] == "1"

    log = (run_dir / f"slurm-{job_id}.log").read_text()
    assert "restart 0 on" in log and "restart 1 on" in log, "one log, appended across the restart"
    hpc = run_dir / "hpc_ckpt_1.ckpt.used"  # retired once resumed from
    assert f"Resuming {run_dir} from {hpc}" in log
    assert [p.name for p in run_dir.parent.iterdir()] == [run_dir.name], "the same run directory"
    saved_at = torch.load(hpc, map_location="cpu", weights_only=False)["global_step"]
    assert 0 < saved_at < epochs * batches
    files = sorted(run_dir.glob("events.out.tfevents.*"), key=lambda p: (int(p.name.split(".")[3]), p.name))
    resumed = _steps(files[-1], "train/loss")
    assert min(resumed) >= saved_at - 1, "the restart continues from the checkpoint, not from step 0"
    # logged steps are 0-based, and a mid-epoch restart may log the step it resumed at once more
    assert max(resumed) in {epochs * batches - 1, epochs * batches}
    last = torch.load(run_dir / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=False)
    assert last["global_step"] == epochs * batches, "the resumed run completed every step"
    record = json.loads((run_dir / "job.json").read_text())
    assert (record["state"], record["restarts"], record["exit_code"]) == ("COMPLETED", 1, 0)
    starts = [json.loads(line) for line in (run_dir / "history.jsonl").read_text().splitlines()]  # each start, once
    slurm = {"scheduler": "slurm", "job_id": job_id}
    assert [(r["kind"], r["global_step"], r["job"]) for r in starts] == [
        ("new", 0, {**slurm, "restart_count": 0}), ("requeue", saved_at, {**slurm, "restart_count": 1})]
    # its cost over both attempts: `train jobs JOB` (--json) and `train runs` give sacct's CPU-hours (tests/test_cost.py)
    assert len(record["starts"]) == 2, "the batch script's start of each attempt"
    assert_cost_matches_sacct(tmp_path, job_id, run_dir, attempts=2)


def _quiet_requeue(log: str, requeues: int) -> None:
    """A requeue says so in one line: no gloo errors, tracebacks or "Resume with" hint of a stop."""
    assert log.count("it resumes on its own") == requeues, log[-3000:]
    for noise in ("collective mismatch", "Traceback", "Training stopped by", "Resume with"):
        assert noise not in log, f"{noise!r} in the log of a requeued job:\n{log[-3000:]}"


@pytest.fixture(scope="module")
def early_signals(slurm_cluster: None, tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Path]:  # noqa: F811
    """A 2-node job given SIGUSR1 the moment its processes start, and again the moment its restart's
    processes start (before Lightning has a handler; this used to kill every rank with exit code 138);
    released each time, it completes on its second restart."""
    job_id, run_dir, _ = _submit(tmp_path_factory.mktemp("early"), 2, 1, "--trainer.max_epochs", "2")
    for _ in range(2):
        usr1_at_start(job_id, tasks=2)
        wait_for_requeue(job_id)
    assert wait_for_state(job_id, timeout_s=400) == "COMPLETED", (run_dir / f"slurm-{job_id}.log").read_text()[-3000:]
    return job_id, run_dir


@pytest.mark.long  # make test's 12 minutes (41 s): a USR1 in the first instant of a task is
# test_slurm_restarts.py::test_usr1_in_the_first_instant_of_a_task_ends_in_a_requeue
def test_usr1_right_after_start_and_restart_requeues(early_signals: tuple[str, Path]) -> None:
    job_id, run_dir = early_signals
    log = (run_dir / f"slurm-{job_id}.log").read_text()
    assert scontrol_job(job_id)["Restarts"] == "2"
    assert "restart 2 on" in log
    _quiet_requeue(log, requeues=2)
    assert (run_dir / "hpc_ckpt_1.ckpt.used").is_file() and (run_dir / "hpc_ckpt_2.ckpt.used").is_file()
    assert f"Resuming {run_dir} from {run_dir / 'hpc_ckpt_2.ckpt.used'}" in log
    assert torch.load(run_dir / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=False)["global_step"] == 10


def test_train_jobs_reads_the_run_once_slurm_forgot_the_job(early_signals: tuple[str, Path]) -> None:
    """Slurm forgets a finished job after MinJobAge (300 s; no accounting here): `train jobs` then
    shows the restarts and final state the job wrote into <run>/job.json. Simulated by renaming the
    job to an id Slurm never had."""
    job_id, run_dir = early_signals
    root = run_dir.parents[1]
    forgotten = str(int(job_id) + 500_000)
    assert scontrol_job(forgotten).get("JobId") is None
    record = json.loads((run_dir / "job.json").read_text())
    assert (record["job_id"], record["restarts"], record["state"]) == (job_id, 2, "COMPLETED")
    (run_dir / "job.json").write_text(json.dumps(record | {"job_id": forgotten}))
    registry = root / submissions.REGISTRY_NAME  # as an earlier version kept it, in the root: read too
    lines = submissions.read_registry(root)
    registry.write_text("".join(json.dumps(r | {"job_id": forgotten}) + "\n" for r in lines if r["job_id"] == job_id))
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert jobs.main(["--root", str(root)], engines()) == 0
    row = next(r for r in out.getvalue().splitlines() if r.startswith(forgotten + " ")).split()
    assert row[1:3] == ["COMPLETED", "2"], out.getvalue()


def test_completed_run_resubmitted_is_not_retrained(early_signals: tuple[str, Path]) -> None:
    _, run_dir = early_signals
    last = run_dir / "checkpoints" / "last.ckpt"
    before = (last.stat().st_mtime_ns, sorted(p.name for p in run_dir.iterdir()))
    code, out = train_submit("--config", str(run_dir / "config.yaml"), "--config", LOCAL_PROFILE)
    assert code == 0, out
    assert f"{run_dir} is finished (2 epochs, step 10" in out and "Nothing was queued." in out, out  # checked before sbatch
    assert "Job id:" not in out, out
    assert (last.stat().st_mtime_ns, sorted(p.name for p in run_dir.iterdir())) == before, "the run untouched"


def test_max_restarts_is_checked_before_requeueing(slurm_cluster: None, tmp_path: Path) -> None:  # noqa: F811
    """With --slurm.max_restarts 0, SIGUSR1 near the time limit (120 s with a 60 s lead time: within
    the 60 + 90 s a time limit's warning may come, :data:`restarts.EARLY_MARGIN_S`, by 30 s however
    late the job acts on it) saves a checkpoint and ends the job: it does not requeue itself only to
    wait for an allocation and exit 1. (Slurm keeps time limits in whole minutes: the 00:02:30 this
    test asked for before was 00:03:00, 180 s against the 90 + 90 s margin, and a signal at the
    job's first second read as a preemption: restarts 1 in a fresh clone's suite.)"""
    job_id, run_dir, _ = _submit(
        tmp_path, 1, 1, "--trainer.max_epochs", "3", "--slurm.max_restarts", "0", "--slurm.time", "00:02:00", "--slurm.signal_delay_s", "60",
    )
    usr1_at_start(job_id, tasks=1)
    assert wait_for_state(job_id, timeout_s=300) == "COMPLETED"
    assert scontrol_job(job_id)["Restarts"] == "0"
    log = (run_dir / f"slurm-{job_id}.log").read_text()
    assert re.search(r"\(time limit, \d+ s left\): saved .*; not requeued: 0 of the restarts so far followed a time limit or a "
                     r"failure, the most --slurm.max_restarts 0 allows \(preemptions do not count\)", log), log[-3000:]
    assert torch.load(run_dir / "hpc_ckpt_1.ckpt", map_location="cpu", weights_only=False)["global_step"] == 0


def _scontrol(*args: str) -> None:
    subprocess.run(["scontrol", *args], check=True, timeout=30)


# long (make test's 12 minutes): five starts of one job; make test keeps test_usr1_right_after_start_and_restart_requeues and test_usr1_checkpoints_requeues_and_resumes
@pytest.mark.long
def test_resume_never_goes_back(slurm_cluster: None, tmp_path: Path) -> None:  # noqa: F811
    """Preempted (hpc checkpoint), run on, a node set DOWN (Slurm requeues the job), run on, crashed
    (SIGKILL), resubmitted with other resources: every start resumes from the run's newest
    checkpoint, so the global step never goes back, and the run completes."""
    # 30 epochs: enough that the run is still training when the crash comes (with 12, a start that
    # imports faster finished the run in the second between its step being seen and the SIGKILL)
    epochs, batches = 30, 5
    job_id, run_dir, _ = _submit(tmp_path, 2, 1, "--trainer.max_epochs", str(epochs))
    log = run_dir / f"slurm-{job_id}.log"
    wait_for_step(run_dir, batches)  # an epoch done
    subprocess.run(["scancel", "-s", "USR1", job_id], check=True, timeout=30)
    wait_for_requeue(job_id)
    preempted = newest_step(run_dir)
    assert (run_dir / "hpc_ckpt_1.ckpt").is_file()

    ran_on = wait_for_step(run_dir, preempted + batches, job_id=job_id)  # last.ckpt now newer than the hpc checkpoint
    hosts = subprocess.run(["scontrol", "show", "hostnames", scontrol_job(job_id)["NodeList"]], capture_output=True, text=True, timeout=30)
    node = hosts.stdout.split()[-1]
    try:
        _scontrol("update", f"NodeName={node}", "State=DOWN", "Reason=test")
        # the restart runs on the other nodes: brought back at once, the downed node may still be
        # killing this job id's old tasks and kill the restarted ones too (seen: the job FAILED), or
        # leave the restart's srun waiting for it ("Requested nodes are busy", seen: no step for 300 s).
        # scripts/local-slurm's ReturnToService=2 returns a DOWN node to service the moment its slurmd
        # answers (milliseconds): drained, it takes no new job until resume_node. The requeued job
        # cannot start before wait_for_requeue lets it (its begin time), so the drain comes first.
        _scontrol("update", f"NodeName={node}", "State=DRAIN", "Reason=test")
        wait_for_requeue(job_id)
        node_down = wait_for_step(run_dir, newest_step(run_dir) + batches, job_id=job_id)
    finally:
        resume_node(node)
    after_failure = log.read_text().split("Node failure", 1)[1].split("restart 2 on", 1)[0]
    assert "Resume with" not in after_failure, after_failure  # at most "Slurm requeued job ...: it resumes on its own"

    subprocess.run(["scancel", "-s", "KILL", job_id], check=True, timeout=30)
    assert wait_for_state(job_id, timeout_s=120) in {"FAILED", "CANCELLED"}
    crashed = newest_step(run_dir)
    assert crashed >= node_down
    if crashed >= epochs * batches:
        pytest.skip("the run finished before the crash: too fast to test the resubmission here")

    code, out = train_submit(
        "--config", str(run_dir / "config.yaml"), "--config", LOCAL_PROFILE, "--trainer.num_nodes", "1", "--trainer.devices", "2",
    )
    assert code == 0, out
    assert "resubmit: trainer.num_nodes: 2 -> 1" in out and re.search(r"resubmit: trainer.devices: '?1'? -> '?2'?\n", out), out
    new_id = job_id_from(out)
    assert wait_for_state(new_id, timeout_s=400) == "COMPLETED", (run_dir / f"slurm-{new_id}.log").read_text()[-3000:]
    assert (run_dir / "config.prev-1.yaml").is_file()  # the job's start rewrote config.yaml, as a resume does
    new_log = (run_dir / f"slurm-{new_id}.log").read_text()
    assert f"(step {crashed}," in new_log and "Resuming " in new_log, new_log[-3000:]

    text = log.read_text() + new_log
    resumed_at = [int(m) for m in re.findall(r"^Resuming .* \(step (\d+),", text, re.M)]
    # a restart after the node failure may itself be killed by Slurm (the downed node's cleanup): the
    # batch script then requeues it once more, one more "Resuming" line, never from an older step
    assert len(resumed_at) >= 3 and resumed_at == sorted(resumed_at), resumed_at
    assert resumed_at[0] >= preempted and resumed_at[1] >= ran_on and resumed_at[-1] >= crashed, resumed_at
    assert torch.load(run_dir / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=False)["global_step"] == epochs * batches
    assert not list(run_dir.glob("checkpoints/*-v1.ckpt")), "no duplicate checkpoint of a rolled-back run"


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


# what the local cluster (scripts/local-slurm: debug = 4 nodes of 8 CPUs, 8 untyped GPUs, 1 MB of
# memory; short = 2 nodes, 10 minutes) cannot give, and the line `train submit` says so with
CLUSTER_REFUSALS = {
    "unknown_partition": (["--slurm.partition", "gpux"], ["--slurm.partition gpux: this cluster has no such partition; it has debug (default), short"]),
    "more_nodes_than_the_cluster": (["--trainer.num_nodes", "10"], ["--trainer.num_nodes 10: partition debug has 4 node(s) for a job"]),
    "more_nodes_than_the_partition": (["--slurm.partition", "short", "--trainer.num_nodes", "3"], ["--trainer.num_nodes 3: partition short has 2 node(s)"]),
    "time_over_max_time": (["--slurm.partition", "short", "--slurm.time", "01:00:00"], ["--slurm.time 01:00:00: over the MaxTime of partition short (10 min)"]),
    "gpus_over_gres": (["--trainer.accelerator", "gpu", "--trainer.devices", "4", "--slurm.gpu_type", "a100"], ["--trainer.devices 4 GPUs per node", "at most 0 a100 GPU(s)"]),
    "tasks_over_cpus": (["--trainer.devices", "16"], ["--trainer.devices 16: one task per device needs 16 CPUs per node", "at most 8"]),
    "cpus_over_node": (["--slurm.cpus_per_task", "100"], ["--slurm.cpus_per_task 100 x 1 task(s) per node = 100 CPUs", "at most 8"]),
    "mem_over_node": (["--slurm.mem", "64G"], ["--slurm.mem 64G: the nodes of partition debug have at most 1 MB"]),
}


def _queued(under: Path) -> list[str]:
    """The queued jobs whose script lies under ``under`` (a job of another test, e.g. one that
    resubmitted itself, is not this test's)."""
    out = subprocess.run(["squeue", "-h", "-o", "%i %o"], capture_output=True, text=True, timeout=30, check=True).stdout
    return [line.split()[0] for line in out.splitlines() if str(under) in line]


@pytest.mark.parametrize("name", list(CLUSTER_REFUSALS))
def test_cluster_refuses_what_it_cannot_run_before_anything_is_written(slurm_queries: None, tmp_path: Path, name: str) -> None:  # noqa: F811
    """Asked of Slurm (scontrol) before the run directory is made or sbatch is called, for a
    submission and for `train submit --check` alike."""
    flags, fragments = CLUSTER_REFUSALS[name]
    root = tmp_path / "runs"
    for check in ([], ["--check"]):
        with pytest.raises(UserError) as refused:
            train_submit("--config", DIGITS, "--config", LOCAL_PROFILE, "--trainer.default_root_dir", str(root), *flags, *check)
        message = str(refused.value)
        assert message.startswith("the cluster cannot run this job:") and all(f in message for f in fragments), message
    assert not root.exists(), "nothing written"
    assert _queued(tmp_path) == [], "nothing queued"


def test_check_alone_exits_0_or_2_and_writes_nothing(slurm_queries: None, tmp_path: Path) -> None:  # noqa: F811
    root = tmp_path / "runs"
    base = ["submit", "--config", DIGITS, "--config", LOCAL_PROFILE, "--trainer.default_root_dir", str(root), "--check"]
    fits = run_train(*base, "--slurm.partition", "short", "--trainer.num_nodes", "2", "--slurm.time", "00:05:00")
    assert fits.returncode == 0, fits.stderr[-3000:]
    assert "check passed: 2 node(s) x 1 task(s)" in fits.stdout and "partition short" in fits.stdout
    refused = run_train(*base, "--trainer.num_nodes", "5")
    assert refused.returncode == 2 and "Traceback" not in refused.stderr
    assert [line for line in refused.stderr.splitlines() if line.startswith("error:")] == ["error: the cluster cannot run this job:"]
    assert not root.exists()


@pytest.fixture(scope="module")
def one_task_job(slurm_cluster: None, tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Path, Path]:  # noqa: F811
    """One finished 1-task job that three tests read, each its own side of it: named ``run%u``, with
    a site setup block (``--slurm.setup_raw``) that puts its own ``python`` first on PATH, and
    given SIGUSR1 once training has finished. Returns (job id, run directory, root)."""
    root = tmp_path_factory.mktemp("one_task")
    env_bin = root / "site_env" / "bin"
    env_bin.mkdir(parents=True)
    python = env_bin / "python"
    python.write_text(f'#!/bin/sh\necho "site env python" >&2\nexec "{os.path.abspath(sys.executable)}" "$@"\n')
    python.chmod(0o755)
    raw = f'export PATH="{env_bin}:$PATH" && echo "site block ran in job $SLURM_JOB_ID"'
    job_id, run_dir, _ = _submit(root, 1, 1, "--name", "run%u", "--slurm.setup_raw", raw)
    log = run_dir / f"slurm-{job_id}.log"
    deadline = time.monotonic() + 300
    while not (log.is_file() and "Run directory:" in log.read_text()):  # the run's closing lines: training has finished
        assert time.monotonic() < deadline, "the run did not finish"
        time.sleep(0.05)
    subprocess.run(["scancel", "-s", "USR1", job_id], capture_output=True, timeout=30)  # the job may be gone already
    wait_for_state(job_id, timeout_s=300)
    return job_id, run_dir, root


def test_percent_in_the_name_is_not_expanded_by_slurm(one_task_job: tuple[str, Path, Path]) -> None:
    """`--name 'run%u'`: Slurm would expand %u (the user) in --output; the log is where `train jobs` looks."""
    job_id, run_dir, root = one_task_job
    assert run_dir == root / "run%u" / "version_0"
    assert scontrol_job(job_id)["JobState"] == "COMPLETED"
    assert (run_dir / f"slurm-{job_id}.log").is_file(), sorted(p.name for p in run_dir.iterdir())
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert jobs.main(["--root", str(root)], engines()) == 0
    line = next(row for row in out.getvalue().splitlines() if row.startswith(job_id + " "))
    assert "COMPLETED" in line and str(run_dir / f"slurm-{job_id}.log") in line


PROBE = (
    '{% extends "ddp.sbatch.j2" %}\n{% block run %}\n'
    'echo "epoch 1/1  train/loss 0.5000  val/loss 0.4000  val/acc 0.7500  0.1 s"\nsleep "${PROBE_SLEEP_S:-0}"\n{% endblock %}\n'
)


@pytest.mark.long  # make test's 12 minutes (32 s): a dozen jobs and an array in two calls is
# test_jobs_explain.py::test_held_job_explained_and_a_dozen_jobs_and_an_array_in_two_calls, a cancel
# test_scheduler_seam.py::test_render_is_the_dry_run_and_a_held_job_is_cancelled
def test_train_jobs_asks_slurm_once_for_10_jobs_then_tails_and_cancels(slurm_cluster: None, tmp_path: Path) -> None:  # noqa: F811
    """10 submitted jobs (a probe template that prints an epoch line; one sleeps): `train jobs`
    calls scontrol once and sacct at most once (counted by wrappers in front of the real
    commands), shows every job with its progress; a registry entry whose id Slurm reused for
    another run's job is not given that job's state; `train cancel RUN` cancels the sleeping job and
    `train jobs --tail RUN` prints its log and stops once the job has ended.

    10, not the 20 of before: one call for every job holds at any number above one, and each submit and
    job costs the cluster group's serial chain (test_jobs_explain asks for a dozen jobs and an array)."""
    template = tmp_path / "probe.sbatch.j2"
    template.write_text(PROBE)
    root = tmp_path / "runs"
    submitted = []
    for i in range(10):
        env = json.dumps({"PROBE_SLEEP_S": "300" if i == 0 else "0"})
        code, out = train_submit(
            "--config", DIGITS, "--config", LOCAL_PROFILE, "--trainer.default_root_dir", str(root), "--name", f"probe{i}",
            "--slurm.template", str(template), "--slurm.env", env, "--slurm.time", "00:10:00",
        )
        assert code == 0, out
        submitted.append(job_id_from(out))
    for job_id in submitted[1:]:
        assert wait_for_state(job_id, timeout_s=120) == "COMPLETED"
    sleeper, sleeper_run = submitted[0], root / "probe0" / "version_0"
    wait_for_state(sleeper, {"RUNNING"}, timeout_s=120)
    # an older entry of the registry whose id Slurm has since given to another run's job
    other = tmp_path / "old_cluster_run"
    other.mkdir()
    (other / "job.json").write_text(json.dumps({"job_id": sleeper, "state": "COMPLETED", "restarts": 1}))
    with open(root / submissions.REGISTRY_NAME, "a") as registry:
        registry.write(json.dumps({"job_id": sleeper, "job_name": "old", "run_dir": str(other)}) + "\n")

    counting, calls = counting_slurm_path(tmp_path)
    done = run_train("jobs", "--root", str(root), "--last", "50", env=counting)
    assert done.returncode == 0, done.stderr[-3000:]
    made = calls.read_text().split()
    assert made.count("scontrol") == 1 and made.count("sacct") <= 1 and "squeue" not in made, made
    rows = {line.split()[0] + " " + line.split()[-2]: line for line in done.stdout.splitlines()[1:]}  # job id, name
    assert len(rows) == 11, done.stdout
    assert all("COMPLETED" in rows[f"{j} probe{i}"] and "epoch 1/1 val/loss 0.4000 val/acc 0.7500" in rows[f"{j} probe{i}"]
               for i, j in enumerate(submitted) if i), done.stdout
    assert "RUNNING" in rows[f"{sleeper} probe0"], done.stdout
    assert rows[f"{sleeper} old"].split()[1:3] == ["COMPLETED", "1"], "a reused id is matched on the job's script, not the id alone"

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert cancel_verb.cancel([str(sleeper_run), "--root", str(root)], engines()) == 0
    assert f"cancelled job(s) {sleeper}" in out.getvalue()
    assert wait_for_state(sleeper, timeout_s=60) == "CANCELLED"
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert jobs.main(["--root", str(root), "--tail", str(sleeper_run)], engines()) == 0
    assert "epoch 1/1  train/loss 0.5000" in out.getvalue()




# long (make test's 12 minutes: a 150-epoch job and its requeue): the job running the snapshot of a tree edited while it
# was held is tests/test_hw_submit.py's test_script_job_runs_the_snapshot_with_its_data_and_train_jobs_lists_it, an
# uncommitted change in the snapshot its test_a_snapshot_holds_the_uncommitted_version_and_its_diff, a requeue resuming
# test_usr1_checkpoints_requeues_and_resumes
@pytest.mark.long
def test_the_job_runs_the_code_submitted_not_the_code_edited_after(slurm_cluster: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: F811
    """A user package in a git repository (a committed module with an uncommitted change), submitted
    held; its source is then overwritten with code that raises and the job released: the job runs
    the submitted code, and so does its requeue after SIGUSR1."""
    repo = tmp_path / "myproject"
    (repo / "snapmodels").mkdir(parents=True)
    (repo / "snapmodels" / "__init__.py").write_text("")
    (repo / "snapmodels" / "tiny.py").write_text(USER_MODULE)
    git = ["git", "-c", "user.email=t@example.com", "-c", "user.name=t", "-C", str(repo)]
    subprocess.run([*git, "init", "-q"], check=True, timeout=30)
    subprocess.run([*git, "add", "."], check=True, timeout=30)
    subprocess.run([*git, "commit", "-qm", "model"], check=True, timeout=30)
    (repo / "snapmodels" / "tiny.py").write_text(USER_MODULE.replace("hidden: int = 16", "hidden: int = 24"))  # uncommitted
    monkeypatch.chdir(repo)
    monkeypatch.syspath_prepend(str(repo))  # as `PYTHONPATH=. train submit` from the repository
    job_id, run_dir, out = _submit(
        tmp_path / "runs", 1, 1, "--model", "snapmodels.tiny.TinyNet", "--trainer.max_epochs", "150", "--slurm.extra_sbatch", '["--hold"]',
    )
    assert f"Code:          {run_dir / 'code'} (" in out and "with uncommitted changes" in out, out
    record = json.loads((run_dir / "code.json").read_text())
    assert record["dirty"] is True and record["files"] == 2 and Path(record["source"]).resolve() == repo.resolve()
    assert "hidden: int = 24" in (run_dir / "code.diff").read_text()
    (repo / "snapmodels" / "tiny.py").write_text('raise RuntimeError("edited after submit")\n')
    _scontrol("release", job_id)

    wait_for_file(run_dir / "checkpoints" / "last.ckpt", timeout_s=300)
    subprocess.run(["scancel", "-s", "USR1", job_id], check=True, timeout=30)
    wait_for_requeue(job_id)
    assert wait_for_state(job_id, timeout_s=400) == "COMPLETED", (run_dir / f"slurm-{job_id}.log").read_text()[-3000:]
    assert scontrol_job(job_id)["Restarts"] == "1"
    log = (run_dir / f"slurm-{job_id}.log").read_text()
    assert "edited after submit" not in log and "restart 1 on" in log
    state = torch.load(run_dir / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=False)["state_dict"]
    assert state["net.1.weight"].shape == (24, 64), "the submitted (uncommitted) version of the module ran"


def test_usr1_after_training_ended_leaves_the_job_completed(one_task_job: tuple[str, Path, Path]) -> None:
    """SIGUSR1 once training has finished (the time limit's warning as a run ends; Python gives
    caught signals their default action back while it shuts down, and SIGUSR1's kills): the job
    still ends COMPLETED."""
    job_id, run_dir, _ = one_task_job
    assert scontrol_job(job_id)["JobState"] == "COMPLETED", (run_dir / f"slurm-{job_id}.log").read_text()[-3000:]


def test_raw_setup_block_activates_the_python_the_job_runs(one_task_job: tuple[str, Path, Path]) -> None:
    """A site's own shell in --slurm.setup_raw ($VAR, &&, PATH changes) runs in the job, and without
    --slurm.python the job runs the `python` it put on PATH (an activated environment)."""
    job_id, run_dir, _ = one_task_job
    log = (run_dir / f"slurm-{job_id}.log").read_text()
    assert scontrol_job(job_id)["JobState"] == "COMPLETED", log[-3000:]
    assert f"site block ran in job {job_id}" in log and "site env python" in log
    assert "srun --kill-on-bad-exit=1 --immediate=600 python -m trainer_cli fit" in (run_dir / "submit.sbatch").read_text()
