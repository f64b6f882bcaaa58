"""The corpus's scripts submitted for real on the local cluster (long: each job trains for half a minute and
is requeued once): a package run with ``python -m`` (``tests/corpus/mlflow_cli``) and a script built with
``run=False`` (``tests/corpus/lightning_example``). Each ``submit`` is the user's own command; the job runs
the submitted code from its snapshot, is given SIGUSR1 mid-training (what ``--signal=SIGUSR1@N`` sends before
the time limit), requeues, resumes at the step it saved and COMPLETES; every checkpoint it leaves loads
with the module's own ``load_from_checkpoint`` in a fresh process."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
import torch
from corpus_support import loads, project, run, user_env, write_digits
from slurm_support import LOCAL_PROFILE, job_id_from, slurm_cluster, wait_for_file, wait_for_requeue, wait_for_state  # noqa: F401

QUIET = ["--trainer.enable_progress_bar", "false", "--trainer.enable_model_summary", "false"]


def _submit_requeue_complete(
    proj: Path, argv: list[str], env: dict[str, str], epochs: int, *more: str
) -> tuple[Path, str, int]:
    """``python ARGV submit ...`` in ``proj``; SIGUSR1 once last.ckpt exists; returns (run dir, job id, the
    requeue's step) after the job COMPLETED after one requeue, resumed where it saved."""
    flags = ["--config", LOCAL_PROFILE, "--trainer.devices", "1", "--trainer.max_epochs", str(epochs), *QUIET, *more]
    done = run(proj, [*argv, "submit", *flags], env)
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    job_id = job_id_from(done.stdout)
    run_dir = Path(next(line.split(":", 1)[1].strip() for line in done.stdout.splitlines() if line.startswith("Run directory:")))
    wait_for_file(run_dir / "checkpoints" / "last.ckpt", timeout_s=300)  # training is under way
    subprocess.run(["scancel", "-s", "USR1", job_id], check=True, timeout=30)
    wait_for_requeue(job_id)
    log = run_dir / f"slurm-{job_id}.log"
    assert wait_for_state(job_id, timeout_s=400) == "COMPLETED", log.read_text()[-3000:]
    starts = [json.loads(line) for line in (run_dir / "history.jsonl").read_text().splitlines()]
    kinds = [(s["kind"], s["slurm"]["restart_count"]) for s in starts if s["kind"] in ("new", "requeue")]
    assert kinds == [("new", 0), ("requeue", 1)], starts
    saved_at = starts[-1]["global_step"]
    assert saved_at > 0, "the restart resumed from the checkpoint, not from step 0"
    return run_dir, job_id, saved_at


@pytest.mark.long
def test_a_module_run_package_submits_requeues_and_completes(slurm_cluster: None, tmp_path: Path) -> None:  # noqa: F811
    """``python -m stormlit.trainer submit``: the job runs ``python -m stormlit.trainer`` from the snapshot."""
    data = write_digits(tmp_path / "outside" / "data")
    proj = project(tmp_path, "mlflow_cli")
    env = user_env(STORMLIT_DATA=str(data), MLFLOW_ALLOW_FILE_STORE="true")
    run_dir, job_id, saved_at = _submit_requeue_complete(proj, ["-m", "stormlit.trainer"], env, epochs=40)
    assert " -m stormlit.trainer fit --config " in (run_dir / "submit.sbatch").read_text()
    last = torch.load(run_dir / "checkpoints" / "last.ckpt", weights_only=True, map_location="cpu")
    assert last["global_step"] > saved_at, "trained on after the requeue (to the end or its EarlyStopping)"
    for ckpt in sorted((run_dir / "checkpoints").glob("*.ckpt")):
        (loaded,) = loads(proj, {"stormlit.module.SequenceClassifier": ckpt}, block=True)
        assert loaded["optimizer"] == ["AdamW", 0.01], loaded


@pytest.mark.long
def test_a_run_false_script_submits_requeues_and_completes(slurm_cluster: None, tmp_path: Path) -> None:  # noqa: F811
    """``python main.py submit`` of a ``run=False`` script: the job runs ``main.py`` without a verb; after the
    requeue the script's own ``trainer.fit`` resumes, then its test and predict run. Its data is found from
    ``__file__`` outside the project (``<project>/../Datasets``), which a code snapshot's copy of ``main.py``
    (``<run>/code/main.py``) cannot reach: the job runs the live script (``--slurm.snapshot false``)."""
    write_digits(tmp_path / "Datasets")
    proj = project(tmp_path, "lightning_example")
    run_dir, job_id, _ = _submit_requeue_complete(proj, ["main.py"], user_env(), 40, "--slurm.snapshot", "false")
    log = (run_dir / f"slurm-{job_id}.log").read_text()
    assert "PREDICTIONS (32, 10)" in log, log[-3000:]
    last = torch.load(run_dir / "checkpoints" / "last.ckpt", weights_only=True, map_location="cpu")
    assert last["global_step"] == 40 * 8, "every step of every epoch"  # 256 training rows, batch 32
    for ckpt in sorted((run_dir / "checkpoints").glob("*.ckpt")):
        (loaded,) = loads(proj, {"main.LitClassifier": ckpt}, block=False)  # main.py imports trainer_cli
        assert loaded["optimizer"] == ["Adam", 0.001], loaded
