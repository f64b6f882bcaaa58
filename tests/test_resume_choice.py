"""Which checkpoint a resume takes, which config it runs with, and interrupts around epoch ends.

Real tiny digits runs, in-process (``run_subcommand``, as ``train`` calls it) to stay fast;
checkpoints are read back from disk.
"""

from __future__ import annotations

import json
import shutil
import warnings
from pathlib import Path

import pytest
import resume_signals
import torch
from resume_support import load
from support import CONFIGS, DIGITS

from trainer_cli.config.request import Request
from trainer_cli.errors import UserError
from trainer_cli.rundir import layout
from trainer_cli.rundir.resume import compare_for_resume
from trainer_cli.runtime.verbs import run_subcommand

TINY = [
    "--trainer.limit_train_batches", "2", "--trainer.limit_val_batches", "1", "--trainer.limit_test_batches", "1",
    "--trainer.enable_progress_bar", "false", "--trainer.enable_model_summary", "false",
]
FLAT_COS = str(CONFIGS / "scheduler" / "flat_cos.yaml")
EARLY_STOPPING = str(CONFIGS / "callbacks" / "early_stopping.yaml")


def fit(root: Path, *args: str, epochs: int = 1) -> None:
    run_subcommand("fit", Request.of(["--config", DIGITS, "--trainer.default_root_dir", str(root), "--trainer.max_epochs", str(epochs), *TINY, *args], "fit"))


def exit_code(verb: str, args: list[str]) -> int:
    with pytest.raises(SystemExit) as stop:
        run_subcommand(verb, Request.of(args, verb))
    return int(stop.value.code or 0)


@pytest.fixture(scope="module")
def flat_cos_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One finished epoch of digits with flat_cos and EarlyStopping (5 callbacks)."""
    root = tmp_path_factory.mktemp("runs")
    fit(root, "--config", FLAT_COS, "--config", EARLY_STOPPING)
    return root / "digits" / "version_0"


def test_resume_with_another_scheduler_or_callbacks_is_refused_in_short_lines(flat_cos_run: Path) -> None:
    root = flat_cos_run.parents[1]
    before = sorted(p.name for p in flat_cos_run.rglob("*"))
    with pytest.raises(UserError) as err:  # the plain digits config: OneCycle and no EarlyStopping
        fit(root, "--ckpt_path", "last", epochs=2)
    message = str(err.value)
    assert "lr_scheduler.class_path: 'trainer_cli.optim.FlatCosineLR' -> 'torch.optim.lr_scheduler.OneCycleLR'" in message
    assert "trainer.callbacks: 5 -> 4 entries (EarlyStopping dropped)" in message
    assert f"train fit --run_dir {flat_cos_run} --ckpt_path last" in message and len(message) < 800
    assert sorted(p.name for p in flat_cos_run.rglob("*")) == before  # nothing renamed or written


def test_config_changes_are_summarised_one_short_line_each() -> None:
    callbacks = [{"class_path": f"lightning.pytorch.callbacks.{n}", "init_args": {"x": 1}} for n in ("ModelCheckpoint", "LearningRateMonitor")]
    stored = {"trainer": {"callbacks": callbacks, "max_epochs": 1}, "optimizer": {"init_args": {"lr": 0.1}}}
    current = {"trainer": {"callbacks": callbacks[:1], "max_epochs": 3}, "optimizer": {"init_args": {"lr": 0.2}}}
    lines = compare_for_resume(stored, current, Path("run"))
    assert lines == ["optimizer.init_args.lr: 0.1 -> 0.2", "trainer.callbacks: 2 -> 1 entries (LearningRateMonitor dropped)",
                     "trainer.max_epochs: 1 -> 3"]
    with pytest.raises(UserError, match=r"trainer.precision: '32-true' -> 'bf16-mixed'"):
        compare_for_resume({"trainer": {"precision": "32-true"}}, {"trainer": {"precision": "bf16-mixed"}}, Path("run"))
    # a setting the model declares as not shaping its weights (MixUp) may change on resume
    mixing = {"model": {"class_path": "trainer_cli.models.ImageClassifier", "init_args": {"backbone": "cnn", "mixup_alpha": 0.2}}}
    plain = {"model": {"class_path": "trainer_cli.models.ImageClassifier", "init_args": {"backbone": "cnn", "mixup_alpha": 0.0}}}
    assert compare_for_resume(mixing, plain, Path("run")) == ["model.init_args.mixup_alpha: 0.2 -> 0.0"]
    # devices as a number or as its text (a job's command line gives '1') is no change; another count is
    assert compare_for_resume({"trainer": {"devices": 1}}, {"trainer": {"devices": "1"}}, Path("run")) == []
    assert compare_for_resume({"trainer": {"devices": 1}}, {"trainer": {"devices": "2"}}, Path("run")) == ["trainer.devices: 1 -> '2'"]
    # another model class: one line for the class, none for the init_args that come with it
    tiny = {"model": {"class_path": "mymodels.TinyNet", "init_args": {"hidden": 32}}}
    ours = {"model": {"class_path": "trainer_cli.models.ImageClassifier", "init_args": {"backbone": "cnn", "mixup_alpha": 0.0}}}
    with pytest.raises(UserError, match=r"architecture changed \(model.class_path: 'mymodels.TinyNet' -> 'trainer_cli.models.ImageClassifier'\)"):
        compare_for_resume(tiny, ours, Path("run"))


def test_ckpt_path_best_resolves_for_test_and_validate(flat_cos_run: Path) -> None:
    root = flat_cos_run.parents[1]
    best = next((flat_cos_run / "checkpoints").glob("best-*.ckpt"))
    assert layout.best_checkpoint(flat_cos_run) == best
    run_subcommand("test", Request.of(["--config", DIGITS, "--config", FLAT_COS, "--config", EARLY_STOPPING, "--trainer.default_root_dir", str(root), *TINY, "--ckpt_path", "best"], "test"))
    run_subcommand("validate", Request.of(["--run_dir", str(flat_cos_run), *TINY, "--ckpt_path", "best"], "validate"))
    assert [p.name for p in (root / "digits").iterdir()] == ["version_0"]  # no new run directory


def test_evaluating_a_run_without_ckpt_path_uses_its_best_checkpoint(flat_cos_run: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``train validate|test --run_dir R`` evaluates the run's trained weights, not the config's fresh ones."""
    for verb in ("validate", "test"):
        assert run_subcommand(verb, Request.of(["--run_dir", str(flat_cos_run), *TINY], verb)) == 0
        assert f"Using the best checkpoint of {flat_cos_run}: {layout.best_checkpoint(flat_cos_run)}" in capsys.readouterr().out
    assert [p.name for p in flat_cos_run.parent.iterdir()] == ["version_0"]  # no new run directory


def test_finished_run_is_not_retrained_unless_more_epochs(flat_cos_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = tmp_path / "version_0"
    shutil.copytree(flat_cos_run, run)
    assert exit_code("fit", ["--run_dir", str(run), "--ckpt_path", "last"]) == 0
    assert f"{run} is finished (1 epochs, step 2; max_epochs=1" in capsys.readouterr().out
    run_subcommand("fit", Request.of(["--run_dir", str(run), "--ckpt_path", "last", "--trainer.max_epochs", "2"], "fit"))
    assert load(run / layout.LAST_CKPT)["global_step"] == 4


def _fake_checkpoint(path: Path, step: int) -> None:
    torch.save({"global_step": step, "epoch": 0, "loops": {"fit_loop": {"epoch_progress": {"current": {"processed": 0}}}}}, path)


def test_slurm_job_in_its_run_dir_resumes_from_the_newest_checkpoint(flat_cos_run: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    run = tmp_path / "version_0"
    shutil.copytree(flat_cos_run, run)
    (run / "hpc_ckpt_1.ckpt").write_bytes(b"truncated")  # not a complete checkpoint: never chosen
    shutil.copy(run / layout.LAST_CKPT, run / "hpc_ckpt_2.ckpt")
    stale = torch.load(run / "hpc_ckpt_2.ckpt", weights_only=True)
    stale["global_step"] = 1  # older than last.ckpt (step 2): Lightning's own hpc lookup would take it
    torch.save(stale, run / "hpc_ckpt_2.ckpt")
    assert [c.global_step for c in layout.run_checkpoints(run)] == [1, 2]
    monkeypatch.setenv("SLURM_JOB_ID", "4242")
    monkeypatch.setenv("SLURM_RESTART_COUNT", "0")  # a new job submitted into the run, no requeue
    monkeypatch.setenv("SLURM_NTASKS", "1")
    run_subcommand("fit", Request.of(["--config", str(run / "config.yaml"), "--run_dir", str(run), "--trainer.max_epochs", "2"], "fit"))
    assert f"Resuming {run} from {run / layout.LAST_CKPT} (step 2, 1 epochs done)" in capsys.readouterr().out
    assert load(run / layout.LAST_CKPT)["global_step"] == 4
    assert not list(run.glob("hpc_ckpt_*.ckpt"))  # the stale one retired (and, older than last.ckpt, deleted)
    assert not (run / "hpc_ckpt_2.ckpt").exists() and not (run / "hpc_ckpt_2.ckpt.used").exists()


def test_newest_checkpoint_is_by_step_and_a_chosen_hpc_checkpoint_is_retired(tmp_path: Path) -> None:
    (tmp_path / "checkpoints").mkdir()
    _fake_checkpoint(tmp_path / layout.LAST_CKPT, 10)
    _fake_checkpoint(tmp_path / "hpc_ckpt_1.ckpt", 14)
    _fake_checkpoint(tmp_path / "hpc_ckpt_2.ckpt", 12)
    newest = layout.newest_checkpoint(tmp_path)
    assert newest is not None and (newest.path.name, newest.global_step) == ("hpc_ckpt_1.ckpt", 14)
    _fake_checkpoint(tmp_path / "hpc_ckpt_0.ckpt.used", 3)  # consumed by an earlier resume
    chosen = layout.retire_hpc_checkpoints(tmp_path, newest)
    assert chosen.path == tmp_path / "hpc_ckpt_1.ckpt.used" and chosen.path.is_file()
    assert sorted(p.name for p in tmp_path.glob("hpc_*")) == ["hpc_ckpt_1.ckpt.used"]  # older used ones deleted
    assert layout.newest_checkpoint(tmp_path) == chosen  # still the newest state until a newer one is saved


def test_another_rank_reads_an_hpc_checkpoint_that_rank_0_retires_under_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A restarted 2-task DDP job: rank 1 listed ``hpc_ckpt_1.ckpt``, rank 0 renamed it ``.used`` before rank 1
    read it. Rank 1 still finds it (by its new name), so it never passes ``ckpt_path=None`` to Lightning, whose
    hpc lookup would name the file that is gone (a local Slurm job's rank 1: FileNotFoundError, the job FAILED)."""
    (tmp_path / "checkpoints").mkdir()
    _fake_checkpoint(tmp_path / layout.LAST_CKPT, 10)
    _fake_checkpoint(tmp_path / "hpc_ckpt_1.ckpt", 14)
    listed = layout._resume_files(tmp_path)  # rank 1's listing, an instant before rank 0's rename
    layout.retire_hpc_checkpoints(tmp_path, layout.newest_checkpoint(tmp_path))  # rank 0
    monkeypatch.setattr(layout, "_resume_files", lambda run_dir: listed)
    newest = layout.newest_checkpoint(tmp_path)
    assert newest is not None and (newest.path.name, newest.global_step) == ("hpc_ckpt_1.ckpt.used", 14)
    assert layout.damaged_checkpoints(tmp_path) == [], "a retired file is not a damaged one"


def test_logger_false_drops_callbacks_that_need_a_logger(tmp_path: Path) -> None:
    fit(tmp_path, "--trainer.logger", "false")  # default callbacks include LearningRateMonitor
    run = tmp_path / "digits" / "version_0"
    assert load(run / layout.LAST_CKPT)["global_step"] == 2 and not list(run.glob("events.out.tfevents.*"))


@pytest.mark.parametrize(("every", "validations"), [([], [0, 1]), (["--trainer.val_check_interval", "1"], [0, 0, 1, 1])])
def test_interrupt_during_validation_runs_it_on_resume(tmp_path: Path, every: list[str], validations: list[int]) -> None:
    """At an epoch's end (Lightning would skip that validation and log train/acc from no batches) or mid-epoch."""
    resume_signals.VALIDATED.clear()
    callbacks = ["--trainer.callbacks+", "resume_signals.SignalAt", "--trainer.callbacks+", "resume_signals.RecordValidation"]
    assert exit_code("fit", ["--config", DIGITS, "--trainer.default_root_dir", str(tmp_path), "--trainer.max_epochs", "2",
                             *TINY, "--trainer.limit_val_batches", "2", *every, *callbacks]) == 143
    assert resume_signals.VALIDATED == []  # stopped after the first of 2 batches of epoch 0's first validation
    run = tmp_path / "digits" / "version_0"
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message=".*compute.*before the ``update``.*")
        run_subcommand("fit", Request.of(["--run_dir", str(run), "--ckpt_path", "last"], "fit"))
    assert resume_signals.VALIDATED == validations
    assert load(run / layout.LAST_CKPT)["global_step"] == 4


def test_ctrl_c_before_the_first_batch_exits_130_and_leaves_no_run_dir(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = ["--trainer.callbacks+", "resume_signals.SignalAt", "--trainer.callbacks+.init_args.hook", "on_fit_start",
            "--trainer.callbacks+.init_args.signal", "SIGINT"]
    assert exit_code("fit", ["--config", DIGITS, "--trainer.default_root_dir", str(tmp_path), *TINY, *args]) == 130
    assert "before any batch was trained; nothing was saved" in capsys.readouterr().err
    assert not (tmp_path / "digits").exists()  # nor the experiment's folder the start made (issue 45)


def test_sigterm_stop_is_recorded_where_train_runs_reads_the_steps(tmp_path: Path) -> None:
    """Issue 45: a run stopped by SIGTERM at step 9 (log_every_n_steps past it: its TensorBoard events
    end at step 5) showed 0 steps in `train runs`; the stop's record in metrics.jsonl says where it stopped."""
    from trainer_cli.rundir import metrics
    from trainer_cli.tools import run_row, runs

    args = ["--trainer.callbacks+", "resume_signals.SignalAt", "--trainer.callbacks+.init_args.hook", "on_train_batch_end",
            "--trainer.callbacks+.init_args.epoch", "1", "--trainer.callbacks+.init_args.batch", "3"]
    assert exit_code("fit", ["--config", DIGITS, "--trainer.default_root_dir", str(tmp_path), "--trainer.max_epochs", "3", *TINY,
                             "--trainer.limit_train_batches", "5", "--trainer.log_every_n_steps", "50", *args]) == 143
    run = tmp_path / "digits" / "version_0"
    assert load(run / layout.LAST_CKPT)["global_step"] == 9
    assert metrics._tensorboard(run).steps < 9  # what the loggers logged alone
    read = run_row.read_run(run)
    assert (read["epochs"], read["steps"]) == (1, 9)
    assert metrics.recorded(run).steps == 9


def test_stock_lightningcli_config_gets_the_run_layout_and_resumes(tmp_path: Path) -> None:
    from lightning.pytorch.cli import LightningCLI  # stock LightningCLI writes the config, as its --print_config would

    from trainer_cli.data import DigitsDataModule
    from trainer_cli.models import ImageClassifier

    classes = ["--model", "trainer_cli.models.ImageClassifier", "--model.num_classes", "10", "--data", "trainer_cli.data.DigitsDataModule"]
    stock = LightningCLI(ImageClassifier, DigitsDataModule, run=False, args=classes,
                         subclass_mode_model=True, subclass_mode_data=True, save_config_callback=None)
    config = stock.parser.dump(stock.config, skip_none=False)
    assert "logger: null" in config and "callbacks: null" in config
    file = tmp_path / "stock.yaml"
    file.write_text(config)
    common = ["--config", str(file), "--trainer.default_root_dir", str(tmp_path), "--optimizer", "AdamW", *TINY]
    run_subcommand("fit", Request.of([*common, "--trainer.max_epochs", "1"], "fit"))
    run = tmp_path / "run" / "version_0"
    assert (run / layout.LAST_CKPT).is_file() and list(run.glob("events.out.tfevents.*")) and not (run / "lightning_logs").exists()
    run_subcommand("fit", Request.of([*common, "--trainer.max_epochs", "2", "--ckpt_path", "last"], "fit"))
    assert load(run / layout.LAST_CKPT)["global_step"] == 4
    assert layout.best_checkpoint(run) == run / "checkpoints" / "epoch=1-step=4.ckpt"  # no monitor: the latest, as Lightning's
    run_subcommand("test", Request.of([*common, "--ckpt_path", "best"], "test"))


def test_one_task_ddp_resumes_mid_epoch(tmp_path: Path) -> None:
    import os

    env_before = dict(os.environ)
    ddp = ["--trainer.strategy", "ddp", "--trainer.devices", "1", "--trainer.accelerator", "cpu", "--trainer.limit_train_batches", "4"]
    stop = ["--trainer.callbacks+", "resume_signals.SignalAt", "--trainer.callbacks+.init_args.hook", "on_train_batch_end",
            "--trainer.callbacks+.init_args.batch", "1"]
    try:
        assert exit_code("fit", ["--config", DIGITS, "--trainer.default_root_dir", str(tmp_path), "--trainer.max_epochs", "1", *TINY, *ddp, *stop]) == 143
        run = tmp_path / "digits" / "version_0"
        assert load(run / layout.LAST_CKPT)["global_step"] == 2  # stopped mid-epoch
        run_subcommand("fit", Request.of(["--run_dir", str(run), "--ckpt_path", "last"], "fit"))  # the resumable sampler, as a DistributedSampler of one replica
        assert load(run / layout.LAST_CKPT)["global_step"] == 4
    finally:
        if torch.distributed.is_available() and torch.distributed.is_initialized():
            torch.distributed.destroy_process_group()
        for key in set(os.environ) - set(env_before):
            del os.environ[key]


def _stop_at(epoch: int, batch: int) -> list[str]:
    """SIGTERM to this process after batch ``batch`` of epoch ``epoch`` (not on a resume)."""
    return ["--trainer.callbacks+", "resume_signals.SignalAt", "--trainer.callbacks+.init_args.hook", "on_train_batch_end",
            "--trainer.callbacks+.init_args.epoch", str(epoch), "--trainer.callbacks+.init_args.batch", str(batch)]


def test_a_users_save_last_does_not_roll_the_resume_back(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 45: a user's ``ModelCheckpoint(save_last=True)`` rewrites ``last.ckpt`` only when it saves a file of
    its own (here every third epoch, step 6); the launcher's resume checkpoint goes beside it as ``resume.ckpt``
    (the user's ``last.ckpt`` is never written over, also not by the SIGTERM save at step 7), and ``--ckpt_path
    last`` resumes from the run's newest state, not 1 step (or epochs) back."""
    users = tmp_path / "users_last.yaml"
    users.write_text("trainer:\n  callbacks:\n    - class_path: lightning.pytorch.callbacks.ModelCheckpoint\n"
                     "      init_args: {every_n_epochs: 3, save_top_k: -1, save_last: true}\n")
    args = ["--config", DIGITS, "--config", str(users), "--trainer.default_root_dir", str(tmp_path), "--trainer.max_epochs", "5", *TINY]
    assert exit_code("fit", [*args, *_stop_at(3, 0)]) == 143
    run = tmp_path / "digits" / "version_0"
    checkpoints = run / "checkpoints"
    assert load(checkpoints / "last.ckpt")["global_step"] == 6 and load(checkpoints / "epoch=2-step=6.ckpt")["global_step"] == 6
    assert load(run / layout.RESUME_CKPT)["global_step"] == 7  # stopped 1 batch into epoch 4
    capsys.readouterr()
    run_subcommand("fit", Request.of(["--run_dir", str(run), "--ckpt_path", "last"], "fit"))
    out = capsys.readouterr().out
    assert f"from {run / layout.RESUME_CKPT} (step 7, 3 epochs done)" in out, out[-2000:]
    assert "repeats" not in out and "inexact" not in out  # digits' loader is resumable: an exact resume
    last = json.loads((run / "history.jsonl").read_text().splitlines()[-1])
    assert last["checkpoint"] == str(run / layout.RESUME_CKPT) and last["global_step"] == 7 and "inexact" not in last
    assert load(run / layout.RESUME_CKPT)["global_step"] == 10
    newest = layout.newest_checkpoint(run)
    assert newest is not None and newest.global_step == 10


def test_a_plain_dataloader_resumed_mid_epoch_is_inexact(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 45: stopped 2 batches into epoch 2 with a plain ``DataLoader`` (Lightning restores no position in it),
    the resume says it replays and skips 2 batches, ``history.jsonl`` records it, ``train runs`` and ``train jobs``'
    goodput show it."""
    from trainer_cli.rundir import goodput, run_cost
    from trainer_cli.tools import run_row, runs

    args = ["--config", DIGITS, "--data", "resume_signals.PlainLoaderDigits", "--trainer.default_root_dir", str(tmp_path),
            "--trainer.max_epochs", "2", *TINY, "--trainer.limit_train_batches", "4"]
    assert exit_code("fit", [*args, *_stop_at(1, 1)]) == 143
    run = tmp_path / "digits" / "version_0"
    capsys.readouterr()
    run_subcommand("fit", Request.of(["--run_dir", str(run), "--ckpt_path", "last"], "fit"))
    out = capsys.readouterr().out
    assert "resume: inexact: stopped 2 batch(es) into epoch 2 and the training DataLoader is not resumable" in out, out[-2000:]
    assert "so 2 batch(es) of it are replayed and 2 skipped" in out
    last = json.loads((run / "history.jsonl").read_text().splitlines()[-1])
    assert last["global_step"] == 6 and last["inexact"] == {"epoch": 1, "batches_replayed": 2, "batches_skipped": 2}
    assert load(run / layout.LAST_CKPT)["global_step"] == 8
    header, rows = runs.table_rows(runs.collect([tmp_path]))
    assert rows[0][header.index("inexact resume")] == "epoch 2: 2 batches replayed, 2 skipped"
    shown = "\n".join(goodput.block(goodput.allocated(run, run_cost.cost(run))))
    assert "0 step(s) redone; inexact resume (not resumable DataLoader): epoch 2: 2 batches replayed, 2 skipped" in shown, shown


def test_a_resume_that_lowers_max_epochs_is_a_shortening(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 45: recorded as ``shortening`` (not ``extension``); once the run is past the new limit, one line, exit 0."""
    args = ["--config", DIGITS, "--trainer.default_root_dir", str(tmp_path), "--trainer.max_epochs", "3", *TINY]
    assert exit_code("fit", [*args, *_stop_at(1, 0)]) == 143
    run = tmp_path / "digits" / "version_0"
    run_subcommand("fit", Request.of(["--run_dir", str(run), "--ckpt_path", "last", "--trainer.max_epochs", "2"], "fit"))
    last = json.loads((run / "history.jsonl").read_text().splitlines()[-1])
    assert last["kind"] == "shortening" and last["changes"] == ["trainer.max_epochs: 3 -> 2"], last
    assert load(run / layout.LAST_CKPT)["global_step"] == 4
    capsys.readouterr()
    records = (run / "history.jsonl").read_text()
    assert exit_code("fit", ["--run_dir", str(run), "--ckpt_path", "last", "--trainer.max_epochs", "1"]) == 0
    out = capsys.readouterr().out
    assert f"{run} is already past max_epochs=1, max_steps=-1 (it trained 2 epochs, step 4): nothing to train" in out, out
    assert (run / "history.jsonl").read_text() == records and load(run / layout.LAST_CKPT)["global_step"] == 4
