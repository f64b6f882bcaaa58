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
import subprocess
import sys
from pathlib import Path

import pytest
from support import REPO

PACKAGE = REPO / "trainer_cli"


def _modules() -> dict[str, tuple[Path, bool]]:
    found = {}
    for path in PACKAGE.rglob("*.py"):
        parts = list(path.relative_to(REPO).with_suffix("").parts)
        is_package = parts[-1] == "__init__"
        found[".".join(parts[:-1] if is_package else parts)] = (path, is_package)
    return found


def _type_checking_nodes(tree: ast.AST) -> set[int]:
    skipped: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skipped.update(id(inner) for body in node.body for inner in ast.walk(body))
    return skipped


def import_graph() -> dict[str, set[str]]:
    """``{module: the package's modules it imports}``, function-level imports included."""
    modules = _modules()
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


@pytest.mark.parametrize("args", [["--help"], ["submit", "--help"], ["jobs", "--help"], ["cancel", "--help"], ["sweep-results", "--help"]])
def test_launcher_help_imports_no_torch(args: list[str]) -> None:
    code = (
        "import sys\nfrom trainer_cli.__main__ import main\ntry:\n    rc = main(%r)\nexcept SystemExit as exit:\n    rc = exit.code or 0\n"
        "assert 'torch' not in sys.modules and 'lightning' not in sys.modules, 'torch imported'\nsys.exit(rc)" % args
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip()


SLURM_COMMANDS = {"sbatch", "squeue", "scontrol", "sacct", "sacctmgr", "scancel", "srun"}


def test_slurm_commands_run_only_through_the_wrapper() -> None:
    """Every Slurm command the package runs goes through trainer_cli.job.slurm_commands (a
    timeout, a typed error): no other module hands a list starting with one to ``subprocess``."""
    offenders = []
    for name, (path, _) in _modules().items():
        if name == "trainer_cli.job.slurm_commands":
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and ast.unparse(node.func.value) == "subprocess"):
                continue
            first = node.args[0] if node.args else None
            if isinstance(first, ast.List) and first.elts and isinstance(first.elts[0], ast.Constant) and first.elts[0].value in SLURM_COMMANDS:
                offenders.append(f"{path.relative_to(REPO)}:{node.lineno}")
    assert offenders == []


# The package's layers, lowest first: a module imports its own layer and the ones below, never one
# above (../shared/design/ARCHITECTURE.md). Foundations every layer may use; what runs inside a Slurm
# job (standard library and filelock); where a run lives; the components a config names; the front
# door (argv and files -> a parsed, checked spec); what runs in a fit process around Lightning; the
# verbs around it (tools, sweeps, the login-node Slurm verbs); the package face and `train`.
LAYERS = [
    ("foundations", ["trainer_cli.errors", "trainer_cli.atomic", "trainer_cli.tables", "trainer_cli.imports"]),
    ("job", ["trainer_cli.job"]),
    ("rundir", ["trainer_cli.rundir"]),
    ("components", ["trainer_cli.callbacks", "trainer_cli.data", "trainer_cli.models", "trainer_cli.optim"]),
    ("config", ["trainer_cli.config"]),
    ("runtime", ["trainer_cli.runtime"]),
    ("verbs", ["trainer_cli.tools", "trainer_cli.sweeps", "trainer_cli.launch"]),
    ("face", ["trainer_cli", "trainer_cli.__main__", "trainer_cli.cli", "trainer_cli.wandb_logger"]),
]
# Upward edges that remain, each with its reason; the list only shrinks. (The last, runtime.cli ->
# launch.fit_job for a user's script's `submit`, left when the script's verbs were dispatched through
# config.verbs.SCRIPT_VERBS, as `train`'s are.)
ALLOWED_UPWARD: set[tuple[str, str]] = set()
MAX_ROOT_MODULES = 8


def layer_of(module: str) -> int:
    """The index in :data:`LAYERS` of the longest prefix naming ``module``'s layer."""
    best: tuple[int, int] | None = None
    for index, (_, prefixes) in enumerate(LAYERS):
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and (best is None or len(prefix) > best[1]):
                best = (index, len(prefix))
    assert best is not None, f"{module} is in no layer: add it to LAYERS"
    return best[0]


def test_no_module_imports_a_higher_layer() -> None:
    graph = import_graph()
    upward = sorted(
        (module, dep) for module, deps in graph.items() for dep in deps if layer_of(dep) > layer_of(module)
    )
    unexpected = [f"{m} ({LAYERS[layer_of(m)][0]}) -> {d} ({LAYERS[layer_of(d)][0]})" for m, d in upward if (m, d) not in ALLOWED_UPWARD]
    assert unexpected == [], "imports from a lower layer to a higher one:\n" + "\n".join(unexpected)
    assert set(upward) == ALLOWED_UPWARD, f"an allowed upward edge is gone: remove it from ALLOWED_UPWARD ({set(upward) ^ ALLOWED_UPWARD})"


def test_the_layer_rule_sees_an_upward_import() -> None:
    graph = import_graph()
    assert layer_of("trainer_cli.job.jobstate") < layer_of("trainer_cli.runtime.cli")
    assert "trainer_cli.job.jobstate" in graph["trainer_cli.runtime.run"]  # a real downward edge, seen


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
