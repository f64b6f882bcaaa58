"""Layered --config files, dotted overrides, short names, interpolation and list append."""

from __future__ import annotations

from pathlib import Path

import pytest
from support import CONFIGS, DIGITS, quiet_args, run_train

from trainer_cli.config.request import Request
from trainer_cli.runtime.verbs import parse_config


def fit_config(*args: str):  # noqa: ANN201 - a jsonargparse Namespace
    return parse_config("fit", Request.of(list(args)))[1]


def test_later_config_files_override_earlier_ones() -> None:
    cfg = fit_config("--config", DIGITS, "--config", str(CONFIGS / "optimizer" / "sgd.yaml"))
    assert cfg.optimizer.class_path == "torch.optim.SGD"
    assert cfg.optimizer.init_args.momentum == 0.9


def test_flags_override_configs_and_interpolation_sees_them() -> None:
    cfg = fit_config("--config", DIGITS)
    assert cfg.optimizer.init_args.lr == 0.01
    assert cfg.lr_scheduler.init_args.max_lr == 0.01  # ${optimizer.init_args.lr} in scheduler/onecycle.yaml
    cfg = fit_config("--config", DIGITS, "--optimizer.lr", "0.5", "--trainer.max_epochs", "3")
    assert cfg.optimizer.init_args.lr == 0.5
    assert cfg.lr_scheduler.init_args.max_lr == 0.5
    assert cfg.trainer.max_epochs == 3


def test_interpolation_across_layered_files_sees_overrides() -> None:
    cosine = str(CONFIGS / "scheduler" / "cosine_epochs.yaml")
    cfg = fit_config("--config", DIGITS, "--config", cosine, "--trainer.max_epochs", "7")
    assert cfg.lr_scheduler.class_path == "torch.optim.lr_scheduler.CosineAnnealingLR"
    assert cfg.lr_scheduler.init_args.T_max == 7


def test_short_names_for_optimizer_and_scheduler() -> None:
    cfg = fit_config("--config", DIGITS, "--optimizer", "Adam", "--optimizer.lr", "3e-4",
                     "--lr_scheduler", "LinearWarmupCosineLR", "--lr_scheduler.warmup_pct", "0.1")
    assert cfg.optimizer.class_path == "torch.optim.Adam"
    assert cfg.optimizer.init_args.lr == pytest.approx(3e-4)
    assert cfg.lr_scheduler.class_path == "trainer_cli.optim.LinearWarmupCosineLR"
    assert cfg.lr_scheduler.init_args.total_steps is None  # filled from the trainer at run time


def test_group_file_layers_onto_any_run() -> None:
    cfg = fit_config("--config", DIGITS, "--config", "configs/precision/bf16-mixed.yaml")
    assert cfg.trainer.precision == "bf16-mixed"
    cfg = fit_config("--config", "experiment/digits", "--config", "precision/64-true")  # short forms
    assert cfg.trainer.precision == "64-true"


def test_list_append_adds_a_callback() -> None:
    cfg = fit_config("--config", DIGITS, "--trainer.callbacks+=EarlyStopping", "--trainer.callbacks.monitor=val/loss")
    names = [c.class_path.rpartition(".")[2] for c in cfg.trainer.callbacks]
    assert names == ["ModelCheckpoint", "LastCheckpoint", "LearningRateMonitor", "ModelSummary", "EarlyStopping"]
    assert cfg.trainer.callbacks[-1].init_args.monitor == "val/loss"


def test_print_config_prints_the_resolved_config() -> None:
    proc = run_train("fit", "--config", DIGITS, "--optimizer.lr", "0.02", "--print_config")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "max_lr: 0.02" in proc.stdout
    assert "${" not in proc.stdout


def test_a_users_own_lightning_module_plugs_in_by_class_path(tmp_path: Path) -> None:
    proc = run_train(
        "fit", "--model", "lightning.pytorch.demos.boring_classes.DemoModel",
        "--data", "lightning.pytorch.demos.boring_classes.BoringDataModule",
        "--optimizer", "SGD", "--optimizer.lr", "0.1", "--name", "boring",
        "--trainer.limit_train_batches", "4", "--trainer.limit_val_batches", "2",
        *quiet_args(tmp_path / "runs"),
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert list((tmp_path / "runs" / "boring" / "version_0" / "checkpoints").glob("*.ckpt"))
