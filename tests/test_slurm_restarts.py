"""Restarts on a real local Slurm cluster (scripts/local-slurm): time limit and preemption told apart
(Slurm's own `--signal` before the time limit, `scancel -s USR1` for a preemption), the cap naming
the cause that ended the run, and `--slurm.requeue_mode resubmit`: the job queues its own script
again into the same run, which resumes under the new job id that `train jobs` follows; and a real
preemption by Slurm (the `urgent` partition of scripts/local-slurm), in both modes.

Skipped with the reason where the cluster cannot start, failed instead under CI=true.
"""

from __future__ import annotations

import contextlib
import io
import json
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from slurm_support import (  # noqa: F401 - slurm_cluster is a fixture
    _job_processes,
    job_id_from,
    newest_step,
    sacct_attempts,
    sacct_hours,
    scontrol_job,
    slurm_cluster,
    wait_for_file,
    wait_for_requeue,
    wait_for_state,
    wait_for_step,
)
from support import REPO
from test_slurm_cluster import _submit

from trainer_cli.job import restarts
from trainer_cli.schedulers.slurm.output import time_limit_s
from trainer_cli.launch import cancel as cancel_verb
from trainer_cli.launch import jobs
from trainer_cli.rundir import run_cost
from trainer_cli.schedulers import engines


def _train_jobs(root: Path) -> dict[str, str]:
    """``train jobs --root ROOT``: its rows by job id."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert jobs.main(["--root", str(root)], engines()) == 0
    return {line.split()[0]: line for line in out.getvalue().splitlines()[1:]}


@pytest.mark.long  # make test's 12 minutes: the cause told on the cluster is test_a_real_preemption_is_told_from_the_time_limit[requeue], the cap's rule tests/test_restarts.py's test_preemptions_do_not_consume_the_cap
def test_preemption_then_time_limit_and_the_cap_names_the_cause(slurm_cluster: None, tmp_path: Path) -> None:  # noqa: F811
    """`scancel -s USR1` with 10 minutes left is a preemption: requeued even with `--slurm.max_restarts
    0` (preemptions do not consume the cap); the restart, its time limit cut once it trains, gets
    Slurm's own `--signal=SIGUSR1@100` warning: a time limit, which the cap does not allow, so the
    run stops there, saying so; `train jobs` shows both."""
    # more epochs than the job can train before its time limit (a quiet machine trains 1,700 steps,
    # 350 epochs, between the restart's start and its warning): the signals end the run, never its last epoch
    job_id, run_dir, _ = _submit(
        tmp_path, 1, 1, "--trainer.max_epochs", "5000", "--slurm.max_restarts", "0", "--slurm.signal_delay_s", "100",
    )
    wait_for_file(run_dir / "checkpoints" / "last.ckpt", timeout_s=300)
    subprocess.run(["scancel", "-s", "USR1", job_id], check=True, timeout=30)
    assert wait_for_state(job_id, {"PENDING", "COMPLETED", "FAILED", "CANCELLED"}, timeout_s=120) == "PENDING"
    preempted_at = newest_step(run_dir)
    wait_for_requeue(job_id)
    # The time limit is cut once the restart trains: Slurm may send `--signal=USR1@100` up to 60 s early,
    # so a limit cut before the restart starts can signal it before it has loaded anything.
    wait_for_step(run_dir, preempted_at + 1, job_id=job_id)
    run_s = time_limit_s(scontrol_job(job_id)["RunTime"]) or 0
    limit_min = (run_s + 100) // 60  # 41-100 s left: within signal_delay_s, so the warning comes at Slurm's next time-limit check
    subprocess.run(["scontrol", "update", f"JobId={job_id}", f"TimeLimit={limit_min}"], check=True, timeout=30)
    log = run_dir / f"slurm-{job_id}.log"
    assert wait_for_state(job_id, timeout_s=240) == "COMPLETED", log.read_text()[-3000:]
    text = log.read_text()
    assert re.search(r"SIGUSR1 at step \d+ \(preempted, \d+ s left\): saved .*; requeueing job", text), text[-3000:]
    assert re.search(
        r"SIGUSR1 at step \d+ \(time limit, \d+ s left\): saved .*; not requeued: 0 of the restarts so far followed a time "
        r"limit or a failure, the most --slurm.max_restarts 0 allows \(preemptions do not count\): the run stops here, "
        r"ended by the time limit", text,
    ), text[-3000:]
    events = restarts.read(run_dir)
    assert [(e["cause"], e["action"], e["restart"]) for e in events] == [("preempted", "requeue", 1), ("time limit", "stop", 1)]
    assert events[1]["seconds_left"] <= 100 + restarts.EARLY_MARGIN_S < events[0]["seconds_left"]
    row = _train_jobs(tmp_path)[job_id]
    assert "COMPLETED" in row and "1 (1 preempted; stopped by time limit)" in row, row
    assert json.loads((run_dir / "job.json").read_text())["ended_by"] == "time limit"


def test_resubmit_mode_continues_the_run_as_a_new_job(slurm_cluster: None, tmp_path: Path) -> None:  # noqa: F811
    """`--slurm.requeue_mode resubmit`: SIGUSR1 ends the job after the hpc checkpoint and the job
    queues its own script again; the new job (a new id) resumes in the same run directory, the
    global step never going back, and completes; the test job (`--slurm.test_after_fit`) waits for
    it, not for the job that ended. `train jobs`, `--tail` and `train cancel` follow the run to the
    new id."""
    epochs, batches = 30, 5  # seconds of training left after the first checkpoint: the signal comes before the end
    job_id, run_dir, out = _submit(
        tmp_path, 1, 1, "--trainer.max_epochs", str(epochs), "--slurm.requeue_mode", "resubmit", "--slurm.test_after_fit", "true",
    )
    test_id = job_id_from(out, "Test job id:")
    wait_for_step(run_dir, batches, job_id=job_id)
    tailed = subprocess.Popen(  # `train jobs --tail RUN` started on the first job follows the run into the new one
        [sys.executable, "-m", "trainer_cli", "jobs", "--root", str(tmp_path), "--tail", str(run_dir)],
        cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    assert tailed.stdout is not None
    first_line = tailed.stdout.readline()  # it follows the first job (a loaded machine starts it late)
    subprocess.run(["scancel", "-s", "USR1", job_id], check=True, timeout=30)
    old_log = run_dir / f"slurm-{job_id}.log"
    assert wait_for_state(job_id, timeout_s=120) == "COMPLETED", old_log.read_text()[-3000:]
    assert scontrol_job(job_id)["Restarts"] == "0", "resubmitted, not requeued"
    record = json.loads((run_dir / "job.json").read_text())
    new_id = str(record["job_id"])
    assert new_id != job_id and record["resubmitted_from"] == [job_id], record
    saved = newest_step(run_dir)
    assert 0 < saved < epochs * batches
    assert scontrol_job(test_id)["JobState"] == "PENDING", "the test job waits for the new job"
    assert wait_for_state(new_id, timeout_s=300) == "COMPLETED", (run_dir / f"slurm-{new_id}.log").read_text()[-3000:]
    assert wait_for_state(test_id, timeout_s=300) == "COMPLETED", (run_dir / f"slurm-{test_id}.log").read_text()[-3000:]
    assert f"Using the best checkpoint of {run_dir}: {run_dir / 'checkpoints' / 'best-'}" in (run_dir / f"slurm-{test_id}.log").read_text()
    followed, notes = tailed.communicate(timeout=60)
    followed = first_line + followed
    assert f"[train jobs --tail: the run goes on as job {new_id}]" in notes and f"job {new_id} is COMPLETED" in notes, notes
    assert f"job {job_id} restart 0 on" in followed and f"job {new_id} restart 1 on" in followed, followed[-3000:]

    text = old_log.read_text()
    assert text.count("it resumes on its own") == 1 and f"resubmitted {run_dir} as job {new_id} (restart 1)" in text, text[-3000:]
    assert "Traceback" not in text and "Resume with" not in text, text[-3000:]
    new_log = (run_dir / f"slurm-{new_id}.log").read_text()
    assert f"job {new_id} restart 1 on" in new_log, new_log[-3000:]
    resumed = re.search(r"^Resuming .* from (\S+) \(step (\d+),", new_log, re.M)
    assert resumed and resumed.group(1) == str(run_dir / "hpc_ckpt_1.ckpt.used") and int(resumed.group(2)) == saved, new_log[-3000:]
    assert torch.load(run_dir / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=False)["global_step"] == epochs * batches
    assert [p.name for p in run_dir.parent.iterdir()] == [run_dir.name], "the same run directory"
    events = restarts.read(run_dir)
    assert [(e["job_id"], e["cause"], e["action"], e["restart"]) for e in events] == [(job_id, "preempted", "resubmit", 1)]
    final = json.loads((run_dir / "job.json").read_text())
    assert (final["job_id"], final["state"], final["restarts"]) == (new_id, "COMPLETED", 1)
    # the run's cost holds both jobs' attempts (the one it resubmitted itself from too), as sacct has them
    rows = sacct_attempts(job_id, 1) + sacct_attempts(new_id, 1)
    spent = run_cost.cost(run_dir, engines=engines()).as_json()
    assert (spent["source"], spent["attempts"], [a["job_id"] for a in spent["per_attempt"]]) == ("sacct", 2, [job_id, new_id]), spent
    assert spent["cpu_hours"] == pytest.approx(sacct_hours(rows), rel=0.02), (spent, rows)

    rows = _train_jobs(tmp_path)
    assert job_id not in rows and "COMPLETED" in rows[new_id] and "1 (1 preempted)" in rows[new_id], rows
    assert jobs.find_run(tmp_path, job_id) == jobs.find_run(tmp_path, new_id) == jobs.find_run(tmp_path, str(run_dir))
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert jobs.main(["--root", str(tmp_path), "--tail", job_id], engines()) == 0
    assert "restart 1 on" in out.getvalue()
    out = io.StringIO()
    with contextlib.redirect_stdout(out):  # the jobs have ended: scancel accepts them and does nothing
        assert cancel_verb.cancel([job_id, "--root", str(tmp_path)], engines()) == 0
    assert f"cancelled job(s) {new_id}, {test_id} of {run_dir}" in out.getvalue()


@pytest.mark.long  # make test's 12 minutes: a job resubmitting itself and resuming is test_resubmit_mode_continues_the_run_as_a_new_job
def test_refused_requeue_resubmits_instead(slurm_cluster: None, tmp_path: Path) -> None:  # noqa: F811
    """A job Slurm will not requeue (`--no-requeue`, as a site's JobRequeue=0 or a PreemptMode that
    cancels makes it): `scontrol requeue` fails, and the job resubmits itself instead; the new job
    resumes from the hpc checkpoint and completes."""
    epochs, batches = 30, 5  # seconds of training left after the first checkpoint: the signal comes before the end
    job_id, run_dir, _ = _submit(tmp_path, 1, 1, "--trainer.max_epochs", str(epochs), "--slurm.extra_sbatch", '["--no-requeue"]')
    wait_for_step(run_dir, batches, job_id=job_id)
    subprocess.run(["scancel", "-s", "USR1", job_id], check=True, timeout=30)
    wait_for_state(job_id, timeout_s=120)
    text = (run_dir / f"slurm-{job_id}.log").read_text()
    assert f"`scontrol requeue {job_id}` failed: " in text and "resubmitting instead" in text, text[-3000:]
    record = json.loads((run_dir / "job.json").read_text())
    new_id = str(record["job_id"])
    assert record["resubmitted_from"] == [job_id] and new_id != job_id, record
    new_log = run_dir / f"slurm-{new_id}.log"
    assert wait_for_state(new_id, timeout_s=300) == "COMPLETED", new_log.read_text()[-3000:] if new_log.is_file() else record
    assert f"from {run_dir / 'hpc_ckpt_1.ckpt.used'} (step" in new_log.read_text()
    assert torch.load(run_dir / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=False)["global_step"] == epochs * batches
    assert [(e["action"], e["restart"]) for e in restarts.read(run_dir)] == [("requeue", 1), ("resubmit", 1)]
    assert "1 (1 preempted)" in _train_jobs(tmp_path)[new_id]


def _urgent_partition() -> bool:
    """Whether the cluster has the preempting partition `urgent` (scripts/local-slurm since it has one)."""
    out = subprocess.run(["scontrol", "show", "partition", "urgent", "-o"], capture_output=True, text=True, timeout=30)
    config = subprocess.run(["scontrol", "show", "config"], capture_output=True, text=True, timeout=30).stdout
    return out.returncode == 0 and "PriorityTier=2" in out.stdout and "preempt_send_user_signal" in config


# resubmit in the long tier (make test's 12 minutes): a self-resubmission resuming is test_resubmit_mode_continues_the_run_as_a_new_job
@pytest.mark.parametrize("mode", ["requeue", pytest.param("resubmit", marks=pytest.mark.long)])
def test_a_real_preemption_is_told_from_the_time_limit(slurm_cluster: None, tmp_path: Path, mode: str) -> None:  # noqa: F811
    """Slurm itself preempts the job (a job of the higher-tier partition `urgent` needs its node;
    PreemptMode=CANCEL with a 60 s GraceTime, the --signal sent at once): the job tells it from the
    time limit (Slurm set its PreemptTime and moved its EndTime to 60 s from now, well within
    --slurm.signal_delay_s), checkpoints and restarts by `mode`, and the run completes."""
    if not _urgent_partition():
        pytest.skip("the running local cluster has no preempting partition `urgent`: it was started by an older "
                    "scripts/local-slurm; restart it (scripts/local-slurm stop; scripts/local-slurm start) to run this test")
    epochs, batches = 60, 5  # long enough (seconds) that Slurm's preemption comes before the end, on a loaded machine too
    job_id, run_dir, _ = _submit(
        tmp_path, 1, 1, "--trainer.max_epochs", str(epochs), "--slurm.requeue_mode", mode,
        "--slurm.extra_sbatch", '["--nodelist=node4", "--exclusive"]',  # alone on node4: nobody else's job is preempted
    )
    wait_for_step(run_dir, batches, job_id=job_id)
    urgent = subprocess.run(
        ["sbatch", "--parsable", "-p", "urgent", "--nodelist=node4", "--exclusive", "--time=1", f"--output={tmp_path}/urgent-%j.log", "--wrap", "sleep 1"],
        capture_output=True, text=True, timeout=30, check=True,
    ).stdout.strip()
    try:
        assert wait_for_state(urgent, timeout_s=120) == "COMPLETED"
        log = run_dir / f"slurm-{job_id}.log"
        text = log.read_text()
        assert re.search(r"SIGUSR1 at step \d+ \(preempted, \d+ s left\): saved ", text), text[-3000:]
        event = restarts.read(run_dir)[-1]
        assert (event["cause"], event["action"]) == ("preempted", mode), event
        current = str(json.loads((run_dir / "job.json").read_text())["job_id"])
        if mode == "requeue":
            assert current == job_id
            wait_for_requeue(job_id)
        else:
            assert current != job_id
        # (600 s: 300 steps take about 40 s on a quiet machine; at a load of 23 they outlasted 300 s)
        assert wait_for_state(current, timeout_s=600) == "COMPLETED", (run_dir / f"slurm-{current}.log").read_text()[-3000:]
        assert torch.load(run_dir / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=False)["global_step"] == epochs * batches
        assert "1 (1 preempted)" in _train_jobs(tmp_path)[current]
    finally:
        subprocess.run(["scancel", urgent], capture_output=True, timeout=30)


def test_usr1_in_the_first_instant_of_a_task_ends_in_a_requeue(slurm_cluster: None, tmp_path: Path) -> None:  # noqa: F811
    """SIGUSR1 the moment the task's process exists (before Python installed anything: the signal's
    default action kills it, srun exits 138): the batch script takes it for the requeue signal it
    is and requeues the job as preempted (not against the cap: `--slurm.max_restarts 0`), which
    resumes and completes. (Caught a few milliseconds later, the task saves and requeues itself.)"""
    job_id, run_dir, _ = _submit(tmp_path, 1, 1, "--trainer.max_epochs", "2", "--slurm.max_restarts", "0")
    deadline = time.monotonic() + 300
    while not _job_processes(job_id):
        assert time.monotonic() < deadline, f"job {job_id}: no task process in 300 s"
        time.sleep(0.005)
    subprocess.run(["scancel", "-s", "USR1", job_id], check=True, timeout=30)
    wait_for_requeue(job_id)
    log = run_dir / f"slurm-{job_id}.log"
    assert wait_for_state(job_id, timeout_s=300) == "COMPLETED", log.read_text()[-3000:]
    text = log.read_text()
    assert f"requeueing job {job_id} (restart 1), it resumes on its own" in text, text[-3000:]
    assert re.search(r"SIGUSR1 (as a task started, before it could act on it|at step 0) \(preempted, \d+ s left\)", text), text[-3000:]
    assert f"job {job_id} restart 1 on" in text and "Resume with" not in text, text[-3000:]
    assert [(e["action"], e["restart"], e["cause"]) for e in restarts.read(run_dir)] == [("requeue", 1, restarts.PREEMPTED)]
    assert torch.load(run_dir / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=False)["global_step"] == 10


def test_a_step_slurm_cancels_is_requeued_not_failed(slurm_cluster: None, tmp_path: Path) -> None:  # noqa: F811
    """Slurm kills the training step but not the job (`scancel <job>.0`, as the cleanup after a node
    failure killed a restart's step): the tasks note the SIGTERM before anything fails, so the batch
    script requeues the job within the cap instead of ending it FAILED; it resumes and completes."""
    epochs, batches = 12, 5
    job_id, run_dir, _ = _submit(tmp_path, 2, 1, "--trainer.max_epochs", str(epochs))
    wait_for_step(run_dir, batches, job_id=job_id)
    subprocess.run(["scancel", f"{job_id}.0"], check=True, timeout=30)
    wait_for_requeue(job_id)
    log = run_dir / f"slurm-{job_id}.log"
    assert wait_for_state(job_id, timeout_s=300) == "COMPLETED", log.read_text()[-3000:]
    text = log.read_text()
    assert re.search(rf"stopped by Slurm \(a signal or a kill, not an error of the training\); requeueing job {job_id} \(restart 1\)", text), text[-3000:]
    assert [(e["cause"], e["action"], e["restart"]) for e in restarts.read(run_dir)] == [(restarts.STEP_KILLED, "requeue", 1)]
    assert torch.load(run_dir / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=False)["global_step"] == epochs * batches


# long (make test's 12 minutes): two 2-node DDP jobs side by side; make test keeps test_usr1_checkpoints_requeues_and_resumes and test_resume.py's bitwise resume
@pytest.mark.long
def test_preempted_ddp_job_resumes_bitwise_equal_to_the_job_left_alone(slurm_cluster: None, tmp_path: Path) -> None:  # noqa: F811
    """The headline of exact requeue, on the real cluster: a 2-node DDP job (gloo, one task per
    node, 2 loader workers each, deterministic) given `scancel -s USR1` mid-epoch saves its hpc
    checkpoint, is requeued and resumes; it ends with the same weights, optimizer and scheduler
    state (torch.equal on every tensor) as the same job run beside it without interruption."""
    from resume_support import final_state, same_tensors

    # 10 epochs: the run must still be training when the signal lands, a moment after its first
    # last.ckpt (with 3, a run that started and stepped faster finished first and was never requeued)
    epochs, batches = 10, 4
    exact = ["--trainer.max_epochs", str(epochs), "--trainer.limit_train_batches", str(batches), "--trainer.limit_val_batches", "1",
             "--trainer.deterministic", "true", "--data.init_args.num_workers", "2"]
    reference_id, reference_dir, _ = _submit(tmp_path / "reference", 2, 1, *exact)
    job_id, run_dir, _ = _submit(tmp_path / "preempted", 2, 1, *exact)
    wait_for_file(run_dir / "checkpoints" / "last.ckpt", timeout_s=300)  # an epoch done: the signal lands in a later one
    subprocess.run(["scancel", "-s", "USR1", job_id], check=True, timeout=30)
    wait_for_requeue(job_id)
    log = run_dir / f"slurm-{job_id}.log"
    assert wait_for_state(job_id, timeout_s=300) == "COMPLETED", log.read_text()[-3000:]
    assert wait_for_state(reference_id, timeout_s=300) == "COMPLETED", (reference_dir / f"slurm-{reference_id}.log").read_text()[-3000:]
    assert scontrol_job(reference_id)["Restarts"] == "0" and scontrol_job(job_id)["Restarts"] == "1"
    saved = torch.load(run_dir / "hpc_ckpt_1.ckpt.used", map_location="cpu", weights_only=False)
    assert batches < saved["global_step"] < epochs * batches and saved["global_step"] % batches, f"not mid-epoch: step {saved['global_step']}"
    assert f"Resuming {run_dir} from {run_dir / 'hpc_ckpt_1.ckpt.used'} (step {saved['global_step']}," in log.read_text()
    # USR1 reached every process of the step: the loader workers, and on Python < 3.12 their forkserver and
    # multiprocessing's resource tracker, outlived it (trainer_cli.job.stop_signals.start_forkserver)
    assert "Traceback" not in log.read_text() and "resource_tracker" not in log.read_text(), log.read_text()[-3000:]

    reference, resumed = final_state(reference_dir), final_state(run_dir)
    assert resumed["step"] == reference["step"] == epochs * batches
    assert same_tensors(resumed["model"], reference["model"]), f"weights differ after a requeue at step {saved['global_step']}"
    assert same_tensors(resumed["optimizer"], reference["optimizer"]), "optimizer state differs"
    assert same_tensors(resumed["scheduler"], reference["scheduler"]), "scheduler state differs"


@pytest.mark.long  # make test's 12 minutes: --ckpt_path best's choice is tests/test_resume_choice.py's, the job's resume test_resume_never_goes_back's
def test_submit_ckpt_path_best_runs_in_the_queue(slurm_cluster: None, tmp_path: Path) -> None:  # noqa: F811
    """`train submit --ckpt_path best` continues the experiment's newest run from its best
    checkpoint, chosen in the job as `train fit --ckpt_path best` chooses it (it used to pass the
    checks here and fail in the queue: the job looked for a best checkpoint in a new run)."""
    first_id, run_dir, _ = _submit(tmp_path, 1, 1)
    assert wait_for_state(first_id, timeout_s=300) == "COMPLETED", (run_dir / f"slurm-{first_id}.log").read_text()[-3000:]
    best = next((run_dir / "checkpoints").glob("best-*.ckpt"))
    job_id, again, out = _submit(tmp_path, 1, 1, "--ckpt_path", "best", "--trainer.max_epochs", "2")
    assert again == run_dir and "resubmit: trainer.max_epochs: 1 -> 2" in out, out
    assert "ckpt_path: best\n" in (run_dir / "job_config.yaml").read_text()  # how the job resumes: its own input
    log = run_dir / f"slurm-{job_id}.log"
    assert wait_for_state(job_id, timeout_s=300) == "COMPLETED", log.read_text()[-3000:]
    assert f"Using the best checkpoint of {run_dir}: {best}" in log.read_text(), log.read_text()[-3000:]
    assert torch.load(run_dir / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=False)["global_step"] == 10
    assert [p.name for p in tmp_path.joinpath("digits").iterdir()] == [run_dir.name], "the same run directory"
    recorded = (run_dir / "config.yaml").read_text()  # the run's record: the change, not how one start resumed
    assert "max_epochs: 2\n" in recorded and "ckpt_path: best" not in recorded, recorded


def test_a_resubmission_while_the_runs_job_is_queued_is_refused(slurm_cluster: None, tmp_path: Path) -> None:  # noqa: F811
    """`train submit --config <run>/config.yaml` while the run's job is still queued (held) would put a second job
    into the same run: refused in one line, nothing written; once that job is cancelled, the resubmission is queued."""
    from slurm_support import LOCAL_PROFILE, train_submit

    from trainer_cli.errors import UserError

    job_id, run_dir, _ = _submit(tmp_path, 1, 1, "--slurm.extra_sbatch", '["--hold"]')
    recorded = (run_dir / "config.yaml").read_text()
    again = ["--config", str(run_dir / "config.yaml"), "--config", LOCAL_PROFILE, "--trainer.max_epochs", "2"]
    try:
        with pytest.raises(UserError, match=rf"is still in slurm job {job_id} \(PENDING\): a second job would write"):
            train_submit(*again)
        with pytest.raises(UserError, match=rf"slurm job {job_id} \(PENDING\)"):
            train_submit(*again, "--dry-run")  # said before anything is rendered
        assert not (run_dir / "job_config.yaml").exists() and (run_dir / "config.yaml").read_text() == recorded
        assert sorted(p.name for p in run_dir.glob("slurm-*.log")) == [], "nothing ran"
    finally:
        subprocess.run(["scancel", job_id], check=True, timeout=30)
    assert wait_for_state(job_id, timeout_s=120) == "CANCELLED"
    code, out = train_submit(*again, "--slurm.extra_sbatch", '["--hold"]')  # its job ended: resubmitted into the run
    assert code == 0 and "resubmit: trainer.max_epochs: 1 -> 2" in out, out
    subprocess.run(["scancel", job_id_from(out)], check=True, timeout=30)
