"""Regression tests for shipped presets that did not work together (issue 10, "combinations"):
a backbone switch on the command line, EMA on a short run, an experiment extended with another
scheduler. (MixUp/CutMix and 64-true with the model summary on, and the refused pairs, are in
``tests/test_combinations.py``.)"""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
import yaml
from practice_support import cfg, metrics
from support import CONFIGS, DIGITS

from trainer_cli.__main__ import main
from trainer_cli.callbacks.ema import decay_after, warmup_ema_update
from trainer_cli.config.after_parse import check_backbone_kwargs
from trainer_cli.config.request import Request
from trainer_cli.runtime.verbs import parse_config

TINY = ["--trainer.limit_train_batches", "2", "--trainer.limit_val_batches", "1", "--trainer.max_epochs", "1",
        "--trainer.enable_progress_bar", "false"]


def only_run_dir(root: Path) -> Path:
    runs = list(root.glob("*/version_*"))
    assert len(runs) == 1, runs
    return runs[0]


# -- 1. switching the backbone ------------------------------------------------------------------------
def test_backbone_switch_drops_the_configs_backbone_kwargs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from trainer_cli.models import ImageClassifier
    from trainer_cli.models.backbones import MLP

    code = main(["fit", "--config", DIGITS, "--model.backbone", "mlp", "--trainer.default_root_dir", str(tmp_path), *TINY])
    out = capsys.readouterr()
    assert code == 0, out.err[-3000:]
    assert "note: backbone 'mlp' takes no width, stages" in out.out
    run = only_run_dir(tmp_path)
    config = yaml.safe_load((run / "config.yaml").read_text())
    assert config["model"]["init_args"]["backbone_kwargs"] == {"dropout": 0.1}  # mlp's option kept, cnn's dropped
    model = ImageClassifier.load_from_checkpoint(run / "checkpoints" / "last.ckpt", map_location="cpu")
    assert isinstance(model.net, MLP)


def test_backbone_switch_to_torchvision_drops_them_all() -> None:
    _, config = parse_config("fit", Request.of(["--config", DIGITS, "--model.backbone", "resnet18", "--data.rgb", "true"]))
    check_backbone_kwargs(config)
    assert config.model.init_args.backbone_kwargs == {}


def test_unknown_backbone_option_is_one_error_and_no_run_dir(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["fit", "--config", DIGITS, "--model.backbone_kwargs", "{widht: 8}", "--trainer.default_root_dir", str(tmp_path), *TINY])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2
    assert err[-1].startswith("error: model.init_args.backbone_kwargs: backbone 'cnn' takes no option 'widht'. Did you mean: width?")
    assert not any(tmp_path.iterdir())


# -- 4. EMA on short runs -----------------------------------------------------------------------------
def test_ema_decay_warms_up_to_its_value() -> None:
    assert decay_after(1, 0.999, 0.75, 1.0) == pytest.approx(1 - 2**-0.75)
    assert decay_after(200, 0.999, 0.75, 1.0) == pytest.approx(1 - 201**-0.75)  # 0.981: ~53 updates
    assert decay_after(1e6, 0.999, 0.75, 1.0) == 0.999
    assert decay_after(5, 0.9, 0.0, 1.0) == 0.9  # warm-up off
    ema, current = torch.zeros(3), torch.ones(3)
    updated = warmup_ema_update(ema, current, torch.tensor(200), decay=0.999, power=0.75, gamma=1.0)
    assert torch.allclose(updated, torch.full((3,), 201**-0.75))


def test_ema_preset_learns_on_a_short_digits_run_and_warns(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # 3 epochs x 20 steps: a fixed decay 0.999 validated at chance (0.10) for the whole run
    code = main(["fit", "--config", DIGITS, "--config", cfg("averaging/ema.yaml"), "--config", cfg("logger/csv.yaml"),
                 "--trainer.default_root_dir", str(tmp_path), "--trainer.max_epochs", "3",
                 "--trainer.enable_progress_bar", "false", "--trainer.enable_model_summary", "false"])
    err = capsys.readouterr().err
    assert code == 0, err[-3000:]
    warning = [line for line in err.splitlines() if "EMA decay" in line]
    end = decay_after(60, 0.999, 0.75, 1.0)
    assert warning == [f"warning: EMA decay 0.999 averages over ~1000 updates, more than this run's 60: the warm-up "
                       f"holds it at {end:.3f} by the end (an average of the last ~{1 / (1 - end):.0f} updates)"]
    val_acc = metrics(only_run_dir(tmp_path))["val/acc"]
    assert len(val_acc) == 3 and val_acc[-1][1] >= 0.9, val_acc


# -- 5. extending a shipped experiment with another scheduler ---------------------------------------------
def test_experiment_extended_with_another_scheduler(tmp_path: Path) -> None:
    mine = tmp_path / "mine.yaml"
    mine.write_text("defaults:\n  - /experiment/digits\n  - override /scheduler: warmup_cosine\n  - _self_\n"
                    "name: mine\noptimizer:\n  init_args:\n    lr: 0.02\n")
    _, config = parse_config("fit", Request.of(["--config", str(mine)]))
    assert config.name == "mine" and config.optimizer.init_args.lr == 0.02
    assert config.lr_scheduler.class_path == "trainer_cli.optim.LinearWarmupCosineLR"
    assert config.lr_scheduler.init_args.warmup_pct == 0.05 and "max_lr" not in config.lr_scheduler.init_args


@pytest.mark.parametrize("experiment", ["digits", "cifar10_resnet18"])  # the two that tied max_lr
def test_every_scheduler_preset_layers_onto_the_experiment(experiment: str) -> None:
    path = str(CONFIGS / "experiment" / f"{experiment}.yaml")
    for scheduler in sorted((CONFIGS / "scheduler").glob("*.yaml")):
        _, config = parse_config("fit", Request.of(["--config", path, "--config", str(scheduler), "--optimizer.lr", "0.3"]))
        expected = yaml.safe_load(scheduler.read_text())["lr_scheduler"]["class_path"]
        assert config.lr_scheduler.class_path == expected
        if expected.endswith("OneCycleLR"):  # the peak follows the optimizer's rate
            assert math.isclose(config.lr_scheduler.init_args.max_lr, 0.3)
