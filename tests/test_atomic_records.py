"""Job records changed by several processes at once (trainer_cli.atomic): the submitter, the batch
script's ``jobstate`` and rank 0 each read-modify-write ``job.json`` under its lock; none loses
another's change, and a reader never sees half a file."""

from __future__ import annotations

import json
import multiprocessing
from pathlib import Path

import pytest

from trainer_cli.atomic import append_line, read_json, update_json, write_atomic
from trainer_cli.job import jobstate
from trainer_cli.schedulers import submissions
from trainer_cli.schedulers import engines

WORKERS, INCREMENTS = 4, 40


def _increment(path: str, key: str, times: int) -> None:
    for _ in range(times):
        update_json(Path(path), lambda record: record | {key: int(record.get(key, 0)) + 1, "total": int(record.get("total", 0)) + 1})


def _merge_job_fields(run_dir: str, worker: int, times: int) -> None:
    for i in range(times):
        jobstate.update(Path(run_dir), **{f"worker_{worker}": i + 1})


def _register(root: str, worker: int, times: int) -> None:
    for i in range(times):
        submissions.register(Path(root), {"job_id": f"{worker}{i:03d}", "run_dir": f"/runs/{worker}/{i}", "job_name": "x" * 2000})


def _spawn(target: object, args: list[tuple[object, ...]]) -> None:
    context = multiprocessing.get_context("spawn")  # separate interpreters, as on separate nodes
    procs = [context.Process(target=target, args=a) for a in args]  # type: ignore[attr-defined]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
    assert [p.exitcode for p in procs] == [0] * len(procs)


def test_concurrent_increments_lose_no_update(tmp_path: Path) -> None:
    record = tmp_path / "job.json"
    _spawn(_increment, [(str(record), f"w{i}", INCREMENTS) for i in range(WORKERS)])
    found = json.loads(record.read_text())
    assert found == {"total": WORKERS * INCREMENTS} | {f"w{i}": INCREMENTS for i in range(WORKERS)}
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")) == []


def test_job_record_writers_keep_each_others_fields(tmp_path: Path) -> None:
    jobstate.write(tmp_path, {"job_id": "7", "state": "PENDING"})
    _spawn(_merge_job_fields, [(str(tmp_path), i, 25) for i in range(3)])
    assert jobstate.read(tmp_path) == {"job_id": "7", "state": "PENDING", "worker_0": 25, "worker_1": 25, "worker_2": 25}


def test_registry_lines_are_whole_under_concurrent_submissions(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))  # the user's registry, this test's alone
    _spawn(_register, [(str(tmp_path), i, 30) for i in range(3)])
    records = submissions.read_registry(tmp_path)
    assert len(records) == 90 and len(submissions.registry_file().read_text().splitlines()) == 90
    assert sorted(r["job_id"] for r in records) == sorted(f"{w}{i:03d}" for w in range(3) for i in range(30))


def test_write_atomic_replaces_and_read_json_tolerates_garbage(tmp_path: Path) -> None:
    path = tmp_path / "run.json"
    write_atomic(path, "{not json")
    assert read_json(path) == {} and read_json(tmp_path / "missing.json") == {}
    write_atomic(path, json.dumps({"a": 1}))
    assert read_json(path) == {"a": 1}
    append_line(tmp_path / "log.jsonl", "one")
    append_line(tmp_path / "log.jsonl", "two\n")
    assert (tmp_path / "log.jsonl").read_text() == "one\ntwo\n"
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")] == []


@pytest.mark.parametrize("umask", [0o002, 0o027])
def test_records_and_their_locks_follow_the_umask(tmp_path: Path, umask: int) -> None:
    """A record, a line appended and their lock files get ``0o666`` less the umask (no mode of their own):
    under ``umask 002`` in a group's shared folder another member can take the lock and rewrite the
    record (filelock 3.12, the floor, forced ``0o644`` on its lock files); the cluster's side of it as
    another user: tests/test_site_user.py."""
    import os
    import stat

    old = os.umask(umask)
    try:
        update_json(tmp_path / "job.json", lambda r: r | {"state": "RUNNING"})
        append_line(tmp_path / "history.jsonl", "{}")
        write_atomic(tmp_path / "config.yaml", "a: 1\n")
    finally:
        os.umask(old)
    modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in tmp_path.iterdir()}
    assert modes == dict.fromkeys([".job.json.lock", "job.json", ".history.jsonl.lock", "history.jsonl", "config.yaml"], 0o666 & ~umask)


def test_a_full_registry_rotates_and_the_newest_jobs_come_from_the_newest_segments(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 48: past its size the registry becomes an archive segment (numbered, oldest first) and a new one is
    started; every job is still read, in order, and `train jobs --last 3` reads only the newest segments and lists
    the same 3 jobs as the whole registry's newest 3."""
    from trainer_cli.launch import jobs

    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))
    monkeypatch.setenv("PATH", str(tmp_path / "no-slurm-here"))  # nothing to ask: states from job.json
    monkeypatch.setattr(submissions, "ROTATE_BYTES", 5000)  # about 4 lines a segment
    for i in range(30):
        run_dir = tmp_path / "runs" / f"r{i}"
        run_dir.mkdir(parents=True)
        (run_dir / "job.json").write_text(json.dumps({"job_id": str(1000 + i), "state": "COMPLETED"}))
        submissions.register(run_dir.parent, {"job_id": str(1000 + i), "run_dir": str(run_dir), "job_name": "x" * 1000,
                                              "submitted": f"2026-12-01T00:00:{i:02d}"})
    archived = submissions.segments(submissions.registry_file())
    assert [p.name for p in archived] == [f"submissions.{n}.jsonl" for n in range(1, len(archived) + 1)] and len(archived) >= 5
    every = submissions.read_registry()
    assert [r["job_id"] for r in every] == [str(1000 + i) for i in range(30)]
    sizes: list[int] = []
    newest = submissions.read_registry(enough=lambda read: sizes.append(len(read)) is None and len(read) >= 3)
    assert newest[-3:] == every[-3:] and len(newest) < 10 and sizes[-1] >= 3

    assert jobs.main(["--last", "3"], engines()) == 0
    listed = [line.split()[0] for line in capsys.readouterr().out.splitlines()[1:]]
    assert listed == ["1027", "1028", "1029"]
    assert jobs.find_run(None, "1000")["run_dir"] == str(tmp_path / "runs" / "r0"), "an archived job is still found"
