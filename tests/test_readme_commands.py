"""Every command README.md and the documentation (docs/**/*.md) show is run here, so neither can drift
from the code.

The commands are read from the Markdown itself (indented code blocks, and fenced ones marked ``bash``,
``sh``, ``console`` or nothing; ``\\`` continuations joined, ``# comments`` dropped; the lines that
start with ``train``, ``cp`` or ``python``, ``cp`` steps run as shell commands). README.md is grouped by
its ``##`` sections; a docs page is one group, so a page's later commands reuse the runs its earlier
ones made. Each group runs in a fresh working directory, its commands in page order, so the paths one
command prints and the next one uses (``runs/digits/version_0/lr_find.yaml``) are checked as written.
Training verbs get small step limits appended (:data:`LIMITS`); ``train submit`` gets ``--dry-run``
(the real local cluster runs are in ``tests/test_slurm_cluster.py``). The ``python`` fenced snippets
run too. What the pages show but this test cannot run is marked so: a ``text`` block (``pip install``:
``tests/test_packaging.py`` installs the wheel; ``make run`` / ``make test`` are what CI itself runs), a
``shell`` block (it edits the user's ``~/.bashrc``), a ``diff`` block, ``train jobs`` right after a real
submission and ``train doctor`` on Slurm (:data:`NEEDS_CLUSTER`).

Commands run in-process through ``trainer_cli.__main__.main`` (no interpreter start per command).
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
DOCS = REPO / "docs"
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


def markdown_sections(path: Path, by_section: bool = True) -> dict[str, tuple[list[str], list[str]]]:
    """``{section title: (train commands, python snippets)}`` in page order (one group per ``##`` section,
    or the whole page as one group when not ``by_section``)."""
    sections: dict[str, tuple[list[str], list[str]]] = {}
    title = "top"
    fenced: str | None = None
    block: list[str] = []
    joined = ""
    for line in path.read_text().splitlines():
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
        if line.startswith("## ") and by_section:
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


def readme_sections() -> dict[str, tuple[list[str], list[str]]]:
    return markdown_sections(README)


# pages whose commands run in a project of their own, by their own test (page -> that test)
OWN_TEST = {"migration/lightning-hydra-template.md": "tests/test_migration_lht.py"}


def docs_pages() -> dict[str, tuple[list[str], list[str]]]:
    """``{page path under docs/: (train commands, python snippets)}`` for the pages that show any
    (but :data:`OWN_TEST`'s)."""
    paths = sorted(p for p in DOCS.rglob("*.md") if str(p.relative_to(DOCS)) not in OWN_TEST)
    pages = {str(path.relative_to(DOCS)): markdown_sections(path, by_section=False).get("top") for path in paths}
    return {page: found for page, found in pages.items() if found}


SECTIONS = readme_sections()
PAGES = docs_pages()


def _verbs(groups: dict[str, tuple[list[str], list[str]]]) -> set[str]:
    return {shlex.split(c)[1] for cmds, _ in groups.values() for c in cmds if c.startswith("train ")}


def test_readme_shows_commands() -> None:
    """The extraction finds the README's quick start and the docs' commands (a rewrite must not silently
    empty this test)."""
    assert {"fit", "ls", "lr-find", "predict", "export", "submit"} <= _verbs(SECTIONS)
    commands = [c for cmds, _ in PAGES.values() for c in cmds if c.startswith("train ")]
    assert len(commands) >= 40, commands
    assert set(VERBS_SHOWN) <= _verbs(PAGES), set(VERBS_SHOWN) - _verbs(PAGES)
    pages = {"getting-started.md", "guides/workflow.md", "guides/slurm.md", "migration/sbatch.md"}
    assert pages <= set(PAGES), list(PAGES)


# every verb but the cluster-only ones is shown and run somewhere in the docs
VERBS_SHOWN = [
    "fit", "ls", "lr-find", "scale-batch-size", "cv", "predict", "export", "submit", "doctor", "sweep-results",
    "completion",
]


def test_the_one_line_swap_is_one_line() -> None:
    """``tests/foreign/main.py`` is ``plain_main.py`` with the import line changed, as the README and
    docs say (``from trainer_cli import TrainerCLI as LightningCLI``); the docstrings aside."""
    foreign = REPO / "tests" / "foreign"
    plain, swapped = ((foreign / name).read_text().splitlines()[1:] for name in ("plain_main.py", "main.py"))
    changed = [(a, b) for a, b in zip(plain, swapped) if a != b]
    assert len(plain) == len(swapped) and changed == [
        ("from lightning.pytorch.cli import LightningCLI", "from trainer_cli import TrainerCLI as LightningCLI")
    ], changed


def _runnable(command: str) -> list[str]:
    argv = shlex.split(command)
    return argv if argv[0] != "train" else [*argv[1:], *LIMITS.get(argv[1], [])]


def _commands(commands: list[str]) -> Iterator[list[str]]:
    for command in commands:
        argv = _runnable(command)
        if argv[0] not in NEEDS_CLUSTER and not (argv[0] == "doctor" and "--local" not in argv):  # its Slurm form: tests/test_doctor.py
            yield argv


@pytest.mark.parametrize("title", list(SECTIONS), ids=[_slug(t) for t in SECTIONS])
def test_readme_section_runs(
    title: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Each command of the section exits 0 in a fresh directory, in README order; then its Python snippets run.

    The directory is laid out as a clone is (``configs/`` and ``slurm/`` beside the user), without
    anything a previous section made.
    """
    _run("README.md", title, *SECTIONS[title], tmp_path, monkeypatch, capsys)


@pytest.mark.parametrize("page", list(PAGES), ids=[_slug(p.removesuffix(".md")) for p in PAGES])
def test_docs_page_runs(
    page: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Each command of the docs page exits 0 in one fresh directory, in page order; then its Python snippets run."""
    _run(f"docs/{page}", page, *PAGES[page], tmp_path, monkeypatch, capsys)


def _run(
    source: str, title: str, commands: list[str], snippets: list[str], tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
) -> None:
    from trainer_cli.__main__ import main

    for folder in ("configs", "slurm", "tests"):
        (tmp_path / folder).symlink_to(REPO / folder)
    monkeypatch.chdir(tmp_path)
    for argv in _commands(commands):
        if argv[0] == "cp":  # a shell step the page shows (copy a profile to edit)
            subprocess.run(argv, check=True)
            continue
        if argv[0] == "python":  # a user's script with TrainerCLI (Bring your own script)
            env = {k: v for k, v in os.environ.items() if k != "TRAINER_CLI_RUN_DIR"}
            done = forkserver.run_python([*argv[1:], *LIMITS.get(argv[2], [])], tmp_path, env, 600)  # a new process, forked where it can
            failed = f"{source} command failed ({done.returncode}): {shlex.join(argv)}\n{done.stderr[-3000:]}"
            assert done.returncode == 0, failed
            continue
        try:
            code = main(argv)
        except SystemExit as stop:  # --print_config and --help exit through argparse
            code = stop.code if isinstance(stop.code, int) else (0 if stop.code is None else 1)
        out = capsys.readouterr()
        failed = f"{source} command failed ({code}): train {shlex.join(argv)}\n{out.out[-3000:]}\n{out.err[-3000:]}"
        assert code == 0, failed
    for snippet in snippets:
        import torch

        exec(compile(snippet, f"{source} ({title})", "exec"), {"images": torch.zeros(2, 1, 8, 8)})
