"""Which changes a resume allows: model arguments decided by the checkpoint's tensors, and
``--resume_force`` for a change the check refuses.

A real tiny digits run (the project's CNN: ``backbone_kwargs: {width: 32, stages: 2, dropout: 0.1}``)
resumed in-process as ``train`` runs it; the run directory is read back.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml
from support import CONFIGS, DIGITS

from trainer_cli.config.request import Request
from trainer_cli.errors import UserError
from trainer_cli.rundir import history, record
from trainer_cli.runtime.verbs import run_subcommand

TINY = [
    "--trainer.limit_train_batches", "2", "--trainer.limit_val_batches", "1",
    "--trainer.enable_progress_bar", "false", "--trainer.enable_model_summary", "false",
]


def cnn(width: int = 32, dropout: float = 0.1) -> list[str]:
    return ["--model.init_args.backbone_kwargs", f"{{width: {width}, stages: 2, dropout: {dropout}}}"]


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("runs")
    run_subcommand("fit", Request.of(["--config", DIGITS, "--trainer.default_root_dir", str(root), "--trainer.max_epochs", "1", *TINY], "fit"))
    return root / "digits" / "version_0"


def resume(trained: Path, tmp_path: Path, *args: str, configs: tuple[str, ...] = ()) -> Path:
    run = tmp_path / "run"
    if not run.exists():
        shutil.copytree(trained, run)
    layers = [a for c in configs for a in ("--config", c)]  # first: a config sets ckpt_path and run_dir too
    run_subcommand("fit", Request.of([*layers, "--run_dir", str(run), "--ckpt_path", "last", "--trainer.max_epochs", "2", *TINY, *args], "fit"))
    return run


def test_a_dropout_change_resumes_with_one_line(trained: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = resume(trained, tmp_path, *cnn(dropout=0.3))
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("resume: model.")]
    assert lines == ["resume: model.init_args.backbone_kwargs.dropout: 0.1 -> 0.3 (changed since the run started)"]
    assert history.read(run)[-1]["changes"] == ["model.init_args.backbone_kwargs.dropout: 0.1 -> 0.3", "trainer.max_epochs: 1 -> 2"]
    config = yaml.safe_load((run / "config.yaml").read_text())
    assert config["model"]["init_args"]["backbone_kwargs"]["dropout"] == 0.3 and config["trainer"]["max_epochs"] == 2


def test_a_width_change_is_refused_naming_the_tensor(trained: Path, tmp_path: Path) -> None:
    run = tmp_path / "run"
    shutil.copytree(trained, run)
    before = {p.name: p.stat().st_mtime_ns for p in run.rglob("*")}
    with pytest.raises(UserError) as err:
        resume(trained, tmp_path, *cnn(width=48))
    message = str(err.value)
    assert "net.features.0.weight: checkpoint [32, 1, 3, 3], configured [48, 1, 3, 3]" in message
    assert "--resume_force true" in message and "\n" not in message
    assert {p.name: p.stat().st_mtime_ns for p in run.rglob("*")} == before  # nothing written: no history, same config


def test_resume_force_lets_a_refused_change_through_and_never_loads_part_of_the_weights(
    trained: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = tmp_path / "run"
    shutil.copytree(trained, run)
    # the run's config with a callback that keeps state added (a --config given: the run's is not taken by itself)
    early_stopping = (str(run / "config.yaml"), str(CONFIGS / "callbacks" / "early_stopping.yaml"))
    with pytest.raises(UserError, match="EarlyStopping added.*--resume_force true"):
        resume(trained, tmp_path, configs=early_stopping)
    resume(trained, tmp_path, "--resume_force", "true", configs=early_stopping)
    assert "resume: forced: trainer.callbacks: 4 -> 5 entries (EarlyStopping added)" in capsys.readouterr().out
    assert history.read(run)[-1]["options"]["resume_force"] is True
    assert record.read(run / "config.yaml")["resume_force"] is False  # forced once, not for every later start
    # weights that do not fit: forced past the check, the load is still Lightning's strict one
    with pytest.raises(UserError, match="size mismatch for net.features.0.weight"):
        run_subcommand("fit", Request.of(["--run_dir", str(run), "--ckpt_path", "last", "--trainer.max_epochs", "3", *TINY, *cnn(width=48), "--resume_force", "true"], "fit"))
    assert "resume: forced: the checkpoint's weights do not fit the configured model (net.features.0.weight" in capsys.readouterr().out


def test_a_resume_keeps_the_records_header_naming_the_linked_and_launcher_set_values(tmp_path: Path) -> None:
    """Bug A5: a resume read the run's config.yaml, where the values the data->model links gave
    (``in_channels=1``, ``image_size=8``: not the model's defaults) and the values the launcher set for the
    run directory (the logger's ``name``/``save_dir``/``version``) stand as plain values, so it saw them as
    the user's: the rewritten header lost their lines while the values stayed. Resumed in place, as the
    README says (``train fit --run_dir RUN --ckpt_path last --trainer.max_epochs N``)."""
    root = tmp_path / "runs"
    run_subcommand("fit", Request.of(["--config", DIGITS, "--trainer.default_root_dir", str(root), "--trainer.max_epochs", "1", *TINY], "fit"))
    run = root / "digits" / "version_0"
    before = (run / "config.yaml").read_text()
    linked = record.linked_line(
        {f"model.init_args.{k}": v for k, v in {"num_classes": 10, "in_channels": 1, "image_size": 8}.items()}
    )
    assert linked in before.splitlines()
    run_subcommand("fit", Request.of(["--run_dir", str(run), "--ckpt_path", "last", "--trainer.max_epochs", "2", *TINY], "fit"))
    after = (run / "config.yaml").read_text()
    assert history.read(run)[-1]["changes"] == ["trainer.max_epochs: 1 -> 2"]  # rewritten: the record changed

    def header(text: str) -> list[str]:
        return [line for line in text.splitlines() if line.startswith("#") and not line.startswith("# Rewritten on resume")]

    assert header(after) == header(before) and linked in after.splitlines()
    assert any(line.startswith("#   trainer.logger.init_args.save_dir:") for line in header(after))
    old, new = yaml.safe_load(before), yaml.safe_load(after)
    assert new["model"] == old["model"] and new["trainer"]["logger"] == old["trainer"]["logger"]  # values unchanged
    # the values as configured (`train runs` compares them) read back as before the resume
    configured = record.read(run / "config.yaml", configured=True) or {}
    assert configured["trainer"]["logger"] == (record.read(run / "config.prev-1.yaml", configured=True) or {})["trainer"]["logger"]
