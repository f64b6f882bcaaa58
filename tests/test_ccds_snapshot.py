"""A cookiecutter-data-science project (tests/foreign_ccds, issue 45) submitted as it is: its
``.gitignore`` lists the data sub-folders ``data/raw`` and ``data/processed`` (git lists ``data/``,
``data/raw/`` and ``data/processed/``), its code finds the data from its own file
(``Path(__file__).resolve().parents[1] / "data" / "processed"``).

Modelled on drivendataorg/cookiecutter-data-science at 0f6b163cdbe3918a2c65ab57ad9fefda93976d9e
(master, 2025-07-23): ``{{ cookiecutter.repo_name }}/`` with the package at the top, its ``config.py``
deriving ``PROCESSED_DATA_DIR`` from ``__file__``, ``data/{raw,interim,processed,external}/.gitkeep``,
``/data/`` in its ``.gitignore``; the sub-folder lines of earlier projects and the
``data/raw/*``/``!data/raw/.gitkeep`` lines of its 0129c3f1737580ff429d7fbd7f151512f7ffa131 are the
other two ``.gitignore`` shapes checked (tests/ccds_support.py ``GITIGNORES``).

The snapshot links each git-ignored data folder once (a folder inside a linked one is reached through
it), a piece it cannot write is one error line with the run folder removed, and the dry run shows the
snapshot it would take, or says the job runs the live files where there is none. In the long tier the
project is submitted for real on the local cluster: its job completes from the snapshot, and every
checkpoint it leaves loads with the module's own ``load_from_checkpoint`` where trainer_cli is not importable.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import forkserver
import pytest
from ccds_support import GITIGNORES, ccds_project, run_main
from hw_support import git, hw_env
from slurm_support import LOCAL_PROFILE, job_id_from, slurm_cluster, wait_for_state  # noqa: F401 - a fixture

from trainer_cli.schedulers import snapshot

SMALL = ("--config", LOCAL_PROFILE, "--trainer.devices", "1", "--trainer.strategy", "auto", "--trainer.max_epochs", "1")


def _errors(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("error:")]


@pytest.mark.parametrize("data_ignore", sorted(GITIGNORES))
def test_snapshot_reaches_every_data_folder_through_one_link(tmp_path: Path, data_ignore: str) -> None:
    project = ccds_project(tmp_path, data_ignore=data_ignore, process=False)
    before = git(project, "status", "--porcelain", "--ignored").stdout
    run_dir = tmp_path / "runs" / "ccds" / "version_0"
    run_dir.mkdir(parents=True)
    snap = snapshot.take(project, run_dir)
    assert snap is not None
    code = run_dir / "code"
    config_copy = code / "ccds_digits" / "config.py"
    assert config_copy.is_file() and not config_copy.is_symlink()
    processed = config_copy.resolve().parents[1] / "data" / "processed"  # as the copied config.py derives it
    for name in ("processed/features.npy", "processed/labels.csv", "raw/points.csv"):
        assert (code / "data" / name).resolve() == (project / "data" / name).resolve(), name
    assert (processed / "labels.csv").read_text() == (project / "data" / "processed" / "labels.csv").read_text()
    linked = json.loads((run_dir / "code.json").read_text())["linked"]
    expected = {
        "subfolders": ["data"],  # data/raw and data/processed are reached through it
        "whole": ["data"],
        "contents": ["data/processed/features.npy", "data/processed/labels.csv", "data/raw/points.csv"],
    }
    assert linked == snap.linked == expected[data_ignore], linked
    if data_ignore == "contents":  # the tracked placeholders are copied beside the linked files
        assert (code / "data" / "raw" / ".gitkeep").is_file() and not (code / "data").is_symlink()
    assert git(project, "status", "--porcelain", "--ignored").stdout == before  # nothing written into the tree


def test_submit_takes_the_snapshot_and_a_refusal_leaves_no_run(tmp_path: Path) -> None:
    """The issue's crash: the real submit's snapshot (sbatch refused here, after it) is taken without a
    traceback, the data reachable from it; the run folder and the folders made for it are removed."""
    project = ccds_project(tmp_path)
    bin_dir, seen = tmp_path / "bin", tmp_path / "seen.txt"
    bin_dir.mkdir()
    sbatch = bin_dir / "sbatch"  # refuses, after noting what the job would find from the snapshot's own code
    sbatch.write_text(
        '#!/bin/sh\nrun=$(dirname "$2")\nls -L "$run/code/data/processed/features.npy" > '
        f"{seen} 2>&1\necho 'sbatch: error: refused by the test' >&2\nexit 1\n"
    )
    sbatch.chmod(0o755)
    root = tmp_path / "root"
    env = hw_env(PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    args = ["main.py", "submit", *SMALL, "--trainer.default_root_dir", str(root)]
    done = forkserver.run_python(args, project, env, 300)
    assert done.returncode != 0 and "Traceback" not in done.stderr, done.stderr[-3000:]
    assert len(_errors(done.stderr)) == 1 and "refused by the test" in done.stderr, done.stderr[-3000:]
    assert seen.read_text().strip().endswith("code/data/processed/features.npy"), seen.read_text()
    assert not root.exists(), list(root.rglob("*"))  # the run folder, and <root>/lightning_logs made for it
    assert (project / "data" / "processed" / "features.npy").is_file()  # the links removed, not followed


def test_snapshot_that_cannot_be_written_is_one_line_and_leaves_no_run(tmp_path: Path) -> None:
    """A run root on a full disk: the copy fails; one error line naming the file and the fixes, no
    traceback, the run folder removed and the project as it was."""
    project = ccds_project(tmp_path)
    (project / "notes.bin").write_bytes(os.urandom(400_000))  # untracked: copied (under the size limit)
    disk = tmp_path / "disk"
    disk.mkdir()
    mount = ["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(disk)]
    mounted = subprocess.run(mount, capture_output=True, text=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here: {mounted.stderr.strip()}")
    try:
        done = run_main(project, "submit", *SMALL, "--trainer.default_root_dir", str(disk))
        left = sorted(p.name for p in disk.rglob("*"))
    finally:
        subprocess.run(["umount", str(disk)], capture_output=True)
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr[-3000:]
    errors = _errors(done.stderr)
    assert len(errors) == 1 and errors[0].startswith("error: the code snapshot cannot write "), done.stderr
    assert "No space left on device" in errors[0] and "--slurm.snapshot false" in errors[0], errors
    assert left == [], left
    assert git(project, "status", "--porcelain").stdout == "?? notes.bin\n"


def test_dry_run_shows_the_snapshot_or_says_the_job_runs_the_live_files(tmp_path: Path) -> None:
    project = ccds_project(tmp_path)
    done = run_main(project, "submit", *SMALL, "--dry-run")
    assert done.returncode == 0, done.stderr[-3000:]
    line = next(x for x in done.stdout.splitlines() if x.startswith("# Code:"))
    assert "(dry run: not taken)" in line and "clean; git-ignored data linked, not copied" in line, line
    assert not list(project.rglob("code.json")) and not (project / "lightning_logs").exists()

    shutil.rmtree(project / ".git")  # the same project outside a git repository: no snapshot
    done = run_main(project, "submit", *SMALL, "--dry-run")
    assert done.returncode == 0, done.stderr[-3000:]
    lines = [x for x in done.stdout.splitlines() if x.startswith("# Code:")]
    assert len(lines) == 1 and "no snapshot (" in lines[0] and "is in no git work tree" in lines[0], done.stdout
    assert "the job runs " in lines[0] and "main.py" in lines[0], lines


@pytest.mark.long  # a real job on the local cluster (scripts/local-slurm): ~1-2 minutes
def test_submitted_job_completes_and_its_checkpoints_load_without_trainer_cli(
    slurm_cluster: None,  # noqa: F811
    tmp_path: Path,
) -> None:
    """The issue's project, ``python main.py submit`` with the local profile: the job trains from the code
    snapshot, finding the processed data from its own file through the ``data`` link, and COMPLETES; each
    checkpoint in the run folder loads with ``PointClassifier.load_from_checkpoint(path)`` and
    ``torch.load(path, weights_only=True)`` in a fresh python where importing trainer_cli fails."""
    project = ccds_project(tmp_path)
    root = tmp_path / "root"
    done = run_main(project, "submit", *SMALL, "--trainer.default_root_dir", str(root))
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stdout + done.stderr[-3000:]
    job_id = job_id_from(done.stdout)
    lines = done.stdout.splitlines()
    run_dir = Path(next(line.split(":", 1)[1].strip() for line in lines if line.startswith("Run directory:")))
    try:
        state = wait_for_state(job_id, timeout_s=300)
    finally:
        subprocess.run(["scancel", job_id], capture_output=True, timeout=30)  # (a no-op once it ended)
    log = (run_dir / f"slurm-{job_id}.log").read_text()
    assert state == "COMPLETED", log[-3000:]
    assert json.loads((run_dir / "job.json").read_text())["state"] == "COMPLETED", log[-3000:]
    checkpoints = sorted(run_dir.rglob("*.ckpt"))
    assert checkpoints and (run_dir / "checkpoints" / "last.ckpt") in checkpoints, log[-3000:]
    loads = str(Path(__file__).with_name("checkpoint_loads.py"))
    pairs = [f"ccds_digits.modeling.model.PointClassifier={ckpt}" for ckpt in checkpoints]
    env = hw_env(PYTHONPATH=str(project))
    fresh = subprocess.run(  # never the fork server's preloads
        [sys.executable, loads, "--block", *pairs], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300
    )
    assert fresh.returncode == 0, fresh.stderr[-3000:]
    loaded = [json.loads(line) for line in fresh.stdout.splitlines() if line.startswith("{")]
    assert len(loaded) == len(checkpoints), fresh.stdout
    assert all(x["loaded"] == "PointClassifier" and x["trainer_cli"] is False for x in loaded), loaded
    # the submitted run's config.yaml starts a new run with the user's script (it was refused: "--run_dir ...
    # already holds a trained run", the submit had pinned the run's folder in its launcher.yaml)
    again = run_main(project, "fit", "--config", str(run_dir / "config.yaml"))
    assert again.returncode == 0, again.stdout[-2000:] + again.stderr[-3000:]
    runs = {ckpt.parent.parent for ckpt in root.rglob("last.ckpt")}
    assert len(runs) == 2 and run_dir in runs, runs


def test_a_refusal_names_the_submitting_engine_s_options_only(tmp_path: Path) -> None:
    """A snapshot over its limit is refused with the options of the engine that submits: Slurm's
    (--slurm.snapshot_max_mb, --slurm.snapshot false), none for Ray's, which always ships one and whose
    submission refuses every --slurm.* option (it said both, a way out a Ray user could not take)."""
    from trainer_cli.schedulers.slurm.options import SlurmOptions

    project = ccds_project(tmp_path, process=False)
    (project / "weights.bin").write_bytes(b"\0" * 1_500_000)  # tracked-to-be: untracked files are copied too
    run_dir = tmp_path / "runs" / "ccds" / "version_0"
    run_dir.mkdir(parents=True)
    with pytest.raises(snapshot.UserError) as slurm:
        snapshot.take(project, run_dir, SlurmOptions(snapshot_max_mb=1).snapshot_limit())
    assert "over --slurm.snapshot_max_mb 1; largest: weights.bin (1.5 MB)" in str(slurm.value)
    assert "raise --slurm.snapshot_max_mb, or submit with --slurm.snapshot false" in str(slurm.value)
    with pytest.raises(snapshot.UserError) as ray:
        snapshot.preview(project, run_dir, snapshot.Limit(max_mb=1))
    assert "over the limit of 1 MB; largest: weights.bin (1.5 MB)" in str(ray.value) and "--slurm" not in str(ray.value)
    assert not (run_dir / "code").exists(), "nothing written"
