"""Reading a config file: YAML's safe loader (no Python object tags), a cap on what its aliases expand
to, and its errors as one line naming the file, line and column."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from trainer_cli.errors import UserError

MAX_CONFIG_NODES = 1_000_000  # values a config file may expand to through YAML aliases


def load_yaml_file(path: Path) -> Any:
    """Load a YAML file safely (no Python object tags).

    Raises:
        UserError: on a YAML syntax error, naming the file, line and column.
    """
    try:
        text = path.read_text()
    except OSError as err:
        raise UserError(f"cannot read config file {path}: {err.strerror}") from None
    try:
        check_expanded_size(yaml.compose(text, Loader=yaml.SafeLoader), path)
        return yaml.safe_load(text)
    except yaml.MarkedYAMLError as err:
        mark = err.problem_mark
        where = f" line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise UserError(f"YAML syntax error in {path}{where}: {err.problem or err}") from None
    except yaml.YAMLError as err:
        raise UserError(f"YAML error in {path}: {err}") from None


def check_expanded_size(root: Any, path: Path, limit: int = MAX_CONFIG_NODES) -> None:
    """Refuse a YAML document whose aliases (``*a``) expand to more than ``limit`` values (a "billion
    laughs" file: a few lines that grow to gigabytes once anything walks or copies them).

    Raises:
        UserError: naming the file and the size it would expand to.
    """
    sizes: dict[int, int] = {}

    def size(node: Any) -> int:
        if id(node) in sizes:
            return sizes[id(node)]
        sizes[id(node)] = 1  # a recursive alias counts once
        if isinstance(node, yaml.SequenceNode):
            total = 1 + sum(size(child) for child in node.value)
        elif isinstance(node, yaml.MappingNode):
            total = 1 + sum(size(k) + size(v) for k, v in node.value)
        else:
            total = 1
        sizes[id(node)] = total
        return total

    expanded = size(root) if root is not None else 0
    if expanded > limit:
        raise UserError(
            f"config file {path} expands to {expanded:,} values through its YAML aliases (*name), over the limit of "
            f'{limit:,}: a config that large is a mistake or an attack ("billion laughs"); write the values out'
        )
