"""trainer-cli builds on the public APIs of Lightning, jsonargparse, torch and the rest: no class of
the project overrides an underscored member of a library class, and no module imports an
underscored name from a library. (The supported range of versions is tested at both ends by
`make test`: .venv and .venv-min.)"""

from __future__ import annotations

import ast
import importlib
import inspect
import typing
import pkgutil

from support import REPO

import trainer_cli

# Where a library offers no public route, the use lives in one module guarded by a version check.
ALLOWED: dict[str, set[str]] = {}


def _project_modules() -> list[str]:
    return [m.name for m in pkgutil.walk_packages(trainer_cli.__path__, "trainer_cli.") if not m.name.endswith("__main__")]


PYTHON_MADE = {"_abc_impl"}  # set on every ABC subclass by Python itself


def _is_private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__")) and name not in PYTHON_MADE


def test_no_class_overrides_a_private_library_member() -> None:
    overrides = []
    for name in _project_modules():
        module = importlib.import_module(name)
        for _, cls in inspect.getmembers(module, inspect.isclass):
            if cls.__module__ != name:
                continue
            library_bases = [b for b in cls.__mro__[1:] if not b.__module__.startswith("trainer_cli") and b is not object]
            # what typing.Protocol itself writes into each protocol class (_is_protocol, ...) is not an override
            made = set(vars(typing.Protocol)) if typing.Protocol in cls.__mro__ else set()
            for member in cls.__dict__:
                if _is_private(member) and member not in made and any(member in vars(b) for b in library_bases):
                    if member not in ALLOWED.get(name, set()):
                        overrides.append(f"{name}.{cls.__name__}.{member}")
    assert not overrides, f"overrides of library internals: {overrides}"


def test_no_module_imports_a_private_library_name() -> None:
    found = []
    for path in sorted((REPO / "trainer_cli").rglob("*.py")):
        module = ".".join(path.relative_to(REPO).with_suffix("").parts)
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and not node.module.startswith("trainer_cli"):
                private = [a.name for a in node.names if _is_private(a.name) or any(_is_private(p) for p in node.module.split("."))]
                if private and not set(private) <= ALLOWED.get(module, set()):
                    found.append(f"{module}: from {node.module} import {', '.join(private)}")
    assert not found, f"imports of library internals: {found}"
