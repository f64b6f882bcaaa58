"""The run-directory policy (:mod:`trainer_cli.rundir.policy`): where a start of a run goes, which
checkpoint it loads and why, its frozen config, and what a start that saved nothing leaves.

Real files in a temporary folder; the checkpoints are small torch files holding the fields of a
Lightning checkpoint that the policy reads (global step, epochs done, ``ModelCheckpoint`` state).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from trainer_cli.errors import UserError
from trainer_cli.job import jobstate, restarts
from trainer_cli.rundir import discard, freezing, layout
from trainer_cli.rundir import policy as rundir

SLURM_VARIABLES = ("SLURM_JOB_ID", "SLURM_JOB_NAME", "SLURM_NTASKS", "SLURM_PROCID", "SLURM_RESTART_COUNT", "SLURM_ARRAY_JOB_ID",
                   restarts.ENV_PRIOR_RESTARTS, layout.ENV_RUN_DIR)


@pytest.fixture(autouse=True)
def _outside_slurm(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in SLURM_VARIABLES:
        monkeypatch.delenv(name, raising=False)


def _checkpoint(path: Path, step: int, epochs: int = 0, callbacks: dict | None = None) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    progress = {"fit_loop": {"epoch_progress": {"current": {"processed": epochs}}}}
    torch.save({"global_step": step, "epoch": epochs, "loops": progress, "callbacks": callbacks or {}}, path)


def test_plan_chooses_where_each_start_goes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "runs"
    dry = rundir.plan(root, "exp", None, None, dry_run=True)
    assert (dry.kind, dry.created, dry.path) == ("dry-run", False, root / "exp" / "version_0") and not dry.path.exists()
    first = rundir.plan(root, "exp", None, None)
    assert (first.kind, first.created, first.path) == ("new", True, root / "exp" / "version_0") and first.path.is_dir()
    assert rundir.plan(root, "exp", None, None).path == root / "exp" / "version_1"  # never reused
    with pytest.raises(UserError, match="--ckpt_path last: no run of 'exp' under .* has a checkpoint"):
        rundir.plan(root, "exp", "last", None)
    _checkpoint(first.path / layout.LAST_CKPT, 4)
    resumed = rundir.plan(root, "exp", "last", None)  # the newest run *with* a checkpoint: version_1 has none
    assert (resumed.kind, resumed.path, resumed.created, resumed.existing) == ("resumed", first.path, False, True)
    named = rundir.plan(root, "exp", "best", tmp_path / "elsewhere")
    assert (named.kind, named.path, named.existing) == ("named", tmp_path / "elsewhere", True)
    monkeypatch.setenv("SLURM_JOB_ID", "7")
    monkeypatch.setenv("SLURM_NTASKS", "2")
    monkeypatch.setenv("SLURM_PROCID", "1")
    shared = rundir.plan(root, "exp", None, None)
    assert (shared.kind, shared.path, shared.created) == ("shared", root / "exp" / "job_7", False)
    assert rundir.plan(root, "exp", None, None, submitting=True, dry_run=True).kind == "dry-run"  # the job's tasks, not the submitter's
    monkeypatch.setenv(layout.ENV_RUN_DIR, str(first.path))
    assert rundir.plan(root, "exp", None, None).kind == "inherited"
    assert rundir.plan(root, "exp", None, None, submitting=True, dry_run=True).kind == "dry-run"


def test_which_checkpoint_a_start_loads_and_why(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    assert rundir.resume_checkpoint(run, None) is None  # nothing saved: a new start
    with pytest.raises(UserError, match="holds no complete checkpoint; nothing to resume"):
        rundir.resume_checkpoint(run, "last")
    _checkpoint(run / layout.LAST_CKPT, 10, 1)
    _checkpoint(run / "hpc_ckpt_3.ckpt", 12, 1)
    (run / "hpc_ckpt_4.ckpt").write_bytes(b"truncated")  # not a complete checkpoint: never chosen
    last = rundir.resume_checkpoint(run, "last")
    assert last is not None and last.progress is not None
    assert (last.which, last.path.name, last.progress.global_step) == ("last", "hpc_ckpt_3.ckpt", 12)
    assert last.why == "--ckpt_path last: the newest complete checkpoint by global step (hpc_ckpt_4.ckpt damaged: passed over)"
    assert last.skipped == (run / "hpc_ckpt_4.ckpt",)  # named where the resume is announced
    with pytest.raises(UserError, match="already holds a trained run .* add --ckpt_path last"):
        rundir.resume_checkpoint(run, None)  # outside a job a trained run is never started over
    in_job = rundir.resume_checkpoint(run, None, in_job=True)  # a job (re)started in its run continues
    assert in_job is not None and (in_job.which, in_job.path.name) == ("last", "hpc_ckpt_3.ckpt")
    assert in_job.why.startswith("a job in its trained run continues from its newest checkpoint: the newest complete checkpoint by global step")
    evaluation = rundir.resume_checkpoint(run, None, trains=False)  # test --run_dir R: the run's weights, not the config's
    assert evaluation is not None and (evaluation.which, evaluation.path.name) == ("last", "hpc_ckpt_3.ckpt")  # no best yet
    assert evaluation.why.startswith("an evaluation of a trained run without --ckpt_path uses its last checkpoint")
    assert rundir.resume_checkpoint(run, None, named=False) is None  # a DDP process launched into a new run
    given = rundir.resume_checkpoint(run, str(tmp_path / "other.ckpt"))
    assert given is not None and (given.which, given.path) == ("file", tmp_path / "other.ckpt")
    with pytest.raises(UserError, match="has no best checkpoint .* use --ckpt_path last"):
        rundir.resume_checkpoint(run, "best")
    best = run / "checkpoints" / "best-epoch=0.ckpt"
    _checkpoint(best, 5)
    state = {"monitor": "val/acc", "best_model_path": str(best), "best_model_score": torch.tensor(0.9)}
    _checkpoint(run / "hpc_ckpt_5.ckpt", 14, 2, {"ModelCheckpoint{'monitor': 'val/acc', 'mode': 'max'}": state})
    chosen = rundir.resume_checkpoint(run, "best")
    assert chosen is not None and (chosen.which, chosen.path, chosen.why) == ("best", best, "--ckpt_path best: the best monitored score")
    evaluation = rundir.resume_checkpoint(run, None, trains=False)
    assert evaluation is not None and (evaluation.which, evaluation.path) == ("best", best)
    assert rundir.resume_checkpoint(run, None, trains=False, named=False) is None  # no --run_dir: the config's own weights


def test_a_restarted_job_goes_on_from_what_it_saved_since_it_was_submitted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    given = tmp_path / "pretrained.ckpt"
    _checkpoint(given, 3)
    jobstate.write(tmp_path, {"job_id": "12", "submitted": "2026-01-01T00:00:00+00:00"})
    _checkpoint(tmp_path / "hpc_ckpt_1.ckpt", 7, 1)
    monkeypatch.setenv("SLURM_JOB_ID", "12")
    monkeypatch.setenv("SLURM_JOB_NAME", "digits")
    monkeypatch.setenv("SLURM_RESTART_COUNT", "0")
    first = rundir.resume_checkpoint(tmp_path, str(given))
    assert first is not None and (first.which, first.path) == ("file", given)  # the job's first start takes its --ckpt_path
    monkeypatch.setenv("SLURM_RESTART_COUNT", "1")
    again = rundir.resume_checkpoint(tmp_path, str(given))
    assert again is not None and (again.which, again.path.name) == ("last", "hpc_ckpt_1.ckpt")
    assert again.why.startswith(f"a restarted job goes on from what it saved, not from --ckpt_path {given}")


def test_a_finished_run_has_nothing_to_train(tmp_path: Path) -> None:
    reached = layout.RunCheckpoint(tmp_path / "last.ckpt", 20, 2)
    line = rundir.finished_line(tmp_path, reached, 2, None)
    assert line is not None and line.startswith(f"{tmp_path} is finished (2 epochs, step 20; max_epochs=2, max_steps=None): nothing to train")
    assert rundir.finished_line(tmp_path, reached, 3, -1) is None
    assert rundir.finished_line(tmp_path, reached, None, 20) is not None  # max_steps reached
    assert rundir.finished_line(tmp_path, reached, None, None) is None  # Lightning's default: 1000 epochs


def test_freeze_once_and_discard_only_a_start_that_saved_nothing(tmp_path: Path) -> None:
    run = tmp_path / "exp" / "version_0"
    assert freezing.freeze(run, "trainer:\n  max_epochs: 1\n")
    assert not freezing.freeze(run, "trainer:\n  max_epochs: 2\n")  # frozen at the first start
    assert (run / layout.CONFIG_FILE).read_text() == "trainer:\n  max_epochs: 1\n"
    _checkpoint(run / layout.LAST_CKPT, 1)
    assert not discard.discard_if_untrained(run, empty_parents=1) and run.is_dir()  # it saved something: kept
    (run / layout.LAST_CKPT).unlink()
    assert discard.discard_if_untrained(run, empty_parents=1)
    assert not (tmp_path / "exp").exists() and tmp_path.is_dir()  # the parent it left empty, no further


def test_a_carried_ckpt_path_counts_only_until_the_run_saved_a_checkpoint(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    pretrained = tmp_path / "pretrained.ckpt"
    _checkpoint(pretrained, 3)
    first = rundir.resume_checkpoint(run, str(pretrained), carried=True)
    assert first is not None and first.which == "file"  # the run's first start: nothing saved yet
    _checkpoint(run / layout.LAST_CKPT, 8, 1)
    with pytest.raises(UserError, match="already holds a trained run .* add --ckpt_path last"):
        rundir.resume_checkpoint(run, str(pretrained), carried=True)  # never back to where it started
    resubmitted = rundir.resume_checkpoint(run, str(pretrained), carried=True, in_job=True)
    assert resubmitted is not None and (resubmitted.which, resubmitted.path.name) == ("last", "last.ckpt")
    given = rundir.resume_checkpoint(run, str(pretrained))  # given for this start: taken
    assert given is not None and given.which == "file"


def test_last_takes_the_launchers_resume_checkpoint_beside_a_users_last(tmp_path: Path) -> None:
    """Issue 45: where a user's ``save_last`` callback writes ``checkpoints/last.ckpt``, the launcher's is
    ``checkpoints/resume.ckpt``: ``last`` takes the newer, the user's on equal steps, and a weights-only
    ``last.ckpt`` (``save_weights_only``) only where nothing holds the training state."""
    def save(path: Path, step: int, full: bool = True) -> None:
        _checkpoint(path, step)
        if full:
            torch.save({**torch.load(path, weights_only=True), "optimizer_states": []}, path)

    run = tmp_path / "run"
    save(run / layout.LAST_CKPT, 6)
    save(run / layout.RESUME_CKPT, 7)
    assert layout.newest_checkpoint(run).path == run / layout.RESUME_CKPT  # the user's last.ckpt is behind
    save(run / layout.LAST_CKPT, 7)
    assert layout.newest_checkpoint(run).path == run / layout.LAST_CKPT  # equal steps: the user's file
    save(run / layout.LAST_CKPT, 9, full=False)
    assert layout.newest_checkpoint(run).path == run / layout.RESUME_CKPT  # weights only: not resumable
    (run / layout.RESUME_CKPT).unlink()
    assert layout.newest_checkpoint(run).path == run / layout.LAST_CKPT  # the only one
