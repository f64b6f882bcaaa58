"""Errors in a user's own code under `train` (issue 18, defect 5): an exception their model raises
while it is imported or built shows their own frames (file, line, the exception), not a rewritten
config error nor the library's frames (exit code 2, as any mistake the user fixes); a value of their config that their code refuses stays one
line naming the config file and line; a start that fails before the first step leaves no run
directory.

The models are in ``tests/foreign/lit_foreign/broken.py``, ``stale.py``, ``broken_import.py`` and
``broken_toplevel.py``
(the user's package); all cases run through the real entry point in one helper process.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from foreign_support import DATA, FOREIGN, SUPPORT, foreign_env
from support import run_helper

PACKAGE = FOREIGN / "lit_foreign"


def line_of(file: Path, text: str) -> int:
    """The 1-based line of ``file`` that holds ``text``."""
    return next(i for i, line in enumerate(file.read_text().splitlines(), 1) if text in line)


def frame(file: Path, text: str, function: str) -> str:
    """How a traceback names the line of ``file`` holding ``text``."""
    return f'File "{file}", line {line_of(file, text)}, in {function}'


BROKEN, STALE, IMPORT, TOPLEVEL = (PACKAGE / f"{name}.py" for name in ("broken", "stale", "broken_import", "broken_toplevel"))
# name -> (model class, what stderr must hold)
CASES: dict[str, tuple[str, list[str]]] = {
    "name_error_in_init": ("lit_foreign.broken.TypoNet", [
        "error: exception in your code: NameError: name 'num_clases' is not defined",
        frame(BROKEN, "num_clases)", "__init__"),
    ]),
    "library_called_wrongly": ("lit_foreign.broken.ArgNet", [
        "error: exception in your code: TypeError: Linear.__init__() missing 1 required positional argument",
        frame(BROKEN, "nn.Linear(hidden_dim)", "__init__"),
    ]),
    "error_in_setup": ("lit_foreign.broken.SetupNet", [
        "error: exception in your code: RuntimeError: cannot set up for",
        frame(BROKEN, "lookup table missing", "setup"),
    ]),
    "stale_annotation": ("lit_foreign.stale.StaleNet", [
        "error: model: cannot import lit_foreign.stale.StaleNet: exception in your code: AttributeError: "
        "module 'torch.nn' has no attribute 'NoSuchActivation'",
        frame(STALE, "nn.NoSuchActivation", "StaleNet"),
    ]),
    "import_error_in_module": ("lit_foreign.broken_import.ImportNet", [
        "error: model: cannot import lit_foreign.broken_import.ImportNet: exception in your code: ModuleNotFoundError: "
        "No module named 'lit_foreign.helpers_that_were_renamed'",
        frame(IMPORT, "helpers_that_were_renamed", "<module>"),
    ]),
    "name_error_at_module_level": ("lit_foreign.broken_toplevel.TopNet", [
        "error: model: cannot import lit_foreign.broken_toplevel.TopNet: exception in your code: NameError: "
        "name 'DEFAULT_WIDHT' is not defined",
        frame(TOPLEVEL, "= DEFAULT_WIDHT", "<module>"),
    ]),
}


@pytest.fixture(scope="module")
def outcome(tmp_path_factory: pytest.TempPathFactory) -> dict:
    tmp = tmp_path_factory.mktemp("user_code")
    config = tmp / "checked.yaml"
    config.write_text("model:\n  class_path: lit_foreign.broken.CheckedNet\n  init_args:\n    dropout: 1.5\n")
    common = ["--data", DATA, "--trainer.default_root_dir", "runs", "--trainer.max_epochs", "1"]
    argvs = {name: ["fit", "--model", model, *common] for name, (model, _) in CASES.items()}
    argvs["value_refused_by_user_check"] = ["fit", "--config", str(config), *common]
    cases = {}
    for name, argv in argvs.items():
        (tmp / name).mkdir()
        cases[name] = {"argv": argv, "cwd": str(tmp / name)}
    (tmp / "cases.json").write_text(json.dumps(cases))
    run_helper(SUPPORT, str(tmp / "cases.json"), str(tmp / "out.json"), env=foreign_env())
    return {"tmp": tmp, "config": config, "results": json.loads((tmp / "out.json").read_text())}


@pytest.mark.parametrize("name", list(CASES))
def test_user_code_error_shows_the_users_frames(outcome: dict, name: str) -> None:
    _, fragments = CASES[name]
    result = outcome["results"][name]
    stderr = result["stderr"]
    assert result["code"] == 2, stderr[-3000:]
    for fragment in fragments:
        assert fragment in stderr, f"{fragment!r} not in:\n{stderr[-3000:]}"
    shown = stderr[stderr.index("error:"):]
    assert "site-packages" not in shown and "trainer_cli" not in shown  # the user's frames only
    assert "Traceback (most recent call last)" not in stderr + result["stdout"]


def test_value_refused_by_the_users_check_names_the_line_the_type_and_the_users_frame(outcome: dict) -> None:
    """The user's own check of a value (a ValueError in their ``__init__``): where the value was written,
    the exception's type and the user's frame (it was the config line and the message alone)."""
    result = outcome["results"]["value_refused_by_user_check"]
    assert result["code"] == 2
    stderr = result["stderr"]
    shown = stderr[stderr.index("error:"):]
    assert shown.splitlines()[0] == (
        f"error: in {outcome['config']} line 4: exception in your code: ValueError: dropout must be in [0, 1), got 1.5"
    )
    assert 'lit_foreign/broken.py", line 39, in __init__' in shown and "site-packages" not in shown
    assert "Traceback (most recent call last)" not in stderr


def test_a_failed_start_leaves_no_run_directory(outcome: dict) -> None:
    """Nor the folders above it that the start made (an empty ``runs/run/`` was left: issue 45)."""
    for name in outcome["results"]:
        left = list((outcome["tmp"] / name).rglob("*"))
        assert not left, f"{name}: {left}"


# The same mistakes through the user's own script (TrainerCLI swapped in for LightningCLI, subclass mode):
# the errors `train` gives, one line with the file and line or the user's frames (they were jsonargparse's
# raw text and tracebacks).
SCRIPT_CASES = {
    "yaml_syntax": (["--config", "{tmp}/bad.yaml"], ["error: YAML syntax error in {tmp}/bad.yaml line 4, column 1"]),
    "missing_config": (["--config", "nope.yaml"], ["error: config file not found: nope.yaml"]),
    "users_init": (
        ["--config", "{tmp}/checked.yaml"],
        [
            "error: in {tmp}/checked.yaml line 4: exception in your code: ValueError: dropout must be in [0, 1), got 1.5",
            'lit_foreign/broken.py", line 39, in __init__',
        ],
    ),
    "error_in_setup": (  # after the run directory was planned: nothing of it is left (issue 45)
        ["--model", "lit_foreign.broken.SetupNet"],
        ["error: exception in your code: RuntimeError: cannot set up for", 'lit_foreign/broken.py", line 22, in setup'],
    ),
    "unsafe_checkpoint": (
        ["--model", "lit_foreign.model.SmallNet", "--ckpt_path", "{tmp}/unsafe.ckpt"],
        ["error: --ckpt_path {tmp}/unsafe.ckpt: refused by torch's safe loader (weights_only=True; nothing in it was run)"],
    ),
}


@pytest.fixture(scope="module")
def script_project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    import argparse

    import torch

    tmp = tmp_path_factory.mktemp("script_errors")
    stock = (FOREIGN / "plain_subclass_main.py").read_text()
    swapped = stock.replace("from lightning.pytorch.cli import LightningCLI", "from trainer_cli import TrainerCLI as LightningCLI")
    assert swapped != stock
    (tmp / "main.py").write_text(swapped)
    (tmp / "bad.yaml").write_text("trainer:\n  max_epochs: 1\n  callbacks: [\n")
    (tmp / "checked.yaml").write_text("model:\n  class_path: lit_foreign.broken.CheckedNet\n  init_args:\n    dropout: 1.5\n")
    # an object torch's safe loader does not allow (weights_only=True), as LightningCLI loads --ckpt_path
    torch.save({"state_dict": {}, "hyper_parameters": {"extra": argparse.Namespace(a=1)}}, tmp / "unsafe.ckpt")
    return tmp


@pytest.mark.parametrize("name", list(SCRIPT_CASES))
def test_the_users_script_reports_mistakes_as_train_does(script_project: Path, name: str) -> None:
    import forkserver

    args, fragments = SCRIPT_CASES[name]
    tmp = str(script_project)
    argv = [str(script_project / "main.py"), "fit", *(a.format(tmp=tmp) for a in args), "--trainer.max_epochs", "1"]
    done = forkserver.run_python(argv, script_project, foreign_env(), 300)
    assert done.returncode == 2, done.stderr[-3000:]
    for fragment in fragments:
        assert fragment.format(tmp=tmp) in done.stderr, done.stderr[-3000:]
    assert "Traceback (most recent call last)" not in done.stderr + done.stdout
    assert "<unicode string>" not in done.stderr and 'Parser key "config"' not in done.stderr
    # a failed start leaves no run directory, nor the folders above it that it made
    assert not (script_project / "foreign_logs").exists() and not (script_project / "lightning_logs").exists()
