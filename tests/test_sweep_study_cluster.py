"""Issue 30's study on the local cluster, as its "Done when" states it: a 12-trial TPE study with a
median pruner, searched by 3 Slurm array workers whose trials are 2-task DDP fits, one worker
preempted mid-trial; in the journal file and in PostgreSQL.

Exactly 12 trials finish (COMPLETE or PRUNED, none FAIL), no trial is trained by two workers, the
preempted trial resumes from its checkpoint (its steps continue) and is told once, at least one
trial is PRUNED and keeps its run directory and checkpoint.

Long (marker ``long``, 3-5 minutes per storage on 2 cores): not in ``make test``'s 12 minutes;
``make test-long`` runs it, and CI (``.ci/run``) runs both.
"""

from __future__ import annotations

import contextlib
import io
import json
import re
import subprocess
from pathlib import Path

import pytest
from postgres_support import postgres_url  # noqa: F401 - a fixture
from slurm_support import (  # noqa: F401 - slurm_cluster is a fixture
    LOCAL_PROFILE,
    job_id_from,
    newest_step,
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
from trainer_cli.sweeps import results, study

EPOCHS, BATCHES, TRIALS, WORKERS = 4, 5, 12, 3


@pytest.mark.long
@pytest.mark.parametrize("storage", ["journal", "postgresql"])
def test_twelve_trials_three_workers_ddp_trials_one_preempted(
    slurm_cluster: None, tmp_path: Path, storage: str, request: pytest.FixtureRequest  # noqa: F811
) -> None:
    database = ["--sweep_storage", request.getfixturevalue("postgres_url")] if storage == "postgresql" else []
    code, out = train_submit(
        "--config", DIGITS, "--config", LOCAL_PROFILE, *every_epoch_last_checkpoint(tmp_path),
        *quiet_args(tmp_path, epochs=EPOCHS), "--trainer.limit_train_batches", str(BATCHES),
        "--trainer.limit_val_batches", "2", "--trainer.devices", "2", "--slurm.time", "00:30:00",
        # from 1e-5 (a trial that barely learns: the median pruner's case) to 1e-1
        "--sweep", "optimizer.init_args.lr=loguniform(1e-5,1e-1)", "--sweep_sampler", "tpe",
        "--sweep_trials", str(TRIALS), "--sweep_seed", "0", "--sweep_pruner", "median(n_startup_trials=2)",
        "--slurm.array_workers", str(WORKERS), *database,
    )  # fmt: skip
    assert code == 0, out
    job_id = job_id_from(out)
    sweep_dir = tmp_path / "digits" / "sweep_0"
    # worker 1's first trial, preempted once it has a checkpoint
    flight = sweep_dir / "workers" / "task_1.json"
    wait_for_file(flight, timeout_s=300)
    preempted_dir = Path(json.loads(flight.read_text())["run_dir"])
    wait_for_file(preempted_dir / "checkpoints" / "last.ckpt", timeout_s=300)
    subprocess.run(["scancel", "-s", "USR1", f"{job_id}_1"], check=True, timeout=30)
    wait_for_requeue(f"{job_id}_1")
    preempted_at = newest_step(preempted_dir)
    for task in range(WORKERS):
        log = sweep_dir / "workers" / f"slurm-{job_id}_{task}.log"
        state = wait_for_state(f"{job_id}_{task}", timeout_s=900)
        assert state == "COMPLETED", log.read_text()[-3000:] if log.is_file() else "(no log)"
    assert scontrol_job(f"{job_id}_1")["Restarts"] == "1"

    record = json.loads((sweep_dir / "sweep.json").read_text())
    loaded = study.load(record["study"])
    states = {t.number: t.state.name for t in loaded.trials}
    assert sorted(states) == list(range(TRIALS)), f"exactly the {TRIALS} trials asked for: {states}"
    assert set(states.values()) <= {"COMPLETE", "PRUNED"}, states
    pruned = [n for n, state in states.items() if state == "PRUNED"]
    assert pruned, f"the median pruner stopped no trial: {states}"
    for number in pruned:  # a pruned trial keeps its run directory and its checkpoint
        assert (sweep_dir / f"trial_{number:03d}" / "checkpoints" / "last.ckpt").is_file()
    assert sorted(t["index"] for t in record["trials"]) == list(range(TRIALS))
    for number in range(TRIALS):  # no trial twice: each trial's fit ran in one worker's task
        logs = sorted((sweep_dir / f"trial_{number:03d}").glob(f"slurm-{job_id}_*.log"))
        assert len(logs) == 1, (number, logs)
        assert (logs[0].read_text().count("Resuming ") > 0) == (sweep_dir / f"trial_{number:03d}" == preempted_dir)

    log = (preempted_dir / f"slurm-{job_id}_1.log").read_text()
    resumed = re.search(rf"Resuming {re.escape(str(preempted_dir))} from .*\(step (\d+),", log)
    assert resumed, log[-3000:]
    assert int(resumed.group(1)) >= preempted_at > 0, "the preempted trial continued from its checkpoint"
    told = loaded.trials[int(preempted_dir.name.removeprefix("trial_"))]
    if told.state.name == "COMPLETE":  # else pruned after its resume (once two other trials were complete)
        assert newest_step(preempted_dir) == EPOCHS * BATCHES, "its steps continued to the end, not restarted"
    else:
        assert told.user_attrs["pruned_at_step"] > int(resumed.group(1)), told.user_attrs
    assert json.loads((preempted_dir / "job.json").read_text())["restarts"] == 1
    assert not any((sweep_dir / "workers").glob("task_*.json")), "every in-flight trial was told"
    table = results.collect(sweep_dir, engines())
    assert sorted((r["trial"], r["study"]) for r in table["rows"]) == sorted(states.items())
    preempted_number = int(preempted_dir.name.removeprefix("trial_"))  # the trials after it in its task: no restart
    assert {r["trial"]: r["restarts"] for r in table["rows"]} == {n: int(n == preempted_number) for n in range(TRIALS)}
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert jobs.main(["--root", str(tmp_path)], engines()) == 0  # `train jobs`: the workers' tasks, each COMPLETED
    rows = [line.split() for line in out.getvalue().splitlines()[1:]]
    assert {(r[0], r[1]) for r in rows} == {(f"{job_id}_{i}", "COMPLETED") for i in range(WORKERS)}, out.getvalue()
