"""``train scale-batch-size`` on digits."""

from __future__ import annotations

import json
from pathlib import Path

import yaml
from support import DIGITS, quiet_args, run_train
from tuning_support import LIBRARY_NOISE, only_run_dir, run_into_log_file


def test_power_mode_finds_a_power_of_two_within_its_limits(tmp_path: Path) -> None:
    root = tmp_path / "runs"
    proc = run_train(
        "scale-batch-size", "--config", DIGITS, *quiet_args(root),
        "--mode", "power", "--init_val", "4", "--max_val", "128", "--steps_per_trial", "1",
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    run = only_run_dir(root / "digits")
    result = json.loads((run / "batch_size.json").read_text())
    found = result["batch_size"]
    assert 4 <= found <= 128 and found & (found - 1) == 0  # a power of two within the limits
    assert found == 128  # nothing runs out of memory on digits: the search stops at --max_val
    fragment = yaml.safe_load((run / "batch_size.yaml").read_text())
    assert fragment == {"data": {"init_args": {"batch_size": found}}}
    assert f"--data.batch_size {found}" in proc.stdout


def test_bad_limits_are_reported_together(tmp_path: Path) -> None:
    proc = run_train("scale-batch-size", "--config", DIGITS, *quiet_args(tmp_path), "--init_val", "0", "--margin", "1.5")
    assert proc.returncode == 2
    assert "--init_val 0" in proc.stderr and "--margin 1.5" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


def test_a_log_file_holds_the_search_not_the_trial_fits(tmp_path: Path) -> None:
    """Up to the training set's size (2048 > 1257 samples): no line per trial fit, no logging-interval
    warnings, no "will continue with full run" (nothing continues)."""
    log = run_into_log_file(
        tmp_path / "scale.log", "scale-batch-size", "--config", DIGITS, *quiet_args(tmp_path / "runs"),
        "--init_val", "256", "--steps_per_trial", "1",
    )
    assert "largest batch size that fits: 2048" in log and "Batch size 256 succeeded" in log
    noise = [n for n in LIBRARY_NOISE if n in log]
    assert not noise, log
