"""Errors that need no class are reported before torch is imported (issue 19), with the message
the verb gives after its import.

Each kind runs in its own ``train`` process (:data:`PROBE`: the real entry point, then whether
torch or Lightning had been imported when it returned). The speed itself is a benchmark figure
(``benchmarks/overhead.py``: error latency), not asserted here.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from support import CONFIGS, DIGITS

from trainer_cli.config.before_parse import TOP_LEVEL_KEYS, check_top_level_keys
from trainer_cli.config.compose import expand_config_args
from trainer_cli.config.request import Request

# `train ARGV` through the real entry point; then one JSON line: which heavy modules were imported
PROBE = (
    "import json, sys\n"
    "from trainer_cli.__main__ import main\n"
    "code = main(sys.argv[1:])\n"
    "print(json.dumps({m: m in sys.modules for m in ('torch', 'lightning')}))\n"
    "sys.exit(code)\n"
)


def probe(*argv: str, cwd: Path) -> tuple[int, str, dict[str, bool]]:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    env.pop("TRAINER_CLI_RUN_DIR", None)
    done = subprocess.run([sys.executable, "-c", PROBE, *argv], cwd=cwd, env=env, capture_output=True, text=True, timeout=120)
    return done.returncode, done.stderr, json.loads(done.stdout.strip().splitlines()[-1])


def write(path: Path, text: str) -> str:
    path.write_text(text)
    return str(path)


def cases(tmp: Path) -> dict[str, tuple[list[str], list[str]]]:
    """name -> (argv after `train`, fragments of the message)."""
    top = write(tmp / "top.yaml", "optimiser:\n  lr: 0.1\n")
    return {
        "yaml_syntax": (["fit", "--config", write(tmp / "syntax.yaml", "trainer:\n  max_epochs: 2\n   devices: [1\n")], ["YAML syntax error", "syntax.yaml line 3"]),
        "config_missing": (["fit", "--config", "configs/experiment/digitz.yaml"], ["config file not found", "Did you mean: digits"]),
        "config_empty": (["validate", "--config", write(tmp / "empty.yaml", "# nothing yet\n")], ["empty.yaml is empty"]),
        "defaults_missing_group_file": (["fit", "--config", write(tmp / "d1.yaml", "defaults:\n  - /model: cnnn\n  - _self_\n")], ["cannot compose", "d1.yaml", "cnnn"]),
        "defaults_missing_group_file_cv": (["cv", "--folds", "2", "--config", str(tmp / "d1.yaml")], ["cannot compose", "cnnn"]),
        "unknown_verb": (["fitt"], ["unknown verb 'fitt'", "Did you mean: fit"]),
        "unknown_top_key_in_file": (["fit", "--config", DIGITS, "--config", top], ["top.yaml line 2", "'optimiser.lr'", "Did you mean: optimizer", "`train fit --help`"]),
        "unknown_top_key_flag": (["test", "--config", DIGITS, "--optimiser.lr", "0.1"], ["unrecognized arguments: --optimiser.lr 0.1", "Did you mean: optimizer", "`train test --help`"]),
        "unknown_top_key_submit": (["submit", "--config", DIGITS, "--config", top, "--dry-run"], ["top.yaml line 2", "Did you mean: optimizer"]),
        "slurm_bad_value": (["submit", "--config", DIGITS, "--slurm.time", "1:99", "--dry-run"], ["--slurm.time 1:99: not a time limit"]),
        "slurm_wrong_type": (["submit", "--config", DIGITS, "--slurm.cpus_per_task", "x", "--dry-run"], ["slurm.cpus_per_task: expected int, got 'x'"]),
        "slurm_unknown_option": (["submit", "--config", DIGITS, "--slurm.tme", "1", "--dry-run"], ["unknown Slurm option 'slurm.tme'", "Did you mean: slurm.time"]),
    }


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("fast")
    (tmp / "configs").symlink_to(CONFIGS)
    return tmp


NAMES = (
    "yaml_syntax", "config_missing", "config_empty", "defaults_missing_group_file", "defaults_missing_group_file_cv", "unknown_verb",
    "unknown_top_key_in_file", "unknown_top_key_flag", "unknown_top_key_submit", "slurm_bad_value", "slurm_wrong_type", "slurm_unknown_option",
)


@pytest.mark.parametrize("name", NAMES)
def test_reported_before_torch_is_imported(work: Path, name: str) -> None:
    table = cases(work)
    assert sorted(table) == sorted(NAMES)
    argv, fragments = table[name]
    code, stderr, imported = probe(*argv, cwd=work)
    assert code == 2, stderr[-2000:]
    assert stderr.startswith("error: ") and "Traceback" not in stderr, stderr[-2000:]
    for fragment in fragments:
        assert fragment in stderr, f"{fragment!r} not in:\n{stderr}"
    assert imported == {"torch": False, "lightning": False}


def test_every_bundled_config_passes_the_key_check() -> None:
    """No false alarm: every experiment (composed) and every group file (but the Slurm profiles,
    which only `train submit` reads) has only known top-level keys."""
    files = [p for p in sorted(CONFIGS.rglob("*.yaml")) if p.parent.name != "slurm"]
    assert len(files) > 20
    for path in files:
        request = Request.of(["--config", str(path)])
        check_top_level_keys("fit", expand_config_args(request) if path.parent.name == "experiment" else request)


# run in one process that imports Lightning: the verbs' own parsers, and their messages for the
# unknown keys the precheck reports, next to the precheck's
SLOW_PATH = r"""
import contextlib, io, json, sys
from trainer_cli.runtime.verbs import run_subcommand
from trainer_cli.tools.completion import OPTION
from trainer_cli.errors import UserError, report_user_error
from trainer_cli.config.before_parse import precheck
from trainer_cli.config.request import Request

keys, messages = {}, {}
for verb in ("fit", "validate", "test", "predict"):
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.suppress(SystemExit):
        run_subcommand(verb, Request.of(["--help"], verb))
    keys[verb] = sorted({o[2:].split(".")[0].rstrip("+") for o in OPTION.findall(out.getvalue())})
for name, (verb, argv) in json.loads(sys.argv[1]).items():
    try:
        precheck(verb, Request.of(argv, verb))
        fast = None
    except UserError as err:
        fast = f"error: {err}\n"
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        try:
            run_subcommand(verb, Request.of(argv, verb))
        except UserError as refused:  # rendered as `train` renders it
            report_user_error(refused)
    messages[name] = {"fast": fast, "slow": err.getvalue()}
print(json.dumps({"keys": keys, "messages": messages}))
"""


def test_key_list_and_messages_match_the_verbs_parsers(tmp_path: Path) -> None:
    """:data:`TOP_LEVEL_KEYS` is each verb's parser's, and the precheck's message for an unknown
    key is the one the verb's parser gives (file keys nested, scalar, two in a file; flags)."""
    files = {
        "nested": write(tmp_path / "nested.yaml", "trainer:\n  max_epochs: 1\noptimiser:\n  init_args:\n    lr: 0.1\n"),
        "scalar": write(tmp_path / "scalar.yaml", "sead_everything: 3\n"),
        "two": write(tmp_path / "two.yaml", "modle: 1\nfoo:\n  bar: 2\nempty: {}\n"),
    }
    argv = {f"file_{k}": ("fit", ["--config", DIGITS, "--config", v]) for k, v in files.items()}
    argv |= {
        "flag_section": ("validate", ["--config", DIGITS, "--optimiser.lr", "0.1", "--trainer.max_epochs", "1"]),
        "flag_key_equals": ("predict", ["--config", DIGITS, "--retrun_predictions=false"]),
        "flag_two_values": ("fit", ["--config", DIGITS, "--foo", "1", "-2", "--name", "x"]),
        "flag_and_file": ("test", ["--config", DIGITS, "--config", files["two"], "--foo=1"]),
    }
    env = {**os.environ, "TRAINER_CLI_HELP_CACHE": "0"}
    done = subprocess.run([sys.executable, "-c", SLOW_PATH, json.dumps(argv)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    found = json.loads(done.stdout.strip().splitlines()[-1])
    assert found["keys"] == {verb: sorted(keys) for verb, keys in TOP_LEVEL_KEYS.items()}
    for name, pair in found["messages"].items():
        assert pair["fast"] is not None, f"{name}: the precheck let it through; the verb said:\n{pair['slow']}"
        assert pair["fast"] == pair["slow"], name


def test_help_of_submit_comes_before_its_config_is_read(work: Path) -> None:
    """`train submit --config missing.yaml --help` shows the help, as before the precheck."""
    code, stderr, imported = probe("submit", "--config", "missing.yaml", "--help", cwd=work)
    assert code == 0 and "error:" not in stderr, stderr[-2000:]
    assert imported["torch"] is False


def test_the_verb_parses_what_the_precheck_composed(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """`train fit` composes a Hydra experiment once (for the precheck), not again for the parser;
    the config printed is the composed one."""
    from trainer_cli.__main__ import main
    from trainer_cli.config import compose

    composed: list[Path] = []
    real = compose._compose

    def counted(path: Path, roots: object = ()) -> object:
        composed.append(path)
        return real(path, roots)  # type: ignore[arg-type]

    monkeypatch.setattr(compose, "_compose", counted)
    with pytest.raises(SystemExit) as done:  # --print_config prints and exits, as LightningCLI's
        main(["fit", "--config", DIGITS, "--trainer.max_epochs", "7", "--print_config"])
    assert done.value.code in (None, 0)
    assert composed == [Path(DIGITS).resolve()], composed
    assert "max_epochs: 7" in capsys.readouterr().out


# `train ls` as the whole process (main() reading sys.argv), then as a call from Python (main(argv))
GC_PROBE = (
    "import gc, json, sys\n"
    "from trainer_cli.__main__ import main\n"
    "sys.argv = ['train', 'ls', 'models']\n"
    "whole = main()\n"
    "after_whole = {'enabled': gc.isenabled(), 'frozen': gc.get_freeze_count()}\n"
    "print(json.dumps({'code': whole, **after_whole}))\n"
)
GC_PROBE_CALLER = (
    "import gc, json\n"
    "from trainer_cli.__main__ import main\n"
    "code = main(['ls', 'models'])\n"
    "print(json.dumps({'code': code, 'enabled': gc.isenabled(), 'frozen': gc.get_freeze_count()}))\n"
)


@pytest.mark.parametrize("probe_code,frozen", [(GC_PROBE, True), (GC_PROBE_CALLER, False)], ids=["train-process", "caller-process"])
def test_verb_import_pauses_the_collector_only_in_trains_own_process(tmp_path: Path, probe_code: str, frozen: bool) -> None:
    """`train` imports its verb with the cyclic collector paused, then freezes what was imported and
    turns the collector back on (trainer_cli.__main__._import_verb); a caller's process (main(argv))
    keeps its collector as it was."""
    done = subprocess.run([sys.executable, "-c", probe_code], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    state = json.loads(done.stdout.strip().splitlines()[-1])
    assert state["code"] == 0 and state["enabled"] is True, state
    assert (state["frozen"] > 0) is frozen, state
