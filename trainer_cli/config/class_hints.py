"""Which classes a name that resolves to none could have meant: the user's own classes (of their packages,
their script, the class paths their configs name) and the launcher's, torch's and Lightning's short names,
for the `` Did you mean`` of a parse error (:mod:`trainer_cli.config.explain`).

Its reason to change is where the user's code lives and how it is found (packages, a script, the working
folder); the libraries' error messages are :mod:`trainer_cli.config.explain`'s.
"""

from __future__ import annotations

import importlib
import inspect
import re
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from trainer_cli.errors import close_matches, is_user_file
from trainer_cli.imports import import_class

if TYPE_CHECKING:
    from trainer_cli.config.keys import Layers

DOTTED = r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+"
"""A dotted path (``torch.optim.AdamW``)."""


def class_options(class_path: str) -> list[str]:
    """Constructor argument names of ``class_path`` (empty when it can't be imported)."""
    try:
        return [
            p for p in inspect.signature(import_class(class_path)).parameters if p not in {"self", "args", "kwargs"}
        ]
    except Exception:  # noqa: BLE001 - only for a hint
        return []


def public_classes(module: str) -> list[str]:
    """Class names of an importable module (empty when it can't be imported)."""
    try:
        return [
            n for n, v in vars(importlib.import_module(module)).items() if inspect.isclass(v) and not n.startswith("_")
        ]
    except Exception:  # noqa: BLE001 - only for a hint
        return []


def _short_names() -> list[str]:
    """Every short class name a config may use (``train ls``), or the registry's when that is absent."""
    try:
        from trainer_cli.config.listing import all_short_names
    except ImportError:
        import torch.optim

        from trainer_cli.models.registry import backbone_names

        return (
            backbone_names()
            + [n for n in dir(torch.optim) if n[:1].isupper()]
            + [n for n in dir(torch.optim.lr_scheduler) if n[:1].isupper()]
        )
    return list(all_short_names())


def config_class_paths(layers: Layers | None) -> list[str]:
    """The dotted class paths (``class_path:``, ``_target_:``) the command line's config files name."""
    from trainer_cli.config.yaml_files import load_yaml_file

    files = {file for layer in layers or [] for file, _ in layer.keys.values() if file is not None}
    found: list[str] = []

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                if key in ("class_path", "_target_") and isinstance(value, str) and re.fullmatch(DOTTED, value):
                    found.append(value)
                walk(value)
        elif isinstance(node, list):
            for item in node:
                walk(item)

    for file in sorted(files):
        try:
            walk(load_yaml_file(file))
        except Exception:  # noqa: BLE001 - only for a hint
            continue
    return list(dict.fromkeys(found))


def user_packages(named: Sequence[str]) -> list[str]:
    """The user's top-level packages: of the class paths their configs name, of the script's own module and
    the user's modules it imported, and the packages in the working folder; those found in the user's own
    files (:func:`trainer_cli.errors.is_user_file`: not Python's, an installed package's or the launcher's)."""
    import importlib.util
    import os

    main = sys.modules.get("__main__")
    spec = getattr(main, "__spec__", None)
    names = [p.split(".")[0] for p in named] + ([spec.name.split(".")[0]] if spec and spec.name else [])
    loaded = [(n, m) for n, m in list(sys.modules.items()) if "." not in n]  # a module's package is loaded too
    names += [n for n, m in loaded if is_user_file(getattr(m, "__file__", None) or "")]
    try:
        here = [e for e in os.scandir() if e.is_dir()]  # the packages in the working folder
        names += sorted(e.name for e in here if os.path.isfile(os.path.join(e.path, "__init__.py")))
    except OSError:
        pass
    packages = []
    for name in dict.fromkeys(n for n in names if n.isidentifier() and n != "__main__"):
        try:
            found = importlib.util.find_spec(name)
        except (ImportError, ValueError):
            continue
        if found is not None and found.submodule_search_locations and is_user_file(found.origin or ""):
            packages.append(name)
    return packages


def _user_classes(kind: str | None, layers: Layers | None, name: str = "") -> list[str]:
    """The dotted paths of the user's classes of ``kind`` (every class without one): those the user's packages
    (:func:`user_packages`) and script define (read, not imported) and those their configs name that look
    like ``name`` (imported to see their kind)."""
    import importlib.util
    from pathlib import Path

    from trainer_cli.config.listing import KIND_ROOTS, classes_in, classes_of_file, subclasses

    named = config_class_paths(layers)
    classes: dict[str, tuple[list[str], str, str]] = {}
    for package in user_packages(named):
        spec = importlib.util.find_spec(package)
        for folder in spec.submodule_search_locations or [] if spec else []:
            classes |= classes_in(Path(folder))
    script = getattr(sys.modules.get("__main__"), "__file__", None)
    if script and is_user_file(script) and getattr(sys.modules["__main__"], "__spec__", None) is None:
        classes |= classes_of_file(Path(script), "__main__")  # `python main.py`: its own classes
    roots = KIND_ROOTS.get(kind or "")
    found = subclasses(classes, roots) if roots else sorted(classes)
    close = set(close_matches(name, {p.rpartition(".")[2] for p in named}))
    for path in named:  # a class the configs name elsewhere (an installed package's too), of the kind asked for
        if path in found or path.rpartition(".")[2] not in close:
            continue
        try:
            cls = import_class(path)
        except Exception:  # noqa: BLE001 - only for a hint
            continue
        if inspect.isclass(cls) and (not roots or any(c.__name__ in roots for c in cls.__mro__)):
            found.append(path)
    return found


def class_hint(name: str, kind: str | None, layers: Layers | None = None) -> str:
    """`` Did you mean: ...?`` for a class name that resolves to no class of ``kind``: the user's own classes
    of that kind first (their dotted paths, :func:`_user_classes`), then the launcher's, torch's and
    Lightning's short names of it (:func:`trainer_cli.config.listing.short_names`); empty without a match."""
    try:
        from trainer_cli.config.listing import short_names
    except ImportError:
        ours = _short_names()
    else:
        ours = short_names(kind)
    by_name: dict[str, list[str]] = {}
    for path in _user_classes(kind, layers, name):  # one a short name gives (torch.optim.AdamW): by that name
        short = path.rpartition(".")[2]
        shown = short if short in ours and not any(is_user_file(f) for f in _files_of(path)) else path
        by_name.setdefault(short, []).append(shown)
    found = [path for short in close_matches(name, by_name) for path in by_name[short]]
    found += [n for n in close_matches(name, ours) if n not in found and n not in by_name]
    return f" Did you mean: {', '.join(list(dict.fromkeys(found))[:3])}?" if found else ""


def _files_of(path: str) -> list[str]:
    """The file of the module a dotted class path's module would be loaded from (none when not found)."""
    import importlib.util

    try:
        spec = importlib.util.find_spec(path.rpartition(".")[0])
    except (ImportError, ValueError):
        return []
    return [spec.origin] if spec and spec.origin else []
