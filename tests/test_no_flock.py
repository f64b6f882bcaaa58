"""A run root without ``flock`` (Lustre mounted without ``-o flock`` answers ``ENOSYS``), emulated by
``tests/no_flock.c`` in ``LD_PRELOAD``: the records change under lease files instead
(:func:`trainer_cli.atomic.locked`), one line says so, a lease left by a killed writer never blocks
the next one, and a lock held past its timeout is one ``error:`` line; a Slurm job whose tasks lack
``flock`` while the shell that submitted it had it (a login node and compute nodes) requeues and
completes. Runs at the floor filelock (``make test-min``, but the cluster job) and the newest alike."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from slurm_support import newest_step, slurm_cluster, usr1_at_start, wait_for_requeue, wait_for_state  # noqa: F401 - a fixture
from support import DIGITS, REPO, quiet_args, run_train
from test_slurm_cluster import _submit

from trainer_cli.atomic import LEASE_S, LockTimeout, locked, read_json_lines

TINY = ["--trainer.limit_train_batches", "2", "--trainer.limit_val_batches", "1"]


@pytest.fixture(scope="module")
def no_flock(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """The environment of a process whose ``flock()`` fails with ``ENOSYS``."""
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        pytest.skip("no C compiler (cc, gcc) to build tests/no_flock.c, the LD_PRELOAD library without flock")
    library = tmp_path_factory.mktemp("shim") / "no_flock.so"
    subprocess.run([compiler, "-shared", "-fPIC", "-o", str(library), str(REPO / "tests" / "no_flock.c")], check=True)
    return {"LD_PRELOAD": str(library)}


@pytest.fixture(scope="module")
def run_dir(no_flock: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A digits run trained without flock (2 steps)."""
    root = tmp_path_factory.mktemp("runs")
    done = run_train("fit", "--config", DIGITS, *quiet_args(root), *TINY, env=no_flock)
    assert done.returncode == 0, done.stderr[-3000:]
    (found,) = (p.parent for p in root.rglob("run.json"))
    (root / "stderr.txt").write_text(done.stderr)
    return found


def _hold(record: Path, env: dict[str, str], then: str) -> subprocess.Popen[str]:
    """A process that takes the lock of ``record`` and then runs ``then`` (Python); returns once it holds it."""
    code = f"import os, sys, time\nfrom trainer_cli.atomic import locked\nwith locked({str(record)!r}):\n"
    code += f"    print('held', flush=True)\n    {then}\n"
    holder = subprocess.Popen([sys.executable, "-c", code], env={**os.environ, **env}, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, cwd=REPO)
    assert holder.stdout is not None and holder.stdout.readline() == "held\n", holder.communicate()
    return holder


def _about_lock(stderr: str, *paths: Path) -> list[str]:
    """The lines of ``stderr`` about a lock (the paths of this checkout, h-flock or not, and ``paths`` left out)."""
    for path in (REPO, *paths):
        stderr = stderr.replace(str(path), "PATH")
    return [line for line in stderr.splitlines() if "lock" in line.lower()]


def _records(run: Path) -> dict[str, str]:
    return {name: (run / name).read_text() for name in ("run.json", "metrics.jsonl", "history.jsonl")}


def test_fit_without_flock_keeps_its_records_and_says_so_once(run_dir: Path) -> None:
    stderr = (run_dir.parents[1] / "stderr.txt").read_text()
    about_lock = _about_lock(stderr)
    assert len(about_lock) == 1 and "ENOSYS" in about_lock[0] and "lease" in about_lock[0], about_lock
    assert "UserWarning" not in stderr and "Traceback" not in stderr
    assert json.loads((run_dir / "run.json").read_text())["run_id"]
    assert [r for r in read_json_lines(run_dir / "metrics.jsonl") if r], "no metrics"
    assert read_json_lines(run_dir / "history.jsonl")
    assert not list(run_dir.rglob("*.lease*")), "a lease left behind"


def test_lease_of_a_killed_writer_and_a_kernel_lock_file_do_not_block(run_dir: Path, no_flock: dict[str, str]) -> None:
    with locked(run_dir / "run.json"):  # with flock: leaves the empty .run.json.lock a login node's submit leaves
        pass
    assert (run_dir / ".run.json.lock").stat().st_size == 0
    killed = _hold(run_dir / "history.jsonl", no_flock, "os.kill(os.getpid(), 9)")
    assert killed.wait(10) == -signal.SIGKILL
    assert (run_dir / ".history.jsonl.lease").is_file()  # what a SIGKILL leaves
    start = time.monotonic()
    done = run_train("fit", "--config", DIGITS, *quiet_args(run_dir.parent, epochs=2), *TINY, "--run_dir",
                     str(run_dir), "--ckpt_path", "last", env={**no_flock, "TRAINER_CLI_LOCK_TIMEOUT_S": "20"})
    assert done.returncode == 0, done.stderr[-3000:]
    assert len(_about_lock(done.stderr)) == 1, done.stderr
    assert time.monotonic() - start < 60
    assert not (run_dir / ".history.jsonl.lease").exists()
    assert len(read_json_lines(run_dir / "history.jsonl")) >= 2  # the resume recorded


def test_lease_of_another_host_is_stale_after_its_lease_time(tmp_path: Path) -> None:
    record, lease = tmp_path / "job.json", tmp_path / ".job.json.lease"
    lease.write_text(json.dumps({"host": "node-gone", "boot_id": "x", "pid": 1, "since": time.time()}))
    held = r"\.job\.json\.lease: lock not taken within 1 s \(held by pid 1 on node-gone"
    with pytest.raises(LockTimeout, match=held):
        with locked(record, timeout_s=1):
            pass
    os.utime(lease, (time.time() - LEASE_S - 1,) * 2)  # not renewed for its lease time: the node died
    with locked(record, timeout_s=1):
        assert json.loads(lease.read_text())["pid"] == os.getpid()
    assert not lease.exists()


def test_lock_held_past_its_timeout_is_one_error_line(run_dir: Path, no_flock: dict[str, str]) -> None:
    """A node without flock holds the lease; a process with flock (a login node's) waits for it too."""
    before = _records(run_dir)
    holder = _hold(run_dir / "history.jsonl", no_flock, "time.sleep(120)")
    try:
        done = run_train("fit", "--config", DIGITS, *quiet_args(run_dir.parent, epochs=3), *TINY, "--run_dir",
                         str(run_dir), "--ckpt_path", "last", env={"TRAINER_CLI_LOCK_TIMEOUT_S": "2"})
    finally:
        holder.kill()
        holder.wait()
    assert done.returncode == 2, done.stderr[-3000:]
    assert "Traceback" not in done.stderr
    (line,) = _about_lock(done.stderr)
    assert line == done.stderr.strip().splitlines()[-1]
    lease = run_dir / ".history.jsonl.lease"
    assert line.startswith(f"error: {lease}: lock not taken within 2 s (held by pid {holder.pid} on ")
    assert line.endswith("let it finish and run again (if none is running, remove .history.jsonl.lease)")
    after = _records(run_dir)
    assert after["metrics.jsonl"].startswith(before.pop("metrics.jsonl"))  # the stopped start's line added
    assert {name: after[name] for name in before} == before


def test_sweep_journal_needs_no_flock(tmp_path: Path, no_flock: dict[str, str]) -> None:
    """The sweep's default storage, Optuna's journal file, locks with a symlink (JournalFileSymlinkLock)."""
    code = (
        "import optuna\nfrom trainer_cli.callbacks.optuna_pruning import open_storage\n"
        "optuna.logging.set_verbosity(optuna.logging.WARNING)\n"
        f"study = optuna.create_study(storage=open_storage({str(tmp_path / 'study.journal')!r}), study_name='s')\n"
        "for i in range(3):\n    trial = study.ask()\n    study.tell(trial, float(i))\n"
        "print(len(study.trials), study.best_value)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], env={**os.environ, **no_flock}, capture_output=True, text=True,
                          cwd=REPO, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split() == ["3", "0.0"]


def test_slurm_job_without_flock_requeues_and_completes(
    slurm_cluster: None, no_flock: dict[str, str], tmp_path: Path  # noqa: F811
) -> None:
    """The job's batch script and tasks lack flock (``LD_PRELOAD`` in its ``--slurm.env``), the submit had
    it: the empty ``.job.json.lock`` its kernel lock leaves is no lock to the job (filelock's soft lock
    took it for one held forever: a ``Timeout`` traceback). SIGUSR1 as its task starts, a requeue, done."""
    job_id, run_dir, _ = _submit(tmp_path, 1, 1, *TINY, "--trainer.max_epochs", "2",
                                 "--slurm.env", json.dumps(no_flock))  # the job's; the submit here has flock
    assert (run_dir / ".job.json.lock").is_file(), "the submit's kernel lock file: the trap"
    usr1_at_start(job_id, tasks=1)
    wait_for_requeue(job_id)
    log = run_dir / f"slurm-{job_id}.log"
    assert wait_for_state(job_id, timeout_s=400) == "COMPLETED", log.read_text()[-3000:]
    text = log.read_text()
    for noise in ("UserWarning", "Timeout", "Traceback", "\nerror: "):  # `train`'s own error line, not srun's
        assert noise not in text, f"{noise!r} in the job's log:\n{text[-3000:]}"
    # one line per process that writes a record: per attempt the batch script's `batch start` and
    # `end`, and the task (which writes several: filelock's warning came twice per command)
    about_lock = _about_lock(text, tmp_path)  # its name says flock
    assert len(about_lock) == 2 * 3 and len(set(about_lock)) == 1 and "(ENOSYS)" in about_lock[0], about_lock
    record = json.loads((run_dir / "job.json").read_text())
    assert (record["state"], record["restarts"], record["exit_code"]) == ("COMPLETED", 1, 0)
    assert len(record["starts"]) == 2, "the batch script's start of each attempt"
    starts = read_json_lines(run_dir / "history.jsonl")
    slurm = {"scheduler": "slurm", "job_id": job_id}
    assert [(r["kind"], r["job"]) for r in starts] == [
        ("new", {**slurm, "restart_count": 0}), ("requeue", {**slurm, "restart_count": 1})]
    assert [r for r in read_json_lines(run_dir / "metrics.jsonl") if r], "no metrics"
    assert newest_step(run_dir) == 2 * 2, "every step of both epochs"
    assert not list(run_dir.rglob("*.lease*")), "a lease left behind"
