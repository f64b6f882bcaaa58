"""`train runs` (issue 30): a table of the runs under a root with only the config keys that differ
between them and each run's best monitored value, read from the run directories (no torch).
The runs of a real sweep are in tests/test_sweep_optuna.py (the TPE sweep); here, runs whose
config.yaml files differ in known ways.
"""

from __future__ import annotations

import contextlib
import csv
import io
import json
import os
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from support import REPO

from trainer_cli.tools import run_row, runs


def _config(lr: float, epochs: int, run_dir: Path, extra: str = "") -> str:
    return (
        f"seed_everything: 42\ntrainer:\n  max_epochs: {epochs}\n  accelerator: cpu\n"
        f"  logger:\n    class_path: lightning.pytorch.loggers.TensorBoardLogger\n    init_args:\n      save_dir: {run_dir}\n"
        "  callbacks:\n  - class_path: lightning.pytorch.callbacks.ModelCheckpoint\n    init_args:\n      monitor: val/acc\n"
        f"      mode: max\noptimizer:\n  class_path: torch.optim.AdamW\n  init_args:\n    lr: {lr}\n{extra}"
    )


def _runs(root: Path) -> None:
    """Three unrelated runs: two differ in lr, one also in epochs and a key the others lack; each names
    its own folder as the logger's save_dir (not a difference); job.json gives a state."""
    for name, lr, epochs, extra in (("a/version_0", 0.01, 3, ""), ("a/version_1", 0.1, 3, ""),
                                    ("b/version_0", 0.01, 5, "model:\n  init_args:\n    dropout: 0.5\n")):
        run_dir = root / name
        (run_dir / "checkpoints").mkdir(parents=True)
        (run_dir / "config.yaml").write_text(_config(lr, epochs, run_dir.resolve(), extra))
        (run_dir / "checkpoints" / "config.yaml").write_text("not: a run\n")  # inside a run: not a run
    (root / "a" / "version_1" / "job.json").write_text(json.dumps({"state": "COMPLETED"}))


def test_only_the_keys_that_differ(tmp_path: Path) -> None:
    _runs(tmp_path)
    found = runs.collect([tmp_path])
    assert [r["run"] for r in found["runs"]] == [str(tmp_path / n) for n in ("a/version_0", "a/version_1", "b/version_0")]
    assert found["keys"] == ["trainer.max_epochs", "optimizer.init_args.lr", "model.init_args.dropout"]
    assert found["metrics"] == [("val/acc", "max")]
    header, rows = runs.table_rows(found)
    assert header == ["run", "state", "epochs", "steps", "val/acc (max)", "start", "duration", "cost", "goodput", "trainer.max_epochs",
                      "optimizer.init_args.lr", "model.init_args.dropout"]
    assert [r[1:] for r in rows] == [["-", "0", "0", "-", "-", "-", "-", "-", "3", "0.01", "-"], ["COMPLETED", "0", "0", "-", "-", "-", "-", "-", "3", "0.1", "-"],
                                     ["-", "0", "0", "-", "-", "-", "-", "-", "5", "0.01", "0.5"]], "no events, no history, no Slurm job: nothing logged yet, no cost, no goodput"
    same = runs.collect([tmp_path / "a"], every_key=False)
    assert same["keys"] == ["optimizer.init_args.lr"], "between a's runs only lr differs"
    assert "trainer.logger.init_args.save_dir" in runs.collect([tmp_path / "a"], every_key=True)["keys"]
    assert run_row.read_run(tmp_path / "a" / "version_0")["config"]["trainer.logger.init_args.save_dir"] == "<run>"
    assert [r["run"] for r in runs.collect([tmp_path], "version_1")["runs"]] == [str(tmp_path / "a/version_1")]
    assert [r["run"] for r in runs.collect([tmp_path], "b/*")["runs"]] == [str(tmp_path / "b/version_0")]
    with pytest.MonkeyPatch.context() as here:  # `train runs .` names a run as the user types its path: a/version_0
        here.chdir(tmp_path)
        assert [r["run"] for r in runs.collect([Path(".")])["runs"]] == ["a/version_0", "a/version_1", "b/version_0"]


def test_the_verb_prints_csv_json_and_refuses_a_missing_root(tmp_path: Path) -> None:
    _runs(tmp_path)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert runs.main([str(tmp_path), "--format", "csv"]) == 0
    rows = list(csv.DictReader(io.StringIO(out.getvalue())))
    assert [r["optimizer.init_args.lr"] for r in rows] == ["0.01", "0.1", "0.01"]
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert runs.main([str(tmp_path), "--format", "json", "--name", "a/*"]) == 0
    assert json.loads(out.getvalue())["keys"] == ["optimizer.init_args.lr"]
    bad = subprocess.run([sys.executable, "-m", "trainer_cli", "runs", str(tmp_path / "nowhere")], capture_output=True, text=True,
                         cwd=REPO, timeout=120)
    assert bad.returncode == 2 and bad.stderr.startswith("error:") and "no such folder" in bad.stderr and "Traceback" not in bad.stderr


def test_train_runs_imports_no_torch(tmp_path: Path) -> None:
    _runs(tmp_path)
    code = (
        "import sys\nfrom trainer_cli.__main__ import main\nrc = main(['runs', %r])\n"
        "assert 'torch' not in sys.modules and 'lightning' not in sys.modules, 'torch imported'\nsys.exit(rc)" % str(tmp_path)
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "3 run(s); 3 key(s) that differ" in proc.stdout


def test_a_run_that_logged_its_hyperparameters_is_read_past_them(tmp_path: Path) -> None:
    """TensorBoardLogger's defaults (a user's script) write the hparams plugin's summaries first, which
    hold no number: the scalars after them still count (they were dropped with the rest of the file)."""
    from lightning.pytorch.loggers import TensorBoardLogger

    run_dir = tmp_path / "lightning_logs" / "version_0"
    logger = TensorBoardLogger(save_dir=tmp_path)
    logger.log_hyperparams({"lr": 0.1}, metrics={"hp_metric": -1})
    for step, (loss, epoch) in ((4, (2.0, 0)), (9, (1.5, 1))):
        logger.log_metrics({"val/loss": loss, "epoch": epoch}, step=step)
    logger.finalize("success")
    (run_dir / "config.yaml").write_text(
        "trainer:\n  callbacks:\n  - class_path: lightning.pytorch.callbacks.ModelCheckpoint\n"
        "    init_args:\n      monitor: val/loss\n"
    )
    run = run_row.read_run(run_dir)
    assert (run["epochs"], run["steps"], run["best"]) == (2, 9, 1.5)
    bad = subprocess.run([sys.executable, "-m", "trainer_cli", "runs", str(run_dir.parent), "--plot", "val/los"], capture_output=True,
                         text=True, cwd=tmp_path, timeout=120)
    assert bad.returncode == 2 and "--plot val/los: no run listed logged it; did you mean: val/loss?" in bad.stderr, bad.stderr


def test_a_min_column_holds_each_runs_lowest_and_a_max_column_its_highest(tmp_path: Path) -> None:
    """Two runs monitor val/loss, one for its minimum, one for its maximum: two columns, each the extreme its
    name says of every run's values (the launcher's own record, metrics.jsonl, as RunSummary writes it)."""
    from trainer_cli.rundir import metrics

    for name, mode, losses in (("low", "min", (0.9, 0.4, 0.6)), ("high", "max", (0.2, 0.8, 0.5))):
        run_dir = tmp_path / name
        run_dir.mkdir()
        (run_dir / "config.yaml").write_text(
            "trainer:\n  callbacks:\n  - class_path: lightning.pytorch.callbacks.ModelCheckpoint\n"
            f"    init_args:\n      monitor: val/loss\n      mode: {mode}\n"
        )
        for epoch, loss in enumerate(losses):
            metrics.record(run_dir, metrics.EPOCH_STAGE, epoch, 10 * (epoch + 1), 1000.0 + epoch, {"val/loss": loss})
    found = runs.collect([tmp_path])
    header, rows = runs.table_rows(found)
    assert header[4:6] == ["val/loss (max)", "val/loss (min)"]
    assert {r[0].rsplit("/", 1)[1]: r[4:6] for r in rows} == {"high": ["0.8000", "0.2000"], "low": ["0.9000", "0.4000"]}
    assert [r["best"] for r in found["runs"]] == [0.8, 0.4], "each run's best by its own mode"


def _listing(root: Path, curves: bool) -> tuple[list[list[str]], list[dict[str, Any]]]:
    """The table's rows (header first) and the JSON's runs of ``train runs ROOT``; ``curves``: every logger's
    file read (the path without a summary, as before issue 48), else the runs' summaries where up to date."""
    found = runs.collect([root], every_key=True, curves=curves)
    header, rows = runs.table_rows(found)
    hidden = ("scalars", "extremes")
    return [header, *rows], json.loads(json.dumps([{k: v for k, v in r.items() if k not in hidden} for r in found["runs"]], default=str))


def test_a_listing_from_the_summaries_equals_the_listing_from_the_loggers_files(tmp_path: Path) -> None:
    """Issue 48: real runs (two of `train fit`, which keep their summary at the end of the fit, and a user's stock
    LightningCLI script with TensorBoard alone: no metrics.jsonl, no summary) list the same, columns and values,
    read from every logger's file, from the summaries the first listing keeps, and again once a run changed."""
    import forkserver
    from foreign_support import FOREIGN, foreign_env
    from support import DIGITS, quiet_args, run_train

    from trainer_cli.rundir import metrics, summary

    root = tmp_path / "runs"
    for lr in ("0.01", "0.02"):
        done = run_train("fit", "--config", DIGITS, *quiet_args(root, epochs=2), "--trainer.limit_train_batches", "3",
                         "--trainer.limit_val_batches", "1", "--optimizer.init_args.lr", lr)
        assert done.returncode == 0, done.stderr[-3000:]
    user = forkserver.run_python([str(FOREIGN / "plain_main.py"), "fit", "--trainer.logger", "lightning.pytorch.loggers.TensorBoardLogger",
                                  "--trainer.logger.save_dir", str(root / "script"), "--trainer.max_epochs", "2",
                                  "--trainer.limit_train_batches", "3", "--trainer.enable_progress_bar", "false"], tmp_path, foreign_env(), 600)
    assert user.returncode == 0, user.stderr[-3000:]
    [script] = root.glob("script/*/version_0")
    fits = [*sorted(root.glob("digits/version_*")), script]
    assert len(fits) == 3 and not (script / "metrics.jsonl").exists() and not (script / summary.SUMMARY_FILE).exists()
    for run_dir in fits:
        if run_dir != script:  # kept at the end of the fit: the first listing decodes no event file of it
            kept = summary.Summary(run_dir)
            assert kept.get(metrics.SUMMARY_PART, kept.key(names=metrics._source_file, inodes=False))["source"] == "TensorBoard event files"

    before = _listing(root, curves=True)
    assert before[0][0][4:5] == ["val/acc (max)"] and {r["logged_from"] for r in before[1]} == {"TensorBoard event files"}
    assert len(before[1]) == 3 and all(r["steps"] > 0 for r in before[1]), before[0]
    assert _listing(root, curves=False) == before  # the rows computed, kept in each run's summary
    assert all(summary.Summary(d).get(runs.ROW_PART, summary.Summary(d).key(str(d.resolve()))) for d in fits)
    assert _listing(root, curves=False) == before  # from the summaries
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert runs.main([str(root), "--format", "json"]) == 0
    assert [r["best"] for r in json.loads(out.getvalue())["runs"]] == [r["best"] for r in before[1]]

    (script / "job.json").write_text(json.dumps({"state": "COMPLETED"}))  # a run changed: its row is read again
    changed = _listing(root, curves=False)
    assert changed == _listing(root, curves=True) and [r["state"] for r in changed[1]] == ["COMPLETED"] * 3  # (local runs: their attempts')


def test_a_listing_from_the_runs_index_equals_the_listing_from_the_folders(tmp_path: Path) -> None:
    """Issue 48: the second listing reads the rows the runs index keeps at the root (one file, each run's folder and
    files stated) and lists what the folders give; a run changed in place after the index was written (its folder's
    time as before: only the file's size and time tell), and a run added, are shown as they are now."""
    import os
    import time

    from trainer_cli.rundir import index as runs_index

    def age() -> None:  # older than the index's racy window: the folders' times are trusted
        past = time.time() - 60
        for folder in [tmp_path, *(p for p in tmp_path.rglob("*") if p.is_dir())]:
            os.utime(folder, (past, past))

    _runs(tmp_path)
    (tmp_path / "b" / "version_0" / "job.json").write_text(json.dumps({"state": "RUNNING"}))
    age()
    from_folders = _listing(tmp_path, curves=True)
    assert _listing(tmp_path, curves=False) == from_folders  # rows computed, kept in the summaries, the index written
    age()  # the summaries written: their folders listed again, the index written again
    assert _listing(tmp_path, curves=False) == from_folders
    index = runs_index.RunsIndex(tmp_path)
    held = {rel: index.folder(str(tmp_path / rel), rel) for rel in ("a/version_0", "a/version_1", "b/version_0")}
    assert all(f is not None and f.unchanged and index.row(rel) is not None for rel, f in held.items()), held
    assert _listing(tmp_path, curves=False) == from_folders  # from the index

    job = tmp_path / "b" / "version_0" / "job.json"
    before = os.stat(job.parent).st_mtime_ns
    with open(job, "w") as f:  # rewritten in place: the folder's time does not change
        f.write(json.dumps({"state": "COMPLETED"}))
    os.utime(job.parent, ns=(before, before))
    (tmp_path / "c" / "version_0").mkdir(parents=True)
    (tmp_path / "c" / "version_0" / "config.yaml").write_text(_config(0.5, 3, tmp_path / "c" / "version_0"))
    now = _listing(tmp_path, curves=False)
    assert now == _listing(tmp_path, curves=True)
    assert [r["state"] for r in now[1]] == ["-", "COMPLETED", "COMPLETED", "-"] and now[1][-1]["run"].endswith("c/version_0")


def test_a_local_run_and_a_submitted_run_of_one_config_differ_in_no_key_the_user_set_alike(tmp_path: Path) -> None:
    """Found as a new user (2026-12-03): a local ``train fit`` run and a submitted run of the same experiment were
    listed with three keys that differ (the logger's ``save_dir``, ``name``, ``version``), and two local runs with
    one (``version``): a local run's config.yaml holds the values the launcher pointed at its run directory (its
    header says what they were), a submitted run's the configured ones. ``train runs`` compares the configured
    values: only the key set apart (the learning rate, and OneCycle's peak that follows it) is listed. The submission goes up to the queue (``sbatch``
    a stand-in answering a job id; the real cluster lists its runs in tests/test_site_user.py); the job's fit
    command, read from the rendered script, then runs here as the job would run it."""
    from support import DIGITS, run_train

    tiny = ["--trainer.max_epochs", "1", "--trainer.limit_train_batches", "2", "--trainer.limit_val_batches", "1",
            "--trainer.accelerator", "cpu", "--trainer.devices", "1"]
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "sbatch").write_text("#!/bin/sh\necho 4242\n")
    (bin_dir / "sbatch").chmod(0o755)
    env = {"PATH": f"{bin_dir}:{os.environ['PATH']}", "XDG_STATE_HOME": str(tmp_path / "state")}
    for more in ([], ["--optimizer.init_args.lr", "0.05"]):
        done = run_train("fit", "--config", DIGITS, *tiny, *more, cwd=tmp_path, env=env)
        assert done.returncode == 0, done.stderr[-3000:]
    done = run_train("submit", "--config", DIGITS, *tiny, cwd=tmp_path, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    run_dir = Path(next(line.split(":", 1)[1].strip() for line in done.stdout.splitlines() if line.startswith("Run directory:")))
    [srun] = [line for line in (run_dir / "submit.sbatch").read_text().splitlines() if line.startswith("srun ")]
    words = shlex.split(srun.split(" || ")[0])
    command = words[words.index("-m"):]
    assert command[2:] == ["fit", "--config", str(run_dir / "config.yaml"), "--run_dir", "$run_dir"], command
    done = run_train(*command[2:-1], str(run_dir), cwd=tmp_path, env=env)
    assert done.returncode == 0, done.stderr[-3000:]

    found = runs.collect([tmp_path / "runs"])
    assert [Path(r["run_dir"]).name for r in found["runs"]] == ["version_0", "version_1", "version_2"]
    assert found["keys"] == ["optimizer.init_args.lr", "lr_scheduler.init_args.max_lr"], found["keys"]  # OneCycle's peak: the lr
    local = (tmp_path / "runs" / "digits" / "version_0" / "config.yaml").read_text()
    assert "save_dir: " + str(tmp_path / "runs" / "digits") in local, "the record holds where the logger wrote"
    assert found["runs"][0]["config"]["trainer.logger.init_args.save_dir"] == "runs"
