"""One run identity in every logger (``<run>/run.json``): W&B (offline) and MLflow (its default
store, ``<root>/mlflow.db``, opened afterwards as a user would: no MLflow variable set) through the
shipped ``configs/logger/`` files. Two experiments are two logger runs; a run
killed mid-training and resumed with ``--ckpt_path last`` is one logger run whose steps continue;
checkpoints stay in ``<run>/checkpoints/`` whatever the logger.

Skipped when the package is missing (both are in the ``test`` extra: ``make test`` installs them).
"""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

import pytest
from resume_support import global_step, kill_when, start_train
from support import DIGITS, quiet_args, run_train

SHORT = ["--trainer.limit_train_batches", "5", "--trainer.limit_val_batches", "2"]  # 5 steps per epoch
EPOCHS = 4


def _fit(root: Path, logger: str, *extra: str) -> list[str]:
    return ["fit", "--config", DIGITS, "--config", f"logger/{logger}", *quiet_args(root, EPOCHS), *SHORT, *extra]


def _killed_then_resumed(root: Path, logger: str, other: bool = True) -> Path:
    """``digits/version_0``: killed (SIGKILL) after its first epoch's checkpoint, then resumed with
    ``--ckpt_path last`` to the end; plus (``other``) ``other/version_0``, a second experiment's first run."""
    run = root / "digits" / "version_0"
    # Many epochs, so the run cannot end before the kill however loaded the machine (it did once, between two looks).
    proc = start_train(*_fit(root, logger, "--trainer.max_epochs", "1000"))
    kill_when(proc, lambda: (global_step(run / "checkpoints" / "last.ckpt") or 0) >= 5)
    killed_at = global_step(run / "checkpoints" / "last.ckpt") or 0
    assert 5 <= killed_at < EPOCHS * 5, killed_at
    resumed = run_train(*_fit(root, logger, "--ckpt_path", "last"))
    assert resumed.returncode == 0, resumed.stdout[-2000:] + resumed.stderr[-3000:]
    assert f"Resuming {run}" in resumed.stdout
    runs = {run}
    if other:
        done = run_train(*_fit(root, logger, "--name", "other", "--trainer.max_epochs", "1"))
        assert done.returncode == 0, done.stderr[-3000:]
        runs.add(root / "other" / "version_0")
    for run_dir in runs:  # whatever the logger: the run's own checkpoints/
        assert (run_dir / "checkpoints" / "last.ckpt").is_file()
    assert {p.parent.parent for p in root.rglob("*.ckpt")} == runs
    assert global_step(run / "checkpoints" / "last.ckpt") == EPOCHS * 5
    return run


def _run_json(run: Path) -> dict:
    return json.loads((run / "run.json").read_text())


# -- W&B, offline ----------------------------------------------------------------------------------------
def wandb_records(path: Path) -> list[object]:
    """The records of an offline W&B run file (``run-<id>.wandb``): LevelDB-log blocks of
    ``wandb_internal_pb2.Record`` protobufs after a 7-byte header. A torn tail (killed) is dropped."""
    from wandb.proto import wandb_internal_pb2

    data, block, pos = path.read_bytes(), 32768, 7
    records, pending = [], b""
    while pos + 7 <= len(data):
        if block - pos % block < 7:  # a block's trailer: padding
            pos += block - pos % block
            continue
        _crc, length, kind = struct.unpack("<IHB", data[pos:pos + 7])
        if kind == 0 or pos + 7 + length > len(data):
            break
        pending += data[pos + 7:pos + 7 + length]
        pos += 7 + length
        if kind in (1, 4):  # FULL or LAST piece of a record
            record = wandb_internal_pb2.Record()
            record.ParseFromString(pending)
            records.append(record)
            pending = b""
    return records


def wandb_rows(folder: Path) -> list[dict[str, int]]:
    """``{"_step": W&B's step, "trainer/global_step": ...}`` of each history row of one offline W&B run folder."""
    rows = []
    for record in (r for path in folder.glob("run-*.wandb") for r in wandb_records(path)):
        if record.WhichOneof("record_type") == "history":
            items = {(i.key or "/".join(i.nested_key)): json.loads(i.value_json) for i in record.history.item}
            rows.append({k: int(items[k]) for k in ("_step", "trainer/global_step") if k in items})
    return rows


def wandb_runs(run: Path) -> list[tuple[str, list[int]]]:
    """``(W&B run id, logged trainer/global_step values)`` of each offline W&B run directory of ``run``
    (``wandb/offline-run-<time>-<id>/``, one per process; the id from its name and, once written,
    its run record)."""
    found = []
    for folder in sorted(run.glob("wandb/offline-run-*")):
        run_id = folder.name.rsplit("-", 1)[1]
        records = [r for path in folder.glob("run-*.wandb") for r in wandb_records(path)]
        assert {r.run.run_id for r in records if r.WhichOneof("record_type") == "run"} <= {run_id}, folder
        steps = [int(json.loads(i.value_json)) for r in records if r.WhichOneof("record_type") == "history"
                 for i in r.history.item if (i.key or "/".join(i.nested_key)) == "trainer/global_step"]
        found.append((run_id, steps))
    return found


# long (make test's 12 minutes): one W&B run from a start and its resume, its steps continued and W&B's step the
# global step, is test_wandb_script_run_is_one_run_from_its_first_start; each run its own W&B run,
# test_wandb_cv_folds_in_one_process_are_one_run_each
@pytest.mark.long
def test_wandb_one_run_per_run_dir_continued_on_resume(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("wandb", reason="wandb is not installed (pip install 'trainer-cli[wandb]')")
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    run = _killed_then_resumed(tmp_path, "wandb")
    run_id = _run_json(run)["run_id"]
    runs = wandb_runs(run)  # the killed process's (what W&B had flushed: maybe nothing), the resume's
    assert len(runs) == 2 and {r[0] for r in runs} == {run_id}  # one W&B run
    resumed = runs[-1][1]
    assert min(resumed) >= 5 and max(resumed) == EPOCHS * 5 - 1  # its steps continue from the checkpoint
    # W&B's own step is the global step, in both parts: it goes on from the checkpoint, never from 0
    rows = [wandb_rows(folder) for folder in sorted(run.glob("wandb/offline-run-*"))]
    assert all(r["_step"] == r["trainer/global_step"] for part in rows for r in part if "trainer/global_step" in r), rows
    assert min(r["_step"] for r in rows[-1]) >= 5
    other = tmp_path / "other" / "version_0"
    assert [r[0] for r in wandb_runs(other)] == [_run_json(other)["run_id"]] and run_id != _run_json(other)["run_id"]


def test_wandb_cv_folds_in_one_process_are_one_run_each(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`train cv` trains its folds in one process: each fold is its own W&B run (W&B keeps a current
    run per process, which the next fold's logger would otherwise join)."""
    pytest.importorskip("wandb", reason="wandb is not installed (pip install 'trainer-cli[wandb]')")
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    proc = run_train("cv", "--folds", "2", "--config", DIGITS, "--config", "logger/wandb", *quiet_args(tmp_path), *SHORT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    folds = sorted((tmp_path / "digits" / "cv").glob("version_*/fold_*"))
    assert len(folds) == 2
    for fold in folds:
        ((run_id, steps),) = wandb_runs(fold)
        assert run_id == _run_json(fold)["run_id"] and steps  # its own run, with its own steps
    assert _run_json(folds[0])["run_id"] != _run_json(folds[1])["run_id"]


# -- MLflow, the default store (SQLite) ----------------------------------------------------------------------
def _mlflow_killed_then_resumed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, other: bool
) -> tuple[Path, str, Any]:
    """:func:`_killed_then_resumed` with the MLflow logger: the run, its MLflow run id and the store's client."""
    pytest.importorskip("mlflow", reason="mlflow is not installed (pip install 'trainer-cli[mlflow]')")
    pytest.importorskip("sqlalchemy", reason="sqlalchemy is not installed (pip install 'trainer-cli[mlflow]')")
    from mlflow.tracking import MlflowClient

    monkeypatch.delenv("MLFLOW_ALLOW_FILE_STORE", raising=False)  # a user's shell: the launcher's processes and this client alike
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    run = _killed_then_resumed(tmp_path, "mlflow", other=other)
    store = f"sqlite:///{tmp_path / 'mlflow.db'}"  # the default store: <default_root_dir>/mlflow.db
    assert not (tmp_path / "mlruns").exists() and not (run.parent.parent / "mlruns").exists()
    (run_id,) = _run_json(run)["mlflow"].values()
    assert _run_json(run)["mlflow"] == {store: run_id}
    client = MlflowClient(store)
    assert client.get_run(run_id).info.run_name == "digits/version_0"
    steps = sorted({m.step for m in client.get_metric_history(run_id, "val/acc")})
    assert steps == [5 * e + 4 for e in range(EPOCHS)]  # one series, continued after the kill
    return run, run_id, client


def test_mlflow_run_continued_after_a_kill(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The short sibling of the long test below (no second experiment's run): the default store
    <root>/mlflow.db opens with no MLFLOW_ALLOW_FILE_STORE, and a run killed and resumed is one MLflow
    run, alone in the store, whose series continues."""
    _, run_id, client = _mlflow_killed_then_resumed(tmp_path, monkeypatch, other=False)
    experiment = client.get_experiment_by_name("trainer-cli")
    assert experiment.artifact_location == str(tmp_path / "mlartifacts")  # under the root, not the working directory
    assert {r.info.run_id for r in client.search_runs([experiment.experiment_id])} == {run_id}


# long (make test's 12 minutes): its kill, resume and store are test_mlflow_run_continued_after_a_kill's; this one adds
# a second experiment's run, a second MLflow run in the same store
@pytest.mark.long
def test_mlflow_one_run_per_run_dir_continued_on_resume(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The default store is <root>/mlflow.db, which MlflowClient (and `mlflow ui`) open with no
    MLFLOW_ALLOW_FILE_STORE; one MLflow run per run directory, its series continued after a kill."""
    run, run_id, client = _mlflow_killed_then_resumed(tmp_path, monkeypatch, other=True)
    (other_id,) = _run_json(tmp_path / "other" / "version_0")["mlflow"].values()
    experiment = client.get_experiment_by_name("trainer-cli")
    assert experiment.artifact_location == str(tmp_path / "mlartifacts")  # under the root, not the working directory
    assert {r.info.run_id for r in client.search_runs([experiment.experiment_id])} == {run_id, other_id}


def test_mlflow_sqlite_store_first_opened_by_several_ranks_at_once(tmp_path: Path) -> None:
    """The ranks of a DDP run each open the new store together (each builds an MLFlowLogger): under
    the lock both succeed (without it, seen here in 3 of 3 tries, 1 or 2 of 2 processes failed with
    `duplicate column name: step`: each ran MLflow's table migrations at once)."""
    pytest.importorskip("mlflow", reason="mlflow is not installed (pip install 'trainer-cli[mlflow]')")
    pytest.importorskip("sqlalchemy", reason="sqlalchemy is not installed (pip install 'trainer-cli[mlflow]')")
    import subprocess
    import sys

    uri = f"sqlite:///{tmp_path / 'runs' / 'mlflow.db'}"
    ready = tmp_path / "ready"  # a barrier: each process has imported MLflow, then all open the store at once
    ready.mkdir()
    script = ("import os, sys, time\nfrom mlflow.tracking import MlflowClient\nfrom trainer_cli.rundir.identity import open_sqlite_store\n"
              "open(os.path.join(sys.argv[2], str(os.getpid())), 'w').close()\n"
              "while len(os.listdir(sys.argv[2])) < 2:\n    time.sleep(0.005)\n"
              "open_sqlite_store(sys.argv[1])\nprint(len(MlflowClient(sys.argv[1]).search_experiments()))\n")
    procs = [subprocess.Popen([sys.executable, "-c", script, uri, str(ready)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(2)]
    results = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [err[-1500:] for _, err in results]
    assert [out.strip() for out, _ in results] == ["1", "1"]  # one store, its default experiment


def test_mlflow_run_begun_in_the_former_file_store_continues_there(tmp_path: Path) -> None:
    """A run whose run.json records an MLflow run in <root>/mlruns (the default before mlflow.db)
    keeps logging there on resume; every other run gets the SQLite store."""
    from trainer_cli.rundir.identity import default_mlflow_store

    assert default_mlflow_store(tmp_path, {"run_id": "x"}) == f"sqlite:///{tmp_path}/mlflow.db"
    former = f"file:{tmp_path}/mlruns"
    assert default_mlflow_store(tmp_path, {"run_id": "x", "mlflow": {former: "0123"}}) == former
    assert default_mlflow_store(tmp_path, {"run_id": "x", "mlflow": {"http://tracking:5000": "0123"}}).startswith("sqlite:")


def test_mlflow_sql_store_without_sqlalchemy_is_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    """mlflow-skinny alone (no SQLAlchemy): one line naming what is missing and the fix, exit 2, no
    traceback, before anything trains."""
    pytest.importorskip("mlflow", reason="mlflow is not installed (pip install 'trainer-cli[mlflow]')")
    import sys

    from trainer_cli.__main__ import main

    monkeypatch.setitem(sys.modules, "sqlalchemy", None)  # as if not installed: importlib finds no spec
    monkeypatch.chdir(tmp_path)
    assert main(_fit(tmp_path, "mlflow")) == 2
    err = capsys.readouterr().err
    assert f"error: the MLflow store sqlite:///{tmp_path}/mlflow.db needs sqlalchemy, which mlflow-skinny does not bring: " \
           "pip install 'trainer-cli[mlflow]'" in err, err
    assert "Traceback" not in err and not list(tmp_path.rglob("*.ckpt"))


# -- CSV -----------------------------------------------------------------------------------------------------
def test_csv_metrics_file_continued_on_resume(tmp_path: Path) -> None:
    """Lightning's CSVLogger deletes the metrics.csv it finds when it starts: a resumed run keeps it and
    appends, so the file holds every epoch, once, in order, and no warning says files will be deleted."""
    import csv

    run = _killed_then_resumed(tmp_path, "csv")
    with (run / "metrics.csv").open(newline="") as f:
        rows = [r for r in csv.DictReader(f) if r.get("val/acc")]
    # the epochs before the kill (as far as the killed process wrote them), then the resume's: each once
    steps = [int(r["step"]) for r in rows]
    assert steps == sorted(set(steps)) and steps[-1] == 5 * EPOCHS - 1 and steps[0] == 4
    resumed = run_train(*_fit(tmp_path, "csv", "--ckpt_path", "last", "--trainer.max_epochs", str(EPOCHS + 1)))
    assert resumed.returncode == 0 and "will be deleted" not in resumed.stderr, resumed.stderr[-3000:]
    with (run / "metrics.csv").open(newline="") as f:
        after = [int(r["step"]) for r in csv.DictReader(f) if r.get("val/acc")]
    assert after == [*steps, 5 * EPOCHS + 4]


def test_wandb_script_run_is_one_run_from_its_first_start(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A user's script with TrainerCLI (``python main.py fit``, tests/foreign): the run's identity
    (``run.json``) exists from its first start, so the start and its resume are one W&B run (it was
    written at the first resume: two W&B runs)."""
    pytest.importorskip("wandb", reason="wandb is not installed (pip install 'trainer-cli[wandb]')")
    import forkserver
    from foreign_support import FOREIGN, foreign_env

    env = foreign_env() | {"WANDB_MODE": "offline", "WANDB_SILENT": "true"}
    loggers = tmp_path / "loggers.yaml"  # the user's own loggers: CSV (the run directory) and W&B
    loggers.write_text(
        "trainer:\n  logger:\n"
        "    - class_path: lightning.pytorch.loggers.CSVLogger\n      init_args: {save_dir: logs, name: blobs}\n"
        "    - class_path: lightning.pytorch.loggers.WandbLogger\n      init_args: {project: blobs}\n"
    )

    def script(*args: str) -> None:
        done = forkserver.run_python([str(FOREIGN / "main.py"), "fit", "--config", str(loggers), *args], tmp_path, env, 600)
        assert done.returncode == 0, done.stderr[-3000:]

    script("--trainer.max_epochs", "1")
    run = tmp_path / "logs" / "blobs" / "version_0"
    identity = _run_json(run)  # from the first start
    assert identity["name"] == "blobs"  # the display name the script gives its W&B logger, kept on resume
    first = {folder.name.rsplit("-", 1)[1] for folder in tmp_path.rglob("offline-run-*")}
    assert first == {identity["run_id"]}
    script("--ckpt_path", "last", "--trainer.max_epochs", "2")
    assert _run_json(run) == identity
    folders = sorted(tmp_path.rglob("offline-run-*"))
    assert len(folders) == 2 and {f.name.rsplit("-", 1)[1] for f in folders} == {identity["run_id"]}  # one W&B run
    steps = [s for f in folders for _, part in wandb_runs(f.parent.parent) if part for s in part]
    assert steps and max(steps) >= 8  # the resume logged on from the first epoch's 8 steps
    # W&B's own step is the global step, in both parts: it goes on from the checkpoint, never from 0
    rows = [wandb_rows(folder) for folder in folders]
    logged = [r for part in rows for r in part if "trainer/global_step" in r]
    assert all(r["_step"] == r["trainer/global_step"] for r in logged), rows
    assert rows[-1] and min(r["_step"] for r in rows[-1]) >= 8, rows
