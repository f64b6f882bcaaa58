"""Slurm array workers of an Optuna study (issue 30): `train submit --sweep ... --slurm.array_workers N`
queues N workers that ask the study for trials, train them and tell them, until the study holds the
requested number; a preempted worker requeues alone and resumes its in-flight trial from that trial's
checkpoint (not restarted, not asked twice, told once); a worker whose job ended untold has its trial
failed and retried. On the real local cluster. The workers' whole study (2 trials here; 12 trials by 3
workers of 2-task DDP trials in tests/test_sweep_study_cluster.py) is long (marker long): `make test-long`.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import subprocess
from pathlib import Path

import pytest
from slurm_support import (  # noqa: F401 - slurm_cluster is a fixture
    LOCAL_PROFILE,
    job_id_from,
    newest_step,
    sacct_attempts,
    sacct_hours,
    scontrol_job,
    slurm_cluster,
    train_submit,
    wait_for_file,
    wait_for_requeue,
    wait_for_state,
)
from support import DIGITS, every_epoch_last_checkpoint, quiet_args

from trainer_cli.launch import jobs
from trainer_cli.schedulers import engines
from trainer_cli.schedulers.slurm import sweep_worker as worker
from trainer_cli.sweeps import results, study
from trainer_cli.tools import runs

SHORT = ["--trainer.limit_train_batches", "5", "--trainer.limit_val_batches", "2"]


def test_dry_run_shows_the_workers_script(tmp_path: Path) -> None:
    code, out = train_submit("--config", DIGITS, "--config", LOCAL_PROFILE, *quiet_args(tmp_path), "--dry-run",
                             "--sweep", "optimizer.init_args.lr=loguniform(1e-3,1e-1)", "--sweep_sampler", "tpe",
                             "--sweep_trials", "40", "--slurm.array_workers", "4")
    assert code == 0
    assert "40 trial(s) (tpe sampler, pruner none) by 4 worker(s)" in out and "#SBATCH --array=0-3\n" in out
    assert "-m trainer_cli.schedulers.slurm.sweep_worker next" in out and not tmp_path.joinpath("digits").exists()


@pytest.mark.long  # the same at full size (12 trials, 3 workers, DDP): tests/test_sweep_study_cluster.py
def test_workers_fill_the_study_and_a_preempted_worker_resumes_its_trial(slurm_cluster: None, tmp_path: Path) -> None:  # noqa: F811
    epochs, batches, trials = 20, 5, 2  # two workers, two trials: each asks, one is preempted and resumes
    code, out = train_submit(
        "--config", DIGITS, "--config", LOCAL_PROFILE, *every_epoch_last_checkpoint(tmp_path), *quiet_args(tmp_path, epochs=epochs),
        *SHORT, "--trainer.devices", "1", "--slurm.time", "00:10:00",  # DDP trials of an array: test_sweep.py
        "--sweep", "optimizer.init_args.lr=loguniform(1e-3,1e-1)", "--sweep_sampler", "tpe", "--sweep_trials", str(trials),
        "--sweep_seed", "0", "--sweep_pruner", f"median(n_startup_trials=1, n_warmup_steps={10 * batches})", "--slurm.array_workers", "2",
    )  # no pruning before epoch 10 (a pruner's steps are optimizer steps, 5 an epoch here): a worker's trial started
    # late would be pruned at its first epochs once the other's completed, and its worker would end (COMPLETED)
    # before the USR1 (CI, both Slurm versions, with n_warmup_steps=10: pruned from epoch 2 on)
    assert code == 0, out
    job_id = job_id_from(out)
    sweep_dir = Path(next(line.split(":", 1)[1].split(" (")[0].strip() for line in out.splitlines() if line.startswith("Sweep directory:")))
    flight = sweep_dir / "workers" / "task_1.json"
    wait_for_file(flight, timeout_s=300)
    preempted_dir = Path(json.loads(flight.read_text())["run_dir"])
    wait_for_file(preempted_dir / "checkpoints" / "last.ckpt", timeout_s=300)  # its trial is training
    subprocess.run(["scancel", "-s", "USR1", f"{job_id}_1"], check=True, timeout=30)
    wait_for_requeue(f"{job_id}_1")
    preempted_at = newest_step(preempted_dir)
    for task in (0, 1):
        log = sweep_dir / "workers" / f"slurm-{job_id}_{task}.log"
        assert wait_for_state(f"{job_id}_{task}", timeout_s=600) == "COMPLETED", log.read_text()[-3000:] if log.is_file() else "(no log)"
    assert scontrol_job(f"{job_id}_1")["Restarts"] == "1" and scontrol_job(f"{job_id}_0")["Restarts"] == "0"

    record = json.loads((sweep_dir / "sweep.json").read_text())
    loaded = study.load(record["study"])
    assert sorted(t.number for t in loaded.trials) == list(range(trials)), "exactly the trials asked for, none twice"
    assert {t.state.name for t in loaded.trials} <= {"COMPLETE", "PRUNED"}, [(t.number, t.state.name) for t in loaded.trials]
    assert sorted(t["index"] for t in record["trials"]) == list(range(trials))
    number = int(preempted_dir.name.removeprefix("trial_"))
    log = (preempted_dir / f"slurm-{job_id}_1.log").read_text()
    assert f"Resuming {preempted_dir} from" in log, log[-3000:]
    resumed_at = int(log.split(f"Resuming {preempted_dir} from ", 1)[1].split("(step ", 1)[1].split(",", 1)[0])
    assert resumed_at >= preempted_at > 0, "the preempted trial continued from its checkpoint"
    told = loaded.trials[number]
    assert told.state.name in ("COMPLETE", "PRUNED") and json.loads((preempted_dir / "job.json").read_text())["restarts"] == 1
    if told.state.name == "COMPLETE":
        assert newest_step(preempted_dir) == epochs * batches
    assert not any((sweep_dir / "workers").glob("task_*.json")), "every in-flight trial was told"
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert jobs.main(["--root", str(tmp_path)], engines()) == 0  # `train jobs`: a row per worker
    rows = [line.split() for line in out.getvalue().splitlines()[1:]]
    assert sorted((r[0], r[1]) for r in rows) == [(f"{job_id}_{i}", "COMPLETED") for i in range(2)], out.getvalue()
    table = results.collect(sweep_dir, engines())
    listed = {Path(r["run_dir"]).name: r["cost"] for r in runs.collect([sweep_dir], engines=engines())["runs"]}
    # `train runs` prices a worker's trial as `train sweep-results` does (its share of the task), not the task's whole
    assert {Path(r["run_dir"]).name: r["cost"] for r in table["rows"]} == {k: v for k, v in listed.items() if k.startswith("trial_")}, listed
    assert sorted((r["trial"], r["state"], r["study"]) for r in table["rows"]) == sorted(
        (t.number, "COMPLETED", t.state.name) for t in loaded.trials)
    # each trial's share of its worker's allocation, estimated from its processes' time at the CPUs sacct
    # says the task held (the preempted trial: two processes); together less than the tasks' whole
    # allocations (asking and telling the study, the batch script), most of it
    held = sacct_hours(sacct_attempts(f"{job_id}_0", 1) + sacct_attempts(f"{job_id}_1", 2))
    spent = {r["trial"]: r["cost"] for r in table["rows"]}
    assert all(c["source"] == "estimated" and (c["cpu_hours"] or 0) > 0 for c in spent.values()), spent
    assert spent[number]["attempts"] == 2 and all(a["cpus"] for c in spent.values() for a in c["per_attempt"]), spent
    # each process priced at its own task's allocation: an array task's SLURM_JOB_ID is its own, the array's id
    # is one task's raw id (a trial of task 0 was priced at task 1's first allocation, unknown outside it: CI)
    other = next(t for t in spent if t != number)
    assert [a["job_id"] for a in spent[number]["per_attempt"]] == [f"{job_id}_1"] * 2, spent
    assert [a["job_id"] for a in spent[other]["per_attempt"]] == [f"{job_id}_0"], spent  # the other worker's
    assert 0.3 * held < table["cost"]["cpu_hours"] < held, (table["cost"], held)
    assert all((r["goodput"]["goodput_pct"] or 0) > 0 for r in table["rows"]), [r["goodput"] for r in table["rows"]]


def test_a_trial_whose_worker_ended_untold_is_failed_and_retried(
    slurm_cluster: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]  # noqa: F811
) -> None:
    """The journal file has no heartbeat: a worker whose Slurm job ended without telling its trial
    (cancelled, its node lost) is found by the next ask from Slurm's own answer. Worker 0's job here
    is a real array task of the cluster (the workers' sbatch only answers an id; the workers' `next`
    runs in this process): while that job runs its trial is left alone; once it is cancelled, worker
    1's ask fails that trial and retries it with the same values."""
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "sbatch").write_text("#!/bin/sh\necho 424242\n")
    (fake / "sbatch").chmod(0o755)
    with monkeypatch.context() as patched:
        patched.setenv("PATH", f"{fake}:{os.environ['PATH']}")
        code, out = train_submit("--config", DIGITS, "--config", LOCAL_PROFILE, *quiet_args(tmp_path), "--sweep",
                                 "optimizer.init_args.lr=loguniform(1e-3,1e-1)", "--sweep_sampler", "tpe",
                                 "--sweep_trials", "2", "--slurm.array_workers", "2")
    assert code == 0 and "424242" in out, out
    sweep_dir = tmp_path / "digits" / "sweep_0"
    held = subprocess.run(["sbatch", "--parsable", "--array=0", "-p", "debug", "-o", str(tmp_path / "held.log"),
                           "--wrap", "sleep 120"], capture_output=True, text=True, check=True, timeout=30).stdout
    held = held.strip().split(";")[0]
    assert wait_for_state(f"{held}_0", {"RUNNING"}, timeout_s=60) == "RUNNING"

    def next_trial(task: str, job: str) -> Path | None:
        monkeypatch.setenv("SLURM_JOB_ID", job)  # as in a real array task (JobContext knows a Slurm job by it)
        monkeypatch.setenv("SLURM_ARRAY_JOB_ID", job)
        monkeypatch.setenv("SLURM_ARRAY_TASK_ID", task)
        return worker.next_trial(sweep_dir, task)

    assert next_trial("0", held) == sweep_dir / "trial_000"
    assert next_trial("1", "424242") == sweep_dir / "trial_001"  # worker 0's job runs: its trial is not touched
    assert "never told" not in capsys.readouterr().err
    subprocess.run(["scancel", f"{held}_0"], check=True, timeout=30)
    assert wait_for_state(f"{held}_0", timeout_s=60) == "CANCELLED"
    record = json.loads((sweep_dir / "sweep.json").read_text())["study"]
    first, second = study.load(record).trials
    assert (first.state.name, second.state.name) == ("RUNNING", "RUNNING")
    assert first.params != second.params, "each ask (a process of its own) draws its own values from the seed"
    (sweep_dir / "workers" / "task_1.json").unlink()  # worker 1 moves on (as after its tell) and asks again
    assert next_trial("1", "424242") == sweep_dir / "trial_002"
    said = capsys.readouterr().err
    assert f"trial 0 ({sweep_dir / 'trial_000'}) of worker 0 was never told and its job {held}_0 has ended" in said
    loaded = study.load(record)
    dead, retry = loaded.trials[0], loaded.trials[2]
    assert (dead.state.name, loaded.trials[1].state.name, retry.state.name) == ("FAIL", "RUNNING", "RUNNING")
    assert retry.params == dead.params and retry.user_attrs["retried_from"] == 0
    assert not (sweep_dir / "workers" / "task_0.json").exists()
    assert (sweep_dir / "workers" / "dead_task_0.json").is_file()
