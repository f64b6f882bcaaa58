"""Every command README.md shows is run here, so the README cannot drift from the code.

The commands are read from README.md itself (indented and fenced code blocks; ``\\`` continuations
joined, ``# comments`` dropped; ``cp`` steps run as shell commands), grouped by the README's ``##`` sections. Each section runs in a
fresh working directory, its commands in README order, so the paths one command prints and the
next one uses (``runs/digits/version_0/lr_find.yaml``) are checked as written. Training verbs get
small step limits appended (:data:`LIMITS`); ``train submit`` gets ``--dry-run`` (the real local
cluster runs are in ``tests/test_slurm_cluster.py``). The Python snippets run too.

Commands run in-process through ``trainer_cli.__main__.main`` (no interpreter start per command);
``make run`` / ``make test`` are what CI itself runs and are not repeated here.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
from collections.abc import Iterator
from pathlib import Path

import forkserver
import pytest
from support import REPO

README = REPO / "README.md"
FIT_LIMITS = [
    "--trainer.max_epochs", "1", "--trainer.limit_train_batches", "2", "--trainer.limit_val_batches", "2",
    "--trainer.limit_test_batches", "2", "--trainer.limit_predict_batches", "2",
]
# what is appended to each verb's README command so that it runs in seconds
LIMITS: dict[str, list[str]] = {
    "fit": FIT_LIMITS, "validate": FIT_LIMITS, "test": FIT_LIMITS, "predict": FIT_LIMITS, "cv": FIT_LIMITS,
    "lr-find": ["--num_training", "30"],
    "scale-batch-size": ["--steps_per_trial", "1", *FIT_LIMITS],
    "submit": ["--dry-run"],
    "doctor": ["--size_mb", "1", "--timeout", "60"],
}
# README sections whose commands need something this test cannot give them
NEEDS_CLUSTER = {"jobs"}  # `train jobs` right after a real submission: tests/test_slurm_cluster.py


def readme_sections() -> dict[str, tuple[list[str], list[str]]]:
    """``{section title: (train commands, python snippets)}`` in README order."""
    sections: dict[str, tuple[list[str], list[str]]] = {}
    title = "top"
    fenced: str | None = None
    block: list[str] = []
    joined = ""
    for line in README.read_text().splitlines():
        if fenced is not None:
            if line.startswith("```"):
                if fenced == "python":
                    sections.setdefault(title, ([], []))[1].append("\n".join(block))
                fenced, block = None, []
            else:
                block.append(line)
                if fenced in {"", "bash", "sh", "console"}:
                    joined = _collect(sections.setdefault(title, ([], []))[0], joined, line)
            continue
        if line.startswith("```"):
            fenced = line[3:].strip()
            continue
        if line.startswith("## "):
            title = line[3:].strip()
            continue
        if line.startswith("    "):
            joined = _collect(sections.setdefault(title, ([], []))[0], joined, line)
    return {k: v for k, v in sections.items() if v[0] or v[1]}


def _collect(commands: list[str], pending: str, line: str) -> str:
    """Add ``line`` to ``pending`` (a command continued with ``\\``); append finished commands."""
    text = line.strip()
    if not pending and not text.startswith(("train ", "cp ", "python ")):
        return ""
    text = pending + " " + text if pending else text
    if text.endswith("\\"):
        return text[:-1].rstrip()
    commands.append(re.sub(r"\s+#.*$", "", text))
    return ""


def _slug(title: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", title.lower()).strip("-")[:40]


SECTIONS = readme_sections()


def test_readme_shows_commands() -> None:
    """The extraction finds the README's commands (a README rewrite must not silently empty this test)."""
    commands = [c for cmds, _ in SECTIONS.values() for c in cmds if c.startswith("train ")]
    verbs = {shlex.split(c)[1] for c in commands}
    assert len(commands) >= 20, commands
    assert {"fit", "ls", "lr-find", "scale-batch-size", "cv", "predict", "export", "submit"} <= verbs, verbs


def _runnable(command: str) -> list[str]:
    argv = shlex.split(command)
    return argv if argv[0] != "train" else [*argv[1:], *LIMITS.get(argv[1], [])]


def _commands(title: str) -> Iterator[list[str]]:
    for command in SECTIONS[title][0]:
        argv = _runnable(command)
        if argv[0] not in NEEDS_CLUSTER and not (argv[0] == "doctor" and "--local" not in argv):  # its Slurm form: tests/test_doctor.py
            yield argv


@pytest.mark.parametrize("title", list(SECTIONS), ids=[_slug(t) for t in SECTIONS])
def test_readme_section_runs(title: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """Each command of the section exits 0 in a fresh directory, in README order; then its Python snippets run.

    The directory is laid out as a clone is (``configs/`` and ``slurm/`` beside the user), without
    anything a previous section made.
    """
    from trainer_cli.__main__ import main

    for folder in ("configs", "slurm", "tests"):
        (tmp_path / folder).symlink_to(REPO / folder)
    monkeypatch.chdir(tmp_path)
    for argv in _commands(title):
        if argv[0] == "cp":  # a shell step the README shows (copy a profile to edit)
            subprocess.run(argv, check=True)
            continue
        if argv[0] == "python":  # a user's script with TrainerCLI (Bring your own script)
            env = {k: v for k, v in os.environ.items() if k != "TRAINER_CLI_RUN_DIR"}
            done = forkserver.run_python([*argv[1:], *LIMITS.get(argv[2], [])], tmp_path, env, 600)  # a new process, forked where it can
            assert done.returncode == 0, f"README command failed ({done.returncode}): {shlex.join(argv)}\n{done.stderr[-3000:]}"
            continue
        try:
            code = main(argv)
        except SystemExit as stop:  # --print_config and --help exit through argparse
            code = stop.code if isinstance(stop.code, int) else (0 if stop.code is None else 1)
        out = capsys.readouterr()
        assert code == 0, f"README command failed ({code}): train {shlex.join(argv)}\n{out.out[-3000:]}\n{out.err[-3000:]}"
    for snippet in SECTIONS[title][1]:
        import torch

        exec(compile(snippet, f"README.md ({title})", "exec"), {"images": torch.zeros(2, 1, 8, 8)})
