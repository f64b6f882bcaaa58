"""A run's history (history.jsonl, config.yaml as the run is now) and the schedule of an extended run.

Real tiny digits runs (OneCycleLR, 3 steps per epoch), in-process as ``train`` runs them; the
learning rate each step used is read back from the CSV logger's metrics.csv (LearningRateMonitor).
"""

from __future__ import annotations

import csv
import json
import os
import shutil
import signal
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import pytest
import torch
import yaml
from support import CONFIGS, DIGITS

from trainer_cli.config.request import Request
from trainer_cli.optim.schedule_resume import PLANNED_KEY
from trainer_cli.rundir import history
from trainer_cli.runtime.verbs import parse_config, run_subcommand

STEPS_PER_EPOCH = 3
TINY = [
    "--trainer.limit_train_batches", str(STEPS_PER_EPOCH), "--trainer.limit_val_batches", "1",
    "--trainer.enable_progress_bar", "false", "--trainer.enable_model_summary", "false", "--trainer.log_every_n_steps", "1",
]
MAX_LR = 0.01  # configs/experiment/digits.yaml: the optimizer's lr, OneCycle's max_lr


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A finished 2-epoch OneCycle run (6 optimizer steps) with metrics.csv."""
    root = tmp_path_factory.mktemp("runs")
    run_subcommand("fit", Request.of(["--config", DIGITS, "--config", str(CONFIGS / "logger" / "csv.yaml"),
                           "--trainer.default_root_dir", str(root), "--trainer.max_epochs", "2", *TINY], "fit"))
    return root / "digits" / "version_0"


def extend(finished_run: Path, tmp_path: Path, *args: str) -> Path:
    run = tmp_path / "run"
    shutil.copytree(finished_run, run)
    run_subcommand("fit", Request.of(["--run_dir", str(run), "--ckpt_path", "last", "--trainer.max_epochs", "3", *TINY, *args], "fit"))
    return run


def lr_by_step(run: Path) -> dict[int, float]:
    with open(run / "metrics.csv") as f:
        return {int(r["step"]): float(r["lr-AdamW"]) for r in csv.DictReader(f) if r.get("lr-AdamW")}


def one_cycle(total: int) -> list[float]:
    """torch's OneCycleLR rate at each of ``total`` steps, as the config builds it."""
    optimizer = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=MAX_LR)
    scheduler = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=MAX_LR, total_steps=total)
    rates = [scheduler.get_last_lr()[0]]
    for _ in range(total - 1):
        optimizer.step()
        scheduler.step()
        rates.append(scheduler.get_last_lr()[0])
    return rates


def test_extension_rewrites_config_keeps_the_earlier_and_records_each_start(finished_run: Path, tmp_path: Path) -> None:
    run = extend(finished_run, tmp_path)
    records = history.read(run)
    assert [r["kind"] for r in records] == ["new", "extension"]
    assert records[1]["global_step"] == 2 * STEPS_PER_EPOCH and records[1]["checkpoint"] == str(run / "checkpoints" / "last.ckpt")
    assert records[1]["changes"] == ["trainer.max_epochs: 2 -> 3"]
    assert records[1]["options"] == {"resume_schedule": "restretch", "resume_force": False}
    assert records[1]["why"] == "--ckpt_path last: the newest complete checkpoint by global step" and "why" not in records[0]
    now, before = yaml.safe_load((run / "config.yaml").read_text()), yaml.safe_load((run / "config.prev-1.yaml").read_text())
    assert (now["trainer"]["max_epochs"], before["trainer"]["max_epochs"]) == (3, 2)
    assert now["ckpt_path"] is None  # how this start resumed is history, not the run's config
    _, config = parse_config("fit", Request.of(["--config", str(run / "config.yaml")]))  # re-runs as the run now is
    assert config.trainer.max_epochs == 3 and config.ckpt_path is None


@pytest.mark.parametrize("mode", ["restretch", "keep", "restart"])
def test_extended_one_cycle_prints_its_schedule_and_follows_resume_schedule(
    finished_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], mode: str
) -> None:
    done, total = 2 * STEPS_PER_EPOCH, 3 * STEPS_PER_EPOCH
    run = extend(finished_run, tmp_path, "--resume_schedule", mode)
    expected = {  # the rate of each resumed step (6, 7, 8)
        "restretch": one_cycle(total)[done:],  # the 9-step cycle from step 6
        "keep": [one_cycle(done)[-1]] * (total - done),  # the old cycle's final rate, held
        "restart": one_cycle(total - done),  # a new 3-step cycle
    }[mode]
    rates = lr_by_step(run)
    assert [rates[s] for s in range(done, total)] == pytest.approx(expected, rel=1e-6)
    assert [rates[s] for s in range(done)] == pytest.approx(one_cycle(done), rel=1e-6)  # the first segment, as it ran
    # what a requeue of this run finds: the schedule it is on, and the total its config planned (so it goes on with it)
    checkpoint = torch.load(run / "checkpoints" / "last.ckpt", weights_only=True)
    on = {"restretch": total, "keep": done, "restart": total - done}[mode]
    assert (checkpoint["lr_schedulers"][0]["total_steps"], checkpoint[PLANNED_KEY]) == (on, [total])
    lines = [line for line in capsys.readouterr().out.splitlines() if "schedule was" in line]
    assert len(lines) == 1, lines
    assert f"the OneCycleLR schedule was {done} total steps, this run's is {total}" in lines[0]
    assert f"lr {expected[0]:.3g}" in lines[0] and f"--resume_schedule {mode}" in lines[0]


class StopAtStep(pl.Callback):
    """SIGTERM to this process when the global step reaches ``step`` (as a preemption would stop it)."""

    def __init__(self, step: int = 0) -> None:
        self.step = step

    def on_train_batch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any, batch: Any, batch_idx: int) -> None:
        if trainer.global_step == self.step:
            os.kill(os.getpid(), signal.SIGTERM)


def test_a_kept_schedule_stays_kept_when_the_run_is_resumed_again(finished_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """An extension with --resume_schedule keep, stopped mid-epoch (SIGTERM), then resumed as a
    requeue resumes (the run's config, no flags): the kept schedule goes on, held at its final rate."""
    run = tmp_path / "run"
    shutil.copytree(finished_run, run)
    stop = ["--trainer.callbacks+", f"{__name__}.StopAtStep", "--trainer.callbacks+.init_args.step", "7"]
    with pytest.raises(SystemExit) as ended:  # a callback added on resume: forced
        run_subcommand("fit", Request.of(["--run_dir", str(run), "--ckpt_path", "last", "--trainer.max_epochs", "4", *TINY, *stop,
                               "--resume_schedule", "keep", "--resume_force", "true"], "fit"))
    assert ended.value.code == 143
    capsys.readouterr()
    run_subcommand("fit", Request.of(["--run_dir", str(run), "--ckpt_path", "last"], "fit"))
    assert "schedule was" not in capsys.readouterr().out  # the schedule its config planned: nothing changed
    rates = lr_by_step(run)
    assert [rates[s] for s in range(6, 12)] == pytest.approx([one_cycle(6)[-1]] * 6, rel=1e-6)
    assert [r["kind"] for r in history.read(run)] == ["new", "extension", "resume"]


def test_start_kinds_under_slurm(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SLURM_RESTART_COUNT", raising=False)
    monkeypatch.setenv("SLURM_JOB_ID", "12")
    earlier = [{"kind": "new", "slurm": {"job_id": "11", "restart_count": 0}}]
    assert history.start_kind("fit", True, [], earlier) == "resubmission"
    monkeypatch.setenv("SLURM_RESTART_COUNT", "1")
    assert history.start_kind("fit", True, [], earlier) == "requeue"
    assert history.start_kind("test", True, [], earlier) == "test"
    assert history.start_kind("fit", True, [], [{"kind": "new", "job": {"scheduler": "slurm", "job_id": "12"}}]) == "requeue"
    monkeypatch.setenv("SLURM_RESTART_COUNT", "0")  # the same job's first start after another scheduler's job 12
    assert history.start_kind("fit", True, [], [{"kind": "new", "job": {"scheduler": "ray", "job_id": "11"}}]) == "resume"
    assert history.start_kind("fit", True, [], [{"kind": "new", "job": {"scheduler": "slurm", "job_id": "11"}}]) == "resubmission"
    monkeypatch.setenv("SLURM_RESTART_COUNT", "1")
    record = history.append(tmp_path, "fit", None, [])
    assert record["kind"] == "new" and record["job"] == {"scheduler": "slurm", "job_id": "12", "restart_count": 1}
    assert json.loads((tmp_path / history.HISTORY_FILE).read_text()) == record
