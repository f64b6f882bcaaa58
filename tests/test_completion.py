"""``train completion bash|zsh``: the script is sourced in a real bash, registered with ``complete``,
and its completion function answers as bash calls it (COMP_WORDS / COMP_CWORD set)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
from support import REPO, run_train

pytestmark = pytest.mark.skipif(shutil.which("bash") is None, reason="no bash")


@pytest.fixture(scope="module")
def script(tmp_path_factory: pytest.TempPathFactory) -> Path:
    done = run_train("completion", "bash")
    assert done.returncode == 0, done.stderr[-2000:]
    assert len(done.stdout.encode()) < 1_000_000
    path = tmp_path_factory.mktemp("completion") / "train.bash"
    path.write_text(done.stdout)
    return path


def complete(script: Path, *words: str, env: dict[str, str] | None = None) -> tuple[str, list[str]]:
    """Source ``script`` in bash, then complete the last of ``words`` (``train`` first); returns
    the output of ``complete -p train`` and the completions."""
    program = (
        'source "$1"; shift; complete -p train; COMP_WORDS=("$@"); COMP_CWORD=$(($# - 1)); _train; '
        'printf "%s\\n" "${COMPREPLY[@]}"'
    )
    done = subprocess.run(
        ["bash", "-c", program, "bash", str(script), *words], cwd=REPO, capture_output=True, text=True,
        env={**os.environ, **(env or {})}, timeout=60,
    )
    assert done.returncode == 0, done.stderr
    registered, *replies = done.stdout.splitlines()
    return registered, [r for r in replies if r]


def test_bash_completes_verbs_configs_options_and_class_names(script: Path, tmp_path: Path) -> None:
    registered, verbs = complete(script, "train", "s")
    assert registered == "complete -F _train train"
    assert set(verbs) == {"submit", "scale-batch-size", "sweep-results"}
    assert complete(script, "train", "fit", "--config", "experiment/di")[1] == ["experiment/digits"]
    assert complete(script, "train", "fit", "--trainer.max_e")[1] == ["--trainer.max_epochs"]
    assert "--slurm.time" in complete(script, "train", "submit", "--slurm.t")[1]
    assert "--slurm.time" not in complete(script, "train", "fit", "--")[1]
    assert complete(script, "train", "fit", "--test_a")[1] == ["--test_after_fit"]  # the launcher's own switch
    # the options of the verbs with a parser of their own, read from their --help (issue 29)
    assert set(complete(script, "train", "export", "--")[1]) >= {"--ckpt", "--run_dir", "--out", "--trust_checkpoint"}
    assert complete(script, "train", "lr-find", "--num_")[1] == ["--num_training"]
    assert "--trainer.max_epochs" in complete(script, "train", "lr-find", "--trainer.max_e")[1]
    assert complete(script, "train", "scale-batch-size", "--steps")[1] == ["--steps_per_trial"]
    assert complete(script, "train", "runs", "--di")[1] == ["--diff"] and "--tail" in complete(script, "train", "jobs", "--")[1]
    assert complete(script, "train", "fit", "--model", "")[1] == ["ImageClassifier"]
    assert "DigitsDataModule" in complete(script, "train", "fit", "--data", "")[1]
    assert set(complete(script, "train", "fit", "--optimizer", "Adam")[1]) >= {"Adam", "AdamW", "Adamax"}
    assert "resnet18" in complete(script, "train", "fit", "--model.backbone", "resnet")[1]
    # `--trainer.callbacks+=Early`: bash splits the word at "=" (COMP_WORDBREAKS)
    assert complete(script, "train", "fit", "--trainer.callbacks+", "=", "Early")[1] == ["EarlyStopping"]
    # user config roots: $TRAINER_CLI_CONFIG_PATH and --config_root on the line
    for root in ("env_root", "flag_root"):
        (tmp_path / root / "experiment").mkdir(parents=True)
        (tmp_path / root / "experiment" / f"{root}_run.yaml").write_text("trainer:\n  max_epochs: 1\n")
    env = {"TRAINER_CLI_CONFIG_PATH": str(tmp_path / "env_root")}
    words = ["train", "fit", "--config_root", str(tmp_path / "flag_root"), "--config", "experiment/"]
    found = complete(script, *words, env=env)[1]
    assert {"experiment/env_root_run", "experiment/flag_root_run", "experiment/digits"} <= set(found)
    # a YAML file by its path
    (tmp_path / "mine.yaml").write_text("{}\n")
    assert complete(script, "train", "fit", "--config", str(tmp_path / "mi"))[1] == [str(tmp_path / "mine.yaml")]


@pytest.mark.skipif(shutil.which("zsh") is None, reason="no zsh")
def test_zsh_runs_the_same_function_through_bashcompinit(tmp_path: Path) -> None:
    done = run_train("completion", "zsh")
    assert done.returncode == 0, done.stderr[-2000:]
    (tmp_path / "train.zsh").write_text(done.stdout)
    (tmp_path / "root" / "experiment").mkdir(parents=True)
    (tmp_path / "root" / "experiment" / "mine.yaml").write_text("{}\n")
    # zsh numbers arrays from 1 and its compgen leaves the filtering by prefix to compadd
    program = 'source "$1"; shift; COMP_WORDS=("$@"); COMP_CWORD=$(( ${#COMP_WORDS} - 1 )); _train; printf "%s\\n" "${COMPREPLY[@]}"'

    def complete_zsh(*words: str) -> list[str]:
        run = subprocess.run(["zsh", "-c", program, "zsh", str(tmp_path / "train.zsh"), *words], capture_output=True, text=True,
                             env={**os.environ, "TRAINER_CLI_CONFIG_PATH": str(tmp_path / "root")}, timeout=60)
        assert run.returncode == 0, run.stderr
        return run.stdout.split()

    assert "fit" in complete_zsh("train", "f")
    assert "--trainer.max_epochs" in complete_zsh("train", "fit", "--trainer.max_")
    assert "--slurm.time" in complete_zsh("train", "submit", "--slurm.t")
    assert complete_zsh("train", "fit", "--model", "") == ["ImageClassifier"]
    assert {"experiment/mine", "experiment/digits"} <= set(complete_zsh("train", "fit", "--config", "experiment/"))


def test_a_bad_shell_is_one_clear_error() -> None:
    bad = run_train("completion", "fish")
    assert bad.returncode == 2 and "invalid choice: 'fish'" in bad.stderr and "Traceback" not in bad.stderr
