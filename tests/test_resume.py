"""Exact resume after SIGKILL, crash-safe checkpoints, SIGTERM / Ctrl-C, same-second run directories.

Digits on CPU, deterministic, 2 epochs of 10 optimizer steps (``limit_train_batches``). Checkpoints every N optimizer steps
(``ModelCheckpoint(every_n_train_steps=N, save_last=True)``) so a kill can land mid-epoch.
"""

from __future__ import annotations

import multiprocessing
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from resume_support import every_n_steps_config, final_state, global_step, kill_when, load, same_tensors, start_train, stops_itself_at
from support import DIGITS, REPO, quiet_args, run_train, scalars

STEPS_PER_EPOCH = 10  # limit_train_batches (the full epoch is 20 batches of 64)


def fit_args(root: Path, ckpt_config: str, epochs: int = 2) -> list[str]:
    return [
        "fit", "--config", DIGITS, "--config", ckpt_config, *quiet_args(root, epochs), "--trainer.deterministic", "true",
        "--trainer.limit_train_batches", str(STEPS_PER_EPOCH), "--trainer.limit_val_batches", "2",
    ]


def final_val_acc(run: Path) -> float:
    return scalars(run, "val/acc")[-1].value


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """The same run left alone."""
    tmp = tmp_path_factory.mktemp("reference")
    done = run_train(*fit_args(tmp / "runs", every_n_steps_config(tmp, 4)))
    assert done.returncode == 0, done.stderr[-3000:]
    run = tmp / "runs" / "digits" / "version_0"
    return {"state": final_state(run), "val_acc": final_val_acc(run)}


@pytest.mark.parametrize(("every", "where"), [(4, "mid-epoch"), (None, "epoch boundary")])
def test_sigkill_then_resume_is_bitwise_equal(tmp_path: Path, reference: dict, every: int, where: str) -> None:
    root = tmp_path / "runs"
    last = root / "digits" / "version_0" / "checkpoints" / "last.ckpt"
    wanted = (lambda s: s is not None and s > STEPS_PER_EPOCH and s % STEPS_PER_EPOCH) if every == 4 else (lambda s: s == STEPS_PER_EPOCH)
    # it stops itself in its second epoch before it can pass the wanted checkpoint: at step 18 (before the
    # save at 20; 12 and 16 are mid-epoch), or at step 16 (last.ckpt is the one of the epoch end, 10)
    stop = stops_itself_at(1, 7 if every == 4 else 5)
    proc = start_train(*fit_args(root, every_n_steps_config(tmp_path, every)), *stop)
    kill_when(proc, lambda: wanted(global_step(last)))  # stopped while its last.ckpt is the wanted one, then killed
    step = global_step(last)
    assert step is not None and step < 2 * STEPS_PER_EPOCH
    assert (step % STEPS_PER_EPOCH != 0) == (where == "mid-epoch"), f"killed at step {step}, wanted {where}"
    # resume: the newest run of the experiment, from its last.ckpt, with the same config
    resumed = run_train(*fit_args(root, every_n_steps_config(tmp_path, every)), *stop, "--ckpt_path", "last")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    run = root / "digits" / "version_0"
    assert sorted(p.name for p in (root / "digits").iterdir()) == ["version_0"]  # resumed in place
    state = final_state(run)
    assert state["step"] == reference["state"]["step"] == 2 * STEPS_PER_EPOCH
    assert same_tensors(state["model"], reference["state"]["model"]), f"weights differ after a {where} resume (step {step})"
    assert same_tensors(state["optimizer"], reference["state"]["optimizer"])
    assert same_tensors(state["scheduler"], reference["state"]["scheduler"])
    assert final_val_acc(run) == reference["val_acc"]


def test_sigkill_during_saves_never_leaves_a_bad_checkpoint(tmp_path: Path) -> None:
    target = tmp_path / "checkpoints" / "last.ckpt"
    kills, loaded = 12, 0
    rng = random.Random(0)
    proc = subprocess.Popen([sys.executable, str(Path(__file__).with_name("atomic_save_loop.py")), str(target), str(kills)],
                            cwd=REPO, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    for line in proc.stdout:  # one child per line, each saving in a loop until killed
        time.sleep(rng.uniform(0.02, 0.5))
        os.kill(int(line), signal.SIGKILL)
        time.sleep(0.05)  # let the parent reap it
        if target.exists():
            ckpt = load(target)  # must load: the previous or the new complete file
            assert ckpt["w"].numel() == 2_000_000 and float(ckpt["w"][0]) == ckpt["n"]
            loaded += 1
    assert proc.wait() == 0
    assert loaded >= kills // 2, "too few saves finished before the kills"


@pytest.mark.parametrize(("sig", "code", "cause"), [(signal.SIGTERM, 143, "SIGTERM"), (signal.SIGINT, 130, "Ctrl-C")])
def test_signal_saves_checkpoint_and_prints_resume(tmp_path: Path, sig: int, code: int, cause: str) -> None:
    root = tmp_path / "runs"
    args = ["fit", "--config", DIGITS, *quiet_args(root, 20), "--trainer.callbacks", "[]", "--trainer.limit_val_batches", "2"]
    proc = start_train(*args)
    lines: list[str] = []
    assert proc.stdout is not None
    for line in proc.stdout:  # wait until training has started
        lines.append(line)
        if line.startswith("run directory"):
            break
    time.sleep(0.3)
    proc.send_signal(sig)
    out = "".join(lines) + proc.stdout.read()
    assert proc.wait() == code, out[-3000:]
    run = root / "digits" / "version_0"
    assert f"Training stopped by {cause}" in out and f"train fit --run_dir {run} --ckpt_path last" in out, out[-2000:]
    assert "Traceback" not in out
    ckpt = load(run / "checkpoints" / "last.ckpt")
    assert ckpt["global_step"] >= 0 and ckpt["state_dict"]
    if sig == signal.SIGTERM:  # resume in place with the stored config; a changed max_epochs is reported
        stopped_at = ckpt["epoch"] + 1
        resumed = run_train("fit", "--run_dir", str(run), "--ckpt_path", "last", "--trainer.max_epochs", str(stopped_at))
        assert resumed.returncode == 0, resumed.stderr[-3000:]
        assert f"resume: trainer.max_epochs: 20 -> {stopped_at}" in resumed.stdout
        done = load(run / "checkpoints" / "last.ckpt")  # it trained on to the end of that epoch, not beyond
        assert done["epoch"] == ckpt["epoch"] and done["global_step"] >= ckpt["global_step"]
        assert f"Resuming {run}" in resumed.stdout or "is finished" in resumed.stdout, resumed.stdout[-2000:]


def _allocate(args: tuple[str, int]) -> str:
    from trainer_cli.rundir import policy as rundir

    return str(rundir.allocate(Path(args[0]), "same_second"))


def test_runs_started_in_the_same_second_get_different_directories(tmp_path: Path) -> None:
    with multiprocessing.get_context("fork").Pool(4) as pool:
        dirs = pool.map(_allocate, [(str(tmp_path), i) for i in range(16)])
    assert len(set(dirs)) == 16
    assert sorted(Path(d).name for d in dirs) == sorted(f"version_{i}" for i in range(16))
