"""``train ls``: what can be named in a config, read from the code and config files themselves.

Nothing is imported to answer (no torch): the installed torch, torchvision and Lightning sources
and the project's own modules are read with :mod:`ast`, so the listing follows the installed
versions and the project's code, and ``train ls`` answers at once. A test compares it with what
importing the packages reports.
"""

from __future__ import annotations

import argparse
import ast
import importlib.util
from collections.abc import Iterable
from functools import cache
from pathlib import Path

from trainer_cli.config.paths import configs_dir
from trainer_cli.errors import UserError, did_you_mean
from trainer_cli.tables import format_table

PROJECT_DIR = Path(__file__).resolve().parents[1]  # trainer_cli/
PACKAGE_DIRECTIVE = "@package"


def package_dir(name: str) -> Path | None:
    """Folder of an installed top-level package, found without importing it."""
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


def _parse(path: Path) -> ast.Module | None:
    try:
        return ast.parse(path.read_text(encoding="utf-8"))
    except (OSError, SyntaxError, UnicodeDecodeError):
        return None


def module_all(path: Path) -> list[str]:
    """The literal ``__all__`` of a module file, or an empty list."""
    tree = _parse(path)
    for node in tree.body if tree else []:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "__all__" for t in node.targets):
            try:
                return list(ast.literal_eval(node.value))
            except ValueError:
                return []
    return []


def module_imports(path: Path) -> list[str]:
    """The public names a module file imports at top level (``from .adamw import AdamW``): what it
    exports when it states no ``__all__`` (``torch.optim`` before torch 2.5)."""
    tree = _parse(path)
    return [
        alias.asname or alias.name
        for node in (tree.body if tree else [])
        if isinstance(node, ast.ImportFrom)
        for alias in node.names
        if not (alias.asname or alias.name).startswith("_")
    ]


def _first_line(doc: str | None) -> str:
    """The first paragraph of a docstring on one line."""
    paragraph = (doc or "").strip().split("\n\n")[0]
    return " ".join(paragraph.split())


MAX_FILES = 2000
"""The most module files :func:`classes_in` reads of one package (a user's, for a hint)."""
KIND_ROOTS: dict[str, tuple[str, ...]] = {
    "models": ("LightningModule",),
    "data": ("LightningDataModule",),
    "callbacks": ("Callback",),
    "optimizers": ("Optimizer",),
    "schedulers": ("LRScheduler", "_LRScheduler", "_StepwiseLR", "ReduceLROnPlateau"),
}
"""The base class names that make a class one of these kinds of ``train ls`` (what a config's key takes)."""


@cache
def classes_in(folder: Path) -> dict[str, tuple[list[str], str, str]]:
    """Every public class a package folder defines, read with :mod:`ast` (nothing imported): dotted path
    (the package named by the folder's name) -> (base names, module, first docstring line)."""
    found: dict[str, tuple[list[str], str, str]] = {}
    files = sorted(p for p in folder.rglob("*.py") if not any(part.startswith(".") for part in p.parts))
    for path in files[:MAX_FILES]:
        module = ".".join(path.relative_to(folder.parent).with_suffix("").parts).removesuffix(".__init__")
        found |= classes_of_file(path, module)
    return found


def classes_of_file(path: Path, module: str) -> dict[str, tuple[list[str], str, str]]:
    """The public classes one module file defines, as :func:`classes_in` gives them (``module``: its name)."""
    tree = _parse(path)
    return {
        f"{module}.{node.name}": (
            [ast.unparse(b).rpartition(".")[2] for b in node.bases],
            module,
            _first_line(ast.get_docstring(node)),
        )
        for node in (tree.body if tree else [])
        if isinstance(node, ast.ClassDef) and not node.name.startswith("_")
    }


def subclasses(classes: dict[str, tuple[list[str], str, str]], roots: Iterable[str]) -> list[str]:
    """The keys of ``classes`` (:func:`classes_in`) deriving, directly or through one another, from a class
    named in ``roots``, sorted."""
    roots = set(roots)
    members: set[str] = set()
    names: set[str] = set()
    changed = True
    while changed:
        changed = False
        for path, (bases, _, _) in classes.items():
            if path not in members and any(b in roots or b in names for b in bases):
                members.add(path)
                names.add(path.rpartition(".")[2])
                changed = True
    return sorted(members)


def _project_classes() -> dict[str, tuple[list[str], str, str]]:
    """Every class defined in the project: name -> (base names, module, first docstring line)."""
    return {path.rpartition(".")[2]: found for path, found in classes_in(PROJECT_DIR).items()}


def project_subclasses(*roots: str) -> dict[str, tuple[str, str]]:
    """Project classes deriving (directly or through project classes) from any of ``roots``:
    name -> (module, description)."""
    classes = _project_classes()
    return {n: (classes[n][1], classes[n][2]) for n in sorted(subclasses(classes, roots))}


def torchvision_models() -> list[str]:
    """torchvision's classification models: functions decorated with ``@register_model()`` in
    ``torchvision/models/*.py`` (what ``torchvision.models.list_models(module=torchvision.models)`` returns)."""
    root = package_dir("torchvision")
    names: list[str] = []
    if root is None:
        return names
    for path in sorted((root / "models").glob("*.py")):
        text = path.read_text(encoding="utf-8")
        if "register_model" not in text:
            continue
        tree = ast.parse(text)
        for node in tree.body:
            if isinstance(node, ast.FunctionDef) and any(
                "register_model" in ast.unparse(d) for d in node.decorator_list
            ):
                names.append(node.name)
    return sorted(names)


def torch_optimizers() -> list[str]:
    """Optimizer classes ``torch.optim`` exports (its ``__all__``, or its imports where it has none;
    less the ``Optimizer`` base)."""
    root = package_dir("torch")
    init = root / "optim" / "__init__.py" if root else None
    names = (module_all(init) or module_imports(init)) if init else []
    return sorted(n for n in names if n[:1].isupper() and n != "Optimizer")


def torch_schedulers() -> list[str]:
    """Scheduler classes ``torch.optim.lr_scheduler`` exports (its ``__all__``, less the base)."""
    root = package_dir("torch")
    names = module_all(root / "optim" / "lr_scheduler.py") if root else []
    return sorted(n for n in names if n[:1].isupper() and n != "LRScheduler")


def lightning_callbacks() -> list[str]:
    """Callback classes ``lightning.pytorch.callbacks`` exports."""
    root = package_dir("lightning")
    names = module_all(root / "pytorch" / "callbacks" / "__init__.py") if root else []
    return sorted(n for n in names if n[:1].isupper() and n != "Callback")


def config_groups() -> dict[str, list[tuple[str, str]]]:
    """Each config group folder -> [(file stem, one-line description from its first comment)]."""
    groups: dict[str, list[tuple[str, str]]] = {}
    root = configs_dir()
    for group in sorted(p for p in root.iterdir() if p.is_dir()):
        entries = []
        for path in sorted(group.glob("*.yaml")):
            entries.append((path.stem, config_description(path)))
        groups[group.name] = entries
    return groups


def config_description(path: Path) -> str:
    """The first comment line of a config file that is not Hydra's ``@package`` directive."""
    for line in path.read_text(encoding="utf-8").splitlines():
        stripped = line.strip()
        if stripped.startswith("#"):
            text = stripped.lstrip("#").strip()
            if text and not text.startswith(PACKAGE_DIRECTIVE):
                return text
        elif stripped:
            break
    return ""


def _section(title: str, rows: Iterable[tuple[str, str]]) -> str:
    body = format_table(list(rows), indent=2) or "  (none)"
    return f"{title}\n{body}"


def _columns(names: list[str], per_line: int = 6) -> list[tuple[str, str]]:
    return [(", ".join(names[i : i + per_line]), "") for i in range(0, len(names), per_line)]


def render(what: str) -> str:
    """The text of ``train ls <what>``."""
    if what == "models":
        modules = project_subclasses("LightningModule")
        backbones = {n.lower(): d for n, (m, d) in project_subclasses("Module").items() if m.endswith("backbones")}
        return "\n\n".join(
            [
                _section(
                    "LightningModules (model.class_path or --model NAME)", [(n, d) for n, (_, d) in modules.items()]
                ),
                _section("project backbones (--model.backbone NAME)", backbones.items()),
                _section("torchvision classification models (--model.backbone NAME)", _columns(torchvision_models())),
            ]
        )
    if what == "data":
        modules = project_subclasses("LightningDataModule")
        return _section(
            "LightningDataModules (data.class_path or --data NAME)", [(n, d) for n, (_, d) in modules.items()]
        )
    if what == "callbacks":
        ours = project_subclasses("Callback")
        return "\n\n".join(
            [
                _section("project callbacks", [(n, d) for n, (_, d) in ours.items()]),
                _section("Lightning callbacks (lightning.pytorch.callbacks)", _columns(lightning_callbacks(), 4)),
            ]
        )
    if what == "optimizers":
        return _section("torch.optim optimizers (--optimizer NAME)", _columns(torch_optimizers()))
    if what == "schedulers":
        ours = project_subclasses("_StepwiseLR", "LRScheduler")
        return "\n\n".join(
            [
                _section(
                    "project schedulers (--lr_scheduler NAME; total_steps from the trainer)",
                    [(n, d) for n, (_, d) in ours.items()],
                ),
                _section("torch.optim.lr_scheduler (--lr_scheduler NAME)", _columns(torch_schedulers(), 5)),
            ]
        )
    if what == "configs":
        return "\n\n".join(_section(f"configs/{group}/", entries) for group, entries in config_groups().items())
    raise UserError(f"train ls: unknown kind {what!r}.{did_you_mean(what, KINDS)} Kinds: {', '.join(KINDS)}.")


KINDS = ("models", "data", "callbacks", "optimizers", "schedulers", "configs")


def short_names(kind: str | None = None) -> list[str]:
    """The class names a config may give by their short name for a key of ``kind`` (one of :data:`KIND_ROOTS`:
    the project's classes of that kind and torch's or Lightning's), for close-match hints; every kind's
    without one (never a class of none of them, e.g. the project's Slurm records)."""
    kinds = [kind] if kind in KIND_ROOTS else list(KIND_ROOTS)
    names = [n for k in kinds for n in project_subclasses(*KIND_ROOTS[k])]
    library = {"callbacks": lightning_callbacks, "optimizers": torch_optimizers, "schedulers": torch_schedulers}
    names += [n for k in kinds if k in library for n in library[k]()]
    return sorted(set(names + ([] if kind in KIND_ROOTS else torchvision_models())))


def all_short_names() -> list[str]:
    """Every class name a config may give by its short name, of every kind (for close-match hints)."""
    return short_names()


def main(args: list[str]) -> int:
    """``train ls [KIND ...]``: list what can be named; all kinds when none is given."""
    parser = argparse.ArgumentParser(
        prog="train ls",
        description="List what can be named in a config: models, data, callbacks, optimizers, schedulers, configs.",
        epilog="examples:\n  train ls models\n  train ls configs\n  train ls optimizers schedulers",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("kinds", nargs="*", metavar="KIND", help=f"one of: {', '.join(KINDS)} (default: all)")
    ns = parser.parse_args(args)
    print("\n\n".join(render(k) for k in (ns.kinds or KINDS)))
    return 0
