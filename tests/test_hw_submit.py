"""``python main.py submit`` of the foreign recogniser (tests/foreign_hw, issue 35): its data found from
its own file under a git-ignored folder, outputs of earlier runs in the project. The code snapshot
freezes code, links the git-ignored data and leaves outputs out; the launcher keeps nothing of its
own in the project; ``train jobs`` from the project folder lists the job without flags."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from hw_support import DEFAULT, git, hw_project, run_main, run_train
from slurm_support import LOCAL_PROFILE, job_id_from, scontrol_job, slurm_cluster, wait_for_state  # noqa: F401

SMALL = ("--config", LOCAL_PROFILE, "--trainer.devices", "1", "--trainer.max_epochs", "1")


def _outputs_of_earlier_runs(project: Path) -> dict[str, bytes]:
    """What earlier runs left in the project, untracked: a checkpoint in its root, a run folder with
    its checkpoint and code snapshot, an earlier version's registry of jobs (one finished job)."""
    old_run = project / "local_run" / "version_0"
    (old_run / "checkpoints").mkdir(parents=True)
    (old_run / "code" / "hwr").mkdir(parents=True)
    (old_run / "run.json").write_text('{"run_id": "old"}\n')
    (old_run / "launcher.yaml").write_text("{}\n")
    (old_run / "job.json").write_text(json.dumps({"job_id": "777001", "state": "COMPLETED", "restarts": 0}))
    (old_run / "checkpoints" / "epoch=0-step=6.ckpt").write_bytes(b"\0" * 4096)
    (old_run / "code" / "hwr" / "model.py").write_text((project / "hwr" / "model.py").read_text())
    (project / "epoch=3-step=24.ckpt").write_bytes(b"\0" * 4096)
    old_line = {
        "job_id": "777001",
        "job_name": "hwr-old",
        "run_dir": str(old_run),
        "submitted": "2026-01-01T00:00:00+00:00",
    }
    (project / "submissions.jsonl").write_text(json.dumps(old_line) + "\n")
    return {p: (project / p).read_bytes() for p in ("submissions.jsonl", "epoch=3-step=24.ckpt")}


def _status(project: Path, run_dir: Path) -> list[str]:
    """``git status --porcelain`` of the project, less the run directory's own entry (the run's outputs)."""
    lines = git(project, "status", "--porcelain").stdout.splitlines()
    inside = {run_dir.resolve(), *run_dir.resolve().parents}
    return [line for line in lines if (project / line[3:].rstrip("/")).resolve() not in inside]


def test_script_job_runs_the_snapshot_with_its_data_and_train_jobs_lists_it(
    slurm_cluster: None,  # noqa: F811
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    request: pytest.FixtureRequest,
) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))  # the user's state folder, this test's own
    project = hw_project(tmp_path)
    kept = _outputs_of_earlier_runs(project)
    before = git(project, "status", "--porcelain").stdout.splitlines()
    done = run_main(project, "submit", *DEFAULT, *SMALL, "--slurm.extra_sbatch", '["--hold"]')  # released below
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    job_id = job_id_from(done.stdout)
    request.addfinalizer(
        lambda: subprocess.run(["scancel", job_id], capture_output=True, timeout=30)
    )  # if it fails early
    run_dir = Path(
        next(line.split(":", 1)[1].strip() for line in done.stdout.splitlines() if line.startswith("Run directory:"))
    )
    code = run_dir / "code"

    # the snapshot: the code, clean (outputs are no uncommitted changes); the data linked; no outputs
    assert (
        f"Code:          {code} (" in done.stdout and ", clean; git-ignored data linked, not copied)" in done.stdout
    ), done.stdout
    assert (code / "data").is_symlink() and (code / "data").resolve() == (project / "data").resolve()
    copied = {p.relative_to(code).as_posix() for p in code.rglob("*") if not p.is_dir()}
    assert "hwr/data/datamodule.py" in copied and "main.py" in copied, copied
    assert not [p for p in copied if p.endswith(".ckpt") or p.startswith("local_run") or "submissions" in p], copied
    record = json.loads((run_dir / "code.json").read_text())
    assert record["dirty"] is False and record["linked"] == ["data"] and record["left_out"] >= 5, record

    # nothing the launcher keeps for itself in the project: the tree's status and the old files as they were
    assert _status(project, run_dir) == before, (before, git(project, "status", "--porcelain").stdout)
    assert {p: (project / p).read_bytes() for p in kept} == kept
    assert not list(project.rglob(".submissions.jsonl.lock"))
    assert (tmp_path / "state" / "trainer-cli" / "submissions.jsonl").is_file()

    # the job ran the submitted copy (the live tree edited while it was held), in the submitting folder,
    # and found the data from its own file
    model = project / "hwr" / "model.py"
    committed = model.read_text()
    model.write_text(committed.replace('"as-committed"', '"edited-after"'))
    subprocess.run(["scontrol", "release", job_id], check=True, timeout=30)
    state = wait_for_state(job_id, timeout_s=240)
    model.write_text(committed)  # the user's edit undone once the job ended: the tree as it was, for the checks below
    log = (run_dir / f"slurm-{job_id}.log").read_text()
    assert state == "COMPLETED", log[-3000:]
    assert f"HWR_MARKER=as-committed FILE={code / 'hwr' / 'model.py'} CWD={project.resolve()}\n" in log, log[-3000:]
    assert "edited-after" not in log, log[-3000:]
    # the run's folder is where its local fit puts it, <save_dir>/<project>/<W&B run id>, and the job's every
    # checkpoint is in it (issue 35, defect 2: it was hwr/version_0, the script's own ones in hwr/version_0/hwr/<id>)
    assert (
        run_dir.parent == project / "hwr" and json.loads((run_dir / "run.json").read_text())["run_id"] == run_dir.name
    )
    earlier = {project, project / "local_run" / "version_0" / "checkpoints"}
    assert {p.parent for p in project.rglob("*.ckpt")} - earlier == {run_dir / "checkpoints"}, log[-3000:]
    job_name = scontrol_job(job_id)["JobName"]
    assert job_name in {"hwr", "hwr-project"}, job_name  # the script's experiment or project, not `run`

    # `train jobs` from the project folder, no flags: this job, and the one the earlier version registered
    jobs = run_train(project, "jobs")
    assert jobs.returncode == 0, jobs.stderr[-3000:]
    rows = {line.split()[0]: line for line in jobs.stdout.splitlines()[1:]}
    assert "COMPLETED" in rows[job_id] and f" {job_name} " in rows[job_id], jobs.stdout
    assert "COMPLETED" in rows["777001"] and "hwr-old" in rows["777001"], jobs.stdout
    assert _status(project, run_dir) == before, git(project, "status", "--porcelain").stdout


def test_snapshot_over_its_limit_names_the_largest_files(tmp_path: Path) -> None:
    """A project holding a large untracked file: the submission refuses in one line naming it and
    how to leave it out, before anything is queued or left on disk (no cluster needed)."""
    project = hw_project(tmp_path)
    (project / "strokes_export.bin").write_bytes(b"\1" * 3_000_000)
    before = sorted(p.relative_to(project).as_posix() for p in project.rglob("*") if ".git" not in p.parts)
    done = run_main(project, "submit", *DEFAULT, *SMALL, "--slurm.snapshot_max_mb", "2")
    assert done.returncode == 2, done.stdout + done.stderr[-3000:]
    error = [line for line in done.stderr.splitlines() if not line.startswith("warning:")]  # (no Slurm here: a warning)
    assert len(error) == 1 and error[0].startswith("error: the code snapshot of"), done.stderr
    assert "strokes_export.bin (3.0 MB)" in error[0] and "--slurm.snapshot_max_mb 2" in error[0], error
    assert "git-ignoring" in error[0] and "--slurm.snapshot false" in error[0], error
    after = sorted(p.relative_to(project).as_posix() for p in project.rglob("*") if ".git" not in p.parts)
    assert after == before, set(after) ^ set(before)
    assert subprocess.run(
        ["git", "-C", str(project), "status", "--porcelain"], capture_output=True, text=True
    ).stdout == ("?? strokes_export.bin\n")


def test_a_snapshot_holds_the_uncommitted_version_and_its_diff(tmp_path: Path) -> None:
    """A committed module with an uncommitted change, snapshotted as ``train submit`` does, then edited:
    the snapshot holds the submitted (uncommitted) version, ``code.diff`` the change, ``code.json`` says
    dirty (no cluster needed: the short sibling of test_slurm_cluster.py's long
    test_the_job_runs_the_code_submitted_not_the_code_edited_after, whose job then runs that copy)."""
    from support import USER_MODULE

    from trainer_cli.schedulers import snapshot

    repo = tmp_path / "myproject"
    (repo / "snapmodels").mkdir(parents=True)
    (repo / "snapmodels" / "__init__.py").write_text("")
    (repo / "snapmodels" / "tiny.py").write_text(USER_MODULE)
    for args in (["init", "-q"], ["add", "."], ["commit", "-qm", "model"]):
        git(repo, *args)
    changed = USER_MODULE.replace("hidden: int = 16", "hidden: int = 24")
    (repo / "snapmodels" / "tiny.py").write_text(changed)  # uncommitted
    run_dir = tmp_path / "runs" / "digits" / "version_0"
    taken = snapshot.take(repo, run_dir, roots=[tmp_path / "runs"])
    assert taken is not None and taken.dirty and taken.files == 2 and Path(taken.source).resolve() == repo.resolve()
    record = json.loads((run_dir / "code.json").read_text())
    assert record["dirty"] is True and record["files"] == 2 and Path(record["source"]).resolve() == repo.resolve()
    assert "hidden: int = 24" in (run_dir / "code.diff").read_text()
    (repo / "snapmodels" / "tiny.py").write_text('raise RuntimeError("edited after submit")\n')
    assert "hidden: int = 24" in (run_dir / "code" / "snapmodels" / "tiny.py").read_text()


def test_the_registry_is_the_users_and_reads_an_earlier_versions(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Submissions are registered in the user's state folder, not under the run root (a script's root is
    its project); the jobs an earlier version registered in ``runs/`` or the project root still list."""
    from trainer_cli.launch import jobs
    from trainer_cli.schedulers import submissions

    state, project = tmp_path / "state", tmp_path / "project"
    monkeypatch.setenv("XDG_STATE_HOME", str(state))
    monkeypatch.chdir(tmp_path)
    (project / "runs").mkdir(parents=True)
    old = {
        "job_id": "5",
        "job_name": "old",
        "run_dir": str(project / "runs" / "a" / "version_0"),
        "submitted": "2026-01-01T00:00:00",
    }
    (project / "runs" / "submissions.jsonl").write_text(json.dumps(old) + "\n")
    (project / "submissions.jsonl").write_text(
        json.dumps(old | {"job_id": "6", "run_dir": str(project / "hwr" / "x")}) + "\n"
    )
    submissions.register(
        project,
        {"job_id": "7", "job_name": "hwr", "run_dir": str(project / "hwr" / "y"), "submitted": "2026-02-01T00:00:00"},
    )
    submissions.register(
        tmp_path / "elsewhere",
        {"job_id": "8", "run_dir": str(tmp_path / "elsewhere" / "z"), "submitted": "2026-03-01T00:00:00"},
    )
    assert sorted(p.name for p in project.iterdir()) == ["runs", "submissions.jsonl"]  # nothing new in the project
    assert submissions.registry_file() == state / "trainer-cli" / "submissions.jsonl"
    assert [r["job_id"] for r in submissions.read_registry(project)] == ["6", "7"]
    monkeypatch.chdir(project)
    assert [r["job_id"] for r in submissions.read_registry()] == ["5", "6", "7", "8"]
    assert jobs.find_run(None, "8")["run_dir"] == str(tmp_path / "elsewhere" / "z")
    with pytest.raises(jobs.UserError, match="no job you submitted has this run directory or job id"):
        jobs.find_run(None, "9")
