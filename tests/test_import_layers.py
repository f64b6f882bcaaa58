"""The package's import graph has no cycle, counting imports inside functions (they only hide a
cycle from Python, not from a reader), and the launcher's quick verbs import no torch.

The graph is read from the source with ``ast``: ``import a.b`` and ``from a import b`` at any depth,
except under ``if TYPE_CHECKING:`` (never run). ``from pkg import name`` counts as importing the
submodule ``pkg.name`` when there is one, else ``pkg`` itself.
"""

from __future__ import annotations

import ast
import importlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from support import REPO

PACKAGE = REPO / "trainer_cli"


def _modules(package: Path = PACKAGE) -> dict[str, tuple[Path, bool]]:
    found = {}
    for path in package.rglob("*.py"):
        parts = list(path.relative_to(package.parent).with_suffix("").parts)
        is_package = parts[-1] == "__init__"
        found[".".join(parts[:-1] if is_package else parts)] = (path, is_package)
    return found


def _type_checking_nodes(tree: ast.AST) -> set[int]:
    skipped: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skipped.update(id(inner) for body in node.body for inner in ast.walk(body))
    return skipped


def import_graph(package: Path = PACKAGE) -> dict[str, set[str]]:
    """``{module: the package's modules it imports}``, function-level imports included (``package``: the
    folder of the package to read, the repository's own by default)."""
    modules = _modules(package)
    graph: dict[str, set[str]] = {}
    for name, (path, is_package) in modules.items():
        tree = ast.parse(path.read_text(), str(path))
        skipped = _type_checking_nodes(tree)
        deps: set[str] = set()
        for node in ast.walk(tree):
            if id(node) in skipped:
                continue
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:  # relative: from the module's package upwards
                    package = name.split(".") if is_package else name.split(".")[:-1]
                    base = ".".join(package[: len(package) - node.level + 1] + ([base] if base else []))
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names]
            else:
                continue
            for target in targets:
                while target and target not in modules:
                    target = target.rpartition(".")[0]
                if target and target != name:
                    deps.add(target)
        graph[name] = deps
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of ``graph`` as ``[a, b, ..., a]``; None when there is none."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for dep in sorted(graph.get(node, ())):
            if state.get(dep) == 1:
                return path[path.index(dep):] + [dep]
            if dep not in state:
                found = visit(dep)
                if found:
                    return found
        path.pop()
        state[node] = 2
        return None

    for start in sorted(graph):
        if start not in state:
            found = visit(start)
            if found:
                return found
    return None


def test_the_package_has_no_import_cycle() -> None:
    graph = import_graph()
    assert "trainer_cli.launch.submit" in graph and "trainer_cli.runtime.verbs" in graph["trainer_cli.launch.submit"]
    cycle = find_cycle(graph)
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


def test_the_cycle_finder_sees_function_level_imports() -> None:
    graph = import_graph()
    # the submit library imports the verb runner inside a function (Lightning only when it parses): it is counted
    assert "trainer_cli.runtime.verbs" in graph["trainer_cli.launch.submit"]
    assert find_cycle(graph | {"trainer_cli.runtime.verbs": graph["trainer_cli.runtime.verbs"] | {"trainer_cli.launch.submit"}}) is not None


def test_a_scripts_submit_reaches_the_submit_library_through_the_verb_table() -> None:
    """``python main.py submit`` (a user's script with TrainerCLI): runtime names the submit library in
    config.verbs' table and imports it by name when the verb runs; no runtime module imports launch."""
    from trainer_cli.config.verbs import SCRIPT_VERBS

    graph = import_graph()
    assert not [(m, d) for m, deps in graph.items() if m.startswith("trainer_cli.runtime") for d in deps if d.startswith("trainer_cli.launch")]
    module, _, function = SCRIPT_VERBS["submit"].partition(":")
    assert module.startswith("trainer_cli.launch.") and callable(getattr(importlib.import_module(module), function))


@pytest.mark.parametrize("args", [["--help"], ["submit", "--help"], ["jobs", "--help"], ["cancel", "--help"], ["sweep-results", "--help"], ["init", "--help"]])
def test_launcher_help_imports_no_torch(args: list[str]) -> None:
    code = (
        "import sys\nfrom trainer_cli.__main__ import main\ntry:\n    rc = main(%r)\nexcept SystemExit as exit:\n    rc = exit.code or 0\n"
        "assert 'torch' not in sys.modules and 'lightning' not in sys.modules, 'torch imported'\nsys.exit(rc)" % args
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip()


# Slurm commands run only through trainer_cli.job.slurm_commands: tests/test_slurm_reader.py (its guard sees a
# command in a variable, importlib and os.system too).


# The order of the package's first-level folders and root modules, lowest first, one place each: a
# module imports its own folder (or root module) and the ones below it, never one above
# (../shared/design/ARCHITECTURE.md). Every first-level folder and root module is named here, so a new
# one fails test_the_layers_name_every_folder_and_root_module until it is given its place.
LAYERS = [
    # foundations every layer may use (they import nothing of the package)
    "trainer_cli.errors",
    "trainer_cli.atomic",
    "trainer_cli.tables",
    "trainer_cli.imports",
    "trainer_cli.plots",
    # what runs inside a Slurm job (standard library and filelock at import), and what Slurm says of jobs
    "trainer_cli.job",
    # where a run lives and what is in it
    "trainer_cli.rundir",
    # the components a config names (class paths users' YAML holds)
    "trainer_cli.models",
    "trainer_cli.optim",
    "trainer_cli.data",
    "trainer_cli.callbacks",
    # the front door: argv and files -> a parsed, checked spec
    "trainer_cli.config",
    # what runs in a fit process around Lightning
    "trainer_cli.runtime",
    # the verbs around a fit: sweeps (search spaces, trials, their results), the login-node Slurm verbs
    # (submit, sweep arrays, jobs, doctor), the tools (lr-find, cv, export, completion, ls)
    "trainer_cli.sweeps",
    "trainer_cli.launch",
    # the engines behind the scheduler seam (Ray), which plan a run as launch does
    "trainer_cli.schedulers",
    "trainer_cli.tools",
    # the package face: one-line shims kept for old imports, the lazy package (__init__), `train`
    "trainer_cli.wandb_logger",
    "trainer_cli.cli",
    "trainer_cli",
    "trainer_cli.__main__",
]
# Upward edges that remain, each with its reason; the list only shrinks. (The last, runtime.cli ->
# launch.fit_job for a user's script's `submit`, left when the script's verbs were dispatched through
# config.verbs.SCRIPT_VERBS, as `train`'s are.)
ALLOWED_UPWARD: set[tuple[str, str]] = set()
# the face (__init__, __main__), the foundations (errors, atomic, tables, imports, plots) and the two
# one-line shims kept for a release (cli, wandb_logger)
MAX_ROOT_MODULES = 9


def layer_of(module: str) -> int:
    """The index in :data:`LAYERS` of ``module``'s first-level folder or root module."""
    parts = module.split(".")
    place = ".".join(parts[:2])
    assert place in LAYERS, f"{module} is in no layer: add {place} to LAYERS"
    return LAYERS.index(place)


def upward_imports(graph: dict[str, set[str]]) -> list[tuple[str, str]]:
    """The edges of ``graph`` from a module to one of a higher layer, sorted."""
    return sorted((module, dep) for module, deps in graph.items() for dep in deps if layer_of(dep) > layer_of(module))


def unexpected_upward_imports(graph: dict[str, set[str]]) -> list[str]:
    """The upward edges of ``graph`` that :data:`ALLOWED_UPWARD` does not name, in words."""
    return [f"{m} ({LAYERS[layer_of(m)]}) -> {d} ({LAYERS[layer_of(d)]})"
            for m, d in upward_imports(graph) if (m, d) not in ALLOWED_UPWARD]


def test_the_layers_name_every_folder_and_root_module() -> None:
    assert len(LAYERS) == len(set(LAYERS)), "a name twice in LAYERS"
    folders = {f"trainer_cli.{p.name}" for p in PACKAGE.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    root_modules = {"trainer_cli" if p.stem == "__init__" else f"trainer_cli.{p.stem}" for p in PACKAGE.glob("*.py")}
    assert set(LAYERS) == folders | root_modules
    assert {".".join(m.split(".")[:2]) for m in import_graph()} == set(LAYERS)


def test_no_module_imports_a_higher_layer() -> None:
    graph = import_graph()
    unexpected = unexpected_upward_imports(graph)
    assert unexpected == [], "imports from a lower layer to a higher one:\n" + "\n".join(unexpected)
    upward = set(upward_imports(graph))
    assert upward == ALLOWED_UPWARD, f"an allowed upward edge is gone: remove it from ALLOWED_UPWARD ({upward ^ ALLOWED_UPWARD})"


def test_the_layer_rule_sees_an_upward_import(tmp_path: Path) -> None:
    graph = import_graph()
    assert layer_of("trainer_cli.job.jobstate") < layer_of("trainer_cli.runtime.cli") < layer_of("trainer_cli.tools.runs")
    assert "trainer_cli.job.jobstate" in graph["trainer_cli.runtime.run"]  # a real downward edge, seen, not reported
    assert unexpected_upward_imports(graph) == []
    # an edge added to the graph: from the lowest layer to the highest folder, and between two neighbours
    for low, high in [
        ("trainer_cli.errors", "trainer_cli.tools.runs"),
        ("trainer_cli.sweeps.results", "trainer_cli.launch.jobs"),
    ]:
        faked = graph | {low: graph[low] | {high}}
        assert (low, high) in upward_imports(faked)
        assert unexpected_upward_imports(faked) == [
            f"{low} ({LAYERS[layer_of(low)]}) -> {high} ({LAYERS[layer_of(high)]})"
        ]
    # a module written into a copy of the package, importing a higher layer inside a function
    copy = tmp_path / "trainer_cli"
    shutil.copytree(PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__"))
    (copy / "job" / "upward_probe.py").write_text("def probe() -> None:\n    from trainer_cli.launch import jobs\n")
    assert unexpected_upward_imports(import_graph(copy)) == [
        "trainer_cli.job.upward_probe (trainer_cli.job) -> trainer_cli.launch.jobs (trainer_cli.launch)"
    ]


def test_the_package_root_holds_few_modules() -> None:
    root = sorted(p.name for p in PACKAGE.glob("*.py"))
    assert len(root) <= MAX_ROOT_MODULES, f"{len(root)} modules at the package root: {root}"


def test_job_and_launch_import_no_torch_at_module_level() -> None:
    """What runs in a batch script (job/) and the login-node verbs (launch/) start without torch."""
    names = sorted(n for n in _modules() if n.startswith(("trainer_cli.job", "trainer_cli.launch")))
    code = (
        "import importlib, sys\n"
        f"for name in {names!r}:\n    importlib.import_module(name)\n"
        "heavy = sorted(m for m in ('torch', 'lightning') if m in sys.modules)\n"
        "assert not heavy, heavy\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]


def test_the_public_paths_of_before_the_move_still_work() -> None:
    """One-line shims for a release: users' main.py (``trainer_cli.cli.TrainerCLI``), the class path old
    config.yaml files name (``trainer_cli.wandb_logger.WandbLogger``) and the batch scripts of jobs
    queued before the move (``python -m trainer_cli.launch.jobstate``)."""
    code = (
        "from trainer_cli.cli import TrainerCLI\nfrom trainer_cli.runtime.cli import TrainerCLI as New\n"
        "from trainer_cli.wandb_logger import WandbLogger\nfrom trainer_cli.runtime.wandb_logger import WandbLogger as W\n"
        "assert TrainerCLI is New and WandbLogger is W\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    env = {**os.environ, "SLURM_JOB_ID": "123"}
    port = subprocess.run([sys.executable, "-m", "trainer_cli.launch.jobstate", "port"], capture_output=True, text=True,
                          cwd=REPO, env=env, timeout=60)
    assert port.returncode == 0 and 10000 <= int(port.stdout.strip()) < 30000, port.stderr
