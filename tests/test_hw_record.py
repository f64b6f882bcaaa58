"""The run's record on the foreign recogniser (tests/foreign_hw, issue 35 defect 10): its three
``apply_on="instantiate"`` links (``data.num_classes -> model.num_classes``, ``data.input_dim ->
model.input_dim``, ``data.num_classes -> model.hidden`` with ``8 * n``) give values only when the classes
are built, after a submitted run or a sweep trial was frozen.

- a submitted run's job records the link values it built, as a local run does (its config.yaml kept
  the submitted values until a local resume rewrote it), without counting them as a change;
- a resubmission (or a resume) that changes the config keeps the earlier record as it was written, byte
  for byte (``config.prev-1.yaml`` was re-dumped with the launcher's keys in it, so the stock script
  refused it); a resubmission with the command that submitted the run is not refused for the values
  the job recorded;
- ``--print_config`` of the script prints what the stock script prints, nothing it refuses;
- a sweep trial records the link values its process built.

The submission runs up to the queue: ``sbatch`` is a stand-in that answers a job id (the real cluster
runs this in tests/test_hw_submit.py); the job's own command, read from the rendered ``submit.sbatch``,
then runs here as the job would run it.
"""

from __future__ import annotations

import shlex
import subprocess
from pathlib import Path

import forkserver
import torch
import yaml
from hw_support import CLASSES, DEFAULT, FEATURES, hw_env, hw_project, run_main, run_train

from trainer_cli.rundir import record

TINY = ("--trainer.max_epochs", "1", "--trainer.limit_train_batches", "2", "--trainer.limit_val_batches", "1")
LINKED = {"input_dim": FEATURES, "num_classes": CLASSES, "hidden": 8 * CLASSES}


def _ok(done: subprocess.CompletedProcess[str]) -> subprocess.CompletedProcess[str]:
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    return done


def _run_dir(out: str) -> Path:
    """The run directory the launcher names (``Run directory: ...``)."""
    return Path(next(line.split(":", 1)[1].strip() for line in out.splitlines() if line.startswith("Run directory:")))


def _submit(project: Path, tmp_path: Path, *more: str) -> subprocess.CompletedProcess[str]:
    """``python main.py submit`` up to the queue (``sbatch`` answers job 4242)."""
    bin_dir = tmp_path / "bin"
    if not bin_dir.is_dir():
        bin_dir.mkdir()
        (bin_dir / "sbatch").write_text("#!/bin/sh\necho 4242\n")
        (bin_dir / "sbatch").chmod(0o755)
    env = hw_env(PATH=f"{bin_dir}:{hw_env()['PATH']}", XDG_STATE_HOME=str(tmp_path / "state"))
    args = ["main.py", "submit", *DEFAULT, *TINY, "--trainer.accelerator", "cpu", "--trainer.devices", "1", *more]
    return _ok(forkserver.run_python(args, project, env, 300))


def _run_job(run_dir: Path) -> None:
    """The job's fit command (the ``srun`` line of ``<run>/submit.sbatch``), run where the job runs it:
    in the code snapshot, working in the folder it was submitted from."""
    script = (run_dir / "submit.sbatch").read_text()
    [line] = [line for line in script.splitlines() if line.startswith("srun ")]
    words = shlex.split(line.split(" || ")[0])[1:]
    python = next(i for i, word in enumerate(words) if not word.startswith("-"))
    command = words[python + 1 :]
    config = run_dir / ("job_config.yaml" if (run_dir / "job_config.yaml").is_file() else "config.yaml")  # resubmitted
    assert command[1:] == ["fit", "--config", str(config), "--run_dir", "$run_dir"], command
    command[-1] = str(run_dir)  # the shell's $run_dir
    prefix = "export TRAINER_CLI_WORKDIR="
    [workdir] = [line.removeprefix(prefix) for line in script.splitlines() if line.startswith(prefix)]
    env = {**hw_env(), "TRAINER_CLI_WORKDIR": shlex.split(workdir)[0]}
    _ok(forkserver.run_python(command, run_dir / "code", env, 300))


def test_a_submitted_runs_job_records_the_link_values_it_built_and_a_rewrite_keeps_the_record(tmp_path: Path) -> None:
    project = hw_project(tmp_path)
    run_dir = _run_dir(_submit(project, tmp_path).stdout)
    submitted = {name: (run_dir / name).read_bytes() for name in ("config.yaml", "launcher.yaml")}
    assert "num_classes" not in yaml.safe_load(submitted["config.yaml"])["model"]  # not known before the build

    _run_job(run_dir)
    text = (run_dir / "config.yaml").read_text()
    assert yaml.safe_load(text)["model"] == {"lr": 0.1, **LINKED}  # what the model was built with
    assert record.linked_line({f"model.{k}": v for k, v in LINKED.items()}) in text.splitlines()
    # the values the links gave are not the user's: no earlier record kept, no change, launcher.yaml as submitted
    assert not list(run_dir.glob("*.prev-*.yaml"))
    assert (run_dir / "launcher.yaml").read_bytes() == submitted["launcher.yaml"]
    [start] = [yaml.safe_load(line) for line in (run_dir / "history.jsonl").read_text().splitlines()]
    assert start["kind"] == "new" and start["changes"] == []
    # resubmitted with the same command and more epochs: the values the job recorded are no change of the
    # model (it was refused: 'weights do not fit'); the rewrite keeps the earlier files as they were written
    job_record = {name: (run_dir / name).read_bytes() for name in ("config.yaml", "launcher.yaml")}
    again = _submit(project, tmp_path, "--trainer.max_epochs", "2", "--run_dir", str(run_dir), "--ckpt_path", "last")
    assert [line for line in again.stdout.splitlines() if line.startswith("resubmit:")][:1] == [
        "resubmit: trainer.max_epochs: 1 -> 2"
    ], again.stdout
    assert "ckpt_path" not in again.stdout and (run_dir / "config.yaml").read_bytes() == job_record["config.yaml"]
    _run_job(run_dir)  # the resubmitted job's start rewrites config.yaml, as a resume does
    starts = [yaml.safe_load(line) for line in (run_dir / "history.jsonl").read_text().splitlines()]
    assert starts[-1]["changes"] == ["trainer.max_epochs: 1 -> 2"] and starts[-1]["global_step"] > 0, starts
    assert yaml.safe_load((run_dir / "config.yaml").read_text())["ckpt_path"] is None
    assert (run_dir / "config.prev-1.yaml").read_bytes() == job_record["config.yaml"]
    assert (run_dir / "launcher.prev-1.yaml").read_bytes() == job_record["launcher.yaml"]
    assert yaml.safe_load((run_dir / "config.yaml").read_text())["trainer"]["max_epochs"] == 2
    earlier = run_dir / "config.prev-1.yaml"  # read with its launcher settings (run_dir unset: the job names it)
    assert "run_dir" in record.read(earlier) and record.read(earlier)["run_dir"] is None
    assert "run_dir" not in record.read(earlier, launcher=False)

    # the user's stock script trains from the earlier record (it refused the launcher's keys: rc 2)
    elsewhere = tmp_path / "stock"
    elsewhere.mkdir()
    stock = ["stock_main.py", "fit", "--config", str(run_dir / "config.prev-1.yaml")]
    _ok(forkserver.run_python([str(project / stock[0]), *stock[1:]], elsewhere, hw_env(), 300))
    [ckpt] = list(elsewhere.rglob("*.ckpt"))
    assert torch.load(ckpt, weights_only=False)["hyper_parameters"]["num_classes"] == CLASSES


def test_print_config_of_the_script_is_what_the_stock_script_prints(tmp_path: Path) -> None:
    project = hw_project(tmp_path)
    ours = yaml.safe_load(_ok(run_main(project, "fit", *DEFAULT, "--print_config")).stdout)
    stock = yaml.safe_load(_ok(run_main(project, "fit", *DEFAULT, "--print_config", script="stock_main.py")).stdout)
    assert ours == stock and not set(record.LAUNCHER_KEYS) & set(ours)
    printed = tmp_path / "printed.yaml"
    printed.write_text(yaml.safe_dump(ours, sort_keys=False))
    _ok(run_main(project, "fit", "--config", str(printed), "--print_config", script="stock_main.py"))


def test_a_sweep_trial_records_the_link_value_it_built(tmp_path: Path) -> None:
    """``train fit --sweep`` with the project's classes: the launcher's own link (``data.num_classes ->
    model.init_args.num_classes``) gives 5 when the trial builds its model; the trial's config.yaml,
    frozen before, recorded the constructor's default 0."""
    project = hw_project(tmp_path)
    model = ("--model", "hwr.model.Recognizer", "--model.input_dim", str(FEATURES), "--model.hidden", "40")
    sweep = ("--sweep", "model.init_args.lr=0.1", "--sweep_metric", "val_loss", "--sweep_direction", "minimize")
    done = _ok(run_train(project, "fit", *model, "--data", "hwr.data.StrokeData", *TINY, *sweep))
    [trial] = [p.parent for p in project.rglob("trial_000/config.yaml")]
    assert f"Run directory: {trial}" in done.stdout
    text = (trial / "config.yaml").read_text()
    assert yaml.safe_load(text)["model"]["init_args"]["num_classes"] == CLASSES
    assert record.linked_line({"model.init_args.num_classes": CLASSES}) in text.splitlines()
    assert not list(trial.glob("*.prev-*.yaml"))
