"""``train ls`` and ``train --help``: derived from code, answered without importing torch."""

from __future__ import annotations

import subprocess
import sys

import pytest
from support import REPO, run_train

from trainer_cli.config import listing


@pytest.mark.parametrize("args", [["--help"], ["ls"], ["ls", "configs"]])
def test_help_and_ls_do_not_import_torch(args: list[str]) -> None:
    code = (
        "import sys; from trainer_cli.__main__ import main; rc = main(%r); "
        "assert 'torch' not in sys.modules and 'lightning' not in sys.modules, 'torch imported'; sys.exit(rc)" % args
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip()


def test_torchvision_models_match_the_registry() -> None:
    import torchvision

    assert listing.torchvision_models() == sorted(torchvision.models.list_models(module=torchvision.models))


def test_optimizers_and_schedulers_match_torch() -> None:
    import inspect

    import torch

    optimizers = {n for n, c in inspect.getmembers(torch.optim, inspect.isclass) if issubclass(c, torch.optim.Optimizer) and c is not torch.optim.Optimizer}
    assert set(listing.torch_optimizers()) == optimizers
    sched = torch.optim.lr_scheduler
    exported = {n for n in sched.__all__ if inspect.isclass(getattr(sched, n))}
    assert set(listing.torch_schedulers()) == exported - {"LRScheduler"}


def test_project_classes_are_listed() -> None:
    text = listing.render("models") + listing.render("data") + listing.render("schedulers") + listing.render("callbacks")
    for name in ("ImageClassifier", "cnn", "mlp", "resnet18", "DigitsDataModule", "CIFAR10DataModule",
                 "ImageFolderDataModule", "LinearWarmupCosineLR", "OneCycleLR", "RunSummary", "EMAWeightAveraging"):
        assert name in text


def test_ls_configs_lists_each_group_with_descriptions() -> None:
    proc = run_train("ls", "configs")
    assert proc.returncode == 0
    assert "configs/experiment/" in proc.stdout
    line = next(line for line in proc.stdout.splitlines() if line.strip().startswith("digits ") and "CNN" in line)
    assert "handwritten digits" in line
    assert "@package" not in proc.stdout


def test_unknown_kind_and_unknown_verb() -> None:
    proc = run_train("ls", "modles")
    assert proc.returncode == 2 and "Did you mean: models" in proc.stderr
    proc = run_train("fti")
    assert proc.returncode == 2 and "Did you mean: fit" in proc.stderr


def test_help_after_a_config_lists_the_options_of_the_classes_it_chooses(tmp_path) -> None:
    """``train fit --config experiment/digits --help``: LightningCLI's help, then the options of the
    model, data module, optimizer and scheduler the config chooses (as ``--model.help CLASS`` prints
    them); a bare ``train fit --help`` stays LightningCLI's alone."""
    done = run_train("fit", "--config", "experiment/digits", "--help", cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    out = done.stdout
    assert "--trainer.max_epochs" in out  # LightningCLI's own help comes first
    for header in ("# --model: trainer_cli.models.ImageClassifier", "# --data: trainer_cli.data.DigitsDataModule",
                   "# --optimizer: torch.optim.AdamW", "# --lr_scheduler: torch.optim.lr_scheduler.OneCycleLR"):
        assert header in out, header
    for option in ("--model.backbone", "--model.label_smoothing", "--data.batch_size", "--data.val_fraction",
                   "--optimizer.lr", "--optimizer.weight_decay", "--lr_scheduler.max_lr"):
        assert f"\n  {option} " in out, option
    assert not list(tmp_path.iterdir())  # nothing run, nothing written
