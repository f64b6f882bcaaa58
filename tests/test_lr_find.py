"""``train lr-find`` on digits: plot, result file, and a fragment that layers onto ``train fit``."""

from __future__ import annotations

import json
from pathlib import Path

import yaml
from support import CONFIGS, DIGITS, quiet_args, run_train
from tuning_support import FAST, LIBRARY_NOISE, only_run_dir, run_into_log_file

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def test_lr_find_writes_plot_suggestion_and_fragment_that_fit_uses(tmp_path: Path) -> None:
    root = tmp_path / "runs"
    proc = run_train("lr-find", "--config", DIGITS, *quiet_args(root), "--min_lr", "1e-5", "--max_lr", "1", "--num_training", "40")
    assert proc.returncode == 0, proc.stderr[-3000:]
    run = only_run_dir(root / "digits")

    png = (run / "lr_find.png").read_bytes()
    assert png.startswith(PNG_MAGIC) and len(png) > 10_000  # a real plot, not an empty canvas
    result = json.loads((run / "lr_find.json").read_text())
    assert 1e-5 <= result["suggestion"] <= 1
    assert len(result["lr"]) == len(result["loss"]) == result["steps_run"] > 10
    lr = yaml.safe_load((run / "lr_find.yaml").read_text())["optimizer"]["init_args"]["lr"]
    assert lr == float(f"{result['suggestion']:.3g}")
    assert f"--optimizer.lr {lr:g}" in proc.stdout
    assert f"--config {run / 'lr_find.yaml'}" in proc.stdout

    # the fragment layers onto train fit: the run's resolved config has the suggested lr (and the
    # OneCycle max_lr that interpolates it), the rest of the optimizer config is kept
    fit_root = tmp_path / "fit"
    proc = run_train("fit", "--config", DIGITS, "--config", str(run / "lr_find.yaml"), *quiet_args(fit_root), *FAST)
    assert proc.returncode == 0, proc.stderr[-3000:]
    # the run's end is its epoch line, not Lightning's "`Trainer.fit` stopped: `max_epochs=1` reached."
    assert "`Trainer.fit` stopped" not in proc.stdout + proc.stderr
    config = yaml.safe_load((only_run_dir(fit_root / "digits") / "config.yaml").read_text())
    assert config["optimizer"]["class_path"] == "torch.optim.AdamW"
    assert config["optimizer"]["init_args"]["lr"] == lr
    assert config["lr_scheduler"]["init_args"]["max_lr"] == lr
    base = yaml.safe_load((CONFIGS / "optimizer" / "adamw.yaml").read_text())
    assert config["optimizer"]["init_args"]["weight_decay"] == base["optimizer"]["init_args"]["weight_decay"]


def test_lr_find_rejects_a_bad_range_before_building(tmp_path: Path) -> None:
    proc = run_train("lr-find", "--config", DIGITS, *quiet_args(tmp_path), "--min_lr", "1", "--max_lr", "0.1")
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == ["error: --min_lr 1.0 and --max_lr 0.1: need 0 < min_lr < max_lr"]
    assert not tmp_path.joinpath("digits").exists()


def test_lr_find_writes_no_progress_bar_or_trial_noise_into_a_log_file(tmp_path: Path) -> None:
    """Lightning starts a tqdm bar for the test whatever the Trainer's progress bar; in a log file
    the launcher's output is its own report only."""
    log = run_into_log_file(
        tmp_path / "lr_find.log", "lr-find", "--config", DIGITS, *quiet_args(tmp_path / "runs"), "--num_training", "20"
    )
    assert "suggested learning rate:" in log
    noise = [n for n in LIBRARY_NOISE if n in log]
    assert not noise, log


def test_lr_find_run_dir_takes_the_runs_config_and_writes_a_new_run(tmp_path: Path) -> None:
    """``--run_dir`` reads as ``train fit --run_dir`` does (the run's config.yaml, no --config needed);
    the test's files go to a new run directory beside it, the run itself untouched."""
    root = tmp_path / "runs"
    fit = run_train("fit", "--config", DIGITS, *quiet_args(root), *FAST, "--optimizer.init_args.weight_decay", "0.0123")
    assert fit.returncode == 0, fit.stderr[-3000:]
    run = root / "digits" / "version_0"
    before = sorted(p.name for p in run.iterdir())
    proc = run_train("lr-find", "--run_dir", str(run), "--num_training", "20", "--trainer.enable_progress_bar", "false")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "required" not in proc.stderr
    new = root / "digits" / "version_1"
    assert (new / "lr_find.json").is_file() and (new / "lr_find.yaml").is_file()
    assert sorted(p.name for p in run.iterdir()) == before
    config = yaml.safe_load((new / "config.yaml").read_text())
    assert config["optimizer"]["init_args"]["weight_decay"] == 0.0123  # the run's own config, not a default
