"""Every command README.md and the documentation (docs/**/*.md) show is run here, so neither can drift
from the code, as a user without a clone runs them: from an empty folder, with only the built wheel
installed.

The commands are read from the Markdown itself (indented code blocks, and fenced ones marked ``bash``,
``sh``, ``console`` or nothing; ``\\`` continuations joined, ``# comments`` dropped; the lines that
start with ``train``, ``cp`` or ``python``, ``cp`` steps run as shell commands). A fenced block with a
file name (`` ```python title="main.py" ``) is a file the page tells the user to write: it is written
there, in page order. README.md is grouped by its ``##`` sections; a docs page is one group, so a page's
later commands reuse the runs its earlier ones made. Each group runs in an empty working directory
(no ``configs/``, ``slurm/`` or ``tests/`` of a clone), its commands in page order, so the paths one
command prints and the next one uses (``runs/digits/version_0/lr_find.yaml``) are checked as written.
Training verbs get small step limits appended (:data:`LIMITS`); ``train submit`` gets ``--dry-run``
(the real local cluster runs are in ``tests/test_slurm_cluster.py``). The ``python`` fenced snippets
run too. What the pages show but this test cannot run is marked so: a ``text`` block (``pip install``
and ``make`` are what CI itself runs: ``tests/test_packaging.py`` installs the wheel), a ``shell``
block (it edits the user's ``~/.bashrc``), a ``diff`` block, ``train jobs`` right after a real
submission and ``train doctor`` on Slurm (:data:`NEEDS_CLUSTER`).

The wheel is built once per test session (hatchling, as ``make dist``) and installed with ``pip install
--no-deps --target`` into a folder of its own. The commands run in :mod:`docs_runner`, a process
started with that folder on ``PYTHONPATH``, the repository not on its path and an editable install's
path entry taken off it (it reports where ``trainer_cli`` came from: the test checks the wheel's
folder); it imports torch and Lightning once and forks a process per group.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from support import REPO, build_and_install_wheel

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
# pages whose steps still need a clone (`cp configs/...`, `python tests/foreign/main.py`): they run in a
# folder laid out as a clone is (configs/, slurm/, tests/ linked in) until they are rewritten for a
# pip user (issue 37's migration pages, another branch); a page that no longer needs it must leave this set
CLONE_LAYOUT: set[str] = set()
# README sections whose commands need something this test cannot give them
NEEDS_CLUSTER = {"jobs"}  # `train jobs` right after a real submission: tests/test_slurm_cluster.py


FILE_TITLE = re.compile(r'^\w+\s+title="([^"]+)"')


def markdown_sections(path: Path, by_section: bool = True) -> dict[str, tuple[list, list[str]]]:
    """``{section title: (steps, python snippets)}`` in page order (one group per ``##`` section,
    or the whole page as one group when not ``by_section``); a step is a command line or a file
    (``(name, text)``) of a fenced block with a ``title``."""
    sections: dict[str, tuple[list, list[str]]] = {}
    title = "top"
    fenced: str | None = None
    block: list[str] = []
    joined = ""
    for line in path.read_text().splitlines():
        if fenced is not None:
            if line.startswith("```"):
                named = FILE_TITLE.match(fenced)
                if named:
                    sections.setdefault(title, ([], []))[0].append((named.group(1), "\n".join(block) + "\n"))
                elif fenced == "python":
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


def _collect(commands: list, pending: str, line: str) -> str:
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


def readme_sections() -> dict[str, tuple[list, list[str]]]:
    return markdown_sections(README)


# pages whose commands run in a project of their own, by their own test (page -> that test)
OWN_TEST = {"migration/lightning-hydra-template.md": "tests/test_migration_lht.py"}


def docs_pages() -> dict[str, tuple[list, list[str]]]:
    """``{page path under docs/: (train commands, python snippets)}`` for the pages that show any
    (but :data:`OWN_TEST`'s)."""
    paths = sorted(p for p in DOCS.rglob("*.md") if str(p.relative_to(DOCS)) not in OWN_TEST)
    pages = {str(path.relative_to(DOCS)): markdown_sections(path, by_section=False).get("top") for path in paths}
    return {page: found for page, found in pages.items() if found}


SECTIONS = readme_sections()
PAGES = docs_pages()


def _verbs(groups: dict[str, tuple[list, list[str]]]) -> set[str]:
    return {shlex.split(c)[1] for cmds, _ in groups.values() for c in cmds if isinstance(c, str) and c.startswith("train ")}


def test_readme_shows_commands() -> None:
    """The extraction finds the README's quick start and the docs' commands (a rewrite must not silently
    empty this test)."""
    assert {"fit", "ls", "lr-find", "predict", "export", "submit"} <= _verbs(SECTIONS)
    commands = [c for cmds, _ in PAGES.values() for c in cmds if isinstance(c, str) and c.startswith("train ")]
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
    docs say (``from trainer_cli.cli import LightningCLI``); the docstrings aside."""
    foreign = REPO / "tests" / "foreign"
    plain, swapped = ((foreign / name).read_text().splitlines()[1:] for name in ("plain_main.py", "main.py"))
    changed = [(a, b) for a, b in zip(plain, swapped) if a != b]
    assert len(plain) == len(swapped) and changed == [
        ("from lightning.pytorch.cli import LightningCLI", "from trainer_cli.cli import LightningCLI")
    ], changed


def _runnable(command: str) -> list[str]:
    argv = shlex.split(command)
    return argv if argv[0] != "train" else [*argv[1:], *LIMITS.get(argv[1], [])]


def _steps(commands: list) -> Iterator[list]:
    """The runner's steps (:mod:`docs_runner`): ``["train", ARGV]``, ``["python", ARGV]`` (a user's
    script, with the verb's limits), ``["cp", ARGV]``, ``["file", NAME, TEXT]``."""
    for command in commands:
        if isinstance(command, tuple):
            yield ["file", *command]
            continue
        if command.startswith("train "):
            argv = _runnable(command)
            if argv[0] not in NEEDS_CLUSTER and not (argv[0] == "doctor" and "--local" not in argv):  # its Slurm form: tests/test_doctor.py
                yield ["train", argv]
            continue
        argv = shlex.split(command)
        if argv[0] == "python":
            yield ["python", [*argv, *(LIMITS.get(argv[2], []) if len(argv) > 2 else [])]]
        else:
            yield [argv[0], argv]


@pytest.fixture(scope="session")
def wheel_site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel, built once per session (all xdist workers: under a lock in their shared temporary
    folder) and installed with ``pip install --no-deps --target`` into a folder of its own."""
    from filelock import FileLock

    shared = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):  # the workers' folders share this session's parent
        shared = shared.parent
    site = shared / "docs-wheel" / "site"
    with FileLock(str(shared / "docs-wheel.lock")):
        if not (site / "trainer_cli" / "__init__.py").is_file():
            build_and_install_wheel(shared / "docs-wheel")
    return site


@pytest.fixture(scope="session")
def runner(wheel_site: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[subprocess.Popen[str]]:
    """:mod:`docs_runner` with only the wheel's ``trainer_cli`` importable (checked: the path it reports)."""
    alone = tmp_path_factory.mktemp("docs-runner")
    shutil.copy(Path(__file__).parent / "docs_runner.py", alone / "docs_runner.py")  # its folder is sys.path[0]
    env = {k: v for k, v in os.environ.items() if k not in ("TRAINER_CLI_RUN_DIR", "PYTHONPATH")}
    env |= {"PYTHONPATH": str(wheel_site), "TRAINER_CLI_DOCS_SITE": str(wheel_site), "PYTHONUNBUFFERED": "1"}
    # the docs' `--slurm.secrets` commands take the keys from the user's shell, where the page tells them to export them
    env |= {"WANDB_API_KEY": "docs-placeholder-not-a-key", "HF_TOKEN": "docs-placeholder-not-a-token"}
    proc = subprocess.Popen([sys.executable, str(alone / "docs_runner.py")], cwd=alone, env=env, text=True,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert proc.stdout is not None and proc.stdin is not None
    first = proc.stdout.readline()
    assert first, "docs_runner did not start"
    where = Path(json.loads(first)["trainer_cli"])
    print(f"trainer_cli imported from {where}")
    assert where == wheel_site / "trainer_cli" / "__init__.py", f"trainer_cli came from {where}, not the wheel"
    yield proc
    proc.stdin.close()
    proc.wait(60)


@pytest.mark.parametrize("title", list(SECTIONS), ids=[_slug(t) for t in SECTIONS])
def test_readme_section_runs(title: str, tmp_path: Path, runner: subprocess.Popen[str]) -> None:
    """Each command of the section exits 0 in an empty directory, in README order, with only the
    wheel installed; then its Python snippets run."""
    _run(runner, "README.md", *SECTIONS[title], tmp_path)


@pytest.mark.parametrize("page", list(PAGES), ids=[_slug(p.removesuffix(".md")) for p in PAGES])
def test_docs_page_runs(page: str, tmp_path: Path, runner: subprocess.Popen[str]) -> None:
    """Each command of the docs page exits 0 in one empty directory, in page order, with only the
    wheel installed; then its Python snippets run."""
    _run(runner, f"docs/{page}", *PAGES[page], tmp_path, clone=page in CLONE_LAYOUT)


def test_clone_layout_is_only_for_pages_that_need_it() -> None:
    """:data:`CLONE_LAYOUT` names only pages that exist and still show a clone-only step."""
    for page in CLONE_LAYOUT:
        steps = [c for c in PAGES.get(page, ([], []))[0] if isinstance(c, str)]
        assert any(re.match(r"(cp|python) (configs|slurm|tests)/", c) for c in steps), f"{page}: needs no clone now; drop it from CLONE_LAYOUT"


def _run(runner: subprocess.Popen[str], source: str, commands: list, snippets: list[str], tmp_path: Path, clone: bool = False) -> None:
    work = tmp_path / "work"
    work.mkdir()
    for folder in ("configs", "slurm", "tests") if clone else ():
        (work / folder).symlink_to(REPO / folder)
    result = tmp_path / "result.json"
    request = {"cwd": str(work), "steps": list(_steps(commands)), "snippets": snippets, "result": str(result), "source": source}
    assert runner.stdin is not None and runner.stdout is not None
    runner.stdin.write(json.dumps(request) + "\n")
    runner.stdin.flush()
    assert runner.stdout.readline().strip() == "done", "docs_runner ended"
    outcome = json.loads(result.read_text())
    if outcome["failed"] is not None:
        kind, what = outcome["failed"]
        shown = what if isinstance(what, str) else ("train " if kind == "train" else "") + shlex.join(what)
        pytest.fail(f"{source} {kind} failed ({outcome['code']}): {shown}\n{outcome['output']}")


def test_the_swap_module_offers_every_public_name_of_lightning_cli() -> None:
    """``from lightning.pytorch.cli import ArgsType, LightningCLI`` becomes ``from trainer_cli.cli import ArgsType,
    LightningCLI`` (issue 45: it took two edits): every public name lightning.pytorch.cli defines or imports from
    Lightning, jsonargparse or torch is in trainer_cli.cli, the same object, but LightningCLI, TrainerCLI."""
    import ast
    import inspect
    import sys

    import lightning.pytorch.cli as stock

    import trainer_cli.cli as swapped
    from trainer_cli import TrainerCLI

    tree = ast.parse(Path(stock.__file__).read_text())
    defined = {n.name for n in tree.body if isinstance(n, (ast.ClassDef, ast.FunctionDef))}
    defined |= {t.id for n in tree.body if isinstance(n, ast.Assign) for t in n.targets if isinstance(t, ast.Name)}
    library = {
        name for name, value in vars(stock).items()
        if not inspect.ismodule(value)
        and (getattr(inspect.getmodule(value), "__name__", None) or "").split(".")[0] not in {*sys.stdlib_module_names, "typing_extensions"}
    }
    public = {n for n in defined | library if not n.startswith("_")}
    assert {"ArgsType", "LightningCLI", "SaveConfigCallback", "OptimizerCallable", "LRSchedulerCallable",
            "LightningArgumentParser", "instantiate_class", "Namespace", "Trainer"} <= public
    assert swapped.LightningCLI is TrainerCLI and swapped.TrainerCLI is TrainerCLI
    differ = [n for n in sorted(public - {"LightningCLI"}) if getattr(swapped, n, None) is not getattr(stock, n)]
    assert differ == [], differ
    assert set(swapped.__all__) <= set(dir(swapped)) and public <= set(dir(swapped))
    namespace: dict = {}
    exec("from trainer_cli.cli import ArgsType, LightningCLI, OptimizerCallable, Namespace", namespace)
    assert namespace["LightningCLI"] is TrainerCLI and namespace["ArgsType"] is stock.ArgsType
    try:
        exec("from trainer_cli.cli import NoSuchName", {})
    except ImportError as err:
        assert "NoSuchName" in str(err)
    else:
        raise AssertionError("a name lightning.pytorch.cli has not either imported")
