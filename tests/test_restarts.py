"""Restart causes (trainer_cli.job.restarts) from real `scontrol show job -o` lines, the
`train jobs` RESTARTS cell from an event log, the job record of a resubmitted job, and that the
installed Lightning leaves the SIGUSR1 handler `train` installs first in place (no private
Lightning member is needed for the Slurm signal).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from trainer_cli.job.context import JobContext
from trainer_cli.schedulers.slurm import batch, in_job
from trainer_cli.job import jobstate, ports, requeue_signal, restarts, task_output
from trainer_cli.schedulers.slurm.output import key_values
from trainer_cli.launch.jobs import JobStatus, failure_note, restarts_cell

# `scontrol show job -o` of a running job on the local cluster (Slurm 22.05.8), paths shortened:
# `sbatch --time=10 --signal=USR1@120`, 4 s after it started
RUNNING_4S = (
    "JobId=430 JobName=wrap UserId=root(0) GroupId=root(0) MCS_label=N/A Priority=4294901361 Nice=0 Account=(null) "
    "QOS=(null) JobState=RUNNING Reason=None Dependency=(null) Requeue=1 Restarts=0 BatchFlag=1 Reboot=0 ExitCode=0:0 "
    "RunTime=00:00:04 TimeLimit=00:10:00 TimeMin=N/A SubmitTime=2026-11-23T08:01:44 EligibleTime=2026-11-23T08:01:44 "
    "AccrueTime=2026-11-23T08:01:44 StartTime=2026-11-23T08:01:44 EndTime=2026-11-23T08:11:44 Deadline=N/A "
    "SuspendTime=None SecsPreSuspend=0 LastSchedEval=2026-11-23T08:01:44 Scheduler=Backfill Partition=debug "
    "NodeList=node1 BatchHost=node1 NumNodes=1 NumCPUs=1 NumTasks=1 CPUs/Task=1 Command=(null) WorkDir=/home/u/proj"
)


@pytest.mark.parametrize(
    "changes,delay_s,since_s,expected",
    [
        ({}, 120, 0, ("preempted", 596)),  # 10 minutes left: not the time limit's warning
        ({"RunTime": "00:07:30"}, 120, 0, ("time limit", 150)),  # --signal=USR1@120 may come up to 60 s early
        ({"RunTime": "00:07:30"}, 120, 70, ("preempted", 220)),  # acted on 70 s after the signal came
        ({"RunTime": "00:07:30"}, 30, 0, ("preempted", 150)),  # a lead time of 30 s: too early for it
        ({"TimeLimit": "UNLIMITED"}, 120, 0, ("preempted", None)),  # no time limit to warn of
        ({"RunTime": "00:09:00", "PreemptTime": "2026-11-23T08:10:44"}, 120, 0, ("preempted", 60)),  # Slurm preempted it
        ({"TimeLimit": "1-00:00:00", "RunTime": "23:58:30"}, 120, 0, ("time limit", 90)),
    ],
)
def test_cause_from_the_time_the_job_had_left(changes: dict[str, str], delay_s: int, since_s: float, expected: tuple[str, int | None]) -> None:
    job = key_values(RUNNING_4S)[0] | changes
    assert in_job.classify(job, delay_s, since_s) == expected


def test_cause_unknown_without_scontrol() -> None:
    assert in_job.classify({}, 120) == ("unknown", None)
    assert in_job.cause_of_signal(JobContext(), None) == ("unknown", None)  # outside a job: no job to ask of


def _event(job_id: str, restart: int, cause: str, action: str) -> dict[str, object]:
    return {"job_id": job_id, "restart": restart, "cause": cause, "action": action}


def test_restarts_cell_counts_causes_of_the_jobs_chain(tmp_path: Path) -> None:
    """Requeues and resubmissions of this submission's jobs by cause; restarts Slurm made itself
    (counted by Slurm, never signalled) as "requeued by Slurm"; the cap's stop names its cause;
    another submission's events (job 7) do not count."""
    for event in (
        _event("7", 1, "time limit", "requeue"),
        _event("11", 1, "time limit", "requeue"),
        _event("11", 2, "preempted", "requeue"),  # a failed requeue ...
        _event("11", 2, "preempted", "resubmit"),  # ... resubmitted: one restart
        _event("12", 4, "time limit", "stop"),
    ):
        restarts.record(tmp_path, **event)
    with (tmp_path / restarts.EVENTS_FILE).open("a") as log:
        log.write("not json\n")
    events = restarts.read(tmp_path)
    assert len(events) == 5
    assert restarts.summary(events, ["11"], 2) == "2 (1 time limit, 1 preempted)"
    assert restarts.summary(events, ["11"], 3) == "3 (1 time limit, 1 preempted, 1 requeued by Slurm)"
    restarts.record(tmp_path, **_event("12", 3, "time limit", "requeue"))
    assert restarts.summary(restarts.read(tmp_path), ["11", "12"], 3) == "3 (2 time limit, 1 preempted; stopped by time limit)"
    assert restarts.summary(events, ["13"], 0) == "0"

    # train jobs: Slurm counts the restarts of the job it knows (12: 1), the record the ones before (2)
    jobstate.write(tmp_path, {"job_id": "12", "resubmitted_from": ["11"], "prior_restarts": 2, "restarts": 3})
    cell = restarts_cell(JobStatus("RUNNING", 1, "00:01:00", "scontrol"), "12", tmp_path)
    assert cell == "3 (2 time limit, 1 preempted; stopped by time limit)"
    assert restarts_cell(JobStatus("COMPLETED", 3, "-", "job.json"), "12", tmp_path) == cell  # the record's count has them


def test_resubmitted_job_counts_and_is_followed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SLURM_JOB_ID", "12")
    monkeypatch.setenv("SLURM_RESTART_COUNT", "1")
    monkeypatch.setenv(restarts.ENV_PRIOR_RESTARTS, "2")
    monkeypatch.delenv("SLURM_ARRAY_JOB_ID", raising=False)
    assert jobstate.policy().count == 3
    jobstate.write(tmp_path, {"job_id": "11", "state": "PENDING"})
    assert jobstate.follow(tmp_path, "11") == "11"
    jobstate.update(tmp_path, job_id="12", resubmitted_from=["10", "11"])
    assert [jobstate.follow(tmp_path, j) for j in ("10", "11", "12", "9")] == ["12", "12", "12", "9"]
    batch.resubmit_requested(tmp_path, "hpc_ckpt_1.ckpt")
    record = json.loads((tmp_path / jobstate.JOB_FILE).read_text())
    assert (record["state"], record["restarts"], record["checkpoint"]) == ("RESUBMIT", 3, "hpc_ckpt_1.ckpt")


def test_a_run_counts_the_restarts_since_it_first_started(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """An array worker's task restarted once (trial 2 preempted) then starts trial 5: trial 5 has not
    restarted; a run's resubmission keeps the restarts counted before it. The start line names the
    task as `train jobs` does (944_1), not by its own job id (Slurm's 945, or the array's 944 for its last task)."""
    monkeypatch.setenv("SLURM_ARRAY_JOB_ID", "944")
    monkeypatch.setenv("SLURM_ARRAY_TASK_ID", "1")
    monkeypatch.setenv("SLURM_JOB_ID", "945")
    monkeypatch.delenv(restarts.ENV_PRIOR_RESTARTS, raising=False)
    monkeypatch.setenv("SLURM_RESTART_COUNT", "0")
    preempted, later = tmp_path / "trial_002", tmp_path / "trial_005"
    batch.started(preempted)
    assert capsys.readouterr().out.startswith("trainer-cli: job 944_1 restart 0 on ")
    monkeypatch.setenv("SLURM_RESTART_COUNT", "1")
    batch.started(preempted)  # resumed after the requeue
    batch.started(later)
    assert [jobstate.run_restarts(jobstate.read(r)) for r in (preempted, later)] == [1, 0]
    monkeypatch.setenv("SLURM_RESTART_COUNT", "2")
    batch.started(later)
    assert jobstate.run_restarts(jobstate.read(later)) == 1


class _HandlerAtTrainStart:
    """Notes the SIGUSR1 handler in place once Lightning has registered its signal handlers."""

    def __init__(self) -> None:
        import lightning.pytorch as pl

        class Probe(pl.Callback):
            def on_train_start(probe, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:  # noqa: N805
                self.handler = signal.getsignal(signal.SIGUSR1)

        self.handler: object = None
        self.callback = Probe()


def _handlers_under_slurm(monkeypatch: pytest.MonkeyPatch, callbacks: list[object], **trainer_args: object) -> tuple[object, object, str]:
    """A one-task Slurm batch job's environment, train's recording handler installed, then a real
    `Trainer.fit` of one step: (train's handler, the handler at train start, the strategy's class name)."""
    from lightning.pytorch import Trainer
    from lightning.pytorch.demos.boring_classes import BoringModel

    slurm_env = {
        "SLURM_JOB_ID": "1", "SLURM_JOB_NAME": "probe", "SLURM_NTASKS": "1", "SLURM_NTASKS_PER_NODE": "1",
        "SLURM_PROCID": "0", "SLURM_LOCALID": "0", "SLURM_NODEID": "0", "SLURM_NODELIST": "localhost",
    }
    for key, value in slurm_env.items():
        monkeypatch.setenv(key, value)
    previous = signal.getsignal(signal.SIGUSR1)
    probe = _HandlerAtTrainStart()
    environ = dict(os.environ)
    try:
        assert requeue_signal.install()
        ours = signal.getsignal(signal.SIGUSR1)
        trainer = Trainer(accelerator="cpu", devices=1, max_steps=1, logger=False, enable_checkpointing=False,
                          enable_progress_bar=False, enable_model_summary=False, callbacks=[*callbacks, probe.callback],
                          **trainer_args)
        trainer.fit(BoringModel())
        return ours, probe.handler, type(trainer.strategy).__name__
    finally:
        requeue_signal.uninstall()
        signal.signal(signal.SIGUSR1, previous)
        # a DDP strategy's process group, and the MASTER_PORT Lightning's SLURMEnvironment writes into os.environ
        # (15001 for job 1): left behind, every later DDP run of this pytest worker took that one port
        import torch.distributed

        if torch.distributed.is_available() and torch.distributed.is_initialized():
            torch.distributed.destroy_process_group()
        os.environ.clear()
        os.environ.update(environ)


def test_lightning_leaves_the_handler_train_installs_first(monkeypatch: pytest.MonkeyPatch) -> None:
    """Under a Slurm batch job with auto-requeue, Lightning's signal connector would install its own
    SIGUSR1 handler (checkpoint and requeue inside the handler); it does not replace one that is
    there already (Lightning-AI/pytorch-lightning PR #9566, #14626). `train` installs its recording
    handler first, so the Slurm requeue needs no private Lightning member. Checked through a real
    `Trainer.fit` of the installed Lightning."""
    from lightning.fabric.plugins.environments import SLURMEnvironment

    ours, seen, _ = _handlers_under_slurm(monkeypatch, [], plugins=[SLURMEnvironment(auto_requeue=True)])
    assert seen is ours, f"Lightning replaced the SIGUSR1 handler of train with {seen!r}"


def test_a_one_process_job_keeps_the_handler_train_installs(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """`strategy: auto` on one device (SingleDeviceStrategy, what `train init` writes for a one-task job)
    keeps no cluster environment; SynchronizedRequeue still takes the job as Slurm's and keeps train's
    handler (it gave the signal its default action back: a SIGUSR1 before the start was dropped, the
    job ran to its end, and a later one went to Lightning's handler; seen as an ordinary user's job in
    tests/test_site_user.py). A real `Trainer.fit` of the installed Lightning."""
    from trainer_cli.callbacks.requeue import SynchronizedRequeue

    ours, seen, strategy = _handlers_under_slurm(monkeypatch, [SynchronizedRequeue()], default_root_dir=tmp_path)
    assert strategy == "SingleDeviceStrategy"
    assert seen is ours, f"the SIGUSR1 handler of train was replaced by {seen!r}"


def test_auto_requeue_turned_off_gives_the_signal_its_default_action(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """A user's `SLURMEnvironment(auto_requeue=False)` in trainer.plugins turns the requeue off: SynchronizedRequeue
    gives SIGUSR1 its default action back and Lightning installs none (a real `Trainer.fit`; a DDP strategy, whose
    cluster environment is the one the plugin gave: a one-device strategy keeps none, and is requeued)."""
    from lightning.fabric.plugins.environments import SLURMEnvironment

    from trainer_cli.callbacks.requeue import SynchronizedRequeue

    _, seen, _ = _handlers_under_slurm(monkeypatch, [SynchronizedRequeue()], default_root_dir=tmp_path,
                                       plugins=[SLURMEnvironment(auto_requeue=False)], strategy="ddp")
    assert seen is signal.SIG_DFL and not requeue_signal.installed()
    assert "MASTER_PORT" not in os.environ, "the in-process DDP run's port stays with it"


def test_no_requeue_signal_outside_a_batch_job(monkeypatch: pytest.MonkeyPatch) -> None:
    """The requeue signal is the job's context's: SIGUSR1 in a Slurm batch job, none in an interactive allocation
    (Lightning's names: bash, interactive), none for a Ray worker, none outside a job."""
    from trainer_cli.job.context import JobContext

    assert JobContext.from_env({"SLURM_JOB_ID": "5", "SLURM_JOB_NAME": "fit"}).requeue_signal == signal.SIGUSR1
    assert JobContext.from_env({"SLURM_JOB_ID": "5", "SLURM_JOB_NAME": "bash"}).requeue_signal is None
    assert JobContext.from_env({"TRAINER_CLI_RAY_JOB": "raysubmit_1"}).requeue_signal is None
    assert JobContext.from_env({}).requeue_signal is None
    monkeypatch.setenv("SLURM_JOB_ID", "5")
    monkeypatch.setenv("SLURM_JOB_NAME", "interactive")
    assert not requeue_signal.expected() and not requeue_signal.install()


def test_preemptions_do_not_consume_the_cap(tmp_path: Path) -> None:
    """The restart policy (submitit's rule): --slurm.max_restarts caps the restarts after a time
    limit or a failure of this submission's jobs; preemptions and Slurm's own requeues do not count,
    nor the events of another submission into the run (job 7)."""
    for event in (
        _event("7", 1, restarts.TIME_LIMIT, "requeue"),  # an earlier submission
        _event("11", 1, restarts.PREEMPTED, "requeue"),
        _event("11", 2, restarts.TIME_LIMIT, "requeue"),
        _event("11", 3, restarts.STEP_KILLED, "requeue"),  # a refused requeue then resubmitted: one restart
        _event("11", 3, restarts.STEP_KILLED, "resubmit"),
        _event("12", 4, restarts.PREEMPTED, "resubmit"),
    ):
        restarts.record(tmp_path, **event)
    env = {"SLURM_JOB_ID": "12", "SLURM_RESTART_COUNT": "1", restarts.ENV_PRIOR_RESTARTS: "4", restarts.ENV_MAX_RESTARTS: "2"}
    policy = restarts.RestartPolicy.of_job(tmp_path, ["11", "12"], environ=env)
    assert (policy.count, policy.capped, policy.cap) == (5, 2, 2)
    assert policy.allows(restarts.PREEMPTED) and not policy.allows(restarts.TIME_LIMIT)
    assert not policy.allows(restarts.STEP_KILLED) and not policy.allows(restarts.UNKNOWN)
    assert "--slurm.max_restarts 2 allows (preemptions do not count)" in policy.refusal(restarts.TIME_LIMIT)
    assert restarts.RestartPolicy.of_job(tmp_path, ["11", "12"], environ=env | {restarts.ENV_MAX_RESTARTS: "3"}).allows(restarts.TIME_LIMIT)
    zero = restarts.RestartPolicy.of_job(None, environ={restarts.ENV_MAX_RESTARTS: "0"})
    assert (zero.count, zero.capped, zero.cap) == (0, 0, 0) and zero.allows(restarts.PREEMPTED) and not zero.allows(restarts.TIME_LIMIT)
    assert restarts.RestartPolicy.of_job(None, environ={}).allows(restarts.TIME_LIMIT), "a site template without the cap: no cap"


def test_master_port_is_the_job_port_or_a_free_one_drawn_from_the_job_id() -> None:
    """MASTER_PORT: 10000 + job id % 20000; when that is taken, a free port of the range drawn from
    the job id (always the same for a job, and not the next job's own port), never in Linux's
    ephemeral range; a listening socket holds its port, a connection of it left in TIME_WAIT does not."""
    import socket

    assert ports.master_port(123, lambda port: True) == 10123
    assert ports.master_port(20123, lambda port: True) == 10123
    other = ports.master_port(123, lambda port: port != 10123)
    assert other in ports.MASTER_PORTS and other not in (10123, 10124) and other == ports.master_port(123, lambda port: port != 10123)
    assert ports.master_port(123, lambda port: False) == 10123, "nothing free: the job's own port"
    with socket.socket() as taken:
        taken.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as torch's TCPStore listens
        taken.bind(("", 0))
        taken.listen()
        port = taken.getsockname()[1]
        assert not ports._port_is_free(port)
        with socket.create_connection(("127.0.0.1", port)) as client:
            server, _ = taken.accept()
            server.close()  # the server side closes first: its port goes into TIME_WAIT
            client.recv(1)
    assert ports._port_is_free(port), "a port in TIME_WAIT does not stop a listener with SO_REUSEADDR"
    assert all(ports.master_port(j) in ports.MASTER_PORTS for j in (0, 1, 987654))


def test_a_restarted_job_goes_on_from_what_it_saved_not_its_ckpt_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A job submitted with --ckpt_path (best, a file) starts from it; restarted (a requeue, a
    resubmission) it goes on from the checkpoint it saved since `train submit`, not from the
    --ckpt_path again; a checkpoint older than the submission does not count."""
    import torch

    from trainer_cli.rundir.policy import restarted_past as _restarted_past

    for name in ("SLURM_ARRAY_JOB_ID", restarts.ENV_PRIOR_RESTARTS):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("SLURM_JOB_ID", "12")
    monkeypatch.setenv("SLURM_JOB_NAME", "digits")
    monkeypatch.setenv("SLURM_RESTART_COUNT", "1")
    jobstate.write(tmp_path, {"job_id": "12", "submitted": "2026-01-01T00:00:00+00:00"})
    assert not _restarted_past(tmp_path), "no checkpoint yet"
    torch.save({"global_step": 7, "epoch": 1}, tmp_path / "hpc_ckpt_1.ckpt")
    assert _restarted_past(tmp_path)
    monkeypatch.setenv("SLURM_RESTART_COUNT", "0")
    assert not _restarted_past(tmp_path), "the first start takes its --ckpt_path"
    monkeypatch.setenv(restarts.ENV_PRIOR_RESTARTS, "1")
    assert _restarted_past(tmp_path), "a resubmission by the job itself is a restart too"
    jobstate.update(tmp_path, submitted="2999-01-01T00:00:00+00:00")
    assert not _restarted_past(tmp_path), "a checkpoint from before the submission"
    monkeypatch.delenv("SLURM_JOB_ID")
    assert not _restarted_past(tmp_path), "not under Slurm"


@pytest.mark.parametrize(
    "code,records,timeout_s,ran_s,verdict",
    [
        (1, [], 5, 5.4, "step_start"),  # srun --immediate=5 gave up: "Requested nodes are busy", no task ran
        (1, [], 5, None, "step_start"),  # when the step started is not known
        (1, [], 600, 3.0, "killed"),  # ended long before its timeout: not srun giving up on the step
        (1, [], 0, 700.0, "killed"),  # no --immediate: srun waits for the step as long as Slurm wants
        (137, [], 5, 9.0, "killed"),  # SIGKILL before Python noted anything: Slurm stopped the step
        (138, [], 5, 9.0, "requeue"),  # SIGUSR1 in the first instant of a task
        (1, [(3.0, "0", "error"), (3.0, "1", "error")], 5, 9.0, "failed"),  # the tasks ran and failed by themselves
    ],
)
def test_a_step_srun_could_not_start_is_told_from_one_slurm_killed(
    code: int, records: list[tuple[float, str, str]], timeout_s: int, ran_s: float | None, verdict: str
) -> None:
    assert batch.step_verdict(code, records, 2, timeout_s, ran_s) == verdict


def test_a_step_srun_could_not_start_requeues_within_the_cap(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """srun exited 1 after --slurm.step_start_timeout_s and no task noted anything: `batch end`
    requeues the job with cause step start timeout (counted against --slurm.max_restarts, shown by
    `train jobs`), saying why; at the cap the run stops, naming that cause."""
    for name in ("SLURM_ARRAY_JOB_ID", "SLURM_ARRAY_TASK_ID", restarts.ENV_PRIOR_RESTARTS, batch.ENV_REQUEUE_MODE):
        monkeypatch.delenv(name, raising=False)
    env = {"SLURM_JOB_ID": "21", "SLURM_NTASKS": "2", "SLURM_RESTART_COUNT": "0", restarts.ENV_MAX_RESTARTS: "1",
           restarts.ENV_STEP_START_TIMEOUT_S: "5"}
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    calls: list[list[str]] = []
    monkeypatch.setattr(batch, "_slurm", lambda action, *args, **kwargs: calls.append([action.__name__, *args]) or "")
    monkeypatch.setattr(batch, "requeued_by_itself", lambda job: None)
    records = tmp_path / ".tasks"
    records.mkdir()
    batch.started(tmp_path)
    jobstate.update(tmp_path, started="2026-01-01T00:00:00+00:00")  # srun ran past its timeout
    assert batch.end_of_step(tmp_path, 1, records) == 0
    said = capsys.readouterr().out
    assert ("trainer-cli: srun started no task of the step within --slurm.step_start_timeout_s (5 s): nodes busy or "
            "still cleaning up; requeueing job 21 (restart 1), it resumes on its own") in said
    assert calls == [["requeue", "21"]] and jobstate.read(tmp_path)["state"] == jobstate.REQUEUED
    assert [(e["cause"], e["action"], e["restart"]) for e in restarts.read(tmp_path)] == [(restarts.STEP_START, "requeue", 1)]
    assert restarts.summary(restarts.read(tmp_path), ["21"], 1) == "1 (1 step start timeout)"

    monkeypatch.setenv("SLURM_RESTART_COUNT", "1")  # the restart could not start its step either: the cap (1) is spent
    batch.started(tmp_path)
    jobstate.update(tmp_path, started="2026-01-01T00:00:00+00:00")
    assert batch.end_of_step(tmp_path, 1, records) == 1
    said = capsys.readouterr().out
    assert "--slurm.max_restarts 1 allows (preemptions do not count): the run stops here, ended by srun not starting " \
           "the step in time. Resume with: train submit --config" in said
    assert jobstate.read(tmp_path)["state"] == "FAILED" and len(calls) == 1
    assert restarts.summary(restarts.read(tmp_path), ["21"], 1) == "1 (1 step start timeout; stopped by step start timeout)"


# srun's stderr (Slurm 22.05, --kill-on-bad-exit=1) of a 2-node Charliecloud job whose image is missing
SRUN_MISSING_IMAGE = (
    "ch-run[3386]: error: can't stat: /nonexistent/image: No such file or directory (ch_core.c:255 2)\n"
    "srun: error: node1: task 0: Exited with exit code 1\n"
    "srun: launch/slurm: _step_signal: Terminating StepId=414.0\n"
    "ch-run[3383]: error: can't stat: /nonexistent/image: No such file or directory (ch_core.c:255 2)\n"
    "srun: error: node2: task 1: Exited with exit code 1\n"
)


@pytest.mark.parametrize(
    "text,cause",
    [
        (SRUN_MISSING_IMAGE, "ch-run[3386]: error: can't stat: /nonexistent/image: No such file or directory (ch_core.c:255 2)"),
        # no interpreter where the task runs: slurmstepd says it for the task
        ("slurmstepd: error: execve(): /opt/env/bin/python: No such file or directory\n"
         "srun: error: node1: task 0: Exited with exit code 2\n", "slurmstepd: error: execve(): /opt/env/bin/python: No such file or directory"),
        # srun's warning before the tasks ran, a traceback's last line, a peer's line after srun's first message
        ("srun: warning: can't honor --ntasks-per-node set to 2\nTraceback (most recent call last):\n  File \"x\"\n"
         "ModuleNotFoundError: No module named 'mymodel'\nsrun: error: node1: task 0: Exited with exit code 1\n"
         "KeyboardInterrupt\n", "ModuleNotFoundError: No module named 'mymodel'"),
        ("srun: warning: x\nsrun: error: Unable to create step for job 5: Memory required by task is not available\n",
         "srun: error: Unable to create step for job 5: Memory required by task is not available"),
        # Slurm 24.11: srun's first messages before the failing task's line, then slurmstepd's cancellation of its peer
        ("srun: error: node2: task 1: Exited with exit code 1\nsrun: Terminating StepId=10214.0\n"
         "ch-run[26225]: error: can't stat: /x/no-such-image: No such file or directory (ch_core.c:401 2)\n"
         "slurmstepd-node1: error: *** STEP 10214.0 ON node1 CANCELLED AT 2026-12-03T03:06:50 ***\n"
         "srun: error: node1: task 0: Terminated\nsrun: Force Terminated StepId=10214.0\n",
         "ch-run[26225]: error: can't stat: /x/no-such-image: No such file or directory (ch_core.c:401 2)"),
        ("progress 10%\rprogress 20%\rfatal: no GPU\n", "fatal: no GPU"),  # a progress bar's last state
        ("", None),
    ],
)
def test_the_cause_of_a_failed_step_is_the_first_failing_tasks_last_line(text: str, cause: str | None) -> None:
    assert task_output.first_error(text) == cause


def test_task_output_passes_srun_stderr_on_unchanged_and_keeps_its_head(tmp_path: Path) -> None:
    """The batch script's copy of srun's stderr: every byte on to the log (no line buffering: a
    progress bar's carriage returns as they come), the head kept for the verdict; exit 0 always."""
    said = (SRUN_MISSING_IMAGE.encode() + b"\rstep 1\xff" * 20000)[: 3 * task_output.KEPT_BYTES]
    env = {**os.environ, task_output.ENV_TASK_RECORDS: str(tmp_path)}
    done = subprocess.run([sys.executable, "-m", "trainer_cli.job.task_output"], input=said, capture_output=True, env=env)
    assert done.returncode == 0 and done.stdout == b"" and done.stderr == said
    assert (tmp_path / task_output.FILE_NAME).read_bytes() == said[: task_output.KEPT_BYTES]
    assert task_output.read_first_error(tmp_path) == task_output.first_error(SRUN_MISSING_IMAGE)
    assert batch.task_records(tmp_path) == [], "the kept stderr is no task's record"


def test_a_step_that_fails_before_training_ends_the_job_failed_at_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """srun exited 1 and no task noted the start of its training (no `fit start` in `.tasks`): `batch
    end` ends the job FAILED without a requeue, the first failing task's error in one line of the log
    and in job.json for `train jobs`. The same exit once a task noted its start (training ran, then
    a task vanished) is a step Slurm killed: requeued, as before."""
    for name in ("SLURM_ARRAY_JOB_ID", "SLURM_ARRAY_TASK_ID", restarts.ENV_PRIOR_RESTARTS, batch.ENV_REQUEUE_MODE):
        monkeypatch.delenv(name, raising=False)
    records = tmp_path / ".tasks"
    records.mkdir()
    env = {"SLURM_JOB_ID": "31", "SLURM_NTASKS": "2", "SLURM_RESTART_COUNT": "0", restarts.ENV_MAX_RESTARTS: "3"}
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    calls: list[list[str]] = []
    monkeypatch.setattr(batch, "_slurm", lambda action, *args, **kwargs: calls.append([action.__name__, *args]) or "")
    monkeypatch.setattr(batch, "requeued_by_itself", lambda job: None)
    (records / task_output.FILE_NAME).write_text(SRUN_MISSING_IMAGE)
    batch.started(tmp_path)
    assert batch.end_of_step(tmp_path, 1, records) == 1
    said = capsys.readouterr().out
    cause = task_output.first_error(SRUN_MISSING_IMAGE)
    assert (f"trainer-cli: the step ended with exit code 1 before any task started training: {cause}; not restarted "
            f"(it would fail the same way). Fix that, then resume with: train submit --config {tmp_path / 'config.yaml'}") in said
    record = jobstate.read(tmp_path)
    assert (record["state"], record["exit_code"], record["error"]) == ("FAILED", 1, f"failed before training: {cause}")
    assert calls == [] and restarts.read(tmp_path) == []
    assert failure_note(tmp_path, "31") == f"failed before training: {cause}" and failure_note(tmp_path, "32") == ""

    monkeypatch.setenv("SLURM_JOB_ID", "32")  # submitted again: its training started, then Slurm killed the step
    batch.started(tmp_path)
    (records / "0").write_text(f"10.0 {task_output.STARTED}\n12.0 exit 1\n")  # rank 1 vanished (SIGKILL)
    (records / "1").write_text(f"10.1 {task_output.STARTED}\n")
    assert batch.end_of_step(tmp_path, 1, records) == 0
    assert "stopped by Slurm (a signal or a kill, not an error of the training); requeueing job 32" in capsys.readouterr().out
    assert calls == [["requeue", "32"]] and "error" not in {k for k, v in jobstate.read(tmp_path).items() if v}
