"""The package's import graph has no cycle, counting imports inside functions (they only hide a
cycle from Python, not from a reader), and the launcher's quick verbs import no torch.

The graph is read from the source with ``ast``: ``import a.b`` and ``from a import b`` at any depth,
except under ``if TYPE_CHECKING:`` (never run). ``from pkg import name`` counts as importing the
submodule ``pkg.name`` when there is one, else ``pkg`` itself. Imports by name count too: a string
that names a module of the package (``"trainer_cli.x.y"``, ``"trainer_cli.x.y:function"``, a class path
``"trainer_cli.x.y.Class"``) anywhere in a module (a verb table's value, an argument of
``importlib.import_module`` or ``__import__``, a lazy importer's table, ``python -m`` in a command), the
constant start of an f-string (``f"trainer_cli.x.{name}"``: the folder ``trainer_cli.x``), and
``importlib.import_module(".y", __package__)``. A call that imports a name computed at run time is
listed in :data:`IMPORTS_BY_COMPUTED_NAME` with what it imports.
"""

from __future__ import annotations

import ast
import importlib
import re
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


# a module of the package named in a string: "trainer_cli.x.y", "trainer_cli.x.y:function", "trainer_cli.x.y.Class"
# (not the bare "trainer_cli": the package's name as a folder, a label, or `python -m trainer_cli`, the program)
NAMED_MODULE = re.compile(r"trainer_cli(?:\.[A-Za-z_]\w*)+(?::[A-Za-z_][\w.]*)?")
IMPORT_CALLS = {"import_module", "__import__", "run_module"}  # importlib.import_module, __import__, runpy.run_module


def _call_name(node: ast.Call) -> str:
    func = node.func
    return func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""


def _names_by_string(node: ast.AST, name: str, is_package: bool) -> list[str]:
    """The dotted names of the package that ``node`` names by a string (module docstring's rules), unresolved."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str) and NAMED_MODULE.fullmatch(node.value):
        return [node.value.partition(":")[0]]
    if isinstance(node, ast.JoinedStr) and node.values:
        first = node.values[0]
        if isinstance(first, ast.FormattedValue) and ast.unparse(first.value) in ("__name__", "__package__"):
            prefix = name if is_package or ast.unparse(first.value) == "__name__" else name.rpartition(".")[0]
            rest = node.values[1] if len(node.values) > 1 else None
            prefix += rest.value if isinstance(rest, ast.Constant) and isinstance(rest.value, str) else ""
        elif isinstance(first, ast.Constant) and isinstance(first.value, str):
            prefix = first.value
        else:
            return []
        prefix = prefix.partition(":")[0].rpartition(".")[0] if len(node.values) > 1 else prefix.partition(":")[0]
        return [prefix] if NAMED_MODULE.fullmatch(prefix) else []
    if isinstance(node, ast.Call) and _call_name(node) in IMPORT_CALLS and len(node.args) >= 2:
        relative, package = node.args[0], ast.unparse(node.args[1])
        if isinstance(relative, ast.Constant) and str(relative.value).startswith(".") and package in ("__name__", "__package__"):
            base = (name if is_package or package == "__name__" else name.rpartition(".")[0]).split(".")
            dots = len(relative.value) - len(relative.value.lstrip("."))
            return [".".join(base[: len(base) - dots + 1] + [relative.value.lstrip(".")])]
    return []


def import_graph(package: Path = PACKAGE) -> dict[str, set[str]]:
    """``{module: the package's modules it imports}``, function-level imports and imports by name included
    (``package``: the folder of the package to read, the repository's own by default)."""
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
                    folder = name.split(".") if is_package else name.split(".")[:-1]
                    base = ".".join(folder[: len(folder) - node.level + 1] + ([base] if base else []))
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names]
            else:
                targets = _names_by_string(node, name, is_package)
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
    assert "trainer_cli.schedulers.run_plan" in graph and "trainer_cli.runtime.verbs" in graph["trainer_cli.schedulers.run_plan"]
    cycle = find_cycle(graph)
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


def test_the_cycle_finder_sees_function_level_imports() -> None:
    graph = import_graph()
    # the submissions' plan imports the verb runner inside a function (Lightning only when it parses): it is counted
    assert "trainer_cli.runtime.verbs" in graph["trainer_cli.schedulers.run_plan"]
    assert find_cycle(graph | {"trainer_cli.runtime.verbs": graph["trainer_cli.runtime.verbs"] | {"trainer_cli.schedulers.run_plan"}}) is not None


def test_a_scripts_submit_is_given_from_the_top() -> None:
    """``python main.py submit`` (a user's script with TrainerCLI): the public class at the package face gives
    the runtime's class its ``submit`` (``script_verbs``); no runtime module names launch, by import or by name,
    and every verb of ``train`` has its function named at the top (``__main__.TARGETS``), none below."""
    from trainer_cli.__main__ import TARGETS
    from trainer_cli.cli import TrainerCLI
    from trainer_cli.config.verbs import VERBS
    from trainer_cli.runtime import cli

    graph = import_graph()
    assert not [(m, d) for m, deps in graph.items() if m.startswith("trainer_cli.runtime") for d in deps
                if d.startswith(("trainer_cli.launch", "trainer_cli.schedulers"))]
    assert issubclass(TrainerCLI, cli.TrainerCLI) and cli.TrainerCLI.script_verbs == {}
    assert set(TrainerCLI.script_verbs) == {"submit"}
    assert set(TARGETS) == set(VERBS)
    for target in TARGETS.values():
        module, _, function = target.partition(":")
        assert module in graph["trainer_cli.__main__"] and callable(getattr(importlib.import_module(module), function))
    assert not {d for d in graph["trainer_cli.config.verbs"] if layer_of(d) > layer_of("trainer_cli.config.verbs")}


@pytest.mark.parametrize("args", [["--help"], ["submit", "--help"], ["jobs", "--help"], ["cancel", "--help"], ["sweep-results", "--help"], ["init", "--help"]])
def test_launcher_help_imports_no_torch(args: list[str]) -> None:
    code = (
        "import sys\nfrom trainer_cli.__main__ import main\ntry:\n    rc = main(%r)\nexcept SystemExit as exit:\n    rc = exit.code or 0\n"
        "assert 'torch' not in sys.modules and 'lightning' not in sys.modules, 'torch imported'\nsys.exit(rc)" % args
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip()


# Slurm commands run only through trainer_cli.schedulers.slurm.commands: tests/test_slurm_reader.py (its guard sees a
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
    # the verbs around a fit: sweeps (search spaces, trials, their results); the engines behind the
    # scheduler seam, each in its own folder (Slurm's: submit, templates, sizing, containers, site profile,
    # doctor, array sweep workers; Ray's), with what they share (the code snapshot, the registry of
    # submitted jobs); the verbs over every engine's jobs (jobs, cancel); the tools (lr-find, cv, export,
    # completion, ls)
    "trainer_cli.sweeps",
    "trainer_cli.schedulers",
    "trainer_cli.launch",
    "trainer_cli.tools",
    # the package face: one-line shims kept for old imports, the lazy package (__init__), `train`
    "trainer_cli.wandb_logger",
    "trainer_cli.cli",
    "trainer_cli",
    "trainer_cli.__main__",
]
# Upward edges that remain, each with its reason; the list only shrinks. (The last, runtime -> launch for a
# user's script's `submit`, was hidden for a while in a "module:function" string of config.verbs, which the
# graph now reads; the public TrainerCLI at the face gives the runtime's class that verb instead.)
ALLOWED_UPWARD: set[tuple[str, str]] = set()
# the face (__init__, __main__), the foundations (errors, atomic, tables, imports, plots) and the two
# one-line shims kept for a release (cli, wandb_logger)
MAX_ROOT_MODULES = 9


# Each engine's in-job side lives in the engine's folder (all of Slurm in one place) but runs inside a job,
# where the job layer calls it (trainer_cli.job.scheduler.IN_JOB): it sits in the job layer, standard
# library only at import, and may import no higher layer. The engine's __init__ modules that importing it
# runs are held to the same rule (test_the_in_job_sides_import_only_the_job_layer).
IN_JOB_SIDES = {
    "trainer_cli.schedulers.slurm.in_job": "trainer_cli.job",
    "trainer_cli.schedulers.slurm.commands": "trainer_cli.job",
    "trainer_cli.schedulers.slurm.output": "trainer_cli.job",
}


def layer_of(module: str) -> int:
    """The index in :data:`LAYERS` of ``module``'s first-level folder or root module (an in-job side's:
    :data:`IN_JOB_SIDES`)."""
    parts = module.split(".")
    place = IN_JOB_SIDES.get(module) or ".".join(parts[:2])
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


def test_the_in_job_sides_are_the_seams_and_import_only_the_job_layer() -> None:
    """The seam's table of in-job sides names exactly the modules placed in the job layer here (with what
    they import of the engine's folder), and importing one runs nothing above the job layer: no higher
    module, and the engine folders' ``__init__`` import only the job layer and the foundations."""
    from trainer_cli.job.scheduler import IN_JOB

    graph = import_graph()
    closure, todo = set(), list(IN_JOB.values())
    while todo:
        module = todo.pop()
        if module not in closure:
            closure.add(module)
            todo += [d for d in graph[module] if d.startswith("trainer_cli.schedulers")]
    assert closure == set(IN_JOB_SIDES)
    code = (
        "import importlib, sys\n"
        f"for name in {sorted(IN_JOB.values())!r}:\n    importlib.import_module(name)\n"
        "print('\\n'.join(m for m in sys.modules if m.startswith('trainer_cli')))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    ran = set(proc.stdout.split()) - {"trainer_cli", "trainer_cli.schedulers", "trainer_cli.schedulers.slurm"}
    above = sorted(m for m in ran if layer_of(m) > LAYERS.index("trainer_cli.job"))
    assert above == [], f"importing an in-job side runs modules above the job layer: {above}"


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


# The calls that import a name computed at run time, which no reading of the source resolves: (module, the
# function holding the call) -> what it imports. A new one is named here, or written so the graph sees it.
IMPORTS_BY_COMPUTED_NAME = {
    ("trainer_cli.imports", "import_class"): "a class path of a config or a checkpoint (any package's)",
    ("trainer_cli.config.class_hints", "public_classes"): "the module of a class path the user wrote (a hint)",
    ("trainer_cli.schedulers.slurm.probe", "_code_check"): "the modules of the run's class paths (doctor: does the code import)",
    ("trainer_cli.__main__", "_import_verb"): "a verb's module, named in TARGETS (strings the graph reads)",
    ("trainer_cli.callbacks", "__getattr__"): "a callback's module, named in _MODULES (strings the graph reads)",
    ("trainer_cli.job.scheduler", "in_job_side"): "an engine's in-job side, named in IN_JOB (strings the graph reads)",
}


def imports_by_computed_name(package: Path = PACKAGE) -> set[tuple[str, str]]:
    """(module, innermost function) of each call of ``importlib.import_module``, ``__import__`` or
    ``runpy.run_module`` whose name is neither a string constant nor an f-string the graph reads."""
    found: set[tuple[str, str]] = set()

    def visit(node: ast.AST, module: str, function: str) -> None:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            function = node.name
        if isinstance(node, ast.Call) and _call_name(node) in IMPORT_CALLS and node.args:
            first = node.args[0]
            if not (isinstance(first, ast.Constant) or _names_by_string(first, module, False)):
                found.add((module, function))
        for child in ast.iter_child_nodes(node):
            visit(child, module, function)

    for name, (path, _) in _modules(package).items():
        visit(ast.parse(path.read_text(), str(path)), name, "<module>")
    return found


def test_every_import_by_a_computed_name_is_named() -> None:
    found = imports_by_computed_name()
    assert found == set(IMPORTS_BY_COMPUTED_NAME), (
        f"imports by a name computed at run time: name them in IMPORTS_BY_COMPUTED_NAME, or import by a plain "
        f"import or a string the graph reads: new {sorted(found - set(IMPORTS_BY_COMPUTED_NAME))}, "
        f"gone {sorted(set(IMPORTS_BY_COMPUTED_NAME) - found)}"
    )


# one upward import by name of each kind, as a module of job/ would write it, and the module it names
IMPORTS_BY_NAME = {
    "import_module": ("import importlib\n\ndef probe():\n    return importlib.import_module('trainer_cli.launch.jobs')\n",
                      "trainer_cli.launch.jobs"),
    "verb_table": ("VERBS = {'jobs': ('trainer_cli.launch.jobs:main', 'List the jobs.')}\n", "trainer_cli.launch.jobs"),
    "dunder_import": ("def probe():\n    return __import__('trainer_cli.launch.jobs')\n", "trainer_cli.launch.jobs"),
    "class_path": ("LOGGER = 'trainer_cli.runtime.wandb_logger.WandbLogger'\n", "trainer_cli.runtime.wandb_logger"),
    "lazy_table": ("import importlib\n_LAZY = {'Sweep': 'trainer_cli.sweeps.plan'}\n\n"
                   "def __getattr__(name):\n    return getattr(importlib.import_module(_LAZY[name]), name)\n",
                   "trainer_cli.sweeps.plan"),
    "f_string": ("import importlib\n\ndef probe(verb):\n    return importlib.import_module(f'trainer_cli.launch.{verb}')\n",
                 "trainer_cli.launch"),
    "relative": ("import importlib\n\ndef probe():\n    return importlib.import_module('..launch.jobs', __package__)\n",
                 "trainer_cli.launch.jobs"),
}


@pytest.mark.parametrize("kind", sorted(IMPORTS_BY_NAME))
def test_the_layer_rule_sees_an_upward_import_by_name(tmp_path: Path, kind: str) -> None:
    """An upward import by name (importlib, ``__import__``, a verb table's ``module:function``, a class path,
    a lazy importer's table, an f-string's constant start, a relative name), written into a copy of the
    package, is reported as an upward import."""
    source, target = IMPORTS_BY_NAME[kind]
    copy = tmp_path / "trainer_cli"
    shutil.copytree(PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__"))
    (copy / "job" / "by_name_probe.py").write_text(source)
    assert unexpected_upward_imports(import_graph(copy)) == [
        f"trainer_cli.job.by_name_probe (trainer_cli.job) -> {target} ({LAYERS[layer_of(target)]})"
    ]


def test_the_package_root_holds_few_modules() -> None:
    root = sorted(p.name for p in PACKAGE.glob("*.py"))
    assert len(root) <= MAX_ROOT_MODULES, f"{len(root)} modules at the package root: {root}"


def test_job_and_launch_import_no_torch_at_module_level() -> None:
    """What runs in a batch script (job/), the engines (schedulers/) and the login-node verbs (launch/) start without torch."""
    names = sorted(n for n in _modules() if n.startswith(("trainer_cli.job", "trainer_cli.launch", "trainer_cli.schedulers")))
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
    config.yaml files name (``trainer_cli.wandb_logger.WandbLogger``).

    The imports in this process (a worker that has Lightning imported already): a fresh interpreter
    for them took 35-50 s of make test under load, Lightning's and W&B's imports."""
    from trainer_cli.cli import TrainerCLI
    from trainer_cli.runtime.cli import TrainerCLI as New
    from trainer_cli.runtime.wandb_logger import WandbLogger as W
    from trainer_cli.wandb_logger import WandbLogger

    assert issubclass(TrainerCLI, New) and WandbLogger is W
