"""The scheduler seam's Slurm engine (trainer_cli.schedulers.slurm.engine.SlurmScheduler) on the real local
cluster: render is pure and is `train submit --dry-run`'s text; submit queues a short digits run;
describe follows it to COMPLETED; logs has its lines; accounting has its attempt with the CPUs
Slurm allocated; cancel leaves an ended job as it is and cancels a held one.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from slurm_support import LOCAL_PROFILE, scontrol_job, slurm_cluster, train_submit  # noqa: F401 - a fixture
from support import DIGITS, quiet_args

from trainer_cli.config.request import Request
from trainer_cli.errors import UserError
from trainer_cli.job.scheduler import Scheduler
from trainer_cli.job.status import JobStatus
from trainer_cli.schedulers.submissions import read_registry, registry_file
from trainer_cli.schedulers import engine, engines
from trainer_cli.schedulers.slurm.engine import SlurmScheduler


def _files(*folders: Path) -> list[tuple[str, float]]:
    return sorted((str(p), p.stat().st_mtime) for folder in folders if folder.exists() for p in folder.rglob("*"))


def _until(engine: SlurmScheduler, job_id: str, states: set[str], timeout_s: float = 300) -> JobStatus:
    deadline = time.monotonic() + timeout_s
    while True:
        status = engine.describe([job_id]).get(job_id)
        if status is not None and status.state in states:
            return status
        assert time.monotonic() < deadline, f"job {job_id}: {status}"
        time.sleep(1)


def test_the_slurm_engine_is_a_scheduler() -> None:
    assert isinstance(SlurmScheduler(), Scheduler)
    assert isinstance(engine("slurm"), SlurmScheduler) and set(engines()) == {"slurm"}
    with pytest.raises(UserError, match="no such engine"):
        engine("pbs")


def _args(root: Path, *extra: str) -> list[str]:
    return [
        "--config", DIGITS, "--config", LOCAL_PROFILE, *quiet_args(root), "--trainer.devices", "1",
        "--trainer.limit_train_batches", "3", "--trainer.limit_val_batches", "1", "--slurm.time", "00:05:00", *extra,
    ]  # fmt: skip


def test_render_is_the_dry_run_and_a_held_job_is_cancelled(
    slurm_cluster: None,  # noqa: F811
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The short one: render writes nothing and is --dry-run's text; a held job, submitted, waits
    (PENDING), is cancelled, and a second cancel (and one of an unknown id) is a no-op."""
    monkeypatch.chdir(tmp_path)  # outside a git work tree: no code snapshot to take
    root = tmp_path / "runs"
    slurm = SlurmScheduler()
    before = _files(tmp_path, registry_file().parent)
    draft = slurm.render(slurm.spec(Request.of(_args(root, "--slurm.extra_sbatch", '["--hold"]'), "submit")))
    assert _files(tmp_path, registry_file().parent) == before, "a render writes nothing"
    assert draft.run_dir is None and draft.scheduler == "slurm" and draft.command[0] == "sbatch"
    code, printed = train_submit(*_args(root, "--slurm.extra_sbatch", '["--hold"]'), "--dry-run")
    assert code == 0 and printed == draft.text + "\n", "the draft is what --dry-run prints"

    held = slurm.submit(draft)
    (rec,) = [r for r in read_registry(root) if r["job_id"] == held]
    assert (rec["scheduler"], rec["cluster"]) == ("slurm", slurm.cluster() or "no ClusterName") == ("slurm", "localci")
    assert _until(slurm, held, {"PENDING"}, 30).run_dir == rec["run_dir"]
    slurm.cancel(held)
    assert _until(slurm, held, {"CANCELLED"}, 60).state == "CANCELLED"
    slurm.cancel(held)  # twice: a no-op
    slurm.cancel("99999999")  # unknown: nothing to cancel


def test_a_digits_job_is_described_logged_and_accounted(
    slurm_cluster: None,  # noqa: F811
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A short digits run submitted through the engine: COMPLETED, its log's lines, its one attempt
    with the CPUs Slurm allocated, and a cancel of the ended job that leaves it as it is."""
    monkeypatch.chdir(tmp_path)
    root = tmp_path / "runs"
    slurm = SlurmScheduler()
    job_id = slurm.submit(slurm.render(slurm.spec(Request.of(_args(root), "submit"))))
    (rec,) = [r for r in read_registry(root) if r["job_id"] == job_id]
    done = _until(slurm, job_id, {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT"})
    run_dir = Path(rec["run_dir"])
    log = run_dir / f"slurm-{job_id}.log"
    assert done.state == "COMPLETED", log.read_text()[-3000:]
    assert done.run_dir == str(run_dir)
    lines = list(slurm.logs(job_id))
    assert "Initializing distributed: GLOBAL_RANK: 0, MEMBER: 1/1" in lines, lines[-20:]
    assert lines[-2] == f"Run directory: {run_dir}", lines[-20:]
    assert lines == log.read_text().splitlines()

    allocated = float(scontrol_job(job_id)["NumCPUs"])
    # accounting records reach the database a moment after the job ends, and its end state a moment after
    # its start (a fresh clone's CI once read the attempt as RUNNING here)
    deadline = time.monotonic() + 30
    while (not (attempts := slurm.accounting([job_id])) or any(a.state in ("PENDING", "RUNNING") for a in attempts)) \
            and time.monotonic() < deadline:
        time.sleep(1)
    assert [(a.job_id, a.state, a.tres.get("cpu")) for a in attempts] == [(job_id, "COMPLETED", allocated)]
    assert attempts[0].elapsed_s > 0

    slurm.cancel(job_id)  # ended: left as it is
    assert slurm.describe([job_id])[job_id].state == "COMPLETED"


class _Answers:
    """An engine that answers ``describe`` from a table: what `train sweep-results` asks of any engine."""

    name = "slurm"

    def __init__(self, said: dict[str, JobStatus]) -> None:
        self.said, self.asked = said, []  # type: ignore[var-annotated]

    def describe(self, job_ids: list[str]) -> dict[str, JobStatus]:
        self.asked.append(list(job_ids))
        return {job_id: self.said[job_id] for job_id in job_ids if job_id in self.said}


def test_a_submitted_sweeps_trial_states_come_from_its_engine_in_one_describe(tmp_path: Path) -> None:
    """A submitted array sweep's trials: one ``describe`` for every task; an answer whose job runs another
    folder's script (a reused id) is not the trial's, which its ``job.json`` then says; without the engine
    (not given) every state comes from ``job.json``."""
    import json

    from trainer_cli.sweeps.results import trial_states

    sweep = tmp_path / "sweep_0"
    trials = [{"index": i, "run_dir": str(sweep / f"trial_{i:03d}")} for i in range(3)]
    for trial in trials:
        Path(trial["run_dir"]).mkdir(parents=True)
    (sweep / "trial_001" / "job.json").write_text(json.dumps({"job_id": "7", "state": "COMPLETED", "restarts": 1}))
    record = {"job_id": "7", "sweep_dir": str(sweep), "trials": trials}
    engine = _Answers({
        "7_0": JobStatus("RUNNING", 0, "0:05", "scontrol", run_dir=str(sweep)),
        "7_1": JobStatus("PENDING", 0, "0:00", "scontrol", run_dir=str(tmp_path / "another_run")),  # a reused id
    })  # fmt: skip
    assert trial_states(record, {"slurm": engine}) == [("RUNNING", 0), ("COMPLETED", 1), ("UNKNOWN", 0)]
    assert engine.asked == [["7_0", "7_1", "7_2"]]
    assert trial_states(record) == [("PENDING", 0), ("COMPLETED", 1), ("PENDING", 0)]
