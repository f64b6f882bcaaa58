"""A user's own configs, laid out like ``configs/`` in a folder outside the repository, compose
like the shipped ones: the experiment's own config root, ``--config_root DIR`` and
``$TRAINER_CLI_CONFIG_PATH`` are searched before the bundled configs (issue 10)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from support import CONFIGS, DIGITS, USER_MODULE, quiet_args

from trainer_cli.__main__ import main
from trainer_cli.config.compose import expand_config_args
from trainer_cli.config.paths import ENV_CONFIG_PATH
from trainer_cli.config.request import Request
from trainer_cli.config.spec import split
from trainer_cli.errors import ConfigError, UserError
from trainer_cli.runtime.verbs import parse_config


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


@pytest.fixture
def user(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """``tmp_path/myconfigs`` (a config root) and ``tmp_path/src/mymodels.py`` (a user module, importable)."""
    root = tmp_path / "myconfigs"
    write(tmp_path / "src" / "mymodels.py", USER_MODULE)
    monkeypatch.syspath_prepend(str(tmp_path / "src"))
    write(root / "model" / "tiny.yaml", "# @package _global_\nmodel:\n  class_path: mymodels.TinyNet\n  init_args:\n    hidden: 24\n")
    write(root / "optimizer" / "myadam.yaml", "# @package _global_\noptimizer:\n  class_path: torch.optim.Adam\n  init_args:\n    lr: 0.005\n")
    write(root / "optimizer" / "adamw.yaml", "# @package _global_\noptimizer:\n  class_path: torch.optim.AdamW\n  init_args:\n    lr: 0.0042\n    eps: 1.0e-6\n")
    write(root / "experiment" / "mine.yaml", "# @package _global_\ndefaults:\n  - /model: tiny\n  - /data: digits\n"
          "  - /optimizer: myadam\n  - /trainer: default\n  - /logger: tensorboard\n  - _self_\n\nname: mine\ntrainer:\n  accelerator: cpu\n  devices: 1\n")
    write(root / "experiment" / "mine_adamw.yaml", "# @package _global_\ndefaults:\n  - /model: cnn\n  - /data: digits\n  - /optimizer: adamw\n  - _self_\n")
    write(root / "experiment" / "digits_sgd.yaml", "# @package _global_\ndefaults:\n  - /experiment/digits\n  - override /optimizer: sgd\n  - _self_\n\nname: digits_sgd\n")
    return root


def fit_config(*args: str):  # noqa: ANN201 - a jsonargparse Namespace
    return parse_config("fit", Request.of(list(args)))[1]


def test_an_experiment_in_a_user_folder_finds_its_own_groups_and_the_bundled_ones(user: Path, tmp_path: Path) -> None:
    cfg = fit_config("--config", str(user / "experiment" / "mine.yaml"))
    assert (cfg.model.class_path, cfg.model.init_args.hidden) == ("mymodels.TinyNet", 24)  # user group
    assert (cfg.optimizer.class_path, cfg.optimizer.init_args.lr) == ("torch.optim.Adam", 0.005)
    assert cfg.data.class_path == "trainer_cli.data.DigitsDataModule"  # bundled group
    assert cfg.name == "mine"


def test_a_user_group_file_named_like_a_bundled_one_wins(user: Path) -> None:
    cfg = fit_config("--config", str(user / "experiment" / "mine_adamw.yaml"))
    assert cfg.optimizer.init_args.lr == 0.0042  # myconfigs/optimizer/adamw.yaml, not configs/optimizer/adamw.yaml


def test_config_root_groups_win_for_a_shipped_experiment_too(user: Path) -> None:
    cfg = fit_config("--config_root", str(user), "--config", "experiment/digits")
    assert cfg.optimizer.init_args.eps == 1e-6  # the user's adamw.yaml, not the bundled one
    assert cfg.optimizer.init_args.lr == 0.01 and cfg.name == "digits"  # digits.yaml's own values on top


def test_an_experiment_extending_a_shipped_one_composes_from_a_user_folder(user: Path) -> None:
    cfg = fit_config("--config", str(user / "experiment" / "digits_sgd.yaml"))
    assert cfg.optimizer.class_path == "torch.optim.SGD"
    assert cfg.optimizer.init_args.lr == 0.01  # digits.yaml's own value still applies after the override
    assert cfg.model.init_args.backbone == "cnn" and cfg.name == "digits_sgd"


def test_short_forms_search_config_root_flags_and_the_environment(user: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = fit_config("--config_root", str(user), "--config", "experiment/mine", "--config=optimizer/adamw")
    assert (cfg.name, cfg.optimizer.init_args.lr) == ("mine", 0.0042)
    monkeypatch.setenv(ENV_CONFIG_PATH, os.pathsep.join([str(user), str(CONFIGS)]))
    assert fit_config("--config", "experiment/mine").optimizer.class_path == "torch.optim.Adam"
    assert fit_config("--config", "experiment/digits").name == "digits"  # bundled short forms still work
    with pytest.raises(UserError, match="--config_root .*nope: not a directory"):
        expand_config_args(Request.of(["--config_root", str(user / "nope"), "--config", DIGITS]))
    monkeypatch.setenv(ENV_CONFIG_PATH, str(user / "nope"))
    with pytest.raises(UserError, match=f"\\${ENV_CONFIG_PATH} .*nope: not a directory"):
        expand_config_args(Request.of(["--config", DIGITS]))


def test_submit_takes_config_root_out_of_the_fit_arguments(user: Path) -> None:
    request = Request.of(["--config_root", str(user), "--config", "experiment/mine", "--trainer.max_epochs", "1"])
    fit_request, *_ = split(request, "slurm")
    fit_args = fit_request.tokens()
    assert "--config_root" not in fit_args and str(user) not in fit_args
    assert "mymodels.TinyNet" in fit_args[1]  # composed with the user's groups


def test_fit_and_cv_train_a_users_module_from_a_user_folder(user: Path, tmp_path: Path) -> None:
    # in-process (the user module is importable through the fixture): the real entry point, no start-up cost
    limits = [*quiet_args(tmp_path / "runs"), "--trainer.limit_train_batches", "2", "--trainer.limit_val_batches", "1"]
    assert main(["fit", "--config_root", str(user), "--config", "experiment/mine", *limits]) == 0
    run = tmp_path / "runs" / "mine" / "version_0"
    assert "class_path: mymodels.TinyNet" in (run / "config.yaml").read_text()
    from mymodels import TinyNet  # type: ignore[import-not-found]

    reloaded = TinyNet.load_from_checkpoint(next((run / "checkpoints").glob("*.ckpt")), map_location="cpu")
    assert reloaded.hparams.hidden == 24 and reloaded.net[3].weight.shape == (10, 24)
    assert main(["cv", "--folds", "2", "--config_root", str(user), "--config", "experiment/mine", *limits]) == 0
    assert (tmp_path / "runs" / "mine" / "cv" / "version_0" / "cv_results.csv").is_file()


def test_an_experiment_naming_another_model_class_is_told_how_to_drop_the_groups_options(user: Path) -> None:
    """Extending /experiment/digits with `model: class_path: mymodels.TinyNet`: Hydra merges the /model
    default's init_args into it; the error says so and how to drop them, and that way parses."""
    body = "model:\n  class_path: mymodels.TinyNet\n  init_args:\n    hidden: 24\n"
    write(user / "experiment" / "tiny_over_digits.yaml", f"# @package _global_\ndefaults:\n  - /experiment/digits\n  - _self_\n\n{body}")
    with pytest.raises(ConfigError) as raised:  # rendered by `train` as `error: <this>`, exit code 2
        fit_config("--config_root", str(user), "--config", "experiment/tiny_over_digits")
    err = str(raised.value)
    assert raised.value.origin is not None and raised.value.origin.composed_from == user / "experiment" / "tiny_over_digits.yaml"
    assert "from group file" in err and "add `- override /model: null` to the experiment's defaults list" in err
    write(user / "experiment" / "tiny_over_digits.yaml",
          f"# @package _global_\ndefaults:\n  - /experiment/digits\n  - override /model: null\n  - _self_\n\n{body}")
    config = fit_config("--config_root", str(user), "--config", "experiment/tiny_over_digits")
    assert config.model.class_path == "mymodels.TinyNet" and config.model.init_args.hidden == 24
