"""Where each key of a command line was written: the :class:`Layers` of a command line (one per ``--config``
value or flag, each mapping its dotted keys to their file and line), read from the YAML files
(:func:`file_layer`), for error messages that name the file and line of a value; and how a key is spelled by
a flag or a file, one dotted form to compare them (:func:`plain_key`). Built by
:mod:`trainer_cli.config.compose`; read by the checks and the explained errors, and by the Hydra-style
translation (:mod:`trainer_cli.config.hydra_style`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from trainer_cli.errors import Origin


def plain_key(key: str) -> str:
    """A dotted key as both a flag and a file may spell it: ``init_args`` segments and a list
    append's ``+`` dropped (``optimizer.init_args.lr`` and ``optimizer.lr`` are one key)."""
    return ".".join(p.rstrip("+") for p in key.split(".") if p and p != "init_args")


@dataclass
class Layer:
    """One ``--config`` value or one ``--key value`` flag of a command line, in order.

    ``keys`` maps each dotted key the layer sets (``.init_args`` dropped, see :func:`trainer_cli.config.keys.plain_key`)
    to where it is written, ``(file, line)`` (``line`` 1-based; a flag has no file), and ``leaves``
    holds the keys set to a value rather than to a mapping of keys.
    """

    label: str
    keys: dict[str, tuple[Path | None, int | None]] = field(default_factory=dict)
    leaves: set[str] = field(default_factory=set)
    composed_from: Path | None = None  # the file with the ``defaults:`` list a composed layer came from
    hydra: dict[str, Any] | None = None  # a Hydra-style layer as composed, untranslated (see hydra_context)


class Layers(list[Layer]):
    """The layers of one command line, in order (:func:`compose_args` returns them): where each key
    was written, for error messages. A copy (``Layers(layers)``) extends without changing the original."""

    def origin_of(self, keys: Sequence[str]) -> tuple[Layer, str] | None:
        """The last layer that sets one of ``keys`` (the most specific first) to a value, else the
        last that sets one to a mapping; with the key it set. None when no layer does (a default)."""
        wanted = [plain_key(k) for k in keys]
        for leaf_only in (True, False):
            for layer in reversed(self):
                for key in wanted:
                    if key in layer.keys and (key in layer.leaves or not leaf_only):
                        return layer, key
        return None

    def origin(self, keys: Sequence[str]) -> Origin | None:
        """Where the value of ``keys`` (the most specific first) was written; None for a default."""
        found = self.origin_of(keys)
        if found is None:
            return None
        layer, key = found
        file, line = layer.keys[key]
        if file is None:
            return Origin(flag=layer.label)
        return Origin(file, line, layer.composed_from)

    def describe_origin(self, keys: Sequence[str]) -> str:
        """Where the value of ``keys`` was written, for an error message: ``in FILE line N`` (see
        :class:`Origin`), or an empty string for a flag or a default."""
        return str(self.origin(keys) or "")

    def note_flag(self, arg: str) -> None:
        """Record a ``--key value`` flag of the command line (a later flag wins over an earlier
        file, so an error about its key names no file)."""
        if arg.startswith("--") and len(arg) > 2:
            key = plain_key(arg[2:].split("=", 1)[0])
            self.append(Layer(arg.split("=", 1)[0], {key: (None, None)}, {key}))


def file_layer(label: str, files: Sequence[tuple[Path, str]], composed_from: Path | None = None) -> Layer:
    """The :class:`Layer` of YAML ``files`` merged in order, each under its package: every dotted
    key they set (mapping keys at every depth) -> the last file setting it and the key's line."""
    layer = Layer(label, composed_from=composed_from)
    for path, package in files:
        lines, leaves = key_lines(path, package)
        layer.keys.update(lines)
        layer.leaves = (layer.leaves - set(lines)) | leaves
    return layer


def key_lines(path: Path, package: str = "") -> tuple[dict[str, tuple[Path | None, int | None]], set[str]]:
    """Every dotted key a YAML file sets (mapping keys at every depth, under ``package``) -> the
    file and the 1-based line of the key, and the keys set to a value (not a mapping); empty when
    the file can't be read or parsed."""
    out: dict[str, tuple[Path | None, int | None]] = {}
    leaves: set[str] = set()
    try:
        node = yaml.compose(path.read_text())
    except (OSError, yaml.YAMLError):
        return out, leaves

    def walk(node: Any, prefix: str) -> None:
        if not isinstance(node, yaml.MappingNode):
            return
        for key_node, value_node in node.value:
            if not isinstance(key_node, yaml.ScalarNode) or (not prefix and key_node.value == "defaults"):
                continue
            dotted = plain_key(f"{prefix}.{key_node.value}" if prefix else key_node.value)
            out.setdefault(dotted, (path, key_node.start_mark.line + 1))  # `x.init_args` is `x`
            if not isinstance(value_node, yaml.MappingNode):
                leaves.add(dotted)
            walk(value_node, dotted)

    walk(node, plain_key(package))
    return out, leaves
