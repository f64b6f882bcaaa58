"""A user's script whose logger's folder is not versioned (issue 35, defect 2): the recogniser of
``tests/foreign_hw`` logs to W&B with the default ``save_dir="."``. Its runs go where Lightning's own
``ModelCheckpoint`` saves, ``hwr/<W&B run id>/``, one folder a run, never the project's root: a second fit
gets its own, ``--run_dir <first> --ckpt_path last`` resumes the first run's own checkpoint into it, under
the same W&B run and display name (``--ckpt_path last`` alone: the newest run's); a run directory that existed
before the run gets its ``git.txt``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import yaml
from hw_support import DEFAULT, hw_project, run_main
from test_logger_runs import wandb_records

SHORT = ("--trainer.limit_train_batches", "2", "--trainer.limit_val_batches", "1")  # 2 steps an epoch
RECORD = ("run.json", "config.yaml", "launcher.yaml", "checkpoints")  # what a run directory holds


def _ok(proc) -> str:
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    return proc.stdout


def _runs(project: Path) -> set[Path]:
    return {p.parent for p in project.rglob("run.json")}


def _display_names(project: Path, run_id: str) -> list[str]:
    """The display name of each start (offline W&B run folder) of the W&B run ``run_id``."""
    records = [r for f in sorted(project.glob(f"wandb/offline-run-*-{run_id}/run-*.wandb")) for r in wandb_records(f)]
    return [r.run.display_name for r in records if r.WhichOneof("record_type") == "run"]


def test_script_runs_with_wandb_default_save_dir_get_one_folder_each(tmp_path: Path) -> None:
    pytest.importorskip("wandb", reason="wandb is not installed (pip install 'trainer-cli[wandb]')")
    project = hw_project(tmp_path)
    first = _ok(run_main(project, "fit", *DEFAULT, *SHORT, "--trainer.max_epochs", "1",
                         "--trainer.logger.init_args.name", "hw-first"))
    (run,) = _runs(project)
    run_id = json.loads((run / "run.json").read_text())["run_id"]
    assert run == project / "hwr" / run_id  # stock's checkpoint folder is hwr/<run id>/checkpoints
    assert f"Run directory: {run}" in first
    assert all((run / name).exists() for name in (*RECORD, "git.txt")) and (run / "checkpoints" / "last.ckpt").is_file()
    assert not any((project / name).exists() for name in RECORD)  # nothing in the project's root
    assert {p.parent for p in project.rglob("*.ckpt")} == {run / "checkpoints"}  # the script's own callback's too

    _ok(run_main(project, "fit", *DEFAULT, *SHORT, "--trainer.max_epochs", "1"))  # a second new run: its own folder
    (second,) = _runs(project) - {run}
    assert second.parent == run.parent and (second / "config.yaml").is_file()
    assert (second / "checkpoints" / "last.ckpt").is_file()

    resumed = _ok(run_main(project, "fit", "--run_dir", str(run), "--ckpt_path", "last", *SHORT,
                           "--trainer.max_epochs", "2"))
    assert f"Resuming {run} from {run / 'checkpoints' / 'last.ckpt'} (step 2" in resumed
    assert _runs(project) == {run, second}
    assert torch.load(run / "checkpoints" / "last.ckpt", weights_only=False)["global_step"] == 4
    assert {p.parent for p in project.rglob("*.ckpt")} == {run / "checkpoints", second / "checkpoints"}
    assert not any((project / name).exists() for name in RECORD)
    assert _display_names(project, run_id) == ["hw-first", "hw-first"]  # one W&B run, its name kept on resume

    newest = _ok(run_main(project, "fit", *DEFAULT, *SHORT, "--ckpt_path", "last", "--trainer.max_epochs", "2"))
    here = second.relative_to(project)  # the newest run
    assert f"Resuming {here} from {here / 'checkpoints' / 'last.ckpt'} (step 2" in newest, newest
    assert _runs(project) == {run, second} and not any((project / name).exists() for name in RECORD)


def test_script_run_in_a_folder_that_existed_gets_its_record_and_git_txt(tmp_path: Path) -> None:
    """``--run_dir`` naming an existing empty folder: the run's config.yaml and git.txt go there (the
    W&B logger's log_dir is the project's root), and its checkpoints."""
    pytest.importorskip("wandb", reason="wandb is not installed (pip install 'trainer-cli[wandb]')")
    project = hw_project(tmp_path)
    run = project / "mine"
    run.mkdir()
    _ok(run_main(project, "fit", *DEFAULT, *SHORT, "--trainer.max_epochs", "1", "--run_dir", "mine"))
    assert all((run / name).exists() for name in (*RECORD, "git.txt"))
    assert "cwd: " in (run / "git.txt").read_text()  # the project's commit
    assert {p.parent for p in project.rglob("*.ckpt")} == {run / "checkpoints"}
    assert not any((project / name).exists() for name in RECORD)


def test_script_runs_without_a_logger_get_a_versioned_folder_each(tmp_path: Path) -> None:
    """No logger, no default_root_dir: Lightning's folder would be the project's root, for every run. The
    run's files go to a new folder each; the script's SaveConfigCallback saves stock's config.yaml where
    stock saves it (the root: Lightning's own LightningCLI tests read it there), and refuses to overwrite
    it as stock does (the user removes it, as with stock)."""
    project = hw_project(tmp_path)
    args = ("fit", *DEFAULT, *SHORT, "--trainer.max_epochs", "1", "--trainer.logger", "false")
    _ok(run_main(project, *args))
    stock = yaml.safe_load((project / "config.yaml").read_text())
    assert "run_dir" not in stock and "name" not in stock and stock["trainer"]["logger"] is False
    refused = run_main(project, *args)
    assert refused.returncode != 0 and "Aborting to avoid overwriting" in refused.stdout + refused.stderr
    (project / "config.yaml").unlink()
    _ok(run_main(project, *args))
    runs = [project / "lightning_logs" / f"version_{i}" for i in range(2)]
    assert _runs(project) == set(runs) and all((run / "config.yaml").is_file() for run in runs)
    assert {p.parent for p in project.rglob("*.ckpt")} == {run / "checkpoints" for run in runs}
    assert not any((project / name).exists() for name in RECORD if name != "config.yaml")
