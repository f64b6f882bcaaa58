"""The run as a value: a :class:`trainer_cli.runtime.run.Run` is built from what its entry says
(:class:`trainer_cli.runtime.run_entry.RunEntry`, frozen) and changes only through its own methods;
no module assigns a run's attributes (``run.x = ...``, ``self.run.x = ...``, ``cli.run.x = ...``,
``setattr(run, ...)``), not even the run's own parts (they return values: ``run_choice.Choice``).
Read from the source with ``ast``; the rule proves itself on a copy of the package with writes added,
as tests/test_import_layers.py proves its layer rule.
"""

from __future__ import annotations

import ast
import dataclasses
import shutil
from pathlib import Path

import pytest
from support import REPO

PACKAGE = REPO / "trainer_cli"
# the names a Run goes by: run, self.run, cli.run, self._run, record.run, the run_directory TrainerCLI is given,
# and the class itself (a class attribute set from outside)
RUN_NAMES = frozenset({"run", "_run", "run_directory", "Run"})
SETTERS = frozenset({"setattr", "delattr", "object.__setattr__", "object.__delattr__"})


def _is_run(node: ast.AST) -> bool:
    return (isinstance(node, ast.Name) and node.id in RUN_NAMES) or (
        isinstance(node, ast.Attribute) and node.attr in RUN_NAMES
    )


def _targets(node: ast.AST) -> list[ast.AST]:
    """What ``node`` assigns to or deletes, tuples and starred targets unpacked."""
    if isinstance(node, ast.Assign):
        found = list(node.targets)
    elif isinstance(node, (ast.AugAssign, ast.AnnAssign, ast.For, ast.AsyncFor)):
        found = [node.target]
    elif isinstance(node, ast.withitem) and node.optional_vars is not None:
        found = [node.optional_vars]
    elif isinstance(node, ast.Delete):
        found = list(node.targets)
    else:
        return []
    flat: list[ast.AST] = []
    while found:
        target = found.pop()
        if isinstance(target, (ast.Tuple, ast.List)):
            found.extend(target.elts)
        elif isinstance(target, ast.Starred):
            found.append(target.value)
        else:
            flat.append(target)
    return flat


def run_writes(package: Path = PACKAGE) -> list[str]:
    """``path:line: target`` of every assignment (or deletion) of an attribute of a run in ``package``."""
    found = []
    for path in sorted(package.rglob("*.py")):
        where = path.relative_to(package.parent)
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            for target in _targets(node):
                if isinstance(target, ast.Attribute) and _is_run(target.value):
                    found.append(f"{where}:{getattr(node, 'lineno', target.lineno)}: {ast.unparse(target)}")
            if isinstance(node, ast.Call) and ast.unparse(node.func) in SETTERS and node.args and _is_run(node.args[0]):
                found.append(f"{where}:{node.lineno}: {ast.unparse(node)}")
    return found


def test_no_module_assigns_a_runs_attributes() -> None:
    assert run_writes() == [], "give the value to Run's constructor or call a method of Run's named for what happens"


def test_the_rule_sees_a_write_added(tmp_path: Path) -> None:
    copy = tmp_path / "trainer_cli"
    shutil.copytree(PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__"))
    cv = copy / "tools" / "cv.py"
    cv.write_text(cv.read_text() + '\n\ndef _probe(cli):\n    cli.run.resume_command = "again"\n')
    choice = copy / "runtime" / "run_choice.py"  # a part of the run's own is held to the rule too
    choice.write_text(choice.read_text() + "\n\ndef _probe(run):\n    run.created, run.made_from = True, None\n")
    cli = copy / "runtime" / "cli.py"
    cli.write_text(
        cli.read_text() + '\n\ndef _probe(self):\n    setattr(self.run, "trainer", None)\n    self._run.changes += []\n'
    )
    lines = {name: len(path.read_text().splitlines()) for name, path in [("cv", cv), ("choice", choice), ("cli", cli)]}
    assert sorted(run_writes(copy)) == sorted(
        [
            f"trainer_cli/tools/cv.py:{lines['cv']}: cli.run.resume_command",
            f"trainer_cli/runtime/run_choice.py:{lines['choice']}: run.created",
            f"trainer_cli/runtime/run_choice.py:{lines['choice']}: run.made_from",
            f"trainer_cli/runtime/cli.py:{lines['cli'] - 1}: setattr(self.run, 'trainer', None)",
            f"trainer_cli/runtime/cli.py:{lines['cli']}: self._run.changes",
        ]
    )


def test_the_entry_is_one_frozen_value() -> None:
    from trainer_cli.runtime.run_entry import RunEntry

    script = RunEntry.script("python main.py", has_verbs=True, missing_is_error=False)
    assert script == RunEntry(
        "python main.py", "python main.py fit --run_dir {path} --ckpt_path last", True, False, True
    )
    assert RunEntry.script("python main.py", has_verbs=False, missing_is_error=True).resume_command == (
        "python main.py --run_dir {path} --ckpt_path last"  # run=False: the script has no verbs
    )
    assert RunEntry().command == "train" and not RunEntry().follows_lightning
    with pytest.raises(dataclasses.FrozenInstanceError):
        script.command = "train"  # type: ignore[misc]
