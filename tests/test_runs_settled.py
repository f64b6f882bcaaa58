"""Issue 48: `train runs` trusts a run with no writer from one `stat` of its folder (trainer_cli.rundir.live: each
`train` process writing into a run holds a marker there; trainer_cli.rundir.index: a run listed without one, whose
last start kept markers, is held by its folder's time and inode). Real runs of `train fit`; each listing here is
compared with the listing read from every logger's file."""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path
from typing import Any

import pytest
from support import DIGITS, quiet_args, run_train
from test_runs import _listing

from trainer_cli.rundir import attempts, live
from trainer_cli.rundir import index as runs_index

SHORT = ["--trainer.limit_train_batches", "3", "--trainer.limit_val_batches", "1"]


def _age(root: Path) -> None:
    """Every folder's time moved a minute back: older than the index's racy window (a listing then trusts it)."""
    past = time.time() - 60
    for folder in [root, *(p for p in root.rglob("*") if p.is_dir())]:
        os.utime(folder, (past, past))


def _listed(root: Path) -> tuple[list[list[str]], list[dict[str, Any]]]:
    """The listing from the index, checked against the listing read from every logger's file."""
    now = _listing(root, curves=False)
    assert now == _listing(root, curves=True)
    return now


def _held(root: Path) -> dict[str, Any]:
    return json.loads((root / runs_index.INDEX_FILE).read_text())["folders"]


def test_a_settled_run_is_listed_from_one_stat_and_read_again_once_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "runs"
    for lr in ("0.01", "0.02"):
        done = run_train("fit", "--config", DIGITS, *quiet_args(root, epochs=1), *SHORT, "--optimizer.init_args.lr", lr)
        assert done.returncode == 0, done.stderr[-3000:]
    a, b = root / "digits" / "version_0", root / "digits" / "version_1"
    assert not [p for p in root.rglob(f"{live.PREFIX}*")], "each fit removed its marker at its exit"
    assert live.keeps_markers(a) and live.keeps_markers(b)

    _age(root)
    before = _listed(root)  # rows computed, kept in each run's summary (its folder changed)
    _age(root)
    assert _listed(root) == before  # listed again: the index holds both runs as settled
    held = _held(root)
    assert held["digits/version_0"]["settled"] == os.stat(a).st_ino and "settled" in held["digits/version_1"]

    index = runs_index.RunsIndex(root)
    stats: list[str] = []
    real_stat = os.stat
    monkeypatch.setattr(runs_index.os, "stat", lambda path, **kw: stats.append(str(path)) or real_stat(path, **kw))
    known = index.folder(str(a), "digits/version_0")
    monkeypatch.undo()
    assert known is not None and known.is_run and known.unchanged and stats == [str(a)], stats
    assert _listed(root) == before  # from the one stat of each run's folder

    # a resume writes into a settled run: its marker changes the folder's time; the new epoch, checkpoint and
    # attempt are shown
    done = run_train(
        "fit", "--config", DIGITS, *quiet_args(root, epochs=2), *SHORT, "--run_dir", str(a), "--ckpt_path", "last"
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert len(attempts.read(a)) == 2 and (a / "checkpoints").is_dir()
    resumed = _listed(root)
    row = {Path(r["run"]).name: r for r in resumed[1]}
    old = {Path(r["run"]).name: r for r in before[1]}
    assert row["version_0"]["epochs"] == 2 > old["version_0"]["epochs"], row["version_0"]
    assert row["version_0"]["duration_s"] is not None and row["version_1"] == old["version_1"]
    _age(root)
    assert _listed(root) == resumed and "settled" in _held(root)["digits/version_0"]

    # a writer's marker (a process still writing, or killed): the run is stated file by file, not trusted
    marker = a / f"{live.PREFIX}{os.uname().nodename}.{os.getpid()}"
    marker.touch()
    job = a / "job.json"
    job.write_text(json.dumps({"state": "RUNNING"}))
    _age(root)
    assert [r["state"] for r in _listed(root)[1]] == ["RUNNING", "COMPLETED"]  # (version_1: its attempts')
    assert "settled" not in _held(root)["digits/version_0"]
    kept = os.stat(a).st_mtime_ns
    with open(job, "w") as f:  # rewritten in place by that writer: the folder's time as it was
        f.write(json.dumps({"state": "COMPLETED"}))
    os.utime(a, ns=(kept, kept))
    assert [r["state"] for r in _listed(root)[1]] == ["COMPLETED", "COMPLETED"]
    marker.unlink()

    # a file a user adds into a settled run, and a run removed
    _age(root)
    _listed(root)
    _age(root)
    _listed(root)
    assert "settled" in _held(root)["digits/version_1"]
    (b / "job.json").write_text(json.dumps({"state": "COMPLETED"}))
    assert [r["state"] for r in _listed(root)[1]] == ["COMPLETED", "COMPLETED"]
    shutil.rmtree(b)
    assert [Path(r["run"]).name for r in _listed(root)[1]] == ["version_0"]


def test_a_local_runs_state_is_its_last_starts_running_completed_cancelled_or_killed(tmp_path: Path) -> None:
    """A run no job ran (no job.json) has the state of its last start's attempt records: RUNNING while its process
    writes, CANCELLED after Ctrl-C (SIGINT), FAILED once killed (SIGKILL: no file changes, its marker stays; the
    row listed as RUNNING before is not kept); COMPLETED: the test above."""
    import signal
    import subprocess
    import sys

    root = tmp_path / "runs"
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    env.pop("TRAINER_CLI_RUN_DIR", None)
    fits = {}
    for name in ("stopped", "killed"):
        fits[name] = subprocess.Popen(
            [sys.executable, "-m", "trainer_cli", "fit", "--config", DIGITS, *quiet_args(root / name, epochs=500), *SHORT],
            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
    runs = {name: root / name / "digits" / "version_0" for name in fits}
    deadline = time.time() + 300
    while not all((run / "checkpoints").is_dir() for run in runs.values()):  # each past its first epoch
        assert time.time() < deadline and all(f.poll() is None for f in fits.values()), "the fits did not start"
        time.sleep(0.5)
    try:
        # (listed from the index alone: the running fits write between two listings)
        assert [r["state"] for r in _listing(root, curves=False)[1]] == ["RUNNING", "RUNNING"]
        fits["stopped"].send_signal(signal.SIGINT)
        fits["killed"].send_signal(signal.SIGKILL)
        for fit in fits.values():
            fit.wait(timeout=120)
    finally:
        for fit in fits.values():
            fit.kill()
    assert [p.name for p in runs["killed"].glob(f"{live.PREFIX}*")], "a killed process leaves its marker"
    states = {Path(r["run"]).parts[-3]: r["state"] for r in _listed(root)[1]}
    assert states == {"stopped": "CANCELLED", "killed": "FAILED"}, states
