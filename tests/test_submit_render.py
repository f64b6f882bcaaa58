"""`train submit`: rendered sbatch scripts (golden files), quoting, and mismatches rejected before sbatch.

Rendering runs in this process (`plan()`: compose + type-check + render, nothing queued). Golden
files live in tests/golden/ and are committed; a missing or different one fails the test. After a
deliberate change to the rendered scripts, rewrite them with
`UPDATE_GOLDEN=1 python -m pytest tests/test_submit_render.py`, review the diff and commit it.
With the local cluster up, `sbatch --test-only` must accept every golden case.
"""

from __future__ import annotations

import difflib
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from slurm_support import LOCAL_PROFILE, console_sys_path, slurm_cluster, slurm_queries, train_submit  # noqa: F401 - fixtures
from support import CONFIGS, DIGITS, run_train

from trainer_cli.config.request import Request
from trainer_cli.errors import UserError
from trainer_cli.schedulers.slurm import submit, sweep
from trainer_cli.schedulers.slurm.render import quote_directive

GOLDEN = Path(__file__).parent / "golden"
CIFAR = str(CONFIGS / "experiment" / "cifar10_resnet18.yaml")
GPU_PROFILE = str(CONFIGS / "slurm" / "example_gpu.yaml")
PYTHON = ["--slurm.python", "/opt/env/bin/python"]

CASES = {
    "cpu_1x1": [DIGITS, LOCAL_PROFILE, "--trainer.devices", "1"],
    "gpu_1x8": [DIGITS, LOCAL_PROFILE, "--trainer.accelerator", "gpu", "--trainer.devices", "8"],
    "gpu_4x8": [
        CIFAR, LOCAL_PROFILE, "--trainer.accelerator", "gpu", "--trainer.num_nodes", "4", "--trainer.devices", "8",
        "--slurm.time", "04:00:00", "--slurm.exclusive", "true", "--slurm.nccl_debug", "INFO",
        "--slurm.setup", '["echo setting up"]', "--slurm.env", '{"OMP_NUM_THREADS": "1"}',
    ],
}
SITE_CASE = [CIFAR, GPU_PROFILE, "--trainer.num_nodes", "4", "--trainer.devices", "8", "--slurm.test_after_fit", "true"]


def plan(args: list[str], dry_run: bool) -> submit.Plan:
    """``train submit ARGS`` planned (:func:`trainer_cli.schedulers.slurm.submit.plan`): the test's command line read once."""
    return submit.plan(Request.of(args, "submit"), dry_run)


def plan_sweep(args: list[str], dry_run: bool) -> sweep.SweepJob:
    """``train submit ARGS --sweep ...`` planned (:func:`trainer_cli.schedulers.slurm.sweep.plan`)."""
    return sweep.plan(Request.of(args, "submit"), dry_run)


def _args(case: list[str], root: Path) -> list[str]:
    first, profile, *flags = case
    return ["--config", first, "--config", profile, "--trainer.default_root_dir", str(root), *PYTHON, *flags]


def _normalise(text: str, root: Path) -> str:
    return text.replace(str(root), "<ROOT>").replace(str(Path.cwd()), "<CWD>")


def _check_golden(name: str, text: str) -> None:
    path = GOLDEN / f"{name}.sbatch"
    if os.environ.get("UPDATE_GOLDEN"):
        path.write_text(text)
    if not path.exists():
        pytest.fail(f"tests/golden/{name}.sbatch is missing: write it with `UPDATE_GOLDEN=1 python -m pytest "
                    "tests/test_submit_render.py`, review it and commit it")
    expected = path.read_text()
    if text != expected:
        diff = "".join(difflib.unified_diff(expected.splitlines(True), text.splitlines(True), f"golden/{name}.sbatch", "rendered"))
        pytest.fail(f"rendered script differs from tests/golden/{name}.sbatch (UPDATE_GOLDEN=1 to accept):\n{diff}")


def test_missing_golden_file_fails_and_says_how_to_write_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("UPDATE_GOLDEN", raising=False)
    with pytest.raises(pytest.fail.Exception, match="no_such_case.sbatch is missing: write it with `UPDATE_GOLDEN=1"):
        _check_golden("no_such_case", "#!/bin/bash\n")
    assert not (GOLDEN / "no_such_case.sbatch").exists()


@pytest.fixture(scope="module", autouse=True)
def _as_from_a_shell() -> Iterator[None]:
    with console_sys_path():
        yield


@pytest.fixture(scope="module")
def rendered(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[str, Path]]:
    """Each golden case rendered once: name -> (script text, run root)."""
    out = {}
    for name, case in CASES.items():
        root = tmp_path_factory.mktemp(name)
        out[name] = (plan(_args(case, root), dry_run=True).script_text, root)
    return out


@pytest.mark.parametrize("name", list(CASES))
def test_golden_scripts(name: str, rendered: dict[str, tuple[str, Path]]) -> None:
    text, root = rendered[name]
    _check_golden(name, _normalise(text, root))
    assert not any(root.iterdir()), "a dry run creates nothing"


def test_site_profile_golden_with_test_after_fit(tmp_path: Path) -> None:
    job = plan(_args(SITE_CASE, tmp_path), dry_run=True)
    _check_golden("site_gpu_4x8", _normalise(job.script_text, tmp_path))
    _check_golden("site_gpu_test", _normalise(job.test_script_text("afterok:1234"), tmp_path))
    assert job.resources.world_size == 32 and job.resources.gpus_per_node == 8


SWEEP_CASE = [
    DIGITS, LOCAL_PROFILE, "--trainer.devices", "2", "--slurm.array_parallelism", "2",
    "--sweep", "optimizer.init_args.lr=1e-3,1e-2", "--sweep", "trainer.max_epochs=range(1,3)",
]


def test_sweep_golden_one_array_task_per_trial(tmp_path: Path) -> None:
    """`--sweep`: one script for the whole array (`--array=0-3%2`), each task's log and run directory
    its own trial's; nothing written by a dry run."""
    job = plan_sweep(_args(SWEEP_CASE, tmp_path), dry_run=True)
    _check_golden("sweep_cpu_1x2", _normalise(job.script_text, tmp_path))
    assert [t.overrides for t in job.sweep.trials][1] == {"optimizer.init_args.lr": "1e-3", "trainer.max_epochs": "2"}
    assert not any(tmp_path.iterdir())
    own = tmp_path / "own.sbatch.j2"  # a site template made for single jobs
    own.write_text('{% extends "ddp.sbatch.j2" %}\n')
    with pytest.raises(UserError, match='renders no `#SBATCH --array` line.*extends "sweep.sbatch.j2"'):
        plan_sweep(_args([*SWEEP_CASE, "--slurm.template", str(own)], tmp_path / "runs"), dry_run=True)


# sbatch --test-only answers from the nodes' state: in the cluster group (one test after another), not the queries'
# group, which runs beside the tests that set a node DOWN or DRAIN (a 4-node script was then "Requested node
# configuration is not available", seen once in a suite at 13:24 on 2026-12-03)
def test_sbatch_test_only_accepts_the_sweep(slurm_cluster: None, tmp_path: Path) -> None:  # noqa: F811
    script = tmp_path / "sweep.sbatch"
    script.write_text(plan_sweep(_args(SWEEP_CASE, tmp_path / "runs"), dry_run=True).script_text)
    proc = subprocess.run(["sbatch", "--test-only", str(script)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and "to start at" in proc.stderr, proc.stderr


def test_sbatch_test_only_accepts_each(slurm_cluster: None, rendered: dict[str, tuple[str, Path]], tmp_path: Path) -> None:  # noqa: F811
    for name, (text, _) in rendered.items():
        script = tmp_path / f"{name}.sbatch"
        script.write_text(text)
        proc = subprocess.run(["sbatch", "--test-only", str(script)], capture_output=True, text=True, timeout=60)
        assert proc.returncode == 0 and "to start at" in proc.stderr, f"{name}: {proc.stderr}"


def test_frozen_config_and_run_dir(tmp_path: Path) -> None:
    job = plan(_args(CASES["cpu_1x1"], tmp_path), dry_run=False)
    try:
        assert job.run_dir == tmp_path.absolute() / "digits" / "version_0" and job.run_dir.is_dir() and job.created
        assert "\nrun_dir: null\n" in job.frozen_config  # the job names its folder: the record starts a new run elsewhere
        assert "slurm" not in job.frozen_config.split("\n")[0] and "\nslurm:" not in job.frozen_config
        assert f'--config {job.run_dir}/config.yaml --run_dir "$run_dir"' in job.script_text
    finally:
        job.run_dir.rmdir()


MISMATCHES = {
    "devices list, 2 nodes": (["--trainer.devices", "[0,1]", "--trainer.num_nodes", "2"], ["--trainer.devices [0, 1]", "--trainer.num_nodes 2"]),
    "devices auto, 2 nodes": (["--trainer.devices", "auto", "--trainer.num_nodes", "2"], ["--trainer.devices 'auto'", "--trainer.num_nodes 2"]),
    "spawn strategy": (["--trainer.devices", "2", "--trainer.strategy", "ddp_spawn"], ["--trainer.strategy ddp_spawn", "--trainer.devices 2"]),
    "slurm nodes": (["--trainer.num_nodes", "2", "--slurm.nodes", "3"], ["--slurm.nodes 3", "--trainer.num_nodes 2"]),
    "slurm tasks": (["--trainer.devices", "2", "--slurm.ntasks_per_node", "4"], ["--slurm.ntasks_per_node 4", "--trainer.devices 2"]),
    "slurm gpus": (["--trainer.accelerator", "gpu", "--trainer.devices", "8", "--slurm.gpus_per_node", "4"], ["--slurm.gpus_per_node 4", "--trainer.devices 8"]),
    "gpus on cpu": (["--trainer.devices", "2", "--slurm.gpus_per_node", "2"], ["--slurm.gpus_per_node 2", "accelerator cpu"]),
    "auto accelerator": (["--trainer.accelerator", "auto"], ["--trainer.accelerator auto", "gpu or cpu"]),
}


@pytest.mark.parametrize("name", list(MISMATCHES))
def test_mismatch_rejected_before_sbatch(name: str, tmp_path: Path) -> None:
    flags, expected = MISMATCHES[name]
    with pytest.raises(UserError) as err:
        plan(["--config", DIGITS, "--config", LOCAL_PROFILE, "--trainer.default_root_dir", str(tmp_path), *flags], dry_run=False)
    for part in expected:
        assert part in str(err.value), str(err.value)
    assert not any(tmp_path.iterdir()), "nothing is left on disk"


def test_unknown_slurm_option_names_close_match(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="slurm.partion.*Did you mean: slurm.partition"):
        plan(["--config", DIGITS, "--slurm.partion", "gpu"], dry_run=True)


def test_slurm_options_from_file_and_bad_type(tmp_path: Path) -> None:
    site = tmp_path / "site.yaml"
    site.write_text("partition: debug\ntime: '00:05:00'\n")
    job = plan(["--config", DIGITS, "--slurm", str(site), "--trainer.accelerator", "cpu"], dry_run=True)
    assert "#SBATCH --time=00:05:00\n#SBATCH --partition=debug\n" in job.script_text
    with pytest.raises(UserError, match="slurm.cpus_per_task: expected int, got .many.$"):
        plan(["--config", DIGITS, "--slurm.cpus_per_task", "many"], dry_run=True)


def test_directive_refuses_newline_and_quotes_the_rest() -> None:
    with pytest.raises(UserError, match="newline"):
        quote_directive("name\n#SBATCH --wrap=x")
    assert quote_directive('a "b" $(c)') == '"a \\"b\\" $(c)"'


def test_user_error_exit_code_and_dry_run_output(tmp_path: Path) -> None:
    """The real entry point: one `error:` line and exit 2; a dry run prints the script and sbatch command."""
    bad = run_train("submit", "--config", DIGITS, "--config", LOCAL_PROFILE, "--trainer.num_nodes", "2",
                    "--slurm.nodes", "4", "--trainer.default_root_dir", str(tmp_path), "--dry-run")
    assert bad.returncode == 2, bad.stderr
    assert "error: the job cannot run as configured" in bad.stderr and "Traceback" not in bad.stderr
    code, out = train_submit("--config", DIGITS, "--config", LOCAL_PROFILE, "--trainer.default_root_dir", str(tmp_path), "--dry-run")
    assert code == 0
    assert "#SBATCH --nodes=1" in out and f"sbatch --parsable {tmp_path}/digits/version_0/submit.sbatch" in out
    assert not any(tmp_path.iterdir())


def test_signal_delay_not_well_below_time_limit_warns(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = ["--config", DIGITS, "--config", LOCAL_PROFILE, "--trainer.default_root_dir", str(tmp_path), "--dry-run"]
    assert train_submit(*args, "--slurm.time", "00:02:00", "--slurm.signal_delay_s", "300")[0] == 0
    warnings = [line for line in capsys.readouterr().err.splitlines() if line.startswith("warning:")]
    assert warnings == [
        "warning: --slurm.signal_delay_s 300 is not well below --slurm.time 00:02:00 (120 s): the job would checkpoint and "
        "requeue itself after 0 s or less (Slurm may signal up to 60 s early); use at most 60 s or a longer --slurm.time"
    ]
    assert train_submit(*args, "--slurm.time", "1-00:00:00", "--slurm.signal_delay_s", "300")[0] == 0
    assert "warning:" not in capsys.readouterr().err


def test_a_submitted_runs_config_starts_a_new_run_and_only_its_own_job_goes_into_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """issue 45: `train fit --config <run>/config.yaml` of a submitted run starts a new run (it was refused:
    "--run_dir ... already holds a trained run", the submit had pinned run_dir in launcher.yaml); the job
    names its folder itself; `train submit --config <run>/config.yaml` still resubmits into the run. A run
    submitted by an earlier version (run_dir pinned to its own folder) starts a new run too, except in its
    own queued job (SLURM_JOB_ID the one its job.json records), whose script gives no --run_dir."""
    stand_in = tmp_path / "bin" / "sbatch"  # accepts the script and prints a job id, as `sbatch --parsable` does
    stand_in.parent.mkdir()
    stand_in.write_text("#!/bin/sh\necho 4242\n")
    stand_in.chmod(0o755)
    monkeypatch.setenv("PATH", f"{stand_in.parent}{os.pathsep}{os.environ['PATH']}")
    code, out = train_submit(*_args(CASES["cpu_1x1"], tmp_path), "--slurm.snapshot", "false")
    run = tmp_path / "digits" / "version_0"
    config, launcher = run / "config.yaml", run / "launcher.yaml"
    assert code == 0 and "Job id:        4242" in out and "\nrun_dir: null\n" in launcher.read_text(), out
    assert f'fit --config {config} --run_dir "$run_dir"' in (run / "submit.sbatch").read_text()
    tiny = [
        "--trainer.strategy", "auto", "--trainer.max_epochs", "1", "--trainer.limit_train_batches", "2",
        "--trainer.limit_val_batches", "1", "--trainer.enable_progress_bar", "false",
        "--trainer.enable_model_summary", "false",
    ]  # fmt: skip
    job = run_train("fit", "--config", str(config), "--run_dir", str(run), *tiny)  # what the job's script runs
    assert job.returncode == 0 and (run / "checkpoints" / "last.ckpt").is_file(), job.stderr[-2000:]

    new = run_train("fit", "--config", str(config), *tiny)
    assert new.returncode == 0, new.stdout[-1000:] + new.stderr[-2000:]
    assert (tmp_path / "digits" / "version_1" / "checkpoints" / "last.ckpt").is_file()
    code, out = train_submit("--config", str(config), "--config", LOCAL_PROFILE, *PYTHON, "--dry-run")
    assert code == 0 and f"# run directory (not created): {run}\n" in out, out  # a resubmission into the run

    launcher.write_text(launcher.read_text().replace("run_dir: null", f"run_dir: {run}"))  # an earlier version's
    old = run_train("fit", "--config", str(config), *tiny)
    assert old.returncode == 0, old.stdout[-1000:] + old.stderr[-2000:]
    assert (tmp_path / "digits" / "version_2" / "checkpoints" / "last.ckpt").is_file()
    own = run_train("fit", "--config", str(config), *tiny[:2], "--trainer.max_epochs", "2", *tiny[4:],
                    env={"SLURM_JOB_ID": "4242"})  # fmt: skip
    assert own.returncode == 0, own.stdout[-1000:] + own.stderr[-2000:]
    starts = [json.loads(line) for line in (run / "history.jsonl").read_text().splitlines()]
    assert len(starts) == 2 and starts[1]["global_step"] > 0, starts  # the queued job went on in its run
    assert not (tmp_path / "digits" / "version_3").exists()


def test_resubmission_reports_and_checks_changes_before_sbatch(tmp_path: Path) -> None:
    """Resubmitting into a run (`--config <run>/config.yaml`): the new values are listed one line each
    (a dry run writes nothing); a change no resume accepts, or `--ckpt_path last` with nothing to
    resume, is refused before sbatch with the run's config untouched."""
    job = plan(_args(CASES["cpu_1x1"], tmp_path), dry_run=False)
    config = job.run_dir / "config.yaml"
    config.write_text(job.frozen_config)
    job.script.write_text(job.script_text)  # a submitted run (its script and record): its config.yaml resubmits into it
    (job.run_dir / "job.json").write_text(json.dumps({"job_id": "4241", "state": "COMPLETED", "restarts": 0}))
    again = ["--config", str(config), "--config", LOCAL_PROFILE, *PYTHON]
    code, out = train_submit(*again, "--trainer.num_nodes", "2", "--trainer.max_epochs", "9", "--dry-run")
    assert code == 0
    assert f"resubmit: trainer.num_nodes: 1 -> 2 (dry run: {config} not changed)" in out
    assert "resubmit: trainer.max_epochs: 10 -> 9 (dry run" in out
    assert "#SBATCH --nodes=2" in out and config.read_text() == job.frozen_config
    # --run_dir reads the run's config.yaml (and launcher.yaml) as `train fit --run_dir` does, under the site profile
    short = ["--run_dir", str(job.run_dir), "--config", LOCAL_PROFILE, *PYTHON, "--trainer.max_epochs", "9", "--dry-run"]
    code, out = train_submit(*short)
    assert code == 0 and "resubmit: trainer.max_epochs: 10 -> 9 (dry run" in out and "resubmit: trainer.num_nodes" not in out
    with pytest.raises(UserError, match="holds no complete checkpoint; nothing to resume"):
        plan([*again, "--ckpt_path", "last"], dry_run=False)
    with pytest.raises(UserError, match="the architecture changed"):  # (a model argument: the checkpoint's tensors decide)
        plan([*again, "--data.init_args.rgb", "true"], dry_run=False)
    with pytest.raises(UserError, match="--ckpt_path last: no run of 'digits' under .* has a checkpoint"):  # as `train fit`
        plan([*_args(CASES["cpu_1x1"], tmp_path), "--ckpt_path", "last"], dry_run=False)
    assert sorted(p.name for p in job.run_dir.iterdir()) == ["config.yaml", "job.json", "submit.sbatch"]


def test_requeue_signal_recorded_under_slurm_only(monkeypatch: pytest.MonkeyPatch) -> None:
    import signal

    from trainer_cli.job import requeue_signal

    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    assert not requeue_signal.install() and signal.getsignal(signal.SIGUSR1) == signal.SIG_DFL
    monkeypatch.setenv("SLURM_JOB_ID", "7")
    monkeypatch.setenv("SLURM_JOB_NAME", "digits")
    try:
        assert requeue_signal.install()
        os.kill(os.getpid(), signal.SIGUSR1)  # would end this process without the handler
        assert requeue_signal.take() and not requeue_signal.take()
    finally:
        requeue_signal.uninstall()
    assert signal.getsignal(signal.SIGUSR1) == signal.SIG_DFL


def test_job_record_keeps_a_requeue_past_the_script_end(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from trainer_cli.job import jobstate
    from trainer_cli.schedulers.slurm import batch

    monkeypatch.setenv("SLURM_JOB_ID", "7")
    monkeypatch.setenv("SLURM_RESTART_COUNT", "1")
    jobstate.write(tmp_path, {"job_id": "7", "state": "PENDING", "restarts": 0})
    assert batch.main([str(tmp_path), "start"]) == 0
    assert {k: jobstate.read(tmp_path)[k] for k in ("state", "restarts")} == {"state": "RUNNING", "restarts": 1}
    batch.requeued(tmp_path, "hpc_ckpt_1.ckpt")
    assert batch.main([str(tmp_path), "end", "143"]) == 0  # killed by the requeue: still REQUEUED, the script ends 0
    assert jobstate.read(tmp_path)["state"] == "REQUEUED"
    monkeypatch.setenv("SLURM_RESTART_COUNT", "2")
    batch.main([str(tmp_path), "start"])
    batch.main([str(tmp_path), "end", "0"])
    assert {k: jobstate.read(tmp_path)[k] for k in ("state", "restarts", "exit_code")} == {"state": "COMPLETED", "restarts": 2, "exit_code": 0}


def test_step_start_timeout_bounds_every_srun_of_the_tasks(tmp_path: Path) -> None:
    """--slurm.step_start_timeout_s N: every srun that starts the tasks (fit, a sweep's trial, an
    array worker's trial, the test job) gets --immediate=N, and `batch end` reads N; the fit steps
    of a run, of a sweep's trial and of a worker's trial are one block (slurm/fit_step.j2: the
    watchdog in each); the scripts are valid bash; 0 renders no --immediate; below 0 is refused."""
    args = [*_args(CASES["cpu_1x1"], tmp_path), "--slurm.step_start_timeout_s", "30"]
    job = plan([*args, "--slurm.test_after_fit", "true"], dry_run=True)
    sweep = plan_sweep([*args, "--sweep", "optimizer.init_args.lr=1e-3,1e-2"], dry_run=True).script_text
    workers = plan_sweep([*args, "--sweep", "optimizer.init_args.lr=loguniform(1e-3,1e-1)", "--sweep_sampler", "tpe",
                          "--sweep_trials", "4", "--slurm.array_workers", "2"], dry_run=True).script_text
    scripts = {"fit": job.script_text, "test": job.test_script_text("afterok:1"), "sweep": sweep, "workers": workers}
    for name, text in scripts.items():
        assert text.count("srun --kill-on-bad-exit=1 --immediate=30 ") == 1, name
        assert subprocess.run(["bash", "-n"], input=text, text=True, capture_output=True).returncode == 0, name
    for text in (job.script_text, sweep, workers):
        assert "export TRAINER_CLI_STEP_START_TIMEOUT_S=30\n" in text
        assert text.count('-m trainer_cli.schedulers.slurm.watchdog "$run_dir" watch &\n') == 1 and 'kill "$watchdog"' in text
    # a worker's trial: stdout to the trial's log, stderr there through task_output (its head kept, fit_step.j2)
    assert 'fit --config "$run_dir/config.yaml" --run_dir "$run_dir" >>"$run_dir/slurm-${SLURM_ARRAY_JOB_ID}_${task}.log" || rc=$?' in workers
    assert '-m trainer_cli.job.task_output 2>>"$run_dir/slurm-${SLURM_ARRAY_JOB_ID}_${task}.log" 4>&-)' in workers
    assert '\n    end=0\n' in workers and 'batch "$run_dir" end "$rc" || end=$?\n    kill "$heartbeat"' in workers
    loop = workers.split("while true")[1]
    execs = [line.strip() for line in loop.splitlines() if line.strip().startswith("exec ")]
    assert all(line.startswith(("exec 4>&2 2>", "exec 2>&4")) for line in execs), "only stderr moved, the loop goes on"
    assert '-m trainer_cli.schedulers.slurm.sweep_worker next' in loop and '"$task" $ended) || asked=$?' in loop
    assert 'ended="$rc"\ndone\n' in loop, "the trial's exit code is told by the next ask, one process a trial"
    job = plan([*args, "--slurm.step_start_timeout_s", "0"], dry_run=True)
    assert "--immediate=" not in job.script_text and "export TRAINER_CLI_STEP_START_TIMEOUT_S=0\n" in job.script_text
    with pytest.raises(UserError, match=r"--slurm.step_start_timeout_s -1: must be 0 \(no timeout\) or more"):
        plan([*args, "--slurm.step_start_timeout_s", "-1"], dry_run=True)


def test_site_defaults_cpus_from_workers_raw_setup_and_python(tmp_path: Path) -> None:
    """Without --slurm.cpus_per_task a task gets the data module's num_workers + 1 cores; a raw setup
    block is rendered verbatim between labels; with setup lines and no --slurm.python the job runs
    the `python` they put on PATH; --slurm.mem and --slurm.mem_per_cpu exclude each other."""
    base = ["--config", CIFAR, "--trainer.default_root_dir", str(tmp_path), "--trainer.accelerator", "cpu", "--trainer.strategy", "ddp", "--trainer.devices", "1"]
    job = plan([*base, "--data.init_args.num_workers", "3", "--slurm.mem_per_cpu", "4G"], dry_run=True)
    assert "#SBATCH --cpus-per-task=4\n" in job.script_text and "#SBATCH --mem-per-cpu=4G\n" in job.script_text
    assert f"srun --kill-on-bad-exit=1 --immediate=600 {os.path.abspath(sys.executable)} -m trainer_cli fit" in job.script_text
    raw = 'conda activate "my env" && export DATA=$SCRATCH/data'
    job = plan([*base, "--slurm.setup_raw", raw], dry_run=True)
    assert f"not quoted ----\n{raw}\n# ---- end of site setup block" in job.script_text
    assert "srun --kill-on-bad-exit=1 --immediate=600 python -m trainer_cli fit" in job.script_text
    with pytest.raises(UserError, match="--slurm.mem 4G and --slurm.mem_per_cpu 1G: sbatch takes one of them"):
        plan([*base, "--slurm.mem", "4G", "--slurm.mem_per_cpu", "1G"], dry_run=True)


def test_a_resubmitted_run_goes_on_from_its_checkpoint_not_from_where_it_started(tmp_path: Path) -> None:
    """A run submitted from a checkpoint file and resubmitted with its own config.yaml goes on from
    its newest checkpoint once it saved one, not from the file again (rundir.resume_checkpoint, rule 0)."""
    import torch

    pretrained = tmp_path / "pretrained.ckpt"
    torch.save({"global_step": 3, "epoch": 0}, pretrained)
    job = plan([*_args(CASES["cpu_1x1"], tmp_path), "--ckpt_path", str(pretrained)], dry_run=False)
    config = job.run_dir / "config.yaml"
    config.write_text(job.frozen_config)
    job.script.write_text(job.script_text)  # a submitted run (its script and record): its config.yaml resubmits into it
    (job.run_dir / "job.json").write_text(json.dumps({"job_id": "4241", "state": "COMPLETED", "restarts": 0}))
    again = ["--config", str(config), "--config", LOCAL_PROFILE, *PYTHON]
    assert plan(again, dry_run=True).changes == []  # nothing saved yet: the job's first start takes the file
    (job.run_dir / "checkpoints").mkdir()
    torch.save({"global_step": 8, "epoch": 1}, job.run_dir / "checkpoints" / "last.ckpt")
    # how the job resumes goes into its own input (job_config.yaml), not into the run's config.yaml (a resume option)
    resubmitted = plan(again, dry_run=True)
    assert resubmitted.changes == [] and yaml.safe_load(resubmitted.frozen_config)["ckpt_path"] == "last"
    assert f'fit --config {job.run_dir / "job_config.yaml"} --run_dir "$run_dir"' in resubmitted.script_text
    other = tmp_path / "other.ckpt"
    torch.save({"global_step": 5, "epoch": 0}, other)
    chosen = plan([*again, "--ckpt_path", str(other)], dry_run=True)  # chosen now: taken
    assert chosen.changes == [] and yaml.safe_load(chosen.frozen_config)["ckpt_path"] == str(other)


def _job_command(run: Path) -> list[str]:
    """What the fit step of ``run``'s ``submit.sbatch`` gives `train fit` (``--config FILE --run_dir RUN``)."""
    import re
    import shlex

    line = next(line for line in (run / "submit.sbatch").read_text().splitlines() if " fit --config " in line)
    config = shlex.split(re.search(r" fit --config (\S+) --run_dir", line).group(1).replace('"$run_dir"', str(run)))[0]
    return ["--config", config.replace("$run_dir", str(run)), "--run_dir", str(run)]


def test_a_resubmitted_run_is_recorded_as_a_local_resume_records_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`train submit --config <run>/config.yaml --ckpt_path last --trainer.max_epochs 2` (docs/guides/slurm.md's
    resume form): the run's config.yaml afterwards is what a local `train fit --run_dir <run> --ckpt_path last
    --trainer.max_epochs 2` writes (no `ckpt_path: last`, so `train fit --config <run>/config.yaml` starts a new run;
    its header kept), and the job's start lists the changes the submit printed in history.jsonl. The job itself
    resumes (its command as submit.sbatch gives it, in a job: SLURM_JOB_ID)."""
    import shutil

    stand_in = tmp_path / "bin" / "sbatch"  # accepts the script and prints a job id, as `sbatch --parsable` does
    stand_in.parent.mkdir()
    monkeypatch.setenv("PATH", f"{stand_in.parent}{os.pathsep}{os.environ['PATH']}")
    tiny = [
        "--trainer.strategy", "auto", "--trainer.limit_train_batches", "2", "--trainer.limit_val_batches", "1",
        "--trainer.enable_progress_bar", "false", "--trainer.enable_model_summary", "false",
    ]  # fmt: skip
    stand_in.write_text("#!/bin/sh\necho 4242\n")
    stand_in.chmod(0o755)
    code, out = train_submit(*_args(CASES["cpu_1x1"], tmp_path), "--slurm.snapshot", "false", *tiny, "--trainer.max_epochs", "1")
    run = tmp_path / "digits" / "version_0"
    assert code == 0, out
    first = run_train("fit", *_job_command(run), env={"SLURM_JOB_ID": "4242"})  # the job's first start
    assert first.returncode == 0 and (run / "checkpoints" / "last.ckpt").is_file(), first.stderr[-2000:]
    local = tmp_path / "local" / "digits" / "version_0"  # the same run, resumed here
    shutil.copytree(run, local)

    stand_in.write_text("#!/bin/sh\necho 4243\n")
    again = ["--config", str(run / "config.yaml"), "--config", LOCAL_PROFILE, *PYTHON, "--slurm.snapshot", "false"]
    code, out = train_submit(*again, "--trainer.strategy", "auto", "--ckpt_path", "last", "--trainer.max_epochs", "2")
    assert code == 0 and "resubmit: trainer.max_epochs: 1 -> 2\n" in out, out
    printed = [line.removeprefix("resubmit: ") for line in out.splitlines() if line.startswith("resubmit: ") and "->" in line]
    job = run_train("fit", *_job_command(run), env={"SLURM_JOB_ID": "4243"})  # the resubmitted job's start
    assert job.returncode == 0 and "Resuming " in job.stdout + job.stderr, job.stdout[-2000:] + job.stderr[-2000:]
    starts = [json.loads(line) for line in (run / "history.jsonl").read_text().splitlines()]
    assert [s["kind"] for s in starts] == ["new", "resubmission"] and starts[1]["global_step"] > 0, starts
    assert starts[1]["changes"] == printed == ["trainer.max_epochs: 1 -> 2"], (starts, printed)

    resumed = run_train("fit", "--run_dir", str(local), "--ckpt_path", "last", "--trainer.strategy", "auto",
                        "--trainer.max_epochs", "2")  # fmt: skip
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    ours, theirs = (run / "config.yaml").read_text(), (local / "config.yaml").read_text().replace(str(tmp_path / "local"), str(tmp_path))
    assert "ckpt_path: null\n" in ours and "ckpt_path: last" not in ours, ours
    linked = next(line for line in (run / "config.prev-1.yaml").read_text().splitlines() if line.startswith("# Linked"))
    assert f"\n{linked}\n" in ours and "\n# Rewritten on resume " in ours, ours  # the header a local resume writes
    assert ours == theirs, "\n".join(difflib.unified_diff(theirs.splitlines(), ours.splitlines(), lineterm=""))
    assert (run / "config.prev-1.yaml").read_text() == (local / "config.prev-1.yaml").read_text()

    new = run_train("fit", "--config", str(run / "config.yaml"), *tiny, "--trainer.max_epochs", "1")  # starts a new run
    assert new.returncode == 0 and "nothing to train" not in new.stdout, new.stdout[-2000:] + new.stderr[-2000:]
    assert (tmp_path / "digits" / "version_1" / "checkpoints" / "last.ckpt").is_file()


def test_a_refused_resubmission_leaves_the_runs_files_as_they_were(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """sbatch refuses a resubmission: the run's config.yaml is untouched (no config.prev-<N>.yaml), and the job input it
    wrote is gone again (none before) or back to the earlier resubmission's (which a queued job may still read)."""
    stand_in = tmp_path / "bin" / "sbatch"
    stand_in.parent.mkdir()
    monkeypatch.setenv("PATH", f"{stand_in.parent}{os.pathsep}{os.environ['PATH']}")
    stand_in.write_text("#!/bin/sh\necho 4242\n")
    stand_in.chmod(0o755)
    code, out = train_submit(*_args(CASES["cpu_1x1"], tmp_path), "--slurm.snapshot", "false", "--trainer.max_epochs", "1")
    assert code == 0, out
    run = tmp_path / "digits" / "version_0"
    recorded = (run / "config.yaml").read_text()
    again = ["--config", str(run / "config.yaml"), "--config", LOCAL_PROFILE, *PYTHON, "--slurm.snapshot", "false"]
    refuse = "#!/bin/sh\necho 'sbatch: error: Batch job submission failed: Invalid account' >&2\nexit 1\n"

    stand_in.write_text(refuse)
    with pytest.raises(UserError, match="Invalid account"):
        train_submit(*again, "--trainer.max_epochs", "2")
    assert not (run / "job_config.yaml").exists() and (run / "config.yaml").read_text() == recorded
    assert not list(run.glob("config.prev-*.yaml"))

    stand_in.write_text("#!/bin/sh\necho 4243\n")
    code, out = train_submit(*again, "--trainer.max_epochs", "2")
    assert code == 0 and "resubmit: trainer.max_epochs: 1 -> 2" in out, out
    queued = (run / "job_config.yaml").read_text()
    assert "max_epochs: 2\n" in queued and (run / "config.yaml").read_text() == recorded  # the job's start rewrites it

    stand_in.write_text(refuse)
    with pytest.raises(UserError, match="Invalid account"):
        train_submit(*again, "--trainer.max_epochs", "3")
    assert (run / "job_config.yaml").read_text() == queued and (run / "config.yaml").read_text() == recorded
