"""Metrics are read from what a run logged, whatever its logger (issue 35, defects 9 and 5): a TPE
sweep of trials logged with a CSVLogger tells the study each trial's value (every trial was FAIL,
'failed (exit 0)', exit 1); a trial whose metric is not found says which files were read and what
they hold; `train runs` in the recogniser's folder (tests/foreign_hw: a WandbLogger offline, no
TensorBoard file) finds the script's run without a root and shows its epochs, steps and metric
(it said '--root runs: no such folder', and `train runs .` showed epochs 0, steps 0, no metric).
Real trainings on CPU, the files read back.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
from hw_support import DEFAULT, hw_project, run_main, run_train
from support import DIGITS, quiet_args

from trainer_cli.rundir import metrics
from trainer_cli.sweeps import results, study

TINY = ["--trainer.limit_train_batches", "2", "--trainer.limit_val_batches", "1"]
CSV_LOGGER = str(Path(DIGITS).parents[1] / "logger" / "csv.yaml")


def _csv_column(file: Path, column: str) -> list[float]:
    with file.open(newline="") as f:
        return [float(row[column]) for row in csv.DictReader(f) if row.get(column)]


def test_a_tpe_sweep_with_a_csv_logger_tells_each_trial_its_value(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    from trainer_cli.__main__ import main

    code = main(["fit", "--config", DIGITS, "--config", CSV_LOGGER, *quiet_args(tmp_path), *TINY,
                 "--sweep", "optimizer.init_args.lr=loguniform(1e-3,1e-1)", "--sweep_sampler", "tpe", "--sweep_trials", "1",
                 "--sweep_metric", "val/loss", "--sweep_direction", "minimize"])
    done = capfd.readouterr()
    assert code == 0, done.err[-3000:]
    assert "failed" not in done.err, done.err[-3000:]
    sweep_dir = tmp_path / "digits" / "sweep_0"
    record = json.loads((sweep_dir / "sweep.json").read_text())
    loaded = study.load(record["study"])
    assert [t.state.name for t in loaded.trials] == ["COMPLETE"]
    for trial in loaded.trials:
        run_dir = sweep_dir / f"trial_{trial.number:03d}"
        assert not list(run_dir.glob("events.out.tfevents.*")), "a CSV logger's run: no TensorBoard file"
        assert trial.value == pytest.approx(min(_csv_column(run_dir / "metrics.csv", "val/loss"))), "the value the CSV holds"
    table = json.loads((sweep_dir / "sweep_results.json").read_text())
    assert [(r["score"], r["epochs"]) for r in table["rows"]] == [(pytest.approx(loaded.trials[0].value), 1)]

    # a run written before the run's own record (no metrics.jsonl): its CSVLogger's file is read
    old = sweep_dir / "trial_000"
    (old / metrics.METRICS_FILE).unlink()
    assert results.logged_best(old, "val/loss", "min") == pytest.approx(loaded.trials[0].value)
    assert metrics.read(old).source == "metrics.csv" and metrics.read(old).epochs == 1


def test_a_trial_without_its_metric_says_what_was_read(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    from trainer_cli.__main__ import main

    code = main(["fit", "--config", DIGITS, "--config", CSV_LOGGER, *quiet_args(tmp_path), *TINY,
                 "--sweep", "optimizer.init_args.lr=1e-2", "--sweep_metric", "val/los", "--sweep_direction", "minimize"])
    done = capfd.readouterr()
    assert code == 1
    trial = tmp_path / "digits" / "sweep_0" / "trial_000"
    assert f"trial 0 failed (exit 0, but no val/los in {trial / 'metrics.jsonl'}; it logged: " in done.err, done.err[-3000:]
    assert "val/loss" in done.err.split("it logged: ")[1].splitlines()[0], "what the run logged, the near name among them"


def test_train_runs_finds_a_scripts_wandb_run_and_reads_its_progress(tmp_path: Path) -> None:
    project = hw_project(tmp_path)
    fit = run_main(project, "fit", *DEFAULT)
    assert fit.returncode == 0, fit.stderr[-3000:]
    assert not list(project.rglob("events.out.tfevents.*")), "a W&B run: no TensorBoard file"

    listed = run_train(project, "runs", "--format", "json")  # from the project's folder, no root
    assert listed.returncode == 0, listed.stderr[-3000:]
    found = json.loads(listed.stdout)
    assert len(found["runs"]) == 1, [r["run_dir"] for r in found["runs"]]
    run = found["runs"][0]
    assert (run["epochs"], run["steps"]) == (4, 20), "4 epochs of 5 steps (the project's max_epochs, 80 rows by 16)"
    assert (run["monitor"], run["mode"]) == ("train_loss", "max"), "the ModelCheckpoint added with add_lightning_class_args"
    assert run["best"] is not None and run["best"] > 0 and run["logged_from"] == "metrics.jsonl"
    assert run["state"] == "COMPLETED", "a local run's state: its last start's attempt records (no job.json)"
    assert found["metrics"] == [["train_loss", "max"]]

    table = run_train(project, "runs", "--plot", "val_loss")
    assert table.returncode == 0, table.stderr[-3000:]
    header, row = table.stdout.splitlines()[1:3]
    assert header.split()[:5] == ["run", "state", "epochs", "steps", "train_loss"] and row.split()[1:4] == ["COMPLETED", "4", "20"]
    assert (project / "runs_val_loss.png").stat().st_size > 1000, "the curve of a metric of the run's own record"
