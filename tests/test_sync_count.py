"""A training step never waits on the host: with the shipped experiments, presets, callbacks and
loggers, the calls that force a host-device synchronisation (``Tensor.item``, ``tolist``,
``numpy``, ``cpu``, ``__bool__``, ``__float__``, ``__int__``, ``__index__``, ``__format__``,
``torch.cuda.synchronize``) happen only on the steps the logger writes
(``(global_step + 1) % log_every_n_steps == 0``) and on the last batch of each epoch (the epoch's
progress line, validation, checkpoints, the next epoch's sampler). Counted on CPU by wrapping
those methods (:mod:`tests.sync_count_support`): the same call on a GPU tensor would block the
host until the device has caught up. A new call on any other step fails, naming where it is made.
"""

from __future__ import annotations

import contextlib
import io
import logging
from collections import Counter
from pathlib import Path

import pytest

from tests import sync_count_support as sync
from tests.support import CONFIGS, DIGITS, write_fake_cifar10

LOG_EVERY = 4


def _count(tmp_path: Path, *args: str) -> list[tuple[int, bool, list[tuple[str, str]]]]:
    from trainer_cli.config.request import Request
    from trainer_cli.runtime.verbs import run_subcommand

    argv = [
        *args, "--trainer.default_root_dir", str(tmp_path / "runs"), "--trainer.max_epochs", "2",
        "--trainer.log_every_n_steps", str(LOG_EVERY), "--trainer.enable_model_summary", "false",
        "--trainer.callbacks+=tests.sync_count_support.SyncCounter",
    ]
    logging.getLogger("lightning").setLevel(logging.ERROR)
    with sync.counting(), contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        run_subcommand("fit", Request.of(argv, "fit"))
    return list(sync.STEPS)


def _check(steps: list[tuple[int, bool, list[tuple[str, str]]]], expected_steps: int) -> None:
    assert len(steps) == expected_steps
    at_intervals = [calls for step, last, calls in steps if last or (step + 1) % LOG_EVERY == 0]
    elsewhere = {step: Counter(calls) for step, last, calls in steps if not (last or (step + 1) % LOG_EVERY == 0)}
    new = {step: dict(calls) for step, calls in elsewhere.items() if calls}
    assert not new, f"host-device synchronisation on steps that neither log nor end an epoch: {new}"
    assert any(at_intervals), "the counter saw no call at all: is it still counting?"


def test_digits_with_the_callback_and_logger_presets_syncs_only_at_intervals(tmp_path: Path) -> None:
    presets = [CONFIGS / "callbacks" / f"{name}.yaml" for name in ("throughput", "early_stopping", "device_stats")]
    steps = _count(
        tmp_path, "--config", DIGITS, *[a for p in presets for a in ("--config", str(p))],
        "--config", str(CONFIGS / "logger" / "csv.yaml"),
        "--trainer.limit_train_batches", "8", "--trainer.limit_val_batches", "2",
    )
    _check(steps, 16)


def test_cifar10_fast_with_its_tensorboard_logger_syncs_only_at_intervals(tmp_path: Path) -> None:
    """cifar10_fast layers cifar10_resnet18 (the same model, callbacks and logger) and adds the batched
    on-device data path; the per-sample transforms of cifar10_resnet18 run in the loader (not counted)."""
    data = write_fake_cifar10(tmp_path / "data", n_train=48, n_test=8)
    steps = _count(
        tmp_path, "--config", str(CONFIGS / "experiment" / "cifar10_fast.yaml"), "--trainer.accelerator", "cpu",
        "--trainer.devices", "1", "--model.init_args.compile", "false", "--data.data_dir", str(data),
        "--data.batch_size", "2", "--data.val_size", "2", "--data.num_workers", "0",
        "--trainer.limit_train_batches", "3", "--trainer.limit_val_batches", "1",
    )
    _check(steps, 6)


def test_a_new_per_step_sync_is_caught(tmp_path: Path) -> None:
    steps = _count(
        tmp_path, "--config", DIGITS, "--trainer.limit_train_batches", "3", "--trainer.limit_val_batches", "1",
        "--trainer.callbacks+=tests.sync_count_support.ItemEveryStep",
    )
    with pytest.raises(AssertionError, match="item"):
        _check(steps, 6)
