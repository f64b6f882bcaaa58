"""MkDocs hook (mkdocs.yml ``hooks:``): the reference pages generated from the code at build time.

A page's ``<!-- generated: NAME -->`` line is replaced by:

- ``verbs``: the verb table of ``train`` (``trainer_cli/config/verbs.py``), each verb with its one-line help;
- ``help``: every verb's ``--help`` (the LightningCLI verbs' help depends on the config: their
  section says how to print it);
- ``configs``: every bundled config group (``configs/``) with each file's one-line description
  (what ``train ls configs`` prints);
- ``dependencies``: the package's dependencies and their versions, read from ``pyproject.toml``;
- ``slurm_fields``: every Slurm command the launcher runs and each field it reads of its output, what for,
  what it does when the command cannot answer, and the Slurm versions tested
  (:func:`trainer_cli.schedulers.slurm.output.reference_table`, from the reader's own field lists);
- ``slurm_options``: every option of ``train submit``'s ``slurm:`` section (``--slurm.*``), read with
  ``ast`` from the source of :class:`trainer_cli.schedulers.slurm.options.SlurmOptions`: each field's name, type,
  default and attribute docstring.

Nothing is hand-kept: a new verb or config file shows up in the next build.
"""

from __future__ import annotations

import ast
import inspect
import re
import subprocess
import sys
import tomllib
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from packaging.requirements import Requirement

from trainer_cli.config.listing import config_groups
from trainer_cli.config.verbs import VERBS
from trainer_cli.schedulers.slurm import options as slurm_options_module

MARKER = re.compile(r"^<!-- generated: (\w+) -->$", re.MULTILINE)
# verbs whose --help is LightningCLI's: it lists the options of the classes a config chooses
LIGHTNING_VERBS = {"fit", "validate", "test", "predict"}


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def verbs() -> str:
    rows = [f"| [`{verb}`](#{verb}) | {_cell(help_)} |" for verb, help_ in VERBS.items()]
    return "\n".join(["| verb | what it does |", "| --- | --- |", *rows])


def _help(verb: str) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "trainer_cli", verb, "--help"]
    return subprocess.run(argv, capture_output=True, text=True, timeout=120)


def helps() -> str:
    parts = []
    with ThreadPoolExecutor(2) as pool:  # each --help is a process of its own (the Lightning verbs' import torch)
        outs = dict(zip(VERBS, pool.map(_help, VERBS)))
    for verb, help_ in VERBS.items():
        parts.append(f"## `{verb}` {{#{verb}}}\n\n{help_}\n")
        out = outs[verb]
        if out.returncode != 0:
            raise RuntimeError(f"train {verb} --help failed ({out.returncode}):\n{out.stderr}")
        text = out.stdout.rstrip()
        if verb in LIGHTNING_VERBS:  # its own options; the Trainer's and the classes' follow in the full --help
            text = "options:" + text.split("\noptions:", 1)[1].split("\n\n", 1)[0]
            parts.append(
                f"A LightningCLI subcommand. Its own options (LightningCLI's and the launcher's) are below; "
                f"`train {verb} --help` then lists the Trainer's; after a config (`train {verb} --config "
                "experiment/digits --help`) it then lists the options of the model, data module, optimizer and "
                "scheduler the config chooses, and `--model.help CLASS` (likewise `--data.help`, `--optimizer.help`, "
                "`--lr_scheduler.help`) the options of one class with its docstring; "
                f"`train {verb} --config experiment/digits --print_config` prints every value a config chooses.\n"
            )
        parts.append(f"```text\n{text}\n```\n")
    return "\n".join(parts)


def configs() -> str:
    parts = []
    for group, entries in config_groups().items():
        rows = [f"| `{group}/{stem}` | {_text(description)} |" for stem, description in entries]
        parts.append("\n".join([f"## `{group}/`\n", "| config | what it sets |", "| --- | --- |", *rows, ""]))
    return "\n".join(parts)


def _default(value: ast.expr | None) -> str:
    """A field's default as the user writes it: ``field(default_factory=list)`` is ``[]``, None is empty."""
    if value is None:
        return "required"
    if isinstance(value, ast.Call) and getattr(value.func, "id", "") == "field":
        for keyword in value.keywords:
            if keyword.arg == "default_factory":
                factory = ast.unparse(keyword.value)
                return {"list": "`[]`", "dict": "`{}`"}.get(factory, f"`{factory}()`")
            if keyword.arg == "default":
                return _default(keyword.value)
        return "required"
    if isinstance(value, ast.Constant):
        if value.value is None:
            return "empty"
        if isinstance(value.value, bool):
            return f"`{str(value.value).lower()}`"
        return f"`{value.value!s}`"
    return f"`{ast.unparse(value)}`"


def _type(annotation: ast.expr) -> str:
    """``Optional[int]`` reads as ``int`` (empty is its default's business)."""
    text = ast.unparse(annotation)
    match = re.fullmatch(r"Optional\[(.*)\]", text)
    return match.group(1) if match else text


def slurm_option_fields(module: Any = slurm_options_module, name: str = "SlurmOptions") -> list[tuple[str, str, str, str]]:
    """``(name, type, default, docstring)`` of each field of ``SlurmOptions`` (or of class ``name`` of
    ``module``), in source order: the annotated assignments of the class body and the string literal
    that follows each one."""
    cls = getattr(module, name)
    tree = ast.parse(inspect.getsource(module))
    body = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == cls.__name__).body
    fields = []
    for node, after in zip(body, [*body[1:], None]):
        if not (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)):
            continue
        doc = ""
        if isinstance(after, ast.Expr) and isinstance(after.value, ast.Constant) and isinstance(after.value.value, str):
            doc = inspect.cleandoc(after.value.value)
        if not doc:
            raise RuntimeError(f"{name}.{node.target.id} has no docstring: the sbatch reference needs one")
        fields.append((node.target.id, _type(node.annotation), _default(node.value), doc))
    missing = set(cls.__dataclass_fields__) - {name for name, *_ in fields}
    if missing:
        raise RuntimeError(f"{name} fields not read from the source: {sorted(missing)}")
    return fields


def _text(doc: str) -> str:
    """A docstring as one table cell: one line, ``|`` escaped, ``<`` outside code spans escaped (``<run>``
    is a placeholder, not HTML)."""
    parts = " ".join(doc.split()).split("`")
    return _cell("`".join(p if i % 2 else p.replace("<", "&lt;") for i, p in enumerate(parts)))


def slurm_options() -> str:
    from trainer_cli.schedulers.slurm import container

    fields = slurm_option_fields()
    nested = [(f"container.{n}", *rest) for n, *rest in slurm_option_fields(container, "ContainerOptions")]
    rows = [
        f"| `--{slurm_options_module.SECTION}.{name}` | `{_cell(type_)}` | {default} | {_text(doc)} |"
        for name, type_, default, doc in [f for f in fields if f[0] != "container"] + nested
    ]
    return "\n".join(["| option | type | default | what it does |", "| --- | --- | --- | --- |", *rows])


def dependencies() -> str:
    """The package's dependencies as ``pyproject.toml`` declares them: one row each, with the reason
    its comment gives."""
    pyproject = Path(__file__).resolve().parents[1] / "pyproject.toml"
    declared = tomllib.loads(pyproject.read_text())["project"]["dependencies"]
    reasons = {}
    for line in pyproject.read_text().splitlines():
        text, _, comment = line.partition("#")
        if text.strip().startswith('"') and comment:
            reasons[text.strip().rstrip(",").strip('"')] = comment.strip()
    rows = []
    for spec in declared:
        req = Requirement(spec)
        extras = f"[{','.join(sorted(req.extras))}]" if req.extras else ""
        bounds = ",".join(sorted(map(str, req.specifier), key=lambda bound: not bound.startswith(">")))  # floor first
        rows.append(f"| `{req.name}{extras}` | `{bounds}` | {_text(reasons.get(spec, ''))} |")
    return "\n".join(["| package | versions | what for |", "| --- | --- | --- |", *rows])


def slurm_fields() -> str:
    from trainer_cli.schedulers.slurm.output import reference_table

    return reference_table().rstrip("\n")


GENERATORS = {
    "verbs": verbs,
    "help": helps,
    "configs": configs,
    "slurm_options": slurm_options,
    "slurm_fields": slurm_fields,
    "dependencies": dependencies,
}


def on_page_markdown(markdown: str, **kwargs: Any) -> str:
    return MARKER.sub(lambda m: GENERATORS[m.group(1)](), markdown)


# The docstrings name code with Sphinx roles (``:func:`x` ``), which Google-style rendering keeps as text:
# mkdocstrings renders the role's name before the code span. The page shows the code span alone.
SPHINX_ROLE = re.compile(r":(?:func|class|mod|meth|data|attr|exc|obj):(?=<code>)")


def on_page_content(html: str, **kwargs: Any) -> str:
    return SPHINX_ROLE.sub("", html)

