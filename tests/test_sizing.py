"""A submission sized from an earlier run of its shape (trainer_cli/schedulers/slurm/sizing.py): the sizing block's
figures are the measured run's attempts records (a real digits fit on CPU), ``--slurm.time auto``
writes the limit it chose into the script, and without an earlier run of the shape it refuses with
one line naming a probe run. The cluster test (long tier): after one measured run on the local
cluster, a run twice as long submitted with ``--slurm.time auto`` completes in one attempt under
the limit chosen, a few minutes, well below the profile's."""

from __future__ import annotations

import json
import math
import shlex
import shutil
from pathlib import Path

import pytest
from slurm_support import (  # noqa: F401 - slurm_cluster is a fixture
    LOCAL_PROFILE,
    newest_step,
    sacct_attempts,
    scontrol_job,
    slurm_cluster,
    train_submit,
    wait_for_state,
)
from support import DIGITS, REPO, quiet_args, run_train

from trainer_cli.errors import UserError
from trainer_cli.job import jobstate, restarts
from trainer_cli.schedulers.slurm.output import time_limit_s
from trainer_cli.schedulers.slurm import sizing
from trainer_cli.rundir import attempts, history

BATCHES = 3  # tuning_support.FAST: the fit of test_export_predict.py


def _submit(*args: str) -> str:
    code, out = train_submit(*args)  # the suite's one way to run `train submit` in this process
    assert code == 0, out
    return out


def _block(out: str) -> dict[str, str]:
    """The sizing block's lines by their label (``step time``, ``this run``, ``time limit``, ...)."""
    lines = out.split("sizing: ", 1)[1].splitlines()[1:]
    return {line[2:16].strip(): line[16:] for line in lines if line.startswith("  ") and line[2:3] != " "}


def check_sizing_from(trained: Path, tmp_path: Path) -> None:
    """A dry run of the shape of ``trained`` (a digits fit of one epoch of 3 steps, tuning_support.FAST)
    is sized from its attempts records, copied alone under a root of its own; another shape is refused
    with one line naming a probe run. Run by test_export_predict.py on its module's fit (no fit of its own)."""
    root = tmp_path / "runs"
    run = root / "digits" / "version_0"
    (run / attempts.ATTEMPTS_DIR).mkdir(parents=True)
    shutil.copy(trained / "config.yaml", run / "config.yaml")
    shutil.copy(attempts.rank_file(trained, 0), attempts.rank_file(run, 0))
    [measured] = attempts.read(run)
    assert measured["last_step"] == BATCHES and measured["ended_by"] == "completed"

    shape = ["--config", DIGITS, "--trainer.default_root_dir", str(root), "--trainer.limit_train_batches", str(BATCHES),
             "--trainer.limit_val_batches", "2"]
    done = run_train("submit", *shape, "--trainer.max_epochs", "4", "--slurm.time", "auto", "--slurm.mem", "auto", "--dry-run")
    assert done.returncode == 0, done.stderr[-3000:]
    out = done.stdout
    assert f"sizing: from 1 measured run(s) of this shape: {run}" in out, out
    block = _block(out)
    step_s = measured["seconds"]["train"] / (BATCHES - 1)  # the steps after the first (its end closes the start-up)
    assert block["step time"].startswith(f"{step_s:.3g} s a step"), block
    startup = measured["seconds"]["startup"] + measured["sanity_s"]  # outside Slurm: from the process start
    assert block["start-up"].startswith(f"{startup:.1f} s an attempt (the process start"), block
    # the length: max_epochs 4 x the 3 steps an epoch the earlier run made (3 steps in its 1 epoch)
    assert block["this run"].startswith(f"{4 * BATCHES} step(s) to go (max_epochs 4 x {BATCHES} steps per epoch)"), block
    seconds = measured["seconds"]
    per_step = step_s + (seconds["validation"] - measured["sanity_s"] + seconds["checkpoint"]) / BATCHES
    needed = startup + seconds["tail"] + (4 * BATCHES - 1) * per_step
    assert f": {needed:.1f} s, " in block["this run"] and "CPU-h on 1 node(s) x 1 CPU(s)" in block["this run"], (block, needed)
    chosen = sizing.time_text(math.ceil((needed * sizing.MARGIN + 120 + sizing.FIXED_S) / 60) * 60)  # signal_delay_s 120
    assert block["time limit"].startswith(f"{chosen} (auto: "), block
    assert f"#SBATCH --time={chosen}\n" in out  # written into the script
    assert block["attempts"] == f"1 under --slurm.time {chosen}"
    mem = f"{math.ceil(measured['memory']['rss_peak_bytes'] * 1.25 / 2**30)}G"
    assert f"--slurm.mem {mem} for 1 task(s)" in block["memory"] and f"#SBATCH --mem={mem}\n" in out, block

    # a limit shorter than the run: the attempts it implies, each a start-up again
    assert sizing.attempts_for(sizing.Sizing(None, 100, "", 1000.0, 10.0), 600, 120) == 3  # type: ignore[arg-type]
    assert sizing.attempts_for(sizing.Sizing(None, 100, "", 1000.0, 500.0), 600, 120) is None  # type: ignore[arg-type]

    # another shape (batch size 32): nothing measured, one line naming the probe run
    other = [*shape, "--data.init_args.batch_size", "32", "--trainer.max_steps", "400"]
    refused = run_train("submit", *other, "--slurm.time", "auto", "--dry-run")
    assert refused.returncode == 2 and refused.stdout == "", (refused.stdout, refused.stderr)
    [line] = refused.stderr.splitlines()
    assert line.startswith("error: --slurm.time auto: no earlier run of this shape (") and "batch 32" in line, line
    probe = shlex.join(["train", "submit", *other[:-2], "--trainer.max_steps", str(sizing.PROBE_STEPS), "--slurm.time", sizing.PROBE_TIME])
    assert line.endswith(f"submit a short probe run first: {probe}; then submit this again"), line


TESTS = str(REPO / "tests")


def _cluster_args(root: Path, steps: int, time: str) -> list[str]:
    slow = json.dumps({"class_path": "stall_support.Slow", "init_args": {"step_s": 0.3}})
    return [
        "--config", DIGITS, "--config", LOCAL_PROFILE, *quiet_args(root, epochs=100), "--trainer.limit_train_batches", "10",
        "--trainer.limit_val_batches", "2", "--trainer.num_nodes", "1", "--trainer.devices", "2",
        "--trainer.max_steps", str(steps), "--trainer.callbacks+", slow, "--slurm.env", json.dumps({"PYTHONPATH": TESTS}),
        "--slurm.time", time,
    ]


def _job(out: str) -> tuple[str, Path]:
    fields = dict(line.split(":", 1) for line in out.splitlines() if line.startswith(("Job id:", "Run directory:")))
    return fields["Job id"].strip(), Path(fields["Run directory"].strip())


@pytest.mark.long  # two jobs of their own (about 2 minutes on 2 cores)
def test_time_auto_after_one_measured_run_completes_a_run_twice_as_long_in_one_attempt(slurm_cluster: None, tmp_path: Path) -> None:  # noqa: F811
    steps = 40
    # nothing measured yet under this root: `train submit` refuses with one line (exit 2), nothing queued
    with pytest.raises(UserError) as refused:  # (a UserError: exit 2, one line, no traceback; tests/test_bad_input.py)
        _submit(*_cluster_args(tmp_path, 2 * steps, "auto"))
    line = str(refused.value)
    assert "\n" not in line and "no earlier run of this shape" in line and "--trainer.max_steps 50" in line, line
    assert not list(tmp_path.glob("digits/version_*"))

    probe_id, probe_run = _job(_submit(*_cluster_args(tmp_path, steps, "00:10:00")))
    assert wait_for_state(probe_id, timeout_s=300) == "COMPLETED", (probe_run / f"slurm-{probe_id}.log").read_text()[-3000:]
    assert newest_step(probe_run) == steps

    out = _submit(*_cluster_args(tmp_path, 2 * steps, "auto"))
    job_id, run_dir = _job(out)
    block = _block(out)
    chosen = block["time limit"].split()[0]
    limit_s = time_limit_s(chosen)
    assert limit_s is not None and limit_s % 60 == 0, block
    assert limit_s < time_limit_s("00:10:00"), block  # the profile's limit, and the partition's default: none
    assert scontrol_job(job_id)["TimeLimit"] == chosen
    assert f"#SBATCH --time={chosen}\n" in (run_dir / "submit.sbatch").read_text()
    assert block["this run"].startswith(f"{2 * steps} step(s) to go (max_steps {2 * steps}, before max_epochs 100 x 10 steps"), block
    assert block["attempts"] == f"1 under --slurm.time {chosen}", block
    assert f"{probe_run}" in out.split("sizing: ", 1)[1].splitlines()[0]

    assert wait_for_state(job_id, timeout_s=limit_s + 120) == "COMPLETED", (run_dir / f"slurm-{job_id}.log").read_text()[-3000:]
    assert newest_step(run_dir) == 2 * steps
    record = jobstate.read(run_dir)
    assert record["restarts"] == 0 and record["slurm"]["time"] == chosen, record
    assert restarts.read(run_dir) == []
    assert [r["verb"] for r in history.read(run_dir)] == ["fit"]  # one start
    [row] = sacct_attempts(job_id, 1)
    assert row["State"] == "COMPLETED" and int(row["ElapsedRaw"]) < limit_s - 120, (row, chosen)  # before the signal
    print("sizing:", {"chosen": chosen, "elapsed_s": int(row["ElapsedRaw"]), "block": block})


def test_a_scripts_own_classes_are_its_shape() -> None:
    """A user's script fixes its classes (``LightningCLI(MyModel, MyData)``): its config holds their init
    args without class_path, and the shape names the classes (it said 'None, None batch None')."""
    from trainer_cli.data import DigitsDataModule
    from trainer_cli.models import ImageClassifier

    fixed = {"model": ImageClassifier, "data": DigitsDataModule}
    tree = {"model": {"lr": 0.1, "num_classes": 10}, "data": {"batch_size": 32}, "trainer": {"devices": 2}}
    shape = sizing.shape_of(tree, frozenset({"model.num_classes"}), fixed)
    assert shape["model"] == f"{ImageClassifier.__module__}.ImageClassifier" and shape["model_args"] == {"lr": 0.1}
    assert shape["data"] == f"{DigitsDataModule.__module__}.DigitsDataModule" and shape["batch_size"] == 32
    assert not sizing.same_shape(shape, sizing.shape_of({**tree, "model": {"lr": 0.2}}, fixed=fixed))
