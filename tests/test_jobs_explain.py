"""`train jobs` that explains: Slurm's reason for a pending job in words with what to do and its
estimated start, a running job's nodes and speed, an ended job's cause (trainer_cli.schedulers.slurm.pending,
trainer_cli.launch.job_detail); on the real local cluster, a job held behind one that takes every
node, and `train jobs` over a dozen jobs and an array in at most two Slurm calls (counted by
wrappers in front of the real commands)."""

from __future__ import annotations

import json
import os
import subprocess
import time
from datetime import datetime
from pathlib import Path

import pytest
from slurm_support import (  # noqa: F401 - a fixture
    LOCAL_PROFILE,
    counting_slurm_path,
    job_id_from,
    scontrol_job,
    slurm_cluster,
    train_submit,
    wait_for_state,
)
from support import DIGITS, run_train

from trainer_cli.schedulers.slurm.output import array_task_ids, key_values
from trainer_cli.job import jobstate
from trainer_cli.job.status import with_run_record
from trainer_cli.launch.job_detail import detail
from trainer_cli.schedulers.slurm import states
from trainer_cli.schedulers.slurm.pending import reason_words, start_estimate, why_pending
from trainer_cli.schedulers import engines


@pytest.mark.parametrize("reason,words", [
    ("Resources", "busy"),
    ("Priority", "higher priority"),
    ("QOSMaxJobsPerUserLimit", "QOS's limit of running jobs per user is reached"),
    ("AssocGrpGRES", "account's limit of GPUs (GRES) for the whole group"),
    ("QOSMaxWallDurationPerJobLimit", "time limit is over your QOS's maximum"),
    ("ReqNodeNotAvail", "down, drained or reserved"),
    ("Dependency", "depends on"),
    ("DependencyNeverSatisfied", "never starts"),
    ("JobHeldUser", "scontrol release 42"),
    ("JobHeldAdmin", "administrator"),
    ("BeginTime", "earliest start"),
    ("PartitionTimeLimit", "TimeLimit=HH:MM:SS"),
])
def test_every_reason_in_words_with_what_to_do(reason: str, words: str) -> None:
    meaning, action = reason_words(reason, "42")
    assert words in meaning + " " + action and action


def test_pending_line_names_unavailable_nodes_and_start() -> None:
    line = ("JobId=7 JobName=a JobState=PENDING Reason=ReqNodeNotAvail, UnavailableNodes:node3 Dependency=(null) "
            "StartTime=2026-11-25T08:30:00 ArrayTaskId=0-3%2")
    [fields] = key_values(line)
    text = why_pending(fields, now=datetime(2026, 11, 25, 8, 0))
    assert text.startswith("ReqNodeNotAvail: a node it needs is down, drained or reserved (node3);") and text.endswith("est. start 08:30 (in 30 min)")
    assert start_estimate("Unknown") is None and array_task_ids(fields["ArrayTaskId"]) == [0, 1, 2, 3]
    # a start half a minute ahead is not "now" (seen: 05:46:08 shown as "05:46 (now)" at 05:45:39)
    assert start_estimate("2026-11-25T05:46:08", now=datetime(2026, 11, 25, 5, 45, 39)) == "05:46 (in 1 min)"
    assert start_estimate("2026-11-25T05:46:08", now=datetime(2026, 11, 25, 5, 46, 8)) == "05:46 (now)"


def test_running_and_ended_details(tmp_path: Path) -> None:
    """Slurm's words for a job beyond its state (its `scontrol show job` fields), and the DETAIL cell they make with
    the log's last epoch line; a job Slurm no longer knows: the cause its job.json recorded."""
    def cell(fields: dict[str, str], progress: str = "-") -> str:
        return detail(states._summarise([fields]), progress)

    assert cell({"JobState": "RUNNING", "NodeList": "node[1-2]"}, "epoch 2/5 val/acc 0.9 7.5 steps/s") == \
        "on node[1-2]; epoch 2/5 val/acc 0.9 7.5 steps/s"
    assert cell({"JobState": "FAILED", "ExitCode": "3:0"}) == "failed: exit code 3"
    assert cell({"JobState": "FAILED", "ExitCode": "0:9"}) == "failed: killed by signal 9"
    assert cell({"JobState": "TIMEOUT", "TimeLimit": "00:10:00"}).startswith("hit its time limit (00:10:00)")
    assert cell({"JobState": "NODE_FAIL", "NodeList": "node4"}) == "a node failed (node4)"
    assert cell({"JobState": "CANCELLED", "PreemptTime": "2026-11-25T08:00:00"}) == "preempted (cancelled)"
    assert cell({"JobState": "COMPLETED"}, "epoch 1/1 val/acc 0.75") == "epoch 1/1 val/acc 0.75"
    # an array: its running tasks' nodes and why the first pending one waits
    tasks = [{"JobState": "RUNNING", "NodeList": "node1"}, {"JobState": "PENDING", "Reason": "JobArrayTaskLimit"}]
    assert detail(states._summarise(tasks), "-").startswith("on node1; JobArrayTaskLimit: the array's limit")
    # Slurm has forgotten the job: its job.json's state and exit code; queued and not yet known: said so
    jobstate.update(tmp_path, job_id="12", state="FAILED", exit_code=2)
    assert detail(with_run_record(None, "12", tmp_path), "-") == "failed: exit code 2"
    jobstate.update(tmp_path, state="PENDING", exit_code=None)
    assert detail(with_run_record(None, "12", tmp_path), "-") == "queued (its scheduler does not know the job yet, or no longer)"


PROBE = (
    '{% extends "ddp.sbatch.j2" %}\n{% block run %}\n'
    'echo "epoch 1/1  train/loss 0.5000  val/loss 0.4000  val/acc 0.7500  0.1 s  12.5 steps/s"\nsleep "${PROBE_SLEEP_S:-0}"\n{% endblock %}\n'
)


def test_held_job_explained_and_a_dozen_jobs_and_an_array_in_two_calls(slurm_cluster: None, tmp_path: Path) -> None:  # noqa: F811
    """A job taking every CPU of every node of the cluster (4 nodes x 8 tasks) runs; twelve 1-task
    jobs and a 3-task array (a cross-validation with its aggregate job) queued after it pend: `train
    jobs` shows each PENDING with its reason in words and Slurm's estimated start (about the
    blocker's time limit away), and asks Slurm at most twice for all of them."""
    template = tmp_path / "probe.sbatch.j2"
    template.write_text(PROBE)
    root = tmp_path / "runs"
    common = ["--config", DIGITS, "--config", LOCAL_PROFILE, "--trainer.default_root_dir", str(root), "--slurm.template", str(template), "--slurm.snapshot", "false"]
    ids = []
    try:
        code, out = train_submit(*common, "--name", "blocker", "--trainer.num_nodes", "4", "--trainer.devices", "8",
                                 "--slurm.env", json.dumps({"PROBE_SLEEP_S": "600"}), "--slurm.time", "00:05:00")
        assert code == 0, out
        ids.append(blocker := job_id_from(out))
        assert wait_for_state(blocker, {"RUNNING"}, timeout_s=60) == "RUNNING"
        for i in range(12):
            code, out = train_submit(*common, "--name", f"waiting{i}", "--slurm.time", "00:04:00")
            assert code == 0, out
            ids.append(job_id_from(out))
        code, out = train_submit(*common, "--name", "folds", "--slurm.cv_folds", "3", "--slurm.time", "00:04:00")
        assert code == 0, out
        ids.append(folds := job_id_from(out))
        deadline = time.monotonic() + 120  # the backfill scheduler plans pending jobs every bf_interval (5 s on scripts/local-slurm)
        while time.monotonic() < deadline and (not scontrol_job(ids[1]).get("StartTime", "Unknown")[:1].isdigit()
                                               or scontrol_job(folds).get("Reason") in (None, "None")):  # not yet looked at
            time.sleep(2)

        counting, calls = counting_slurm_path(tmp_path)
        done = run_train("jobs", "--root", str(root), "--last", "50", env=counting)
        assert done.returncode == 0, done.stderr[-3000:]
        made = calls.read_text().split()
        assert len(made) <= 2 and made.count("scontrol") == 1, made
        rows = {line.split()[0]: line for line in done.stdout.splitlines()[1:]}
        assert "RUNNING" in rows[blocker] and "on node[1-4]" in rows[blocker], done.stdout
        waiting = rows[ids[1]]
        assert " PENDING " in waiting and ("nodes it asks for are busy" in waiting or "higher priority" in waiting), done.stdout
        assert "est. start" in waiting, done.stdout
        assert all(" PENDING " in rows[j] for j in ids[1:13]), done.stdout
        tasks = [rows[f"{folds}_{i}"] if f"{folds}_{i}" in rows else rows[folds] for i in range(3)]
        assert all("PENDING" in row and ("Resources" in row or "Priority" in row) for row in tasks), done.stdout
        aggregate = next(line for line in done.stdout.splitlines() if "(cv aggregate)" in line)
        assert "PENDING" in aggregate and "Dependency: waiting for the job(s) it depends on" in aggregate, done.stdout
    finally:
        listed = subprocess.run(["squeue", "-h", "-o", "%i %o"], capture_output=True, text=True, timeout=30).stdout
        mine = [line.split()[0] for line in listed.splitlines() if str(tmp_path) in line]
        if mine:
            subprocess.run(["scancel", *mine], timeout=30)


def test_a_job_slurm_forgot_shows_its_recorded_cause(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No Slurm to ask (an empty PATH): the row comes from <run>/job.json, its cause with its exit code."""
    from trainer_cli.launch import jobs

    run_dir = tmp_path / "digits" / "version_0"
    run_dir.mkdir(parents=True)
    (run_dir / "job.json").write_text(json.dumps({"job_id": "777", "state": "FAILED", "exit_code": 3, "restarts": 0}))
    (run_dir / "slurm-777.log").write_text("epoch 1/4  train/loss 0.9000  val/loss 0.8000  val/acc 0.5000  1.0 s  9.5 steps/s\nTraceback ...\n")
    monkeypatch.setenv("PATH", str(tmp_path / "no-slurm-here"))
    (row,) = jobs.job_rows([{"job_id": "777", "job_name": "digits", "run_dir": str(run_dir)}], engines())
    assert row[:3] == ("777", "FAILED", "0") and row[4] == "failed: exit code 3; epoch 1/4 val/loss 0.8000 val/acc 0.5000 9.5 steps/s", row


def test_jobs_lists_this_clusters_jobs_and_counts_the_others(slurm_cluster: None, tmp_path: Path) -> None:  # noqa: F811
    """A registry holding jobs of this cluster (``ClusterName=localci`` of scripts/local-slurm), of another
    cluster and of an older version (no cluster kept): ``train jobs`` without flags lists this cluster's and
    the unknown ones, and says how many of the other cluster it leaves out; ``--all-clusters`` lists all.
    A job's line keeps the cluster its engine said it was on (Slurm's: tests/test_scheduler_seam.py), none
    without one."""
    from trainer_cli.schedulers import submissions

    state = tmp_path / "state"
    env = {"XDG_STATE_HOME": str(state)}
    for job_id, cluster in (("990001", "localci"), ("990002", "far"), ("990003", "far"), ("990004", None)):
        run_dir = tmp_path / "runs" / f"job{job_id}"
        run_dir.mkdir(parents=True)
        (run_dir / "job.json").write_text(json.dumps({"job_id": job_id, "state": "COMPLETED", "restarts": 0}))
        line = {"job_id": job_id, "job_name": f"n{job_id}", "run_dir": str(run_dir), "submitted": f"2026-12-01T00:0{job_id[-1]}"}
        registry = state / "trainer-cli" / "submissions.jsonl"
        registry.parent.mkdir(parents=True, exist_ok=True)
        with registry.open("a") as out:
            out.write(json.dumps(line | ({"cluster": cluster} if cluster else {})) + "\n")

    done = run_train("jobs", env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    listed = {line.split()[0] for line in done.stdout.splitlines()[1:] if line.startswith("990")}
    assert listed == {"990001", "990004"}, done.stdout
    assert "2 job(s) of other clusters not shown (far: 2): train jobs --all-clusters" in done.stdout, done.stdout

    done = run_train("jobs", "--all-clusters", env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    listed = {line.split()[0] for line in done.stdout.splitlines()[1:] if line.startswith("990")}
    assert listed == {"990001", "990002", "990003", "990004"} and "not shown" not in done.stdout, done.stdout

    os.environ["XDG_STATE_HOME"], saved = str(tmp_path / "mine"), os.environ.get("XDG_STATE_HOME", "")
    try:
        submissions.register(tmp_path, {"job_id": "1", "run_dir": str(tmp_path)})
        (kept,) = submissions.read_registry()
    finally:
        os.environ["XDG_STATE_HOME"] = saved
    assert kept["cluster"] is None and kept["scheduler"] == "slurm", kept  # listed on every cluster
