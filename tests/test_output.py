"""What ``train`` prints: output into a pipe closed early, per-epoch lines when stdout is not a
terminal, no known-irrelevant library noise, rounded metrics."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.support import DIGITS, REPO, run_train

CLOSED_PIPE_ARGS = [["--help"], ["ls"]]


@pytest.mark.parametrize("args", CLOSED_PIPE_ARGS, ids=" ".join)
def test_reader_gone_early_is_quiet(args: list[str]) -> None:
    """Bug 10: ``train --help | head -3`` ended in a BrokenPipeError traceback."""
    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader is gone before the first write: every write fails
    env = {k: v for k, v in os.environ.items() if k != "TRAINER_CLI_RUN_DIR"}
    try:
        done = subprocess.run(
            [sys.executable, "-m", "trainer_cli", *args], cwd=REPO, env=env, stdout=write_end,
            stderr=subprocess.PIPE, text=True, timeout=120,
        )
    finally:
        os.close(write_end)
    assert done.stderr == ""
    assert done.returncode == 141  # 128 + SIGPIPE, what a shell reports


EPOCH_LINE = re.compile(r"^epoch (\d+)/(\d+)((?:  [\w/.-]+(?:\[step\])? -?\d+\.\d{4}(?:e[-+]\d+)?)+)  \d+\.\d s  \d+\.\d steps/s$")
NOISE = (
    "srun",  # Lightning's srun hint (an `srun` is on PATH below, as on a machine with Slurm)
    "💡 Tip", "litlogger", "litmodels",
    "Trainer already configured with model summary callbacks",
    "GPU available", "TPU available",
    "Loading `train_dataloader` to estimate",
    "LeafSpec", "deprecated",
    "The dirpath has changed", "`weights_only` was not set",
    "You have overridden `on_after_batch_transfer`",
    "v_num",
)


def _epoch_lines(stdout: str) -> list[re.Match[str]]:
    return [m for m in map(EPOCH_LINE.match, stdout.splitlines()) if m]


def test_log_output_one_line_per_epoch_and_no_noise(tmp_path: Path) -> None:
    """Items 1-3 and bug 12 of issue 10: stdout not a terminal (a log) gets one line per epoch with
    rounded metrics and no progress-bar redraws; Lightning's messages that do not apply are gone
    (also when fine-tuning from another run's checkpoint); the run summary and checkpoints stay."""
    fake_bin = tmp_path / "bin"
    fake_bin.mkdir()
    (fake_bin / "srun").write_text("#!/bin/sh\nexit 0\n")
    (fake_bin / "srun").chmod(0o755)
    env = {"PATH": f"{fake_bin}{os.pathsep}{os.environ['PATH']}"}
    env_no_slurm = {"SLURM_JOB_ID": ""} if os.environ.get("SLURM_JOB_ID") else {}  # (inside a job the hint is real)
    short = ["--trainer.default_root_dir", str(tmp_path / "runs"), "--trainer.limit_train_batches", "2", "--trainer.limit_val_batches", "1"]

    first = run_train("fit", "--config", DIGITS, *short, "--trainer.max_epochs", "2", env={**env, **env_no_slurm})
    assert first.returncode == 0, first.stderr[-3000:]
    run_dir = tmp_path / "runs" / "digits" / "version_0"
    second = run_train(
        "fit", "--config", DIGITS, *short, "--trainer.max_epochs", "3", "--ckpt_path", str(run_dir / "checkpoints" / "last.ckpt"),
        env={**env, **env_no_slurm},
    )
    assert second.returncode == 0, second.stderr[-3000:]

    for done, epochs in ((first, [1, 2]), (second, [3])):
        combined = done.stdout + done.stderr
        assert "\r" not in combined
        assert [n for n in NOISE if n in combined] == []
        assert "world size             1 = 1 devices x 1 nodes" in done.stdout  # the run summary stays
        assert "accelerator            cpu" in done.stdout
        lines = _epoch_lines(done.stdout)
        assert [int(m.group(1)) for m in lines] == epochs, done.stdout
        assert {int(m.group(2)) for m in lines} == {epochs[-1]}
        assert len([ln for ln in done.stdout.splitlines() if ln.startswith("epoch ")]) == len(epochs)
        names = re.findall(r"  ([\w/.-]+) -?\d", lines[-1].group(3))
        assert {"train/acc", "val/loss", "val/acc", "val/acc_macro", "val/acc_top5"} <= set(names)
        assert names.index("train/acc") < names.index("val/acc")
    # val/acc still names the best checkpoint (4 decimals, as the epoch line prints it)
    best = list((run_dir / "checkpoints").glob("best-epoch*-val_acc*.ckpt"))
    assert len(best) == 1
    last_acc = dict(re.findall(r"  ([\w/.-]+) (-?\d+\.\d{4})", _epoch_lines(first.stdout)[-1].group(3)))["val/acc"]
    assert 0.0 <= float(last_acc) <= 1.0


def test_bar_shows_no_version_fragment(tmp_path: Path) -> None:
    """Item 3: the terminal bar showed ``v_num=on_0`` (the end of ``version_0``); it is dropped."""
    import lightning.pytorch as pl
    from lightning.pytorch.loggers import TensorBoardLogger

    from trainer_cli.callbacks import ThrottledTQDMProgressBar

    bar = ThrottledTQDMProgressBar()
    logger = TensorBoardLogger(save_dir=str(tmp_path), name="", version="version_0")
    trainer = pl.Trainer(logger=logger, callbacks=[bar], accelerator="cpu", enable_model_summary=False)
    assert "v_num" in pl.callbacks.TQDMProgressBar().get_metrics(trainer, pl.LightningModule())  # Lightning's bar has it
    assert "v_num" not in bar.get_metrics(trainer, pl.LightningModule())


def test_bar_shows_the_training_loss_read_at_draw_time(tmp_path: Path) -> None:
    """The loss is logged without ``prog_bar`` (Lightning would turn it into a float after every
    step: a host sync per step on a GPU); the bar still shows it, read from the callback metrics."""
    import lightning.pytorch as pl
    import torch

    from trainer_cli.callbacks import ThrottledTQDMProgressBar

    class Tiny(pl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.layer = torch.nn.Linear(2, 1)

        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            loss = self.layer(batch[0]).pow(2).mean()
            self.log("train/loss", loss)
            return loss

        def configure_optimizers(self) -> Any:
            return torch.optim.SGD(self.parameters(), lr=0.1)

    data = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.randn(8, 2)), batch_size=4)
    bar = ThrottledTQDMProgressBar()
    trainer = pl.Trainer(max_steps=2, callbacks=[bar], accelerator="cpu", logger=False, enable_checkpointing=False,
                         enable_model_summary=False, log_every_n_steps=1, default_root_dir=tmp_path)
    module = Tiny()
    trainer.fit(module, data)
    assert "train/loss" not in trainer.progress_bar_metrics  # nothing converted per step by Lightning
    shown = bar.get_metrics(trainer, module)
    assert shown["train/loss"] == pytest.approx(float(trainer.callback_metrics["train/loss"]))


HELP_RUN = (
    "import sys; from trainer_cli.__main__ import main; code = main(['fit', '--help']); "
    "print('TORCH_IMPORTED', 'torch' in sys.modules); sys.exit(code)"
)


def test_fit_help_comes_from_the_cache_the_second_time(tmp_path: Path) -> None:
    """Item 6: ``train fit --help`` built once, then printed without importing torch or Lightning."""
    from trainer_cli.config import help_cache
    from trainer_cli.config.request import Request

    env = {k: v for k, v in os.environ.items() if k != "TRAINER_CLI_RUN_DIR"} | {"XDG_CACHE_HOME": str(tmp_path), "COLUMNS": "100"}
    runs = [
        subprocess.run([sys.executable, "-c", HELP_RUN], cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
        for _ in range(2)
    ]
    assert [r.returncode for r in runs] == [0, 0], runs[0].stderr[-2000:]
    first, second = (r.stdout.rsplit("TORCH_IMPORTED", 1) for r in runs)
    assert first[0] == second[0] and "--trainer.max_epochs" in first[0] and "--model" in first[0]
    assert (first[1].strip(), second[1].strip()) == ("True", "False")
    assert len(list((tmp_path / "trainer-cli" / "help").glob("*.txt"))) == 1
    assert help_cache.cacheable(Request.of(["--help"], "fit"))
    assert not help_cache.cacheable(Request.of(["--config", DIGITS, "--help"], "fit"))


DEMO_MODEL = '''
import time

import torch

from trainer_cli.models import ImageClassifier


class DemoModel(ImageClassifier):
    """A user's model with its own optimizer and slow steps (over a second each)."""

    def training_step(self, batch, batch_idx):
        time.sleep(1.05)
        return super().training_step(batch, batch_idx)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)
'''


def test_a_users_model_gets_its_optimizer_note_and_slow_steps_their_seconds(tmp_path: Path) -> None:
    """The config's optimizer replacing the model's configure_optimizers is said in the model's and the
    config's terms (no UserWarning naming the launcher's class); an epoch of steps over a second each
    prints its seconds per step and a rate that does not round to 0.0."""
    (tmp_path / "demo_model.py").write_text(DEMO_MODEL)
    env = {"PYTHONPATH": f"{tmp_path}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    done = run_train(
        "fit", "--config", DIGITS, "--model.class_path", "demo_model.DemoModel", "--trainer.default_root_dir",
        str(tmp_path / "runs"), "--trainer.limit_train_batches", "2", "--trainer.limit_val_batches", "1",
        "--trainer.max_epochs", "1", "--trainer.enable_model_summary", "false", env=env,
    )
    combined = done.stdout + done.stderr
    assert done.returncode == 0, done.stderr[-3000:]
    assert "will be overridden" not in combined and "TrainerCLI" not in combined and "UserWarning" not in combined
    notes = [line for line in combined.splitlines() if "DemoModel.configure_optimizers is not used" in line]
    assert len(notes) == 1 and "optimizer torch.optim.AdamW" in notes[0], combined
    (line,) = [ln for ln in done.stdout.splitlines() if ln.startswith("epoch 1/1")]
    match = re.search(r"  (\d+\.\d) s/step  (0\.\d+) steps/s$", line)
    assert match and float(match.group(1)) >= 1.0 and float(match.group(2)) > 0, line


def test_macro_accuracy_of_perfect_predictions_prints_as_1() -> None:
    """torchmetrics' float32 macro mean over the classes present gives 1.0000001 for some perfect
    predictions (e.g. of 23 samples of 10 classes); the classifier's metric is kept at 1."""
    import torch
    from torchmetrics.classification import MulticlassAccuracy

    from trainer_cli.models.classifier import MacroAccuracy

    generator = torch.Generator().manual_seed(0)
    over_one = 0
    for n in range(1, 60):  # perfect predictions of n samples of 10 classes
        target = torch.randint(0, 10, (n,), generator=generator)
        logits = torch.nn.functional.one_hot(target, 10).float()
        stock, ours = MulticlassAccuracy(10, average="macro"), MacroAccuracy(10, average="macro")
        stock.update(logits, target)
        ours.update(logits, target)
        over_one += stock.compute().item() > 1.0
        assert ours.compute().item() == 1.0
    assert over_one  # the artefact this guards against occurs


def test_the_epoch_line_shows_epoch_values_and_labels_a_step_value(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A project's metric logged per step only (on_step=True, on_epoch=False) is its last step's value at the
    epoch's end, here of a last batch of one sample: labelled [step]; one logged per epoch shows the epoch's
    mean; one logged both ways shows its epoch value once (no _step/_epoch copies)."""
    import lightning.pytorch as pl
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    from trainer_cli.callbacks.progress import EpochLineProgress

    class Module(pl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.weight = torch.nn.Parameter(torch.zeros(1))

        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            (x,) = batch
            self.log("train_x", x.mean(), on_step=True, on_epoch=False)
            self.log("train_mean", x.mean(), on_step=False, on_epoch=True)
            self.log("train_both", x.mean(), on_step=True, on_epoch=True)
            return (self.weight * x).sum()

        def validation_step(self, batch: Any, batch_idx: int) -> None:
            self.log("val_x", batch[0].mean())

        def configure_optimizers(self) -> torch.optim.Optimizer:
            return torch.optim.SGD(self.parameters(), lr=0.0)

    data = DataLoader(TensorDataset(torch.arange(5.0)), batch_size=2)  # batches [0, 1], [2, 3], [4]
    trainer = pl.Trainer(
        max_epochs=2, accelerator="cpu", logger=False, enable_checkpointing=False, enable_model_summary=False,
        callbacks=[EpochLineProgress()], default_root_dir=tmp_path, num_sanity_val_steps=0,
    )
    trainer.fit(Module(), data, data)
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("epoch ")]
    assert len(lines) == 2 and all(EPOCH_LINE.match(line) for line in lines), lines
    for line in lines:
        cells = dict(re.findall(r"  ([\w/.\[\]-]+) (-?\d+\.\d{4})", line))
        assert cells == {"train_both": "2.0000", "train_mean": "2.0000", "train_x[step]": "4.0000", "val_x": "2.0000"}, line
