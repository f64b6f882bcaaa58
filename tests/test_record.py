"""The run's record (issue 28, defect 3), through a foreign project's own script in subclass mode with
its own instantiate-time link (``data.n_labels -> model.init_args.num_classes``):

- ``config.yaml`` holds the value the link gave the built model (it held the constructor's default);
- it holds exactly what the user's stock LightningCLI script reads back: the launcher's own keys
  (``name``, ``param_groups``, ...) live beside it in ``launcher.yaml`` and are read back on resume;
- a stock run resumed under TrainerCLI reports only the changes the user made (it printed
  ``param_groups...: None -> False``) and stays readable by the stock script;
- an evaluation of a run (``test --run_dir R`` with another data setting) records what it changed in
  the run's history (it recorded ``"changes": []``);
- the record's header names the command that re-runs it (the script, not ``train``).
"""

from __future__ import annotations

import json
from pathlib import Path

import forkserver
import pytest
import yaml
from foreign_support import FOREIGN, MODEL, foreign_env

from trainer_cli.rundir import record

LINK = 'parser.link_arguments("data.n_labels", "model.init_args.num_classes")'
INSTANTIATE_LINK = 'parser.link_arguments("data.n_labels", "model.init_args.num_classes", apply_on="instantiate")'
STOCK_IMPORT = "from lightning.pytorch.cli import LightningCLI"


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The user's stock script (``stock_main.py``) and the same with TrainerCLI swapped in (``main.py``)."""
    tmp = tmp_path_factory.mktemp("record")
    stock = (FOREIGN / "plain_subclass_main.py").read_text()
    assert LINK in stock and STOCK_IMPORT in stock
    stock = stock.replace(LINK, INSTANTIATE_LINK)
    (tmp / "stock_main.py").write_text(stock)
    (tmp / "main.py").write_text(stock.replace(STOCK_IMPORT, "from trainer_cli import TrainerCLI as LightningCLI"))
    return tmp


def script(project: Path, name: str, *args: str, cwd: Path | None = None) -> str:
    done = forkserver.run_python([str(project / name), *args], cwd or project, foreign_env(), 600)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def only_run(root: Path) -> Path:
    [config] = list(root.rglob("config.yaml"))
    return config.parent


def test_record_holds_the_linked_value_and_the_stock_script_reads_it(project: Path, tmp_path: Path) -> None:
    script(project, "main.py", "fit", "--model", MODEL, "--data.n_labels", "5", "--trainer.max_epochs", "1", cwd=tmp_path)
    run = only_run(tmp_path)
    text = (run / "config.yaml").read_text()
    config = yaml.safe_load(text)
    assert config["model"]["init_args"]["num_classes"] == 5  # the value the model was built with
    assert not set(record.LAUNCHER_KEYS) & set(config)  # the launcher's own keys are beside it
    launcher = yaml.safe_load((run / record.LAUNCHER_FILE).read_text())
    assert set(launcher) == set(record.LAUNCHER_KEYS) and record.read(run / "config.yaml")["name"] == launcher["name"]
    assert text.startswith(f"# The resolved config of this run: `python {project / 'main.py'} fit --config <this file>`")
    # the user's stock script takes the record as it is, and builds the model with the linked value
    again = tmp_path / "again"
    again.mkdir()
    script(project, "stock_main.py", "fit", "--config", str(run / "config.yaml"), cwd=again)
    stock_run = only_run(again)
    assert yaml.safe_load((stock_run / "hparams.yaml").read_text())["num_classes"] == 5


def test_a_stock_run_resumed_under_trainercli_reports_only_real_changes(project: Path, tmp_path: Path) -> None:
    script(project, "stock_main.py", "fit", "--model", MODEL, "--trainer.max_epochs", "1", cwd=tmp_path)
    run = only_run(tmp_path)
    [ckpt] = list((run / "checkpoints").glob("*.ckpt"))
    out = script(
        project, "main.py", "fit", "--run_dir", str(run), "--ckpt_path", str(ckpt), "--trainer.max_epochs", "2",
        cwd=tmp_path,
    )
    assert [line for line in out.splitlines() if line.startswith("resume:")] == [
        "resume: trainer.max_epochs: 1 -> 2 (changed since the run started)"
    ]
    config = yaml.safe_load((run / "config.yaml").read_text())
    assert config["trainer"]["max_epochs"] == 2 and not set(record.LAUNCHER_KEYS) & set(config)
    again = tmp_path / "again"
    again.mkdir()
    script(project, "stock_main.py", "fit", "--config", str(run / "config.yaml"), "--trainer.max_epochs", "1", cwd=again)


def test_an_evaluation_records_what_it_changed(project: Path, tmp_path: Path) -> None:
    script(project, "main.py", "fit", "--model", MODEL, "--trainer.max_epochs", "1", cwd=tmp_path)
    run = only_run(tmp_path)
    script(project, "main.py", "test", "--run_dir", str(run), "--data.n_samples", "64", cwd=tmp_path)
    last = [json.loads(line) for line in (run / "history.jsonl").read_text().splitlines()][-1]
    assert last["verb"] == "test" and last["changes"] == ["data.n_samples: 128 -> 64"]
    assert last["checkpoint"]  # and which checkpoint the number came from
