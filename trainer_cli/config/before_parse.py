"""Checks that need no class, run by ``train`` before a verb imports torch and Lightning.

Importing Lightning takes seconds (see ``benchmarks/README.md``); a mistake that can be seen
without it is reported first, within a second: a ``--config`` file that is missing, empty, not
YAML or not a mapping, a Hydra ``defaults:`` list naming a missing group file (all through
:mod:`trainer_cli.config.compose`, as the verb itself reads them), and a top-level key no verb takes
(``optimiser:`` in a file, ``--optimiser.lr`` on the command line). The messages are the ones the
verb would print after its import: the same composition code, and for an unknown key the text
of jsonargparse's error run through :func:`trainer_cli.config.explain.explain_parse_error`. ``train
submit`` reads its files without torch already and calls :func:`check_top_level_keys` itself,
after checking its Slurm options.

The top-level keys of the Lightning verbs are listed here (:data:`TOP_LEVEL_KEYS`);
``tests/test_fast_errors.py`` checks them against the verbs' parsers.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from trainer_cli.config.compose import compose_args
from trainer_cli.config.explain import explain_parse_error, locate
from trainer_cli.config.keys import Layers
from trainer_cli.config.request import LAUNCHER_OPTIONS, Request
from trainer_cli.config.yaml_files import load_yaml_file
from trainer_cli.errors import ConfigError, UserError

_COMMON = frozenset(
    {
        "ckpt_path",
        "config",
        "data",
        "float32_matmul_precision",
        "help",
        "lr_scheduler",
        "model",
        "name",
        "optimizer",
        "param_groups",
        "print_config",
        "resume_force",
        "resume_schedule",
        "run_dir",
        "seed_everything",
        "trainer",
        "weights_only",
    }
)
# verb -> the top-level keys its parser takes (``--KEY`` and ``KEY:`` of a config file)
TOP_LEVEL_KEYS: dict[str, frozenset[str]] = {
    "fit": _COMMON,
    "validate": _COMMON | {"verbose"},
    "test": _COMMON | {"verbose"},
    "predict": _COMMON | {"return_predictions"},
}
# verbs whose --config files are read by trainer_cli.config.compose (their own flags pass through it)
CONFIG_VERBS = frozenset({*TOP_LEVEL_KEYS, "lr-find", "scale-batch-size", "cv"})


def precheck(verb: str, request: Request) -> tuple[Request, Layers] | None:
    """Check ``train VERB ARGS`` for the mistakes that need no class (see the module docstring).

    Returns:
        The command line composed for the check (:func:`trainer_cli.config.compose.compose_args`): a
        Lightning verb parses it as it is, without composing its files again. None when the verb's
        files were not read.

    Raises:
        UserError: with the message the verb would give for the first such mistake.
    """
    helps = request.helps
    if helps and verb not in TOP_LEVEL_KEYS:  # their help comes first, whatever else is given
        return None
    if verb not in CONFIG_VERBS:  # (`train submit` reads its files and checks its keys before torch itself)
        return None
    expanded, layers = compose_args(request)  # a Lightning verb reads its --config files before its help too
    if verb in TOP_LEVEL_KEYS and not helps:
        check_top_level_keys(verb, expanded, layers)
    return expanded, layers


def check_top_level_keys(verb: str, request: Request, layers: Layers | None = None) -> None:
    """Raise the verb's error for an unknown top-level key of an expanded command line ``request``
    (:func:`trainer_cli.config.compose.compose_args`, with its ``layers``), the one its parser reports first: the
    unknown
    flags (argparse's unrecognized arguments), else the deepest unknown key of the ``--config``
    values merged (jsonargparse checks the deepest keys first). Where a deeper key of a known
    section is wrong too (``model.init_args.lrr``), the parser would name that one first: the
    precheck names the unknown top-level key, also a mistake to fix.

    Raises:
        ConfigError: ``[in FILE line N: ]<jsonargparse's message>`` with close matches, as the verb's
            parser reports it (:class:`trainer_cli.runtime.parser.TrainerArgumentParser`).
    """
    known = TOP_LEVEL_KEYS[verb]
    extras: list[str] = []  # what argparse would call unrecognized arguments
    file_keys: dict[str, None] = {}  # unknown dotted keys of the config files, in merge order
    taking_values = False  # the value tokens of an unknown option: argparse has no positional to give them
    for arg in request:
        if arg.name == "config" and arg.value is not None:
            file_keys |= dict.fromkeys(_unknown_file_keys(arg.value, known))
        elif arg.name in LAUNCHER_OPTIONS:
            pass
        elif arg.is_option and _top(arg.name or "") not in known:
            extras.extend(arg.tokens)
            taking_values = True
            continue
        elif taking_values and not _is_flag(arg.tokens[0]):
            extras.extend(arg.tokens)
            continue
        taking_values = False
    if extras:
        _raise(verb, f"unrecognized arguments: {' '.join(extras)}", layers)
    if file_keys:
        deepest = max(file_keys, key=lambda k: k.count("."))  # the first of the deepest
        _raise(verb, f"Subcommand '{verb}' does not accept option '{deepest}'", layers)


def _top(key: str) -> str:
    """The top-level key of a dotted key (``trainer.callbacks+`` -> ``trainer``)."""
    return key.split(".", 1)[0].rstrip("+")


def _is_flag(arg: str) -> bool:
    return arg.startswith("-") and not arg[1:2].isdigit() and arg[1:2] != "."  # -1, -.5: values


def _unknown_file_keys(value: str, known: frozenset[str]) -> list[str]:
    """The dotted keys of the values under the unknown top-level keys of one expanded ``--config``
    value (a file path or YAML text). An empty mapping sets no key: jsonargparse takes
    ``experiment: {}`` (what Hydra composes for an experiment file without ``# @package _global_``)."""
    try:
        data = load_yaml_file(Path(value)) if "\n" not in value and Path(value).is_file() else yaml.safe_load(value)
    except (UserError, yaml.YAMLError, OSError, ValueError):
        return []  # the verb reports it
    if not isinstance(data, dict):
        return []
    return [
        k for key, sub in data.items() if isinstance(key, str) and _top(key) not in known for k in _leaves(key, sub)
    ]


def _leaves(key: str, value: Any) -> list[str]:
    """The dotted keys of the values at and below ``key`` (through nested mappings)."""
    if not isinstance(value, dict):
        return [key]
    return [k for sub, inner in value.items() for k in _leaves(f"{key}.{sub}", inner)]


def _raise(verb: str, message: str, layers: Layers | None) -> None:
    message = explain_parse_error(message, None, known_keys=sorted(TOP_LEVEL_KEYS[verb]))
    key, origin = locate(message, layers)
    raise ConfigError(message, key, origin, help_line=f"`train {verb} --help` lists every option")
