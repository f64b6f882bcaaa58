"""Sweeps driven by a real Optuna study (issue 30): the `--sweep` syntax as Optuna distributions, the
samplers seeded, a pruner stopping a hopeless trial through the Lightning callback (its run directory
and checkpoint kept, the trial PRUNED), and `train sweep-results` reading the study (states, values,
importances, Optuna's plots, the dashboard command). Trials are real `train fit` processes on CPU
with tiny limits.
"""

from __future__ import annotations

import contextlib
import csv
import io
import json
import os
import shutil
from pathlib import Path
from typing import Any

import optuna
import pytest
from corpus_support import loads
from support import DIGITS, quiet_args

from trainer_cli.callbacks.optuna_pruning import make_pruner
from trainer_cli.config.request import Request
from trainer_cli.errors import UserError
from trainer_cli.sweeps import results, study
from trainer_cli.sweeps.space import take_sweep_args
from trainer_cli.tools import runs

SHORT = ["--trainer.limit_train_batches", "4", "--trainer.limit_val_batches", "2"]


def test_every_kind_of_axis_is_an_optuna_distribution() -> None:
    space, _ = take_sweep_args(Request.of([
        "--sweep", "data.init_args.batch_size=32,64", "--sweep", "trainer.max_epochs=range(2,9,3)",
        "--sweep", "optimizer.init_args.lr=loguniform(1e-4,1e-1)", "--sweep", "model.init_args.dropout=uniform(0,0.5)",
        "--sweep", "trainer.min_epochs=randint(1,4)", "--sweep", "optimizer.class_path=choice(AdamW,SGD)",
        "--sweep_sampler", "tpe", "--sweep_trials", "5", "--sweep_seed", "3",
    ]))
    assert space is not None and (space.sampler, space.trials_per_point, space.seed, space.pruner) == ("tpe", 5, 3, "none")
    kinds = {a.key: a.distribution() for a in space.axes}
    assert kinds["data.init_args.batch_size"] == optuna.distributions.CategoricalDistribution(["32", "64"])
    assert kinds["trainer.max_epochs"] == optuna.distributions.IntDistribution(2, 8, step=3)
    assert kinds["optimizer.init_args.lr"] == optuna.distributions.FloatDistribution(1e-4, 1e-1, log=True)
    assert kinds["model.init_args.dropout"] == optuna.distributions.FloatDistribution(0, 0.5)
    assert kinds["trainer.min_epochs"] == optuna.distributions.IntDistribution(1, 3), "randint's high is excluded"
    assert kinds["optimizer.class_path"] == optuna.distributions.CategoricalDistribution(["AdamW", "SGD"])

    def asked(seed: int) -> list[dict[str, str]]:
        created = optuna.create_study(sampler=study._sampler("tpe", seed))
        return [study.suggest(space, created.ask()) for _ in range(3)]

    first = asked(3)
    assert first == asked(3) and first != asked(4), "seeded: the same command asks the same trials"
    for trial in first:
        assert 1e-4 <= float(trial["optimizer.init_args.lr"]) <= 1e-1 and trial["trainer.max_epochs"] in {"2", "5", "8"}
        assert trial["trainer.min_epochs"] in {"1", "2", "3"} and trial["data.init_args.batch_size"] in {"32", "64"}
    assert space.checked_trials()[-1]["optimizer.init_args.lr"] == "0.1", "the edges of each axis are type-checked"


@pytest.mark.parametrize("args,message", [
    (["--sweep", "trainer.max_epochs=1,2", "--sweep_sampler", "bayes"], "expected one of grid, random, tpe, cmaes"),
    (["--sweep", "trainer.max_epochs=1,2", "--sweep_pruner", "asha"], "expected one of none, median"),
    (["--sweep", "trainer.max_epochs=1,2", "--sweep_direction", "up"], "expected one of maximize, minimize"),
    (["--sweep", "trainer.max_epochs=1,2", "--sweep_storage", "study.db"], "expected a database URL"),
    (["--sweep_sampler", "tpe"], "without --sweep"),
])
def test_bad_search_flags(args: list[str], message: str) -> None:
    with pytest.raises(UserError, match=message):
        take_sweep_args(Request.of(args))


def test_pruners_take_optunas_keyword_arguments() -> None:
    assert isinstance(make_pruner("none"), optuna.pruners.NopPruner)
    median = make_pruner("median(n_startup_trials=1, n_warmup_steps=2)")
    assert isinstance(median, optuna.pruners.MedianPruner) and median._n_startup_trials == 1
    assert isinstance(make_pruner("hyperband(min_resource=2)"), optuna.pruners.HyperbandPruner)
    assert isinstance(make_pruner("successive_halving"), optuna.pruners.SuccessiveHalvingPruner)
    for bad in ("median(2)", "median(n_startup=1)", "median(x=os.system)"):
        with pytest.raises(ValueError):
            make_pruner(bad)


def test_a_bad_edge_value_stops_an_optuna_sweep_before_anything_is_written(tmp_path: Path) -> None:
    from trainer_cli.__main__ import main

    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        code = main(["fit", "--config", DIGITS, *quiet_args(tmp_path), "--sweep", "data.init_args.batch_size=choice(32,abc)",
                     "--sweep_sampler", "random", "--sweep_trials", "4"])
    assert code == 2 and "trial 1 (data.init_args.batch_size=abc)" in err.getvalue() and "Traceback" not in err.getvalue()
    assert not tmp_path.joinpath("digits").exists()


def test_a_pruned_trial_keeps_its_checkpoint_and_the_table_reads_the_study(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    """A grid with a median pruner that prunes after one complete trial: lr 5 learns nothing and is
    stopped at its first validation, PRUNED in the study, its run directory and last.ckpt kept."""
    from trainer_cli.__main__ import main

    code = main(["fit", "--config", DIGITS, *quiet_args(tmp_path, epochs=3), *SHORT, "--sweep", "optimizer.init_args.lr=1e-2,5",
                 "--sweep_pruner", "median(n_startup_trials=1)"])
    done = capfd.readouterr()
    assert code == 0, done.err[-3000:]
    sweep_dir = tmp_path / "digits" / "sweep_0"
    record = json.loads((sweep_dir / "sweep.json").read_text())
    assert {k: record["study"][k] for k in ("metric", "direction", "sampler", "storage")} == {
        "metric": "val/acc", "direction": "maximize", "sampler": "grid", "storage": str(sweep_dir / "study.journal")}
    loaded = study.load(record["study"])
    states = {t.number: t.state.name for t in loaded.trials}
    assert states == {0: "COMPLETE", 1: "PRUNED"}, done.out[-3000:]
    pruned = loaded.trials[1]
    assert list(pruned.intermediate_values) == [4], "reported at the global step of its first validation, then stopped"
    assert (sweep_dir / "trial_001" / "checkpoints" / "last.ckpt").is_file()
    assert "trial 1 pruned at step 4" in done.out
    assert loaded.trials[0].value == pytest.approx(results.logged_best(sweep_dir / "trial_000", "val/acc", "max"))

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert results.main([str(sweep_dir)]) == 0
    rows = list(csv.DictReader((sweep_dir / "sweep_results.csv").open()))
    assert [(r["trial"], r["study"]) for r in rows] == [("0", "COMPLETE"), ("1", "PRUNED")], "best first"
    assert f"dashboard: optuna-dashboard {sweep_dir / 'study.journal'}" in out.getvalue()
    assert ("pip install optuna-dashboard" in out.getvalue()) == (shutil.which("optuna-dashboard") is None), "how to get it"
    assert (sweep_dir / "sweep_history.png").stat().st_size > 1000 and (sweep_dir / "sweep_parallel.png").is_file()


def test_tpe_sweep_asks_trials_one_after_another(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    """`--sweep_sampler tpe --sweep_trials 2`: two trials asked from the study, each type-checked and
    written as trial_<n> when asked; all COMPLETE with their values; importances once two are complete."""
    from trainer_cli.__main__ import main

    code = main(["fit", "--config", DIGITS, *quiet_args(tmp_path), *SHORT, "--sweep", "optimizer.init_args.lr=loguniform(1e-3,1e-1)",
                 "--sweep", "data.init_args.batch_size=16,32", "--sweep_sampler", "tpe", "--sweep_trials", "2", "--sweep_seed", "0"])
    done = capfd.readouterr()
    assert code == 0, done.err[-3000:]
    sweep_dir = tmp_path / "digits" / "sweep_0"
    record = json.loads((sweep_dir / "sweep.json").read_text())
    assert [t["run_dir"] for t in record["trials"]] == [str(sweep_dir / f"trial_{i:03d}") for i in range(2)]
    loaded = study.load(record["study"])
    assert [t.state.name for t in loaded.trials] == ["COMPLETE"] * 2
    for frozen, written in zip(loaded.trials, record["trials"]):
        assert written["values"] == {"optimizer.init_args.lr": frozen.params["optimizer.init_args.lr"],
                                     "data.init_args.batch_size": int(frozen.params["data.init_args.batch_size"])}
    # each trial's checkpoint loads as its user loads it (and weights_only), all in one process
    ckpts = [("trainer_cli.models.classifier.ImageClassifier", Path(written["run_dir"]) / "checkpoints" / "last.ckpt")
             for written in record["trials"]]
    restored_all = loads(tmp_path, ckpts, block=False)
    assert len(restored_all) == len(ckpts) == 2, restored_all
    for restored in restored_all:
        assert restored["loaded"] == "ImageClassifier", restored
    table = json.loads((sweep_dir / "sweep_results.json").read_text())
    assert set(table["importances"]) == {"optimizer.init_args.lr", "data.init_args.batch_size"}
    assert (sweep_dir / "sweep_importance.png").is_file()
    assert "parameter importance:" in done.out

    # `train runs` on the sweep: the swept keys (and what links from them) differ, nothing else; the best values
    found = runs.collect([sweep_dir])
    assert {"optimizer.init_args.lr", "data.init_args.batch_size"} <= set(found["keys"]) and "trainer.max_epochs" not in found["keys"]
    assert all(len({r["config"].get(k) for r in found["runs"]}) > 1 for k in found["keys"])
    assert [r["best"] for r in found["runs"]] == pytest.approx([t.value for t in loaded.trials])
    many = tmp_path / "many"  # 100 runs (the trial's config and event file each): all listed (its speed: benchmarks/listing.py)
    for i in range(100):
        (many / f"run_{i}").mkdir(parents=True)
        for f in [sweep_dir / "trial_000" / "config.yaml", *(sweep_dir / "trial_000").glob("events.out.tfevents.*")]:
            shutil.copy(f, many / f"run_{i}" / f.name)
    assert len(runs.collect([many])["runs"]) == 100
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert runs.main([str(sweep_dir), "--plot", "val/acc", "--plot_file", str(tmp_path / "curves.png")]) == 0
    from matplotlib.image import imread

    assert imread(tmp_path / "curves.png")[..., :3].var() > 1e-3, "the curves are drawn"
    header = out.getvalue().splitlines()[1].split()
    assert header[:4] == ["run", "state", "epochs", "steps"] and "duration" in header
    assert all(r["epochs"] == 1 and r["steps"] > 0 for r in found["runs"])


def test_sweep_results_ranks_by_the_study_metric_not_the_checkpoint_monitor(tmp_path: Path) -> None:
    """`--sweep_metric val/loss --sweep_direction minimize` with a ModelCheckpoint monitoring val/acc
    (or none at all): the table shows, ranks and plots val/loss, min first, as the study was told it;
    the epochs come from the newest checkpoint even when no ModelCheckpoint monitors the metric."""
    import torch
    from torch.utils.tensorboard import SummaryWriter

    sweep_dir = tmp_path / "sweep_0"
    record = {"metric": "val/loss", "direction": "minimize", "name": "x/sweep_0", "sampler": "tpe", "pruner": "none",
              "seed": 0, "storage": str(sweep_dir / "study.journal"), "n_trials": 2}
    trials = []
    for index, (losses, acc) in enumerate((((3.0, 2.0), 0.9), ((2.5, 1.5), 0.5))):  # by val/acc trial 0 leads
        run_dir = sweep_dir / f"trial_{index:03d}"
        (run_dir / "checkpoints").mkdir(parents=True)
        (run_dir / "config.yaml").write_text(
            "trainer:\n  callbacks:\n  - class_path: lightning.pytorch.callbacks.ModelCheckpoint\n"
            "    init_args:\n      monitor: val/acc\n      mode: max\n"
        )
        with SummaryWriter(str(run_dir)) as writer:
            for step, value in enumerate(losses):
                writer.add_scalar("val/loss", value, step)
        torch.save({"global_step": 8, "epoch": 1, "loops": {"fit_loop": {"epoch_progress": {"current": {"processed": 2}}}},
                    "callbacks": {"ModelCheckpoint{'monitor': 'val/acc', 'mode': 'max'}": {
                        "monitor": "val/acc", "best_model_score": torch.tensor(acc)}}},
                   run_dir / "checkpoints" / "last.ckpt")
        trials.append({"index": index, "run_dir": str(run_dir), "values": {"model.lr": str(index)}})
    (sweep_dir / "sweep.json").write_text(json.dumps({
        "sweep_dir": str(sweep_dir), "trials": trials, "axes": [{"key": "model.lr"}], "study": record}))
    study.create(record)
    found = results.collect(sweep_dir)
    assert (found["monitor"], found["mode"]) == ("val/loss", "min")
    assert [(r["trial"], r["score"], r["epochs"]) for r in found["rows"]] == [(1, 1.5, 2), (0, 2.0, 2)]


def _table(sweep_dir: Path) -> tuple[dict[str, Any], tuple[list[str], list[list[str]]]]:
    """``train sweep-results``'s JSON (as written) and table of ``sweep_dir``."""
    found = results.collect(sweep_dir)
    public = json.loads(json.dumps({k: v for k, v in found.items() if not k.startswith("_")}, default=str))
    return public, results.table_rows(found)


def test_sweep_results_from_the_trials_summaries_equal_those_read_from_their_files(tmp_path: Path) -> None:
    """Issue 48: a sweep listed again reads each trial's row from its summary.json (no checkpoint opened); the
    table and JSON equal those read from the trials' files (summaries removed), also once a trial changed (its
    checkpoints gone: its score then from what it logged, as before issue 48)."""
    from trainer_cli.__main__ import main
    from trainer_cli.rundir import summary

    assert main(["fit", "--config", DIGITS, *quiet_args(tmp_path), *SHORT, "--sweep", "optimizer.init_args.lr=1e-2,5e-2"]) == 0
    sweep_dir = tmp_path / "digits" / "sweep_0"
    trials = sorted(sweep_dir.glob("trial_*"))
    kept = summary.Summary(trials[0], dirs=(*summary.SCANNED_DIRS, "checkpoints"))
    assert isinstance(kept.get(results.TRIAL_PART, kept.key("val/acc", "max")), dict), "kept by the sweep's own listing"

    def fresh() -> tuple[dict[str, Any], tuple[list[str], list[list[str]]]]:
        for trial in trials:
            (trial / summary.SUMMARY_FILE).unlink(missing_ok=True)
        return _table(sweep_dir)

    listed = _table(sweep_dir)
    assert listed == fresh() == _table(sweep_dir)
    assert [r["score"] for r in listed[0]["rows"]] and all(r["score"] is not None for r in listed[0]["rows"])
    shutil.move(trials[1] / "checkpoints", tmp_path / "moved")
    changed = _table(sweep_dir)
    assert changed == fresh()
    [moved] = [r for r in changed[0]["rows"] if r["run_dir"] == str(trials[1])]
    assert moved["score"] == results.logged_best(trials[1], "val/acc", "max") and moved["epochs"] == 1
    # trials with no writer (each fit removed its marker): held as settled, then trusted from one stat of their folder
    from test_runs_settled import _age

    _age(sweep_dir)
    assert _table(sweep_dir) == changed  # rows computed and kept (their summaries written)
    _age(sweep_dir)
    assert _table(sweep_dir) == changed
    held = json.loads((sweep_dir / results.TRIALS_INDEX).read_text())["folders"]
    assert [held[t.name].get("settled") for t in trials] == [os.stat(t).st_ino for t in trials], held
    assert _table(sweep_dir) == changed == fresh()


def test_sweep_results_listed_again_draws_nothing_and_imports_no_plotting_until_a_trial_is_told(tmp_path: Path) -> None:
    """Issue 48: the importances and the plots are computed once per state of the study and the table (kept in the
    sweep directory): listed again, the same output without importing scikit-learn or matplotlib; a trial told since,
    and a plot removed, are computed and drawn again."""
    import subprocess
    import sys

    from support import REPO

    from trainer_cli.sweeps import figures

    sweep_dir = tmp_path / "sweep_0"
    record = {"metric": "val/loss", "direction": "minimize", "name": "x/sweep_0", "sampler": "tpe", "pruner": "none",
              "seed": 0, "storage": str(sweep_dir / "study.journal"), "n_trials": 10}
    axes = {"model.lr": optuna.distributions.FloatDistribution(1e-3, 1e-1, log=True),
            "model.width": optuna.distributions.IntDistribution(8, 64)}
    sweep_dir.mkdir()
    told = study.create(record)
    trials = []
    for index in range(4):
        params = {"model.lr": 10 ** -(1 + index / 2), "model.width": 8 + 10 * index}
        told.add_trial(optuna.trial.create_trial(params=params, distributions=axes, value=1.0 / (index + 1)))
        run_dir = sweep_dir / f"trial_{index:03d}"
        run_dir.mkdir(parents=True)
        (run_dir / "config.yaml").write_text("trainer:\n  max_epochs: 1\n")
        (run_dir / "metrics.jsonl").write_text(json.dumps({"stage": "epoch", "epoch": 0, "step": 4, "time": 1.0,
                                                           "metrics": {"val/loss": 1.0 / (index + 1)}}) + "\n")
        trials.append({"index": index, "run_dir": str(run_dir), "values": params})
    (sweep_dir / "sweep.json").write_text(json.dumps({
        "sweep_dir": str(sweep_dir), "trials": trials, "axes": [{"key": k, "kind": "uniform"} for k in axes], "study": record}))
    code = ("import sys\nfrom trainer_cli.__main__ import main\nrc = main(['sweep-results', %r])\n"
            "print('imported:', sorted(m for m in ('sklearn', 'matplotlib') if m in sys.modules))\nsys.exit(rc)") % str(sweep_dir)

    def listing() -> tuple[str, str]:
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=300)
        assert done.returncode == 0, done.stderr[-3000:]
        out, imported = done.stdout.rsplit("imported:", 1)
        return out, imported.strip()

    first, imported = listing()
    assert "parameter importance:" in first and "sklearn" in imported and "matplotlib" in imported
    assert (sweep_dir / "sweep_importance.png").is_file() and (sweep_dir / figures.CACHE_FILE).is_file()
    again, imported = listing()
    assert again == first and imported == "[]", imported
    (sweep_dir / "sweep_history.png").unlink()
    assert listing()[0] == first and (sweep_dir / "sweep_history.png").is_file()
    told.add_trial(optuna.trial.create_trial(params={"model.lr": 0.05, "model.width": 60}, distributions=axes, value=0.01))
    _, imported = listing()
    assert "sklearn" in imported and "matplotlib" in imported
    assert json.loads((sweep_dir / "sweep_results.json").read_text())["importances"] == figures.importances(study.load(record))


def test_sweep_results_from_the_trials_index_equal_those_read_from_the_trials(tmp_path: Path) -> None:
    """Issue 48: a sweep listed again reads its trials' rows from the sweep's trials index (one file, each trial's
    folder and files stated); a trial that logged a better value since (its metrics.jsonl appended in place, its
    folder's time as before) is ranked as it is now, as when read from its files."""
    import os
    import time

    from trainer_cli.rundir import index as runs_index
    from trainer_cli.rundir import metrics, summary

    sweep_dir = tmp_path / "sweep_0"
    trials = []
    for index in range(3):
        run_dir = sweep_dir / f"trial_{index:03d}"
        run_dir.mkdir(parents=True)
        (run_dir / "config.yaml").write_text("trainer:\n  callbacks:\n  - class_path: lightning.pytorch.callbacks.ModelCheckpoint\n"
                                             "    init_args:\n      monitor: val/loss\n      mode: min\n")
        metrics.record(run_dir, metrics.EPOCH_STAGE, 0, 4, 1000.0, {"val/loss": 1.0 + index})
        trials.append({"index": index, "run_dir": str(run_dir), "values": {"model.lr": str(index)}})
    (sweep_dir / "sweep.json").write_text(json.dumps({"sweep_dir": str(sweep_dir), "trials": trials, "axes": [{"key": "model.lr"}]}))

    def age() -> None:  # older than the index's racy window: the folders' times are trusted
        past = time.time() - 60
        for folder in [sweep_dir, *(p for p in sweep_dir.rglob("*") if p.is_dir())]:
            os.utime(folder, (past, past))

    def fresh() -> tuple[dict[str, Any], tuple[list[str], list[list[str]]]]:
        for trial in sweep_dir.glob("trial_*"):
            (trial / summary.SUMMARY_FILE).unlink(missing_ok=True)
        (sweep_dir / results.TRIALS_INDEX).unlink(missing_ok=True)
        return _table(sweep_dir)

    age()
    first = _table(sweep_dir)
    age()
    assert _table(sweep_dir) == first
    index = runs_index.RunsIndex(sweep_dir, results.TRIALS_INDEX, extra=["val/loss", "min"])
    assert all((f := index.folder(str(p), p.name)) is not None and f.unchanged for p in sweep_dir.glob("trial_*"))
    assert _table(sweep_dir) == first == fresh()
    age()
    _table(sweep_dir)
    age()
    _table(sweep_dir)
    last = sweep_dir / "trial_002"
    before = os.stat(last).st_mtime_ns
    metrics.record(last, metrics.EPOCH_STAGE, 1, 8, 1001.0, {"val/loss": 0.5})
    os.utime(last, ns=(before, before))
    now = _table(sweep_dir)
    assert (now[0]["rows"][0]["trial"], now[0]["rows"][0]["score"]) == (2, 0.5) and now == fresh()


def test_sweep_results_listed_again_with_the_journal_unchanged_opens_no_study(tmp_path: Path) -> None:
    """Issue 48: a sweep listed again while its journal file is as it was (size, time, inode) takes its trials'
    study states and values from the sweep's cache: Optuna is not imported nor the journal replayed, and the table,
    CSV, JSON and figures are the same bytes; a trial asked, then told (the sweep's own tell), changes the journal
    and is listed as it is now, as is a database study (opened each time)."""
    import subprocess
    import sys

    from support import REPO

    from trainer_cli.sweeps import figures

    sweep_dir = tmp_path / "sweep_0"
    record = {"metric": "val/loss", "direction": "minimize", "name": "x/sweep_0", "sampler": "random", "pruner": "none",
              "seed": 0, "storage": str(sweep_dir / study.JOURNAL_FILE), "n_trials": 10}
    axes = {"model.lr": optuna.distributions.FloatDistribution(1e-3, 1e-1, log=True)}
    sweep_dir.mkdir()
    told = study.create(record)
    trials = []
    for index in range(4):  # the study holds trials 0-2; trial 3 is asked and told below
        params = {"model.lr": 10 ** -(1 + index / 2)}
        if index < 3:
            told.add_trial(optuna.trial.create_trial(params=params, distributions=axes, value=1.0 / (index + 1)))
        run_dir = sweep_dir / f"trial_{index:03d}"
        run_dir.mkdir(parents=True)
        (run_dir / "config.yaml").write_text("trainer:\n  max_epochs: 1\n")
        logged = {"stage": "epoch", "epoch": 0, "step": 4, "time": 1.0, "metrics": {"val/loss": 1.0 / (index + 1)}}
        (run_dir / "metrics.jsonl").write_text(json.dumps(logged) + "\n")
        trials.append({"index": index, "run_dir": str(run_dir), "values": params})
    axis = [{"key": "model.lr", "kind": "loguniform"}]
    made = {"sweep_dir": str(sweep_dir), "trials": trials, "axes": axis, "study": record}
    (sweep_dir / "sweep.json").write_text(json.dumps(made))
    code = ("import sys\nfrom trainer_cli.__main__ import main\nrc = main(['sweep-results', %r])\n"
            "print('imported:', sorted(m for m in ('optuna', 'sqlalchemy') if m in sys.modules))\nsys.exit(rc)")

    def listing(folder: Path = sweep_dir) -> tuple[str, str, dict[str, tuple[bytes, int]]]:
        command = [sys.executable, "-c", code % str(folder)]
        done = subprocess.run(command, capture_output=True, text=True, cwd=REPO, timeout=300)
        assert done.returncode == 0, done.stderr[-3000:]
        out, imported = done.stdout.rsplit("imported:", 1)
        written = sorted(folder.glob("sweep_*.*"))  # the CSV, the JSON and the figures
        files = {f.name: (f.read_bytes(), f.stat().st_mtime_ns) for f in written if f.name != "sweep.json"}
        return out, imported.strip(), files

    first, imported, files = listing()
    assert imported == "['optuna']" and "COMPLETE" in first and len(files) == 6, sorted(files)
    again, imported, same = listing()
    assert (again, imported, same) == (first, "[]", files)
    assert results.collect(sweep_dir)["rows"] == results.collect(sweep_dir)["rows"]  # in-process: equal rows too

    def study_cell(out: str) -> list[str]:
        [row] = [line.split() for line in out.splitlines() if line.split()[:1] == ["3"]]
        return row

    assert "-" in study_cell(first)
    loaded = study.load(record)
    asked = loaded.ask(fixed_distributions=axes)
    assert asked.number == 3
    running, imported, _ = listing()
    assert imported == "['optuna']" and "RUNNING" in study_cell(running)
    assert study.tell(loaded, asked, 0.125, 0) == "COMPLETE"
    now, imported, files = listing()
    assert imported == "['optuna']" and "COMPLETE" in study_cell(now)
    assert json.loads((sweep_dir / "sweep_results.json").read_text())["rows"][0]["value"] == 0.125
    again, imported, same = listing()
    assert (again, imported) == (now, "[]") and [v[0] for v in same.values()] == [v[0] for v in files.values()]
    cache = json.loads((sweep_dir / figures.CACHE_FILE).read_text())
    assert [n for n, *_ in cache[figures.STUDY_TRIALS]["value"]] == [0, 1, 2, 3]

    database = tmp_path / "db"  # a database study: opened at each listing, nothing kept of it
    shutil.copytree(sweep_dir, database)
    for name in (figures.CACHE_FILE, study.JOURNAL_FILE):
        (database / name).unlink()
    url = f"sqlite:///{database / 'study.db'}"
    kept = json.loads((database / "sweep.json").read_text())
    kept["trials"] = [{**t, "run_dir": t["run_dir"].replace(str(sweep_dir), str(database))} for t in kept["trials"]]
    kept |= {"sweep_dir": str(database), "study": record | {"storage": url}}
    (database / "sweep.json").write_text(json.dumps(kept))
    study.create(kept["study"]).add_trials(loaded.get_trials(deepcopy=False))
    for _ in range(2):
        out, imported, _ = listing(database)
        assert "'optuna'" in imported and "'sqlalchemy'" in imported and "COMPLETE" in study_cell(out)
    assert figures.STUDY_TRIALS not in json.loads((database / figures.CACHE_FILE).read_text())
