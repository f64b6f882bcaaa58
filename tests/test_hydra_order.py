"""Group files layered after an experiment merge in Hydra's order (``trainer_cli.config.layer_order.hydra_order``).

A project of lightning-hydra-template's shape (``tests/foreign_lht``, its ``train.yaml`` listing ``trainer`` before
``experiment`` and ``debug`` after it) with the template's ``configs/debug/default.yaml`` and ``fdr.yaml`` (as in
https://github.com/ashleve/lightning-hydra-template: ``fdr.yaml`` is ``defaults: [default]`` and
``trainer.fast_dev_run: true``) and a few more group files of the shapes a ``defaults:`` list takes: a plain entry
at the including file's place (``- default``, with ``_self_`` first or last, ``- /trainer/long@trainer``) and
``override`` entries that change a group's option at the group's own place in ``train.yaml``.

The reference is Hydra itself: its compose API on the same ``configs/`` (``compose("train", ["experiment=example",
"debug=fdr"])``, as ``python src/train.py experiment=example debug=fdr`` composes); the launcher's is ``train fit
--config_root configs --config experiment/example --config debug/fdr --print_config``, run in-process. The keys
compared are the ones those files write: the trainer's values, the callbacks and loggers built (the template's
``instantiate_callbacks`` skips an entry without ``_target_``) and the run's name (``task_name``).
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import pytest
import yaml
from lht_support import lht_project

# the template's configs/debug/default.yaml and fdr.yaml (their comments left out)
DEBUG_DEFAULT = """# @package _global_
task_name: "debug"
callbacks: null
logger: null
extras:
  ignore_warnings: False
  enforce_tags: False
hydra:
  job_logging:
    root:
      level: DEBUG
trainer:
  max_epochs: 1
  accelerator: cpu
  devices: 1
  detect_anomaly: true
data:
  num_workers: 0
  pin_memory: False
"""
FILES = {
    "debug/default.yaml": DEBUG_DEFAULT,
    "debug/fdr.yaml": "# @package _global_\ndefaults:\n  - default\n\ntrainer:\n  fast_dev_run: true\n",
    "debug/self_first.yaml": "# @package _global_\ndefaults:\n  - _self_\n  - default\ntrainer:\n  max_epochs: 9\n",
    "debug/long.yaml": "# @package _global_\ndefaults:\n  - /trainer/long@trainer\ntrainer:\n  fast_dev_run: true\n",
    "debug/no_callbacks.yaml": "# @package _global_\ndefaults:\n  - override /callbacks: none\n"
    "trainer:\n  fast_dev_run: true\n",
    "debug/fdr_no_callbacks.yaml": "# @package _global_\ndefaults:\n  - default\n  - override /callbacks: none\n"
    "trainer:\n  fast_dev_run: true\n",
    "debug/cpu.yaml": "# @package _global_\ndefaults:\n  - override /trainer: cpu\ntrainer:\n  fast_dev_run: true\n",
    "trainer/long.yaml": "defaults:\n  - default\n\nmax_epochs: 50\ncheck_val_every_n_epoch: 5\n",
    "logger/tensorboard.yaml": None,  # the project's own (kept)
    "experiment/long_tb.yaml": "# @package _global_\ndefaults:\n  - override /trainer: long\n  - override /logger: "
    "tensorboard\n\nseed: 7\ntrainer:\n  min_epochs: 3\ncallbacks:\n  early_stopping:\n    patience: 7\n",
}
TRAINER_KEYS = ("min_epochs", "max_epochs", "check_val_every_n_epoch", "fast_dev_run", "accelerator", "devices")
DEFAULTS = {"fast_dev_run": False, "detect_anomaly": False}  # Lightning's, where Hydra's config has no value


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The template-shaped project with the group files of :data:`FILES`."""
    root = lht_project(tmp_path_factory.mktemp("hydra_order") / "project")
    for name, text in FILES.items():
        if text is not None:
            (root / "configs" / name).parent.mkdir(parents=True, exist_ok=True)
            (root / "configs" / name).write_text(text)
    return root


def hydra_config(project: Path, choices: list[str]) -> dict[str, Any]:
    """What Hydra composes for ``python src/train.py CHOICES`` (its compose API, no run)."""
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from omegaconf import OmegaConf

    GlobalHydra.instance().clear()
    try:
        with (
            warnings.catch_warnings(),
            initialize_config_dir(config_dir=str(project / "configs"), version_base="1.3", job_name="train"),
        ):
            warnings.simplefilter("ignore")
            cfg = compose("train", [*choices, "hydra/hydra_logging=none", "hydra/job_logging=none"])
            return OmegaConf.to_container(cfg, resolve=False)  # type: ignore[return-value]
    finally:
        GlobalHydra.instance().clear()


def hydra_summary(cfg: dict[str, Any]) -> dict[str, Any]:
    """The compared keys of a Hydra config, as the template's ``train.py`` builds them."""
    trainer = cfg.get("trainer") or {}

    def built(group: str) -> list[str]:
        entries = cfg.get(group) or {}
        return sorted(e["_target_"] for e in entries.values() if isinstance(e, dict) and "_target_" in e)

    return {
        "trainer": {k: trainer.get(k, DEFAULTS.get(k)) for k in TRAINER_KEYS},
        "detect_anomaly": trainer.get("detect_anomaly", False),
        "callbacks": built("callbacks"),
        "patience": [
            e.get("patience")
            for e in (cfg.get("callbacks") or {}).values()
            if isinstance(e, dict) and str(e.get("_target_", "")).endswith("EarlyStopping")
        ],
        "loggers": built("logger"),
        "name": cfg.get("task_name"),
    }


def launcher_run(
    project: Path, files: list[str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> tuple[dict[str, Any], str]:
    """``train fit --config_root configs --config FILE... --print_config`` in ``project``: the printed config and
    the notes."""
    from trainer_cli.__main__ import main
    from trainer_cli.config import compose

    monkeypatch.setattr(compose, "_NOTED", set())  # a note is printed once a process: each run prints its own
    monkeypatch.setattr(compose, "_NOTED_KEYS", set())
    monkeypatch.chdir(project)
    monkeypatch.syspath_prepend(str(project))
    argv = ["fit", "--config_root", "configs", *(a for f in files for a in ("--config", f)), "--print_config"]
    try:
        code = main(argv)
    except SystemExit as stop:
        code = stop.code if isinstance(stop.code, int) else 0
    out = capsys.readouterr()
    assert code == 0, f"{argv} failed ({code}): {out.err[-3000:]}"
    return yaml.safe_load(out.out), out.err


def launcher_summary(printed: dict[str, Any]) -> dict[str, Any]:
    """The compared keys of the config ``train fit --print_config`` printed."""
    trainer = printed["trainer"]

    def built(key: str) -> list[str]:
        return sorted(e["class_path"] for e in trainer.get(key) or [])

    return {
        "trainer": {k: trainer.get(k) for k in TRAINER_KEYS},
        "detect_anomaly": trainer.get("detect_anomaly"),
        "callbacks": built("callbacks"),
        "patience": [
            e["init_args"].get("patience")
            for e in trainer.get("callbacks") or []
            if e["class_path"].endswith("EarlyStopping")
        ],
        "loggers": built("logger"),
        "name": printed.get("name"),
    }


CASES = [
    # (--config files after the experiment, `python src/train.py experiment=E ...`'s choices)
    ("example", "debug/default"),  # no defaults: list: its own values win, in Hydra as in the launcher
    ("example", "debug/fdr"),  # the report: `- default` (debug/default.yaml's max_epochs: 1) over the experiment's 10
    ("example", "debug/self_first"),  # `_self_` first: debug/default.yaml's max_epochs: 1 over its own 9 too
    ("example", "debug/long"),  # a plain `- /trainer/long@trainer` entry: composed at debug's place, after it
    ("example", "debug/no_callbacks"),  # `override /callbacks: none`: the callbacks group's option replaced
    ("example", "debug/fdr_no_callbacks"),  # `- default` and `override /callbacks: none`
    ("example", "debug/cpu"),  # `override /trainer: cpu`: at trainer's place, under the experiment's own values
    ("long_tb", "debug/fdr"),
    ("long_tb", "debug/no_callbacks"),  # must not bring back train.yaml's trainer/default and logger options
    ("long_tb", "debug/cpu"),  # debug's override replaces the experiment's trainer option (long)
    ("example", "trainer/cpu"),  # the ordinary case: trainer is listed before experiment; the experiment's values stay
    ("long_tb", "trainer/cpu"),
    (None, "debug/fdr"),  # `--config train --config debug/fdr`: `python src/train.py debug=fdr` (task_name: debug)
]


@pytest.mark.parametrize(("experiment", "group_file"), CASES, ids=[f"{e or 'train'}+{g}" for e, g in CASES])
def test_a_group_file_after_the_experiment_composes_as_hydra_does(
    experiment: str | None,
    group_file: str,
    project: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``--config experiment/E --config G`` prints the values Hydra composes for ``experiment=E G`` (``--config
    train --config G``: for ``G``)."""
    group, option = group_file.split("/")
    first = [f"experiment={experiment}"] if experiment else []
    expected = hydra_summary(hydra_config(project, [*first, f"{group}={option}"]))
    files = [f"experiment/{experiment}" if experiment else "train", group_file]
    printed, err = launcher_run(project, files, monkeypatch, capsys)
    assert launcher_summary(printed) == expected, err[-3000:]


def test_the_reported_case_and_its_notes(
    project: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The report: ``--config experiment/example --config debug/fdr`` kept the experiment's ``max_epochs: 10``
    where Hydra (``train.yaml`` lists ``debug`` after ``experiment``) takes ``debug/default.yaml``'s 1; a note says
    so. ``--config trainer/cpu`` instead keeps the experiment's values (``trainer`` is listed before it)."""
    assert hydra_config(project, ["experiment=example", "debug=fdr"])["trainer"]["max_epochs"] == 1
    printed, err = launcher_run(project, ["experiment/example", "debug/fdr"], monkeypatch, capsys)
    assert printed["trainer"]["max_epochs"] == 1 and printed["trainer"]["fast_dev_run"] is True
    assert printed["trainer"]["min_epochs"] == 10 and printed["trainer"]["gradient_clip_val"] == 0.5  # the experiment's
    assert "debug/fdr.yaml: its defaults: list sets trainer.max_epochs over the values of" in err, err[-2000:]
    assert "as Hydra composes train.yaml with experiment=example debug=fdr" in err, err[-2000:]
    assert "does not reset" not in err, err[-2000:]

    assert hydra_config(project, ["experiment=example", "trainer=cpu"])["trainer"]["max_epochs"] == 10
    printed, err = launcher_run(project, ["experiment/example", "trainer/cpu"], monkeypatch, capsys)
    assert printed["trainer"]["max_epochs"] == 10 and printed["trainer"]["min_epochs"] == 10
    assert "does not reset trainer.min_epochs, trainer.max_epochs" in err, err[-2000:]


def test_an_override_after_the_experiment_drops_what_it_replaces(
    project: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``override /callbacks: none`` in a group file after the experiment: Hydra loads none of the experiment's
    callbacks files, so their callbacks are dropped (named in a note); composed into ``train.yaml``, the file
    does not bring back ``train.yaml``'s own options of the groups the experiment replaced (``trainer: default``
    for its ``long``, ``logger: null`` for its ``tensorboard``)."""
    printed, err = launcher_run(project, ["experiment/long_tb", "debug/no_callbacks"], monkeypatch, capsys)
    assert printed["trainer"]["callbacks"] in (None, [])
    assert printed["trainer"]["max_epochs"] == 50 and printed["trainer"]["check_val_every_n_epoch"] == 5
    assert [lg["class_path"] for lg in printed["trainer"]["logger"]] == [
        "lightning.pytorch.loggers.tensorboard.TensorBoardLogger"
    ]
    note = next(line for line in err.splitlines() if "Hydra does not load" in line)
    assert "with experiment=long_tb debug=no_callbacks Hydra does not load callbacks/" in note, note
    assert "callbacks.early_stopping" in note and "set before it, dropped" in note, note


def test_a_plain_config_and_a_flag_before_stay(
    project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Values of no group of ``train.yaml`` (a flag, a config file of its own) have no place in Hydra's order: as
    Hydra's command-line overrides, a later group file's defaults do not reset them; its own values still win."""
    mine = tmp_path / "mine.yaml"
    mine.write_text("trainer:\n  max_epochs: 4\n  check_val_every_n_epoch: 2\n")
    printed, err = launcher_run(project, ["experiment/example", str(mine), "debug/fdr"], monkeypatch, capsys)
    assert printed["trainer"]["max_epochs"] == 4 and printed["trainer"]["check_val_every_n_epoch"] == 2
    assert printed["trainer"]["fast_dev_run"] is True
    assert "does not reset trainer.max_epochs" in err, err[-2000:]
