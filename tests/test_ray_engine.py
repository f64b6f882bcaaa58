"""``train submit --scheduler ray``: the run sent to a real Ray cluster (scripts/local-ray).

Default tier: the dry run (of ``train`` and of a user's script, ``python main.py submit``) and bad input
(no cluster needed: a dry run asks none, the refusals come first). Long tier: a 2-worker DDP digits run
COMPLETES on the local cluster and ``train jobs`` lists it; a worker's process killed after a checkpoint
restarts the worker group, which resumes at that checkpoint's step (``history.jsonl``) and ends with the
uninterrupted run's weights; ``train jobs RUN`` and ``train runs`` give its cost and goodput from its
attempt records (two starts: FAILED, COMPLETED); a user's script's 2-worker run COMPLETES and its
checkpoint loads with the project's own class.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import forkserver
import pytest
from support import DIGITS, REPO, every_epoch_last_checkpoint

pytest.importorskip("ray", reason="Ray is not installed: pip install 'trainer-cli[ray]'")

LOCAL_RAY = REPO / "scripts" / "local-ray"
NOWHERE = "http://127.0.0.1:9"  # (the discard port: nothing listens)
STEPS_PER_EPOCH = 10  # digits: 1257 training images, 64 a batch per rank, 2 ranks (drop_last off)


def train(*args: str, env: dict[str, str] | None = None, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    """``python -m trainer_cli ARGS`` in a process of its own, from the repository (its snapshot is the code):
    what talks to the local Ray cluster (the long tier)."""
    return subprocess.run(
        [sys.executable, "-m", "trainer_cli", *args],
        cwd=REPO,
        env={**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})},
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def dry(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """:func:`train` for what asks no cluster (a dry run, a refusal), forked from the suite's server where it
    can be (:func:`forkserver.run_python`: the same argv, working folder and environment)."""
    return forkserver.run_python(["-m", "trainer_cli", *args], REPO, {**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})}, 600)


def run_args(root: Path, epochs: int = 3) -> list[str]:
    """A 2-worker DDP digits run on CPU, deterministic, ``last.ckpt`` at every epoch end."""
    return [
        "--config", DIGITS, *every_epoch_last_checkpoint(root),
        "--trainer.default_root_dir", str(root), "--trainer.devices", "2", "--trainer.accelerator", "cpu",
        "--trainer.strategy", "ddp", "--trainer.max_epochs", str(epochs), "--trainer.deterministic", "true",
        "--trainer.enable_progress_bar", "false",
    ]  # fmt: skip


def test_the_dry_run_prints_the_ray_job_and_writes_nothing(tmp_path: Path) -> None:
    root, state = tmp_path / "runs", tmp_path / "state"
    done = dry(
        "submit", "--scheduler", "ray", *run_args(root), "--ray.address", "http://127.0.0.1:9",
        "--ray.max_failures", "2", "--dry-run", env={"XDG_STATE_HOME": str(state)},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "entrypoint: python -m trainer_cli.schedulers.ray.driver --run_dir" in out
    assert "--num_nodes 1 --devices 2 --accelerator cpu" in out and "--max_failures 2" in out
    assert re.search(r"runtime_env: \{'working_dir': '.*/digits/version_0/code'", out), out
    assert "workers: 2 (1 node(s) x 2 cpu worker(s)" in out
    assert "# nothing was written or submitted" in out
    assert not (root / "digits").exists() and not state.exists()  # no run folder, no registry line


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--scheduler", "ray", "--ray.address", NOWHERE], f"the Ray cluster at {NOWHERE} does not answer"),
        (["--scheduler", "ray", "--ray.address", NOWHERE, "--slurm.time", "9"], "--slurm.time is an option of `train submit --scheduler slurm`, not of --scheduler ray"),
        (["--ray.max_failures", "1"], "--ray.max_failures is an option of `train submit --scheduler ray`, not of --scheduler slurm (the default"),
        (["--scheduler", "ray", "--ray.adress", "x"], "unknown Ray option '--ray.adress'"),
        (["--scheduler", "kubernetes"], "--scheduler kubernetes: not an engine; choose one of slurm, ray"),
    ],
)  # fmt: skip
def test_bad_input_is_one_line_and_nothing_is_submitted(tmp_path: Path, flags: list[str], message: str) -> None:
    root, state = tmp_path / "runs", tmp_path / "state"
    done = dry("submit", *run_args(root, epochs=1), *flags, env={"XDG_STATE_HOME": str(state), "RAY_ADDRESS": ""})
    assert done.returncode == 2, done.stdout + done.stderr
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and message in errors[0], done.stderr
    assert "Traceback" not in done.stderr
    assert not (root / "digits").exists() and not state.exists()


def test_a_ray_version_outside_the_range_is_refused(tmp_path: Path) -> None:
    """The Ray installed, as importlib.metadata finds it first on the path: here a 2.9.0 (too old)."""
    from trainer_cli.schedulers.ray.options import RAY_VERSIONS, in_range

    text = (REPO / "pyproject.toml").read_text()
    assert f'ray = ["ray[default]>={RAY_VERSIONS[0]},<{RAY_VERSIONS[1]}"]' in text  # one range, stated twice
    assert in_range("2.60.0") and not in_range("2.59.1") and not in_range("3.0.0")
    dist = tmp_path / "site" / "ray-2.9.0.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: ray\nVersion: 2.9.0\n")
    root = tmp_path / "runs"
    done = dry(
        "submit", "--scheduler", "ray", *run_args(root, epochs=1), "--ray.address", "http://127.0.0.1:9", "--dry-run",
        env={"PYTHONPATH": str(tmp_path / "site")},
    )  # fmt: skip
    assert done.returncode == 2, done.stdout + done.stderr
    assert "error: Ray 2.9.0 is installed; trainer-cli supports Ray >=2.60,<3" in done.stderr
    assert not (root / "digits").exists()


# -- on a real local Ray cluster ------------------------------------------------------------------------
@pytest.fixture(scope="module")
def ray_cluster() -> Iterator[str]:
    """The local Ray cluster (scripts/local-ray start: idempotent), its job server's address; stopped
    after the module's tests when this fixture started it (one already running is left running)."""
    started = subprocess.run([str(LOCAL_RAY), "start"], capture_output=True, text=True, timeout=600)
    if started.returncode != 0:
        pytest.fail(f"scripts/local-ray start failed:\n{started.stdout}{started.stderr}")
    env = subprocess.run([str(LOCAL_RAY), "env"], capture_output=True, text=True, check=True).stdout
    yield env.strip().split("=", 1)[1]
    if "local-ray: started" in started.stdout:
        subprocess.run([str(LOCAL_RAY), "stop"], capture_output=True, text=True, timeout=120)


def submit(root: Path, state: Path, address: str, epochs: int) -> tuple[Path, str]:
    """Submit the run; its folder and Ray job id."""
    done = train(
        "submit", "--scheduler", "ray", *run_args(root, epochs), "--ray.address", address, "--ray.max_failures", "2",
        env={"XDG_STATE_HOME": str(state)},
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    run_dir = Path(re.search(r"Run directory: (\S+)", done.stdout)[1])  # type: ignore[index]
    job_id = re.search(r"Ray job: +(\S+)", done.stdout)[1]  # type: ignore[index]
    return run_dir, job_id


def wait_for(run_dir: Path, states: set[str], timeout: float = 900) -> dict:
    deadline = time.time() + timeout
    while time.time() < deadline:
        job = json.loads((run_dir / "job.json").read_text())
        if job.get("state") in states:
            return job
        time.sleep(2)
    log = next(run_dir.glob("ray-*.log"), None)
    pytest.fail(f"the Ray job did not reach {states}: {job}\n{log.read_text()[-3000:] if log else ''}")


def final_weights(run_dir: Path) -> dict:
    import torch

    return torch.load(run_dir / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=False)["state_dict"]


@pytest.mark.long
def test_a_two_worker_run_completes_and_a_killed_worker_resumes_at_its_step(tmp_path: Path, ray_cluster: str) -> None:
    import torch

    state = tmp_path / "state"
    # 1. uninterrupted: 2 workers, 3 epochs (30 steps)
    whole, whole_job = submit(tmp_path / "whole", state, ray_cluster, epochs=3)
    job = wait_for(whole, {"COMPLETED", "FAILED"})
    assert job["state"] == "COMPLETED" and job["restarts"] == 0, job
    listing = train("jobs", env={"XDG_STATE_HOME": str(state)})
    assert re.search(rf"{re.escape(whole_job)}\s+COMPLETED\s+0\s", listing.stdout), listing.stdout
    lines = [line for f in (whole / "attempts").glob("rank*.jsonl") for line in f.read_text().splitlines()]
    assert {json.loads(line)["rank"] for line in lines} == {0, 1}
    # 2. the same run, rank 1's process killed after the first epoch's checkpoint
    broken, broken_job = submit(tmp_path / "broken", state, ray_cluster, epochs=3)
    deadline = time.time() + 900
    while not (broken / "checkpoints" / "last.ckpt").is_file() and time.time() < deadline:
        time.sleep(0.2)
    rank1 = json.loads((broken / "attempts" / "rank1.jsonl").read_text().splitlines()[-1])
    os.kill(int(rank1["pid"]), signal.SIGKILL)
    job = wait_for(broken, {"COMPLETED", "FAILED"})
    assert job["state"] == "COMPLETED" and job["restarts"] == 1, job
    history = [json.loads(line) for line in (broken / "history.jsonl").read_text().splitlines()]
    assert [h["kind"] for h in history] == ["new", "requeue"], history
    resumed_at = history[1]["global_step"]
    assert resumed_at > 0 and resumed_at % STEPS_PER_EPOCH == 0, history  # an epoch end's last.ckpt
    assert history[1]["job"] == {"scheduler": "ray", "job_id": broken_job, "restart_count": 1}
    assert history[1]["checkpoint"].endswith("last.ckpt")
    a, b = final_weights(whole), final_weights(broken)
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a), "the resumed run's weights differ"
    listing = train("jobs", env={"XDG_STATE_HOME": str(state)})
    assert re.search(rf"{re.escape(broken_job)}\s+COMPLETED\s+1\s", listing.stdout), listing.stdout
    # its cost and goodput from its attempt records (Ray keeps no accounting): the killed start, then the resumed one
    shown = train("jobs", str(broken), "--json", env={"XDG_STATE_HOME": str(state)})
    assert shown.returncode == 0, shown.stdout + shown.stderr
    figures = json.loads(shown.stdout)
    cost, measured = figures["cost"], figures["goodput"]
    assert cost["source"] == "records" and cost["attempts"] == 2 and cost["cpu_hours"] > 0, cost
    assert [(a["state"], a["cpus"]) for a in cost["per_attempt"]] == [("FAILED", 2.0), ("COMPLETED", 2.0)], cost
    assert measured["source"] == "records" and len(measured["attempts"]) == 2 and measured["goodput_pct"] > 0
    assert [a["state"] for a in measured["attempts"]] == ["FAILED", "COMPLETED"], measured
    listed = train("runs", str(tmp_path / "broken"), env={"XDG_STATE_HOME": str(state)})
    assert listed.returncode == 0 and re.search(r"~[\d.e-]+ CPU-h", listed.stdout), listed.stdout + listed.stderr
    # with RAY_ADDRESS, train jobs and train cancel ask the cluster through the seam (Ray's elapsed time shown)
    with_ray = {"XDG_STATE_HOME": str(state), "RAY_ADDRESS": ray_cluster}
    listing = train("jobs", env=with_ray)
    row = re.search(rf"{re.escape(broken_job)}\s+COMPLETED\s+1 \(1 restarted by Ray\)\s+(\S+)", listing.stdout)
    assert row and re.fullmatch(r"\d+:\d\d:\d\d", row.group(1)), listing.stdout
    cancelled = train("cancel", str(broken), env=with_ray)
    assert cancelled.returncode == 0 and broken_job in cancelled.stdout, cancelled.stdout + cancelled.stderr
    # 3. the seam's other answers, from the cluster and the run's own records
    from trainer_cli.schedulers.ray.engine import RayScheduler
    from trainer_cli.schedulers.ray.options import RayOptions

    engine = RayScheduler(RayOptions(address=ray_cluster, max_failures=2))
    status = engine.describe([broken_job, "no-such-job"])
    assert set(status) == {broken_job} and status[broken_job].state == "COMPLETED" and status[broken_job].restarts == 1
    assert any("[driver] attempt 1: 2 worker(s)" in line for line in engine.logs(broken_job))
    attempts = engine.accounting([broken_job])
    assert len(attempts) == 2 and all(a.tres["cpu"] == 2 and a.elapsed_s > 0 for a in attempts), attempts
    assert attempts[0].state == "FAILED" and attempts[1].state == "COMPLETED"
    engine.cancel(broken_job)  # ended: left as it is
    engine.cancel("no-such-job")  # unknown: nothing to stop
    assert engine.describe([broken_job])[broken_job].state == "COMPLETED"
    # 4. the completed run resubmitted with one more epoch (`--config <run>/config.yaml`, as on Slurm): its job reads
    # its own input (job_config.yaml) and its start records the resume as a local resume does
    again = train(
        "submit", "--scheduler", "ray", "--config", str(whole / "config.yaml"), "--trainer.max_epochs", "4",
        "--ray.address", ray_cluster, env={"XDG_STATE_HOME": str(state)},
    )  # fmt: skip
    assert again.returncode == 0 and "resubmit: trainer.max_epochs: 3 -> 4" in again.stdout, again.stdout + again.stderr
    job = wait_for(whole, {"COMPLETED", "FAILED"})
    assert job["state"] == "COMPLETED" and job["job_id"] != whole_job, job
    history = [json.loads(line) for line in (whole / "history.jsonl").read_text().splitlines()]
    assert [h["kind"] for h in history] == ["new", "resubmission"], history
    assert history[1]["global_step"] == 3 * STEPS_PER_EPOCH and history[1]["changes"] == ["trainer.max_epochs: 3 -> 4"]
    recorded = (whole / "config.yaml").read_text()
    assert "max_epochs: 4\n" in recorded and "ckpt_path: last" not in recorded, recorded
    assert torch.load(whole / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=False)["epoch"] == 3


def test_a_src_layout_on_sys_path_goes_first_on_each_ranks_pythonpath_as_its_snapshot_copy(tmp_path: Path) -> None:
    """A script's project with its package in ``src/`` found through ``sys.path`` (as ``pip install -e .`` puts
    it; here ``PYTHONPATH``): the Ray job's driver is told ``--import_path src`` (relative to the working
    directory Ray ships, the code snapshot), and a rank's process gets that folder, made absolute in the actor's
    own folder, first on its ``PYTHONPATH`` (:class:`Worker`'s ``run``, here outside Ray), as a Slurm job's batch
    script puts it (tests/test_script_submit_slurm.py)."""
    from test_script_submit_slurm import DATA, MAIN, MODEL, _git_repo

    from trainer_cli.schedulers.ray.driver import Worker

    project = tmp_path / "project"
    (project / "src" / "rowsproj").mkdir(parents=True)
    (project / "main.py").write_text(MAIN)
    for name, text in (("__init__.py", ""), ("model.py", MODEL), ("data.py", DATA)):
        (project / "src" / "rowsproj" / name).write_text(text)
    _git_repo(project)
    env = {**os.environ, "XDG_STATE_HOME": str(tmp_path / "state"), "RAY_ADDRESS": "", "PYTHONPATH": str(project / "src")}
    proc = forkserver.run_python(
        ["main.py", "submit", "--scheduler", "ray", "--trainer.accelerator", "cpu", "--trainer.devices", "1",
         "--ray.address", NOWHERE, "--dry-run"],
        project, env, 300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert " --import_path src" in proc.stdout, proc.stdout
    shipped = tmp_path / "shipped"  # the actor's own folder: Ray's copy of the working directory
    (shipped / "src").mkdir(parents=True)
    log = tmp_path / "rank.log"
    here = os.getcwd()
    os.chdir(shipped)
    try:
        code = Worker().run([sys.executable, "-c", "import sys; print(sys.path[1])"], {}, str(log), "", None, ("src",))
    finally:
        os.chdir(here)
    assert code == 0 and log.read_text().strip() == str(shipped / "src"), log.read_text()


def test_a_scripts_dry_run_prints_the_ray_job_of_its_own_command_and_writes_nothing(tmp_path: Path) -> None:
    """``python main.py submit --scheduler ray --dry-run`` (a user's script with TrainerCLI): the run planned with
    the script's own CLI, each rank running the script as its Slurm job would (``python main.py fit``), from
    the folder the job starts in; nothing written (it was refused in one line before, and a Slurm job before
    that, --scheduler ignored)."""
    import shutil

    project = tmp_path / "project"
    shutil.copytree(REPO / "tests" / "foreign_hw", project)
    before = sorted(p.relative_to(project) for p in project.rglob("*") if "__pycache__" not in p.parts)
    proc = forkserver.run_python(
        ["main.py", "submit", "--scheduler", "ray", "--config", "configs/default.yaml",
         "--trainer.devices", "2", "--trainer.accelerator", "cpu", "--ray.address", NOWHERE, "--dry-run"],
        project, {**os.environ, "XDG_STATE_HOME": str(tmp_path / "state"), "RAY_ADDRESS": ""}, 300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout
    run_dir = re.search(r"# run directory \(not created\): (\S+)", out)[1]  # type: ignore[index]
    assert Path(run_dir).parent == project / "hwr", out  # where the script's own fit puts its runs (W&B's id)
    assert "entrypoint: python -m trainer_cli.schedulers.ray.driver" in out and "--verb fit" in out, out
    assert (
        f"each running: python {project / 'main.py'} fit --config {run_dir}/config.yaml --run_dir {run_dir} "
        f"(in {project})" in out
    ), out  # no git work tree here: the script where it is, as its Slurm job runs it
    assert "workers: 2 (1 node(s) x 2 cpu worker(s)" in out and "# nothing was written or submitted" in out
    after = sorted(p.relative_to(project) for p in project.rglob("*") if "__pycache__" not in p.parts)
    assert after == before and not (tmp_path / "state").exists()


@pytest.mark.long
def test_a_scripts_two_worker_run_completes_and_its_checkpoint_loads(tmp_path: Path, ray_cluster: str) -> None:
    """``python main.py submit --scheduler ray`` of the foreign recogniser (tests/foreign_hw, a git repository
    with git-ignored data): its 2-worker DDP run COMPLETES on the local Ray cluster, each rank running the
    snapshot's ``main.py fit``, and the checkpoint in its run folder loads with the project's own class."""
    from hw_support import DEFAULT, hw_env, hw_project

    project = hw_project(tmp_path)
    state = tmp_path / "state"
    done = subprocess.run(
        [sys.executable, "main.py", "submit", "--scheduler", "ray", *DEFAULT, "--trainer.devices", "2",
         "--trainer.accelerator", "cpu", "--trainer.strategy", "ddp", "--trainer.max_epochs", "2",
         "--trainer.logger.init_args.offline", "true", "--ray.address", ray_cluster, "--ray.max_failures", "0"],
        cwd=project, capture_output=True, text=True, timeout=600, env=hw_env(XDG_STATE_HOME=str(state)),
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    run_dir = Path(re.search(r"Run directory: (\S+)", done.stdout)[1])  # type: ignore[index]
    job_id = re.search(r"Ray job: +(\S+)", done.stdout)[1]  # type: ignore[index]
    assert run_dir.parent == project / "hwr", done.stdout
    job = wait_for(run_dir, {"COMPLETED", "FAILED"})
    log = (run_dir / f"ray-{job_id}.log").read_text()
    assert job["state"] == "COMPLETED" and job["restarts"] == 0, log[-3000:]
    code = run_dir / "code"
    assert f"HWR_MARKER=as-committed FILE={code / 'hwr' / 'model.py'} CWD={project.resolve()}" in log, log[-3000:]
    lines = [line for f in (run_dir / "attempts").glob("rank*.jsonl") for line in f.read_text().splitlines()]
    assert {json.loads(line)["rank"] for line in lines} == {0, 1}, lines
    ckpts = sorted((run_dir / "checkpoints").glob("*.ckpt"))
    load = "import sys; from hwr.model import Recognizer as R;"
    load += " print(type(R.load_from_checkpoint(sys.argv[1])).__qualname__)"
    assert ckpts, log[-3000:]
    for ckpt in ckpts:  # the project's own class, in a fresh process, from the project folder
        loaded = subprocess.run(
            [sys.executable, "-c", load, str(ckpt)],
            cwd=project, capture_output=True, text=True, timeout=300, env=hw_env(),
        )  # fmt: skip
        assert loaded.returncode == 0 and loaded.stdout.strip() == "Recognizer", loaded.stderr[-3000:]
