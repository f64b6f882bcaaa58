"""The core's shape, as the issue "One request, one run" left it: the command line read in one place,
modules small enough to read, the environment written in one place. Read from the source with ``ast``
(the counting rules of ../shared/tools/argv_sites.py, which the issue measured with).
"""

from __future__ import annotations

import ast
from pathlib import Path

from support import REPO

PACKAGE = REPO / "trainer_cli"
MAX_LINES = 500


def _sources() -> dict[Path, ast.Module]:
    return {path: ast.parse(path.read_text(), str(path)) for path in sorted(PACKAGE.rglob("*.py"))}


def _parents(tree: ast.AST) -> dict[ast.AST, ast.AST]:
    return {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}


def _in_entry_main(node: ast.AST, parents: dict[ast.AST, ast.AST]) -> bool:
    while node in parents:
        node = parents[node]
        if isinstance(node, ast.FunctionDef) and node.name in ("main", "_main"):
            return True
        if isinstance(node, ast.If) and "__name__" in ast.unparse(node.test):
            return True
    return False


def _flag_constants(node: ast.AST) -> bool:
    return any(isinstance(k, ast.Constant) and isinstance(k.value, str) and k.value.startswith("--") and len(k.value) > 2
               for k in ast.walk(node))


def test_the_command_line_is_read_in_one_place() -> None:
    """``sys.argv`` outside an entry point's ``main``: the request reader's one line; a token compared
    with a ``--flag`` string: train's verb dispatch alone (the request reader reads by the option table)."""
    argv_sites, scanners = [], []
    for path, tree in _sources().items():
        parents = _parents(tree)
        where = path.relative_to(REPO)
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and node.attr == "argv" and ast.unparse(node.value) == "sys":
                if not _in_entry_main(node, parents):
                    argv_sites.append(f"{where}:{node.lineno}")
            if isinstance(node, ast.FunctionDef):
                compares = any(isinstance(s, ast.Compare) and any(_flag_constants(c) for c in [s.left, *s.comparators])
                               for s in ast.walk(node))
                starts = any(isinstance(s, ast.Call) and isinstance(s.func, ast.Attribute) and s.func.attr == "startswith"
                             and any(_flag_constants(a) for a in s.args) for s in ast.walk(node))
                if compares or starts:
                    scanners.append(f"{where}:{node.name}")
    assert len(argv_sites) <= 1 and all(s.startswith("trainer_cli/config/request.py:") for s in argv_sites), argv_sites
    assert len(scanners) <= 2 and set(scanners) <= {"trainer_cli/__main__.py:_dispatch", "trainer_cli/config/request.py:read"}, scanners


def test_no_module_is_too_long_to_read() -> None:
    lengths = {path.relative_to(REPO): len(path.read_text().splitlines()) for path in PACKAGE.rglob("*.py")}
    assert not {p: n for p, n in lengths.items() if n > MAX_LINES}, "split by reason to change"


def test_the_runtime_cli_holds_the_lightningcli_hooks_only() -> None:
    """runtime/cli.py's TrainerCLI is LightningCLI's hooks (``before_<verb>``/``after_<verb>`` included) and
    properties; a helper of its own (private) is a few lines, so that what is not a hook lives in a module of
    its own reason (the parser, links, optimizers, the script's adapter, the run): what the line cap meant."""
    from lightning.pytorch.cli import LightningCLI

    tree = ast.parse((PACKAGE / "runtime" / "cli.py").read_text())
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "TrainerCLI")
    hooks = {f"{when}_{verb}" for verb in LightningCLI.subcommands() for when in ("before", "after")}
    others = [
        f"{m.name} ({m.end_lineno - m.lineno + 1} lines)"
        for m in cls.body
        if isinstance(m, ast.FunctionDef)
        and not hasattr(LightningCLI, m.name)
        and m.name not in hooks
        and not any(ast.unparse(d) == "property" for d in m.decorator_list)
        and not (m.name.startswith("_") and (m.end_lineno or m.lineno) - m.lineno < 5)
    ]
    assert others == [], f"not LightningCLI hooks: {others}"


def test_the_environment_is_written_in_one_place() -> None:
    """Child processes get their context through :mod:`trainer_cli.job.export` (one scoped export);
    nothing else writes ``os.environ``."""
    writers = []
    for path, tree in _sources().items():
        if path == PACKAGE / "job" / "export.py":
            continue
        for node in ast.walk(tree):
            target = None
            if isinstance(node, (ast.Assign, ast.AugAssign, ast.Delete)):
                targets = node.targets if isinstance(node, (ast.Assign, ast.Delete)) else [node.target]
                target = next((t for t in targets if isinstance(t, ast.Subscript) and ast.unparse(t.value) == "os.environ"), None)
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in (
                "pop", "setdefault", "update", "clear", "popitem"
            ) and ast.unparse(node.func.value) == "os.environ":
                target = node
            elif isinstance(node, ast.Call) and ast.unparse(node.func) in ("os.putenv", "os.unsetenv"):
                target = node
            if target is not None:
                writers.append(f"{path.relative_to(REPO)}:{node.lineno}")
    assert writers == [], writers
