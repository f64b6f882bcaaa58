"""TrainerCLI as a drop-in LightningCLI, tried on a user's own project (``tests/foreign``: its own
package, argument names, logger, link and ``trainer_defaults``; no launcher import but ``main.py``'s)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import forkserver
import pytest
import torch
import yaml
from support import REPO, run_train

FOREIGN = REPO / "tests" / "foreign"


def _env() -> dict[str, str]:
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "PYTHONPATH": os.pathsep.join([str(FOREIGN), os.environ.get("PYTHONPATH", "")])}
    env.pop("TRAINER_CLI_RUN_DIR", None)
    return env


def _script(cwd: Path, *args: str, script: str = "main.py") -> subprocess.CompletedProcess[str]:
    return forkserver.run_python([str(FOREIGN / script), *args], cwd, _env(), 600)


def _train(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return run_train(*args, cwd=cwd, env=_env())


def _config(run: Path) -> dict:
    return yaml.safe_load((run / "config.yaml").read_text())


def test_users_script_gains_run_directory_record_and_resume(tmp_path: Path) -> None:
    """``python main.py fit`` with TrainerCLI swapped in: the user's link and trainer_defaults hold,
    config.yaml records the values the model was built with, and --run_dir resumes exactly."""
    first = _script(tmp_path, "fit", "--data.n_labels", "5", "--trainer.max_epochs", "1")
    assert first.returncode == 0, first.stderr[-3000:]
    run = tmp_path / "foreign_logs" / "blobs" / "version_0"  # where LightningCLI puts it: the user's logger's log_dir
    cfg = _config(run)
    assert cfg["model"]["num_classes"] == 5  # the user's own link (data.n_labels -> model.num_classes)
    assert cfg["seed_everything"] == 7 and cfg["trainer"]["log_every_n_steps"] == 2  # the script's defaults
    assert cfg["trainer"]["logger"]["init_args"]["save_dir"] == "foreign_logs"  # the user's logger kept as it is
    assert "Logs go to the run directory" not in first.stdout
    assert (run / "metrics.csv").is_file() and (run / "git.txt").is_file() and not (tmp_path / "runs").exists()
    steps = torch.load(run / "checkpoints" / "last.ckpt", weights_only=False)["global_step"]
    assert steps == 8  # 128 samples / 16 per batch

    again = _script(tmp_path, "fit", "--run_dir", str(run), "--ckpt_path", "last", "--trainer.max_epochs", "2")
    assert again.returncode == 0, again.stderr[-3000:]
    resumed = torch.load(run / "checkpoints" / "last.ckpt", weights_only=False)
    assert resumed["global_step"] == 2 * steps and resumed["hyper_parameters"]["num_classes"] == 5
    assert "Logs go to the run directory" not in again.stdout and sorted(p.name for p in run.parent.iterdir()) == ["version_0"]

    rerun = _script(tmp_path, "fit", "--config", str(run / "config.yaml"), "--trainer.max_epochs", "1")
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    assert _config(run.parent / "version_1")["model"]["num_classes"] == 5  # re-run: a new run beside it


def test_users_script_with_lightnings_default_logger_resumes_then_tests(tmp_path: Path) -> None:
    """A script whose logger is Lightning's default (``logger: null``): the record rewritten on resume
    keeps ``logger: null`` (it once became a logger section of nulls, which `test --run_dir` refused);
    the resume and the test log into the run directory (issue 45: their events went to a new
    ``runs/lightning_logs/version_0``, which the printed ``tensorboard --logdir`` misses)."""
    from trainer_cli.rundir import metrics

    first = _script(tmp_path, "fit", "--data.n_labels", "3", "--trainer.logger", "null", "--trainer.max_epochs", "1")
    assert first.returncode == 0, first.stderr[-3000:]
    run = tmp_path / "lightning_logs" / "version_0"
    again = _script(tmp_path, "fit", "--run_dir", str(run), "--ckpt_path", "last", "--trainer.max_epochs", "2")
    assert again.returncode == 0, again.stderr[-3000:]
    assert _config(run)["trainer"]["logger"] is None
    test = _script(tmp_path, "test", "--run_dir", str(run), "--ckpt_path", "last")
    assert test.returncode == 0, test.stderr[-3000:]
    assert sorted(p.name for p in run.parent.iterdir()) == ["version_0"]
    events = [p.relative_to(tmp_path) for p in tmp_path.rglob("events.out.tfevents.*")]
    assert len(events) == 3 and {p.parent for p in events} == {Path("lightning_logs/version_0")}, events
    assert sorted(p.name for p in tmp_path.iterdir()) == ["lightning_logs"]
    assert metrics.read(run).epochs == 2 and "test_acc" in metrics.read(run).scalars


def test_model_value_set_by_user_is_kept_recorded_and_tested(tmp_path: Path) -> None:
    """A user model with its own num_classes and a data module without that attribute: the value
    the user gave is built, recorded, and rebuilt by `train test --run_dir`."""
    fit = _train(tmp_path, "fit", "--model", "lit_foreign.model.SmallNet", "--data", "lit_foreign.data.BlobData",
                 "--model.num_classes", "8", "--data.n_labels", "4", "--trainer.max_epochs", "1", "--optimizer", "SGD",
                 "--optimizer.lr", "0.1")
    assert fit.returncode == 0, fit.stderr[-3000:]
    run = next((tmp_path / "runs" / "run").iterdir())
    assert _config(run)["model"]["init_args"]["num_classes"] == 8
    test = _train(tmp_path, "test", "--run_dir", str(run), "--ckpt_path", "last")
    assert test.returncode == 0, test.stderr[-3000:]
    assert "does not fit the model" not in test.stderr


def test_trainercli_in_process_leaves_no_global_state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Built in-process with run=False: the user's link wins over the launcher's, subcommands() is a
    staticmethod, and nothing process-global is left behind for a plain LightningCLI."""
    from lightning.pytorch.cli import LightningCLI

    from trainer_cli import TrainerCLI

    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(FOREIGN))
    from lit_foreign.cli import build

    cli = build(TrainerCLI, args=["--data.n_labels", "3"], run=False)
    assert cli.model.hparams.num_classes == 3 and cli.trainer.max_epochs == 2
    assert "TRAINER_CLI_RUN_DIR" not in os.environ
    assert set(TrainerCLI.subcommands()) == {"fit", "validate", "test", "predict"}
    plain = build(LightningCLI, args=["--data.n_labels", "6"], run=False)
    assert plain.model.hparams.num_classes == 6


def test_launcher_link_fills_only_unset_values(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The launcher's data->model link (num_classes from the data module) fills a model value the user
    left at its default, and leaves one the user set."""
    from trainer_cli import TrainerCLI

    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(FOREIGN))
    from lit_foreign.data import BlobData
    from lit_foreign.model import SmallNet

    class WithNumClasses(BlobData):
        @property
        def num_classes(self) -> int:
            return self.n_labels

    filled = TrainerCLI(SmallNet, WithNumClasses, args=["--data.n_labels", "3"], run=False)
    assert filled.model.hparams.num_classes == 3
    kept = TrainerCLI(SmallNet, WithNumClasses, args=["--data.n_labels", "3", "--model.num_classes", "7"], run=False)
    assert kept.model.hparams.num_classes == 7


def test_users_script_submits_itself_dry_run(tmp_path: Path) -> None:
    """``python main.py submit``: the script's own CLI parses (its link, its defaults) and the job runs
    the script with the frozen config."""
    out = _script(tmp_path, "submit", "--data.n_labels", "3", "--trainer.accelerator", "cpu", "--trainer.devices", "1", "--dry-run")
    assert out.returncode == 0, out.stderr[-3000:]
    # the run directory `python main.py fit` would make: the script's CSVLogger's foreign_logs/blobs/version_<N>
    assert f"python {FOREIGN / 'main.py'} fit --config {tmp_path}/foreign_logs/blobs/version_0/config.yaml" in out.stdout.replace(sys.executable, "python")
    assert not (tmp_path / "foreign_logs").exists() and not (tmp_path / "runs").exists()  # a dry run writes nothing
    bad = _script(tmp_path, "submit", "--data.n_labels", "3", "--dry-run")
    assert bad.returncode == 2 and "Traceback" not in bad.stderr and "--trainer.devices" in bad.stderr
    # its help names the script, not `train`, and offers what a script's submit takes
    helped = _script(tmp_path, "submit", "--help")
    assert helped.returncode == 0, helped.stderr[-3000:]
    assert helped.stdout.startswith(f"usage: python {FOREIGN / 'main.py'} submit ")
    own = helped.stdout.split("Slurm options")[0]  # the Slurm options' own docs aside
    assert "`train" not in own and "--sweep" not in own and "--check" not in own, own
    assert "--slurm.partition" in helped.stdout and helped.stdout.count("usage:") == 1


def test_a_sweep_from_a_script_is_refused_naming_the_train_submit_command(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``python main.py submit --sweep``: not yet; the error names the ``train submit`` command with the
    script's classes (a class defined in the script itself by the script's module name) and its folder on PYTHONPATH."""
    from trainer_cli.config.request import Request
    from trainer_cli.errors import UserError
    from trainer_cli.schedulers.slurm import fit_job

    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(FOREIGN))
    from lit_foreign.data import BlobData

    class Local:  # a class of the script's own file: its module is __main__
        pass

    Local.__module__, Local.__qualname__ = "__main__", "Local"
    with pytest.raises(UserError) as err:
        fit_job.main(Request.of(["--sweep", "model.hidden_dim=8,16"], "submit"), parse=None, script=str(tmp_path / "proj" / "main.py"),  # type: ignore[arg-type]
                     fixed={"model": Local, "data": BlobData})
    assert "`PYTHONPATH=proj train submit --model main.Local --data lit_foreign.data.BlobData ...`" in str(err.value)
    assert "--sweep_metric NAME" in str(err.value)


def test_users_script_with_lightnings_defaults_submits_beside_its_fit_runs(tmp_path: Path) -> None:
    """A script on Lightning's default logger and root: ``python main.py submit`` freezes the script's
    defaults (not the launcher's ``runs/`` root and logger) and takes the next ``lightning_logs/version_<N>``
    after the script's own fit; ``--ckpt_path last`` goes into that newest run."""
    first = _script(tmp_path, "fit", "--data.n_labels", "3", "--trainer.logger", "null", "--trainer.max_epochs", "1")
    assert first.returncode == 0, first.stderr[-3000:]
    flags = ["--data.n_labels", "3", "--trainer.logger", "null", "--trainer.accelerator", "cpu", "--trainer.devices", "1"]
    new = _script(tmp_path, "submit", *flags, "--dry-run")
    assert new.returncode == 0, new.stderr[-3000:]
    # (with the launcher's default root it was runs/lightning_logs/version_0)
    assert f"fit --config {tmp_path}/lightning_logs/version_1/config.yaml" in new.stdout
    more = _script(tmp_path, "submit", *flags, "--ckpt_path", "last", "--trainer.max_epochs", "2", "--dry-run")
    assert more.returncode == 0, more.stderr[-3000:]
    assert f"resubmit: into the newest run of 'lightning_logs': {tmp_path}/lightning_logs/version_0" in more.stdout
    assert sorted(p.name for p in (tmp_path / "lightning_logs").iterdir()) == ["version_0"] and not (tmp_path / "runs").exists()


def test_users_script_resubmission_that_changes_the_weights_is_refused_before_queueing(tmp_path: Path) -> None:
    """``python main.py submit --ckpt_path last`` without the fit's ``--data.n_labels 3`` links
    ``model.num_classes`` 4 into the run's config: refused on the submitting machine (the script fixes
    the model class, so its config.yaml has no class_path to build it from), config.yaml unchanged;
    it was rewritten and the job failed at its start ("weights do not fit")."""
    first = _script(tmp_path, "fit", "--data.n_labels", "3", "--trainer.max_epochs", "1")
    assert first.returncode == 0, first.stderr[-3000:]
    run = tmp_path / "foreign_logs" / "blobs" / "version_0"
    before = (run / "config.yaml").read_text()
    flags = ["--trainer.accelerator", "cpu", "--trainer.devices", "1", "--ckpt_path", "last", "--trainer.max_epochs", "2"]
    for dry_run in (["--dry-run"], []):  # refused before sbatch either way: nothing is queued, nothing rewritten
        bad = _script(tmp_path, "submit", *flags, *dry_run)
        assert bad.returncode == 2 and "Traceback" not in bad.stderr, bad.stdout + bad.stderr[-3000:]
        assert "cannot resume from" in bad.stderr and "weights do not fit" in bad.stderr and "configured [4," in bad.stderr, bad.stderr
        assert (run / "config.yaml").read_text() == before and not list(run.glob("config.prev-*.yaml"))
    good = _script(tmp_path, "submit", *flags, "--data.n_labels", "3", "--dry-run")
    assert good.returncode == 0, good.stderr[-3000:]
    assert "resubmit: trainer.max_epochs: 1 -> 2" in good.stdout and "n_labels" not in good.stdout


def test_users_script_outside_the_repo_reports_and_cleans_up(tmp_path: Path) -> None:
    """From a user's own folder: `train fit` imports the user's modules from the working directory, and a
    script's start that fails on a user error says one line, exits 2 and leaves no run directory."""
    import shutil

    shutil.copytree(FOREIGN / "lit_foreign", tmp_path / "lit_foreign")
    env = {k: v for k, v in _env().items() if k != "PYTHONPATH"}
    fit = subprocess.run([str(Path(sys.executable).parent / "train"), "fit", "--model", "lit_foreign.model.SmallNet", "--data",
                          "lit_foreign.data.BlobData", "--trainer.max_epochs", "1"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert fit.returncode == 0, fit.stderr[-3000:]
    bad = _script(tmp_path, "fit", "--run_dir", str(tmp_path / "runs" / "run" / "version_9"), "--ckpt_path", "last")
    assert bad.returncode == 2 and "Traceback" not in bad.stderr and "nothing to resume" in bad.stderr
    assert sorted(p.name for p in (tmp_path / "runs" / "run").iterdir()) == ["version_0"]


def test_run_made_by_train_resumes_and_tests_under_the_users_script(tmp_path: Path) -> None:
    """A run made with `train fit` (config.yaml in subclass form: class_path + init_args) resumes and
    tests under the user's script, whose CLI fixes the classes; a config naming another class is one line."""
    fit = _train(tmp_path, "fit", "--model", "lit_foreign.model.SmallNet", "--data", "lit_foreign.data.BlobData",
                 "--model.num_classes", "3", "--data.n_labels", "3", "--trainer.max_epochs", "1")
    assert fit.returncode == 0, fit.stderr[-3000:]
    run = tmp_path / "runs" / "run" / "version_0"
    again = _script(tmp_path, "fit", "--run_dir", str(run), "--ckpt_path", "last", "--trainer.max_epochs", "2")
    assert again.returncode == 0, again.stderr[-3000:]
    assert "args parameter" not in again.stderr  # the script's own args, rebuilt from sys.argv: no LightningCLI warning
    assert torch.load(run / "checkpoints" / "last.ckpt", weights_only=False)["global_step"] == 2 * 8
    test = _script(tmp_path, "test", "--run_dir", str(run), "--ckpt_path", "last")
    assert test.returncode == 0 and "test_acc" in test.stdout, test.stderr[-3000:]
    other = tmp_path / "other.yaml"
    other.write_text("model:\n  class_path: lightning.pytorch.demos.boring_classes.BoringModel\n")
    bad = _script(tmp_path, "fit", "--config", str(other))
    assert bad.returncode == 2 and "Traceback" not in bad.stderr
    assert "model.class_path is lightning.pytorch.demos.boring_classes.BoringModel, but this script builds lit_foreign.model.SmallNet" in bad.stderr


def _stopped_script(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """The user's script with the test callbacks of ``tests/resume_signals.py`` importable."""
    env = {**_env(), "PYTHONPATH": os.pathsep.join([str(FOREIGN), str(REPO / "tests")])}
    return forkserver.run_python([str(FOREIGN / "main.py"), *args], cwd, env, 600)


def test_ctrl_c_after_trained_steps_before_the_first_checkpoint_keeps_the_run(tmp_path: Path) -> None:
    """Issue 45: a project whose ModelCheckpoint(save_last=True) saves every 5 epochs, Ctrl-C'd in its first
    epoch (6 steps trained, no checkpoint yet: the launcher's own resume.ckpt is saved at the epoch's end):
    exit 130, the run directory stays with its config.yaml, hparams.yaml, TensorBoard events and metrics (it
    was removed: "before any batch was trained"), the message says the steps were not saved, what is kept and
    how to run it again, and that command runs."""
    from trainer_cli.rundir import metrics

    stop = ["--trainer.callbacks+", "resume_signals.SignalAt", "--trainer.callbacks+.init_args.hook", "on_train_batch_end",
            "--trainer.callbacks+.init_args.epoch", "0", "--trainer.callbacks+.init_args.batch", "5",
            "--trainer.callbacks+.init_args.signal", "SIGINT"]
    every_5 = ["--trainer.callbacks+", "ModelCheckpoint", "--trainer.callbacks+.every_n_epochs", "5",
               "--trainer.callbacks+.save_last", "true"]
    done = _stopped_script(tmp_path, "fit", "--trainer.logger", "true", "--trainer.max_epochs", "10", *every_5, *stop)
    run = tmp_path / "lightning_logs" / "version_0"
    assert done.returncode == 130, done.stderr[-3000:]
    assert "Training stopped by Ctrl-C at epoch 1, step 6; its 6 trained step(s) were not saved" in done.stderr, done.stderr[-3000:]
    assert f"the run directory {run} is kept (config.yaml, " in done.stderr and "removed" not in done.stderr
    assert not list(run.rglob("*.ckpt"))
    for kept in ("config.yaml", "hparams.yaml", "history.jsonl", "run.json", "metrics.jsonl"):
        assert (run / kept).is_file(), kept
    assert list(run.glob("events.out.tfevents.*")) and "train_loss" in metrics.read(run).scalars
    assert metrics.read(run).steps == 6  # where it stopped (the stop's record)
    again = done.stderr.strip().splitlines()[-1].split("Run it again (a new run) with:", 1)[1].split()
    assert again[:4] == ["python", str(FOREIGN / "main.py"), "fit", "--config"]
    rerun = _stopped_script(tmp_path, *again[2:], "--trainer.max_epochs", "1", "--trainer.limit_train_batches", "3")  # its stop: batch 5
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    assert (tmp_path / "lightning_logs" / "version_1" / "checkpoints" / "last.ckpt").is_file() and run.is_dir()


def test_ctrl_c_before_any_batch_leaves_no_folder_the_start_made(tmp_path: Path) -> None:
    """Ctrl-C before the first batch of a start that made its folders (``foreign_logs/blobs/version_0``):
    nothing was trained, nothing is kept: no empty ``foreign_logs/`` left behind."""
    stop = ["--trainer.callbacks+", "resume_signals.SignalAt", "--trainer.callbacks+.init_args.hook", "on_train_batch_start",
            "--trainer.callbacks+.init_args.signal", "SIGINT"]
    done = _stopped_script(tmp_path, "fit", *stop)
    assert done.returncode == 130, done.stderr[-3000:]
    assert "before any batch was trained; nothing was saved" in done.stderr, done.stderr[-3000:]
    assert list(tmp_path.iterdir()) == []


def test_users_script_stops_on_sigterm_with_checkpoint_exit_code_and_resume_line(tmp_path: Path) -> None:
    """SIGTERM to ``python main.py fit`` during training: last.ckpt saved, exit 143, the resume line
    names the script; the printed command resumes the run."""
    import signal
    import time

    # forked from the suite's server where it can be: the signal comes well after the start, while it trains
    proc = forkserver.popen_python([str(FOREIGN / "main.py"), "fit", "--trainer.max_epochs", "5000"], tmp_path, _env(),
                                   stderr=subprocess.PIPE)
    last = tmp_path / "foreign_logs" / "blobs" / "version_0" / "checkpoints" / "last.ckpt"
    deadline = time.monotonic() + 120
    while not last.exists() and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.2)
    time.sleep(0.5)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 143, err[-3000:]
    assert "Training stopped by SIGTERM" in err and "Traceback" not in err
    resume = err.strip().splitlines()[-1].split("Resume with:", 1)[1].split()
    assert resume[:2] == ["python", str(FOREIGN / "main.py")]
    stopped_at = torch.load(last, weights_only=False)["global_step"]
    again = _script(tmp_path, *resume[2:], "--trainer.max_epochs", str(stopped_at // 8 + 1))
    assert again.returncode == 0, again.stderr[-3000:]
    assert torch.load(last, weights_only=False)["global_step"] == (stopped_at // 8 + 1) * 8
