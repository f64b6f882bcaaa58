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


@cache
def _project_classes() -> dict[str, tuple[list[str], str, str]]:
    """Every class defined in the project: name -> (base names, module, first docstring line)."""
    found: dict[str, tuple[list[str], str, str]] = {}
    for path in sorted(PROJECT_DIR.rglob("*.py")):
        tree = _parse(path)
        module = ".".join(path.relative_to(PROJECT_DIR.parent).with_suffix("").parts)
        for node in tree.body if tree else []:
            if isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
                bases = [ast.unparse(b).rpartition(".")[2] for b in node.bases]
                found[node.name] = (bases, module.removesuffix(".__init__"), _first_line(ast.get_docstring(node)))
    return found


def project_subclasses(*roots: str) -> dict[str, tuple[str, str]]:
    """Project classes deriving (directly or through project classes) from any of ``roots``:
    name -> (module, description)."""
    classes = _project_classes()
    members: set[str] = set()
    changed = True
    while changed:
        changed = False
        for name, (bases, _, _) in classes.items():
            if name not in members and any(b in roots or b in members for b in bases):
                members.add(name)
                changed = True
    return {n: (classes[n][1], classes[n][2]) for n in sorted(members)}


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


def all_short_names() -> list[str]:
    """Every class name a config may give by its short name (for close-match hints)."""
    names = list(_project_classes()) + torchvision_models() + torch_optimizers() + torch_schedulers()
    return sorted(set(names + lightning_callbacks()))


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
