"""A sweep's study in PostgreSQL (`--sweep_storage URL`, issue 30): a real server that the test starts
(initdb and pg_ctl of Debian's `postgresql` package; as `nobody` when the tests run as root, which
PostgreSQL refuses), a TPE sweep with a median pruner whose trials report to it from their own
`train fit` processes, and `train sweep-results` reading it back; a Slurm worker that dies (its
heartbeat stops) leaves a trial that the next worker's ask fails and retries with the same values.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from postgres_support import postgres_url  # noqa: F401 - a fixture
from slurm_support import LOCAL_PROFILE, slurm_cluster, slurm_queries  # noqa: F401 - fixtures
from support import DIGITS, REPO, quiet_args

from trainer_cli.sweeps import results, study

SHORT = ["--trainer.limit_train_batches", "4", "--trainer.limit_val_batches", "2"]


# make test's 12 minutes: in the long tier, which CI runs; make test keeps a local TPE study with a median
# pruner (tests/test_sweep_optuna.py: its journal) and a TPE study in PostgreSQL asked by a job array's
# workers (test_a_dead_workers_trial_is_failed_and_retried, below)
@pytest.mark.long
def test_a_study_in_postgresql(postgres_url: str, tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    from trainer_cli.__main__ import main

    code = main(["fit", "--config", DIGITS, *quiet_args(tmp_path, epochs=2), *SHORT, "--sweep", "optimizer.init_args.lr=loguniform(1e-3,1e-1)",
                 "--sweep_sampler", "tpe", "--sweep_trials", "2", "--sweep_pruner", "median", "--sweep_storage", postgres_url])
    done = capfd.readouterr()
    assert code == 0, done.err[-3000:]
    sweep_dir = tmp_path / "digits" / "sweep_0"
    record = json.loads((sweep_dir / "sweep.json").read_text())
    assert record["study"]["storage"] == postgres_url and not (sweep_dir / "study.journal").exists()
    loaded = study.load(record["study"])
    assert [t.state.name for t in loaded.trials] == ["COMPLETE", "COMPLETE"]
    assert all(len(t.intermediate_values) == 2 for t in loaded.trials), "each validation reported by the trial's callback"
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert results.main([str(sweep_dir)]) == 0
    assert f"dashboard: optuna-dashboard '{postgres_url}'" in out.getvalue()
    assert [r["study"] for r in json.loads((sweep_dir / "sweep_results.json").read_text())["rows"]] == ["COMPLETE", "COMPLETE"]


# make test's 12 minutes: the same failure and retry with the journal file is make test's
# test_sweep_workers.py::test_a_trial_whose_worker_ended_untold_is_failed_and_retried (PostgreSQL adds the heartbeat)
@pytest.mark.long
def test_a_dead_workers_trial_is_failed_and_retried(
    slurm_queries: None, postgres_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch  # noqa: F811
) -> None:
    """A workers' sweep queued by a `sbatch` that only answers a job id (nothing queued); the workers'
    own commands run here: worker 0 takes a trial and beats for it, then its beat is killed (the
    worker died, unrequeued); three beats later worker 1's ask fails that trial and gets its retry,
    the same values in a new trial_<n>; asked again, worker 1 gets the same trial (in flight)."""
    import optuna

    from slurm_support import train_submit

    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "sbatch").write_text("#!/bin/sh\necho 424242\n")
    (fake / "sbatch").chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake}:{os.environ['PATH']}")
    code, out = train_submit("--config", DIGITS, "--config", LOCAL_PROFILE, *quiet_args(tmp_path), "--sweep", "optimizer.init_args.lr=loguniform(1e-3,1e-1)",
                             "--sweep_sampler", "tpe", "--sweep_trials", "2", "--sweep_storage", postgres_url, "--slurm.array_workers", "2")
    assert code == 0 and "Job id:          424242" in out, out
    sweep_dir = tmp_path / "digits" / "sweep_0"
    env = {**os.environ, "TRAINER_CLI_SWEEP_HEARTBEAT_S": "1"}

    def worker(*args: str) -> str:
        proc = subprocess.run([sys.executable, "-m", "trainer_cli.schedulers.slurm.sweep_worker", *args], capture_output=True, text=True, env=env, cwd=REPO, timeout=300)
        assert proc.returncode == 0, proc.stderr[-3000:]
        return proc.stdout.strip()

    assert worker("next", str(sweep_dir), "0") == str(sweep_dir / "trial_000")
    beating = subprocess.Popen([sys.executable, "-m", "trainer_cli.schedulers.slurm.sweep_worker", "beat", str(sweep_dir), "0"], env=env, cwd=REPO,
                               stdout=subprocess.PIPE, text=True)
    assert beating.stdout is not None and "heartbeat for trial" in beating.stdout.readline()
    time.sleep(2)
    assert beating.poll() is None, "the heartbeat runs while the trial trains"
    beating.kill()  # the worker dies: no tell, no requeue
    beating.wait()
    time.sleep(4)  # past the grace period (3 beats)
    assert worker("next", str(sweep_dir), "1") == str(sweep_dir / "trial_001")
    loaded = study.load(json.loads((sweep_dir / "sweep.json").read_text())["study"])
    dead, retry = loaded.trials[0], loaded.trials[1]
    assert (dead.state.name, retry.state.name) == ("FAIL", "RUNNING")
    retrying = getattr(optuna.storages, "RetryHeartbeatStaleTrialCallback", None) or optuna.storages.RetryFailedTrialCallback
    assert retrying.retried_trial_number(retry) == 0 and retry.params == dead.params
    assert worker("next", str(sweep_dir), "1") == str(sweep_dir / "trial_001"), "its trial in flight, not a new one"
    assert len(study.load(json.loads((sweep_dir / "sweep.json").read_text())["study"]).trials) == 2
