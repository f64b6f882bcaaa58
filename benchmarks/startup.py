"""Start-up: whole-process wall time of launcher verbs (``train fit --help`` both built and from
its cache, ``trainer_cli.config.help_cache``), of the errors that need no class (a YAML syntax error, a
missing file, an unknown key, a bad ``--slurm.*`` value: reported before torch is imported,
``trainer_cli.config.before_parse``), and time to the first optimizer step of ``train fit`` on digits versus a
plain script doing the same first step.

Every command runs as a fresh process (``python -m trainer_cli ...``, what the ``train`` console
script runs), alternately, repeated; figures are medians.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.common import alternate, medians
from tests.support import DIGITS, REPO

FIRST_STEP_MARK = "BENCH_FIRST_STEP_DONE_AT"
LIGHTNING_IMPORT = 'python -c "import lightning.pytorch"'
TORCH_VERBS = ("train fit --help (built)", "train submit --dry-run")  # they build LightningCLI: they import torch
TORCH_IMPORT = re.compile(r"^import time:.*\|\s*torch$", re.M)  # python -X importtime's line for torch


def _env(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "TRAINER_CLI_RUN_DIR"}
    return env | {"PYTHONUNBUFFERED": "1"} | (extra or {})


def wall_time(cmd: list[str], env: dict[str, str] | None = None) -> dict[str, float]:
    """Whole-process wall time of ``cmd`` in seconds (exit code kept: a missing verb shows)."""
    t0 = time.perf_counter()
    done = subprocess.run(cmd, cwd=REPO, env=_env(env), capture_output=True, text=True)
    return {"wall_s": time.perf_counter() - t0, "returncode": float(done.returncode)}


def time_to_first_step(cmd: list[str]) -> dict[str, float]:
    """Seconds from process launch until it prints that its first optimizer step is done."""
    t0 = time.time()
    done = subprocess.run(cmd, cwd=REPO, env=_env(), capture_output=True, text=True)
    found = re.search(FIRST_STEP_MARK + r" ([0-9.]+)", done.stdout)  # (a progress bar may share the line)
    if found:
        return {"first_step_s": float(found.group(1)) - t0}
    raise RuntimeError(f"{cmd} printed no {FIRST_STEP_MARK} (exit {done.returncode}):\n{done.stderr[-2000:]}")


def imports_torch(argv: list[str], env: dict[str, str] | None = None) -> bool:
    """Whether ``train ARGV`` imports torch: the same command, in a fresh interpreter, under
    ``python -X importtime`` (whatever way it exits)."""
    cmd = [sys.executable, "-X", "importtime", "-m", "trainer_cli", *argv]
    err = subprocess.run(cmd, cwd=REPO, env=_env(env), capture_output=True, text=True).stderr
    return TORCH_IMPORT.search(err) is not None


def error_commands(tmp: Path) -> dict[str, list[str]]:
    """``train`` command lines with a mistake that needs no class (files written under ``tmp``)."""
    syntax, unknown = tmp / "syntax.yaml", tmp / "unknown_key.yaml"
    syntax.write_text("trainer:\n  max_epochs: 2\n   devices: [1\n")
    unknown.write_text("optimiser:\n  lr: 0.1\n")
    return {
        "train fit: YAML syntax error": ["fit", "--config", str(syntax)],
        "train fit: missing config file": ["fit", "--config", str(tmp / "missing.yaml")],
        "train fit: unknown top-level key (composed experiment + file)": ["fit", "--config", DIGITS, "--config", str(unknown)],
        "train submit: bad --slurm.time": ["submit", "--config", DIGITS, "--slurm.time", "1:99", "--dry-run"],
    }


def run(smoke: bool = False) -> dict[str, Any]:
    repeats = 1 if smoke else 5
    train = [sys.executable, "-m", "trainer_cli"]
    verbs = {
        "train --help": ["--help"],
        "train ls": ["ls"],
        "train fit --help (built)": ["fit", "--help"],
        "train fit --help (cached)": ["fit", "--help"],
        "train submit --dry-run": ["submit", "--config", DIGITS, "--dry-run"],
    }
    if smoke:  # the priming call below builds the help once: enough to show it works; the verbs
        # that import Lightning, and the import alone, are only there for the ratios (no figure in smoke)
        del verbs["train fit --help (built)"], verbs["train submit --dry-run"]
    with tempfile.TemporaryDirectory() as tmp:
        envs = {name: {"XDG_CACHE_HOME": str(Path(tmp) / "cache")} for name in verbs}
        if "train fit --help (built)" in envs:
            envs["train fit --help (built)"]["TRAINER_CLI_HELP_CACHE"] = "0"
        wall_time([*train, "fit", "--help"], envs["train fit --help (cached)"])  # fills the cache
        errors = error_commands(Path(tmp))
        sides = {name: (lambda a=argv, e=envs[name]: wall_time([*train, *a], e)) for name, argv in verbs.items()}
        sides |= {name: (lambda a=argv: wall_time([*train, *a])) for name, argv in errors.items()}
        if not smoke:
            sides[LIGHTNING_IMPORT] = lambda: wall_time([sys.executable, "-c", "import lightning.pytorch"])
        launcher = {name: medians(r) for name, r in alternate(sides, repeats).items()}
        lightning_s = launcher.pop(LIGHTNING_IMPORT)["wall_s"] if not smoke else None
        error_latency = {name: launcher.pop(name) for name in errors}
        for name, argv in errors.items():
            error_latency[name]["exit_code"] = error_latency[name].pop("returncode")
            error_latency[name]["imports_torch"] = imports_torch(argv)
        for name, argv in verbs.items():
            launcher[name]["available"] = launcher[name].pop("returncode") == 0
            launcher[name]["imports_torch"] = imports_torch(argv, envs[name]) if launcher[name]["available"] else None
        fit = [
            *train, "fit", "--config", DIGITS, "--trainer.max_steps", "1", "--trainer.default_root_dir", str(Path(tmp) / "runs"),
            "--trainer.callbacks+=benchmarks.clock.FirstStepClock",
        ]
        plain = [sys.executable, str(REPO / "benchmarks" / "plain_first_step.py")]
        runs = alternate({"plain_script": lambda: time_to_first_step(plain), "train_fit": lambda: time_to_first_step(fit)}, repeats)
    first = {name: medians(r) for name, r in runs.items()}
    # the verbs that must import Lightning, against the import alone, measured in the same rounds
    ratios = {name: launcher[name]["wall_s"] / lightning_s for name in TORCH_VERBS if name in launcher and lightning_s}
    return {
        "repeats": repeats,
        "launcher_verbs": launcher,
        "import_lightning_s": lightning_s,
        "over_import_lightning": ratios,
        "errors": error_latency,
        "first_step": first | {"ratio": first["train_fit"]["first_step_s"] / first["plain_script"]["first_step_s"], "runs": runs},
    }
