"""Typed sweeps: the expansion of `--sweep` (grid, range, seeded random search), every trial
type-checked before anything is written, `train fit --sweep` here, and `train submit --sweep` as one
job array on the real local Slurm cluster (per-trial run directories, results table, a task that
requeues alone and resumes).
"""

from __future__ import annotations

import contextlib
import csv
import io
import json
import os
import subprocess
from pathlib import Path

import pytest
import torch
from slurm_support import (  # noqa: F401 - slurm_cluster and slurm_queries are fixtures
    LOCAL_PROFILE,
    job_id_from,
    newest_step,
    sacct_attempts,
    sacct_hours,
    scontrol_job,
    slurm_cluster,
    slurm_queries,
    train_submit,
    wait_for_file,
    wait_for_requeue,
    wait_for_state,
)
from support import DIGITS, quiet_args, run_train

from trainer_cli import plots
from trainer_cli.config.request import Request
from trainer_cli.errors import UserError
from trainer_cli.launch import jobs
from trainer_cli.schedulers import engines
from trainer_cli.sweeps import results
from trainer_cli.sweeps.space import take_sweep_args

SHORT = ["--trainer.limit_train_batches", "5", "--trainer.limit_val_batches", "2"]


def assert_sweep_picture(sweep_dir: Path, table: dict, trials: int) -> None:
    """``sweep_results.png`` exists, read back is a picture (not blank), and draws ``trials`` points
    on each swept axis, one of them marked best."""
    from matplotlib.image import imread

    pixels = imread(sweep_dir / plots.SWEEP_PNG)
    assert pixels.ndim == 3 and pixels.shape[0] > 100 and pixels[..., :3].var() > 1e-3, "the picture is not blank"
    points = plots.sweep_points(table)
    assert set(points) == set(table["keys"]) and all(len(p) == trials for p in points.values()), points
    assert all(sum(best for *_, best in p) == 1 for p in points.values())


# -- the expansion ---------------------------------------------------------------------------------
def _trials(*args: str) -> list[dict[str, str]]:
    space, rest = take_sweep_args(Request.of([*args, "--trainer.max_epochs", "3"]))
    assert space is not None and rest.tokens() == ["--trainer.max_epochs", "3"]
    return space.trials()


def test_grid_is_the_product_first_axis_slowest() -> None:
    trials = _trials("--sweep", "optimizer.init_args.lr=1e-3,3e-3,1e-2", "--sweep=data.init_args.batch_size=32,64")
    assert trials == [
        {"optimizer.init_args.lr": lr, "data.init_args.batch_size": bs} for lr in ("1e-3", "3e-3", "1e-2") for bs in ("32", "64")
    ]


def test_range_and_flow_values() -> None:
    assert [t["trainer.max_epochs"] for t in _trials("--sweep", "trainer.max_epochs=range(1,4)")] == ["1", "2", "3"]
    assert [t["trainer.max_epochs"] for t in _trials("--sweep", "trainer.max_epochs=range(2, 9, 3)")] == ["2", "5", "8"]
    assert [t["trainer.devices"] for t in _trials("--sweep", "trainer.devices=[0,1],[2,3],'a,b'")] == ["[0,1]", "[2,3]", "'a,b'"]


def test_random_search_is_seeded_and_reproducible() -> None:
    args = ["--sweep", "optimizer.init_args.lr=loguniform(1e-4,1e-1)", "--sweep", "model.init_args.dropout=uniform(0,0.5)",
            "--sweep", "data.init_args.batch_size=choice(16,32,64)", "--sweep", "trainer.max_epochs=randint(1,4)", "--sweep_trials", "4"]
    first, again = _trials(*args, "--sweep_seed", "0"), _trials(*args, "--sweep_seed", "0")
    assert first == again and len(first) == 4
    assert first != _trials(*args, "--sweep_seed", "1")
    for trial in first:
        assert 1e-4 <= float(trial["optimizer.init_args.lr"]) <= 1e-1 and 0 <= float(trial["model.init_args.dropout"]) <= 0.5
        assert trial["data.init_args.batch_size"] in {"16", "32", "64"} and trial["trainer.max_epochs"] in {"1", "2", "3"}
    assert len({t["optimizer.init_args.lr"] for t in first}) == 4


def test_grid_times_random_trials_per_point() -> None:
    trials = _trials("--sweep", "data.init_args.batch_size=32,64", "--sweep", "optimizer.init_args.lr=loguniform(1e-4,1e-1)", "--sweep_trials", "3")
    assert [t["data.init_args.batch_size"] for t in trials] == ["32"] * 3 + ["64"] * 3


@pytest.mark.parametrize("args,message", [
    (["--sweep", "trainer.max_epochs"], "write KEY=VALUES"),
    (["--sweep", "trainer.max_epochs=1,,2"], "an empty value"),
    (["--sweep", "trainer.max_epochs=range(3,1)"], "the range is empty"),
    (["--sweep", "trainer.max_epochs=range(1.5,3)"], "must be integers"),
    (["--sweep", "optimizer.init_args.lr=loguniform(0,1)"], "0 < low < high"),
    (["--sweep", "name=a,b"], "cannot vary between trials"),
    (["--sweep", "trainer.max_epochs=1,2", "--sweep_trials", "3"], "needs a random axis"),
    (["--sweep", "trainer.max_epochs=1", "--sweep", "trainer.max_epochs=2"], "given twice"),
    (["--sweep_seed", "3"], "without --sweep"),
])
def test_bad_sweep_flags(args: list[str], message: str) -> None:
    with pytest.raises(UserError, match=message):
        take_sweep_args(Request.of(args))


# -- checked before anything is written or queued ----------------------------------------------
def _queued(name: str) -> list[str]:
    """The ids of the jobs named ``name`` that Slurm knows (others share this cluster)."""
    return subprocess.run(["squeue", "-h", "-n", name, "-o", "%i"], capture_output=True, text=True, timeout=30, check=True).stdout.split()


def test_one_bad_trial_value_fails_the_submission_naming_it(slurm_queries: None, tmp_path: Path) -> None:  # noqa: F811
    root, name = tmp_path / "runs", f"badsweep{tmp_path.name[-12:]}"
    bad = run_train("submit", "--config", DIGITS, "--config", LOCAL_PROFILE, "--trainer.default_root_dir", str(root), "--name", name,
                    "--sweep", "optimizer.init_args.lr=1e-3,1e-2", "--sweep", "trainer.max_epochs=2,abc")
    assert bad.returncode == 2 and "Traceback" not in bad.stderr, bad.stderr[-3000:]
    errors = [line for line in bad.stderr.splitlines() if line.startswith("error:")]
    assert errors == ["error: sweep trial 1 (optimizer.init_args.lr=1e-3, trainer.max_epochs=abc), trial 3 (optimizer.init_args.lr=1e-2, "
                      "trainer.max_epochs=abc): trainer.max_epochs: expected int, got 'abc'"], bad.stderr
    assert not root.exists(), "nothing written"
    assert _queued(name) == [], "nothing queued"
    with pytest.raises(UserError, match=r"sweep trial 1 \(trainer.devices=2\): 1 node\(s\) x 2 task\(s\).*share one resource request"):
        train_submit("--config", DIGITS, "--config", LOCAL_PROFILE, "--trainer.default_root_dir", str(root), "--sweep", "trainer.devices=1,2")
    assert not root.exists()


def test_values_are_typed_by_the_parser() -> None:
    """As `--KEY VALUE` would be: `1e-3` a float, `32` an int; `init_args` may be left out."""
    from trainer_cli.config.compose import expand_config_args
    from trainer_cli.sweeps.plan import plan

    space, rest = take_sweep_args(Request.of(["--config", DIGITS, "--sweep", "optimizer.lr=1e-3", "--sweep", "data.init_args.batch_size=32",
                                   "--sweep", "trainer.max_epochs=range(2,3)"]))
    trial = plan(space, expand_config_args(rest)).trials[0]
    assert trial.values == {"optimizer.lr": 0.001, "data.init_args.batch_size": 32, "trainer.max_epochs": 2}
    assert trial.config.optimizer.init_args.lr == 0.001


def test_trials_share_one_parser_and_parse_as_alone() -> None:
    """The trials are parsed by one parser, built once, and each writes the config.yaml that `train fit`
    parses for the trial's command line alone (a value of an earlier trial does not leak)."""
    from trainer_cli.config.compose import compose_args
    from trainer_cli.runtime.verbs import parse_config
    from trainer_cli.sweeps.plan import plan

    space, rest = take_sweep_args(Request.of(["--config", DIGITS, "--sweep", "model.init_args.num_classes=10,7", "--sweep", "optimizer.lr=1e-3,1e-2"]))
    trials = plan(space, *compose_args(rest)).trials
    assert len(trials) == 4 and len({id(t.parser) for t in trials}) == 1
    for trial in trials:
        alone_parser, alone = parse_config("fit", Request.of([*rest.tokens(), *(a for k, v in trial.overrides.items() for a in (f"--{k}", v))]))
        assert trial.frozen() == alone_parser.dump(alone, skip_none=False, skip_link_targets=False), trial.overrides
    assert [t.config.model.init_args.num_classes for t in trials] == [10, 10, 7, 7]


def test_refused_trials_are_named_with_the_parsers_one_line(tmp_path: Path) -> None:
    """A trial's bad value is the parser's error, on one line, for each trial it refuses; a bad value
    of the command itself is `train fit`'s error, naming the --config file and line it came from."""
    from trainer_cli.config.compose import compose_args
    from trainer_cli.errors import ConfigError
    from trainer_cli.sweeps.plan import plan

    bad = tmp_path / "bad.yaml"
    bad.write_text("trainer:\n  max_epochs: 1\n  min_epochs: many\n")
    space, rest = take_sweep_args(Request.of(["--config", DIGITS, "--config", str(bad), "--sweep", "trainer.max_epochs=2,abc"]))
    with pytest.raises(ConfigError) as refused:
        plan(space, *compose_args(rest))
    assert (refused.value.key, refused.value.origin and (refused.value.origin.file, refused.value.origin.line)) == ("trainer.min_epochs", (bad, 3))
    assert refused.value.brief() == f"in {bad} line 3: trainer.min_epochs: expected int, got 'many'"
    space, rest = take_sweep_args(Request.of(["--config", DIGITS, "--sweep", "trainer.max_epochs=2,abc"]))
    with pytest.raises(UserError, match=r"^sweep trial 1 \(trainer.max_epochs=abc\): trainer.max_epochs: expected int, got 'abc'$"):
        plan(space, *compose_args(rest))


def test_a_refused_sweep_leaves_nothing(slurm_queries: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: F811
    """sbatch refusing the array (an `sbatch` in front of the real one that says no): the sweep
    directory, trials and the folders made for them are removed again. More trials than the
    cluster's MaxArraySize: refused before anything is written."""
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "sbatch").write_text('#!/bin/sh\necho "sbatch: error: QOSMaxSubmitJobPerUserLimit" >&2\nexit 1\n')
    (fake / "sbatch").chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake}:{os.environ['PATH']}")
    root = tmp_path / "runs"
    with pytest.raises(UserError, match="sbatch refused .*sweep_0/submit.sbatch: sbatch: error: QOSMaxSubmitJobPerUserLimit"):
        train_submit("--config", DIGITS, "--config", LOCAL_PROFILE, "--trainer.default_root_dir", str(root), "--sweep", "trainer.max_epochs=1,2")
    assert not root.exists()
    monkeypatch.undo()
    with pytest.raises(UserError, match=r"the sweep has 1200 trials; this cluster's job arrays hold at most 1001 tasks \(MaxArraySize\)"):
        train_submit("--config", DIGITS, "--config", LOCAL_PROFILE, "--trainer.default_root_dir", str(root),
                     "--sweep", "trainer.max_epochs=range(1,1201)")
    assert not root.exists()


# -- train fit --sweep, here -------------------------------------------------------------------
def test_fit_sweep_runs_trials_here_then_the_table(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    """`train fit --sweep` (the entry point, in this process; each trial runs as a `train fit` process)."""
    from trainer_cli.__main__ import main

    code = main(["fit", "--config", DIGITS, *quiet_args(tmp_path, epochs=1), *SHORT, "--sweep", "optimizer.init_args.lr=1e-3,2e-2"])
    done = capfd.readouterr()
    assert code == 0, done.err[-3000:]
    sweep_dir = tmp_path / "digits" / "sweep_0"
    record = json.loads((sweep_dir / "sweep.json").read_text())
    assert [t["values"] for t in record["trials"]] == [{"optimizer.init_args.lr": 0.001}, {"optimizer.init_args.lr": 0.02}]
    for i in (0, 1):
        trial = sweep_dir / f"trial_{i:03d}"
        assert (trial / "checkpoints" / "last.ckpt").is_file() and (trial / "config.yaml").is_file()
        assert "run_dir: null" in (trial / "launcher.yaml").read_text()  # beside it; the trial's run names its folder
    assert "val/acc (max)" in done.out and (sweep_dir / "sweep_results.csv").is_file()

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert results.main([str(sweep_dir)]) == 0
    rows = list(csv.DictReader((sweep_dir / "sweep_results.csv").open()))
    assert [r["state"] for r in rows] == ["COMPLETED", "COMPLETED"] and all(r["val/acc"] for r in rows)
    scores = [float(r["val/acc"]) for r in rows]
    assert scores == sorted(scores, reverse=True), "best (highest val/acc) first"
    table = json.loads((sweep_dir / "sweep_results.json").read_text())
    assert table["monitor"] == "val/acc" and table["mode"] == "max" and len(table["rows"]) == 2
    assert "trial  optimizer.init_args.lr  val/acc (max)  state" in out.getvalue()
    assert_sweep_picture(sweep_dir, table, 2)
    best = next(r for r in table["rows"] if r["trial"] == 0)["score"]
    assert results.logged_best(sweep_dir / "trial_000", "val/acc", "max") == pytest.approx(best), "TensorBoard agrees (read before a checkpoint has a score)"


def test_sweep_results_of_a_folder_that_is_not_a_sweep(tmp_path: Path) -> None:
    bad = run_train("sweep-results", str(tmp_path))
    assert bad.returncode == 2 and bad.stderr.startswith("error:") and "not a sweep directory" in bad.stderr and "Traceback" not in bad.stderr


def test_tail_names_one_task_of_a_sweeps_array(tmp_path: Path) -> None:
    """`train jobs --tail` takes the task ids `train jobs` lists (`<array id>_<i>`, a trial's or a
    worker's) and a trial's run directory; the whole array points at them."""
    from trainer_cli.schedulers.submissions import register

    trials, workers = tmp_path / "digits" / "sweep_0", tmp_path / "digits" / "sweep_1"
    register(tmp_path, {"job_id": "41", "job_name": "digits", "run_dir": str(trials), "trials": 3})
    register(tmp_path, {"job_id": "52", "job_name": "digits", "run_dir": str(workers), "workers": 2})
    assert jobs.sweep_task(tmp_path, "41_2") == (jobs.read_registry(tmp_path)[0], 2)
    assert jobs.sweep_task(tmp_path, str(trials / "trial_001")) == (jobs.read_registry(tmp_path)[0], 1)
    assert jobs.sweep_task(tmp_path, "52_1") == (jobs.read_registry(tmp_path)[1], 1)
    assert jobs.sweep_task(tmp_path, "41_3") is None and jobs.sweep_task(tmp_path, "41") is None
    for whole, told in (("41", "`train jobs --tail 41_0`"), ("52", "`train jobs --tail 52_0`")):
        with pytest.raises(UserError, match=told):
            jobs.tail(tmp_path, whole, engines())


# -- train submit --sweep on the local cluster -------------------------------------------------
def _submit_sweep(root: Path, *extra: str) -> tuple[str, Path]:
    code, out = train_submit(
        "--config", DIGITS, "--config", LOCAL_PROFILE, *quiet_args(root, epochs=1), *SHORT, "--slurm.time", "00:10:00", *extra,
    )
    assert code == 0, out
    sweep_dir = Path(next(line.split(":", 1)[1].split(" (")[0].strip() for line in out.splitlines() if line.startswith("Sweep directory:")))
    return job_id_from(out), sweep_dir


@pytest.mark.long  # make test's 12 minutes (51 s): an array sweep is test_one_array_task_requeues_alone_and_resumes, DDP
# jobs test_slurm_cluster.py::test_ddp_job_completes_with_every_rank
def test_grid_of_ddp_trials_completes_as_one_job_array(slurm_cluster: None, tmp_path: Path) -> None:  # noqa: F811
    """2 x 2 trials of 1 node x 2 tasks (DDP over gloo): one array, four tasks, four run directories,
    every task COMPLETED, the table has four rows with their val/acc."""
    job_id, sweep_dir = _submit_sweep(
        tmp_path, "--trainer.devices", "2", "--sweep", "optimizer.init_args.lr=1e-3,1e-2", "--sweep", "data.init_args.batch_size=32,64",
    )
    script = (sweep_dir / "submit.sbatch").read_text()
    assert "#SBATCH --array=0-3\n" in script and f"#SBATCH --output={sweep_dir}/trial_%3a/slurm-%A_%a.log\n" in script
    for i in range(4):
        assert wait_for_state(f"{job_id}_{i}", timeout_s=420) == "COMPLETED", (sweep_dir / f"trial_{i:03d}" / f"slurm-{job_id}_{i}.log").read_text()[-3000:]
    for i in range(4):
        log = (sweep_dir / f"trial_{i:03d}" / f"slurm-{job_id}_{i}.log").read_text()
        assert "world size             2 = 2 devices x 1 nodes" in log
        last = torch.load(sweep_dir / f"trial_{i:03d}" / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=False)
        assert last["global_step"] == 5
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        table = results.report(sweep_dir, engines())
    assert [r["state"] for r in table["rows"]] == ["COMPLETED"] * 4 and all(r["score"] is not None for r in table["rows"]), out.getvalue()
    assert {(r["values"]["optimizer.init_args.lr"], r["values"]["data.init_args.batch_size"]) for r in table["rows"]} == {
        (0.001, 32), (0.001, 64), (0.01, 32), (0.01, 64)}
    assert len(list(csv.DictReader((sweep_dir / "sweep_results.csv").open()))) == 4
    assert_sweep_picture(sweep_dir, table, 4)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert jobs.main(["--root", str(tmp_path)], engines()) == 0
    rows = [line.split() for line in out.getvalue().splitlines()[1:]]
    assert sorted(r[0] for r in rows) == [f"{job_id}_{i}" for i in range(4)] and all(r[1] == "COMPLETED" for r in rows), out.getvalue()
    (sweep_dir / "sweep_results.csv").unlink()
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert jobs.main([str(sweep_dir)], engines()) == 0  # `train jobs SWEEP_DIR`: the same table
    assert out.getvalue().count("COMPLETED") == 4 and (sweep_dir / "sweep_results.csv").is_file()


def test_one_array_task_requeues_alone_and_resumes(slurm_cluster: None, tmp_path: Path) -> None:  # noqa: F811
    """SIGUSR1 to one task of a sweep's array: that task checkpoints, requeues itself alone (the
    other task is never restarted) and resumes from its checkpoint; both complete. Task 1 is the one
    whose SLURM_JOB_ID is the array's id (Slurm keeps the array's record on the highest index), where
    `scontrol requeue <SLURM_JOB_ID>` would requeue every task: the task requeues `<array>_<task>`."""
    epochs, batches = 30, 5  # seconds of training left after the first checkpoint: the signal comes before the end
    job_id, sweep_dir = _submit_sweep(tmp_path, "--trainer.max_epochs", str(epochs), "--sweep", "optimizer.init_args.lr=1e-3,1e-2")
    task, trial = f"{job_id}_1", sweep_dir / "trial_001"
    wait_for_file(trial / "checkpoints" / "last.ckpt", timeout_s=300)  # training is under way
    subprocess.run(["scancel", "-s", "USR1", task], check=True, timeout=30)
    wait_for_requeue(task)
    preempted = newest_step(trial)
    assert json.loads((trial / "job.json").read_text())["state"] == "REQUEUED"
    while_running = results.collect(sweep_dir, engines())  # read from disk while the trials still run
    by_trial = {r["trial"]: r for r in while_running["rows"]}
    assert by_trial[1]["state"] != "COMPLETED" and by_trial[1]["score"] is not None and by_trial[1]["epochs"] >= 1, while_running
    assert wait_for_state(task, timeout_s=400) == "COMPLETED", (trial / f"slurm-{job_id}_1.log").read_text()[-3000:]
    assert wait_for_state(f"{job_id}_0", timeout_s=400) == "COMPLETED"
    assert scontrol_job(task)["Restarts"] == "1"
    assert scontrol_job(f"{job_id}_0")["Restarts"] == "0", "the other trial was not requeued"
    log = (trial / f"slurm-{job_id}_1.log").read_text()
    assert "restart 0 on" in log and "restart 1 on" in log and f"Resuming {trial} from {trial / 'hpc_ckpt_1.ckpt.used'}" in log, log[-3000:]
    assert "restart 1 on" not in (sweep_dir / "trial_000" / f"slurm-{job_id}_0.log").read_text()
    resumed_at = int(log.split(f"Resuming {trial} from ", 1)[1].split("(step ", 1)[1].split(",", 1)[0])
    assert resumed_at >= preempted > 0, "the global step never goes back"
    last = torch.load(trial / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=False)
    assert last["global_step"] == epochs * batches
    record = json.loads((trial / "job.json").read_text())
    assert (record["state"], record["restarts"], record["job_id"]) == ("COMPLETED", 1, job_id)
    # what each trial cost (sacct: task 1 over both its attempts, task 0 once; task 1's SLURM_JOB_ID, the
    # array's own id, must not bring task 0's rows into it) and the sweep's total, their sum
    attempts = {0: sacct_attempts(f"{job_id}_0", 1), 1: sacct_attempts(f"{job_id}_1", 2)}
    done = results.collect(sweep_dir, engines())
    spent = {r["trial"]: r["cost"] for r in done["rows"]}
    for i, rows in attempts.items():
        assert (spent[i]["source"], spent[i]["attempts"]) == ("sacct", len(rows)), spent
        assert spent[i]["cpu_hours"] == pytest.approx(sacct_hours(rows), rel=0.02), (spent, rows)
    assert done["cost"]["cpu_hours"] == pytest.approx(spent[0]["cpu_hours"] + spent[1]["cpu_hours"], abs=1e-6)
    assert done["cost"]["trials"] == 2 and done["cost"]["pruned"]["trials"] == 0
