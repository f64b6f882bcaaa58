"""The ``slurm:`` section of ``train submit`` read from a command line: site profile files and
``--slurm.*`` flags.

Slurm options are not Trainer arguments, so they are taken out of the command line before the
fit arguments are parsed: a ``slurm:`` key of any ``--config`` file (including one composed from a
Hydra ``defaults:`` list such as ``- /slurm: local``) and every ``--slurm.KEY VALUE`` flag. They
are parsed, in command-line order, against :class:`trainer_cli.launch.options.SlurmOptions` with
jsonargparse, whose help text comes from the attribute docstrings.
"""

from __future__ import annotations

from collections.abc import Collection
from pathlib import Path
from typing import Any

import yaml

from trainer_cli.config.compose import config_text, load_yaml_file, place_class_flags, take_roots
from trainer_cli.config.keys import Layers
from trainer_cli.config.request import Request
from trainer_cli.config.run_layers import with_run_settings, with_stored_config
from trainer_cli.errors import UserError, did_you_mean
from trainer_cli.launch.container import ContainerOptions
from trainer_cli.launch.options import SECTION, SlurmOptions


def split_args(
    args: Request | list[str], fixed: Collection[str] = ()
) -> tuple[list[str], list[dict[str, Any] | list[str]], list[str], Layers]:
    """Separate ``train submit`` arguments into fit arguments and Slurm layers.

    Every ``--config`` value is expanded (composed if it has a ``defaults:`` list); its ``slurm:``
    key, if any, is taken out and the rest passed on as YAML text. ``--slurm.KEY VALUE``,
    ``--slurm.KEY=VALUE`` and ``--slurm FILE`` (a file of Slurm options alone) are taken out too.

    Returns:
        ``(fit_args, slurm_layers, own_flags, layers)``: fit arguments with ``--config`` already
        expanded (for :func:`trainer_cli.runtime.verbs.parse_config` with ``expand=False``), the Slurm layers in
        command-line order (a dict per config file section, a flag list per flag), the
        flags of ``train submit`` itself (``--dry-run``, ``--check``) and the fit arguments'
        :class:`~trainer_cli.config.keys.Layers` (for error messages).

    Raises:
        UserError: for a missing config file, bad YAML, a ``slurm:`` that is not a mapping, or a
            ``--slurm.*`` flag without a value.
    """
    request = Request.of(args)  # --run_dir RUN: the run's config.yaml first, under the site profile's --config
    request = request.with_args(Request.of(with_stored_config(request, under_configs=True)).args)
    roots, request = take_roots(request)  # --config_root DIR: user config roots
    given = request.tokens()
    fit_args: list[str] = []
    layers: list[dict[str, Any] | list[str]] = []
    own: list[str] = []
    provenance = Layers()
    for arg in request:
        if arg.name == "config":
            if arg.value is None:
                raise UserError(f"{arg.flag} needs a file name")
            for file in with_run_settings(arg.value, given):  # a run's config.yaml: its launcher.yaml too
                fit_args += ["--config", _strip_section(config_text(file, provenance, roots), file, layers)]
        elif arg.name == SECTION or (arg.name or "").startswith(SECTION + "."):
            if arg.value is None:
                raise UserError(f"{arg.flag} needs a value")
            layers.append(list(arg.tokens))
        elif arg.name == "dry_run":
            own.append("--dry-run")
        elif arg.name == "check":
            own.append("--check")
        elif arg.name == "scheduler":  # the engine, chosen before (train submit --scheduler slurm)
            continue
        else:
            provenance.note_flag(arg.tokens[0])  # for error messages: a later flag wins over an earlier file
            fit_args.extend(arg.tokens)
    return (
        place_class_flags(fit_args, provenance, fixed),
        layers,
        own,
        provenance,
    )  # a stock config's --model/--data anywhere, as train fit


def _strip_section(text: str, source: str, layers: list[dict[str, Any] | list[str]]) -> str:
    """Take the ``slurm:`` key out of one expanded ``--config`` value (a path or YAML text)."""
    is_path = "\n" not in text and Path(text).is_file()
    data = load_yaml_file(Path(text)) if is_path else yaml.safe_load(text)
    if not isinstance(data, dict) or SECTION not in data:
        return text
    section = data.pop(SECTION)
    if section is not None:
        if not isinstance(section, dict):
            raise UserError(f"{source}: `{SECTION}:` must be a mapping of Slurm options, found {section!r}")
        layers.append(section)
    return yaml.safe_dump(data, sort_keys=False) if data else "{}"


def parse_slurm_options(layers: list[dict[str, Any] | list[str]]) -> SlurmOptions:
    """Merge the Slurm layers (later wins) and type-check them against :class:`SlurmOptions`.

    Raises:
        UserError: for an unknown key (with close matches) or a value of the wrong type.
    """
    from jsonargparse import ActionConfigFile, ArgumentParser

    parser = ArgumentParser(exit_on_error=False, prog="train submit")
    parser.add_argument("--cfg", action=ActionConfigFile)
    parser.add_class_arguments(SlurmOptions, SECTION, instantiate=False)
    argv: list[str] = []
    for layer in layers:
        if isinstance(layer, dict):
            argv += ["--cfg", yaml.safe_dump({SECTION: layer})]
        else:
            argv += layer
    known = [SECTION] + [f"{SECTION}.{name}" for name in SlurmOptions.__dataclass_fields__]  # --slurm FILE too
    known += [f"{SECTION}.container.{name}" for name in ContainerOptions.__dataclass_fields__]
    for layer in layers:
        keys = [f"{SECTION}.{k}" for k in layer] if isinstance(layer, dict) else [layer[0][2:].split("=")[0]]
        for key in keys:
            if key not in known:
                raise UserError(
                    f"unknown Slurm option {key!r}.{did_you_mean(key, known) or ' See `train submit --help`.'}"
                )
    try:
        cfg = parser.parse_args(argv)
    except Exception as err:  # jsonargparse's ArgumentError and type errors: the message is the point
        from trainer_cli.config.explain import explain_parse_error

        raise UserError("Slurm options: " + " ".join(explain_parse_error(str(err), parser).split())) from None
    values = {k: v for k, v in cfg[SECTION].as_dict().items() if k in SlurmOptions.__dataclass_fields__}
    return SlurmOptions(**values)


def slurm_help() -> str:
    """Help text for every ``--slurm.*`` option (from the attribute docstrings)."""
    from jsonargparse import ArgumentParser, set_parsing_settings

    # off by default in jsonargparse: without it the options' help holds only their types (`train submit
    # --help` prints and exits: nothing parsed after it reads the setting)
    set_parsing_settings(docstring_parse_attribute_docstrings=True)
    parser = ArgumentParser(prog="train submit", add_help=False)
    parser.add_class_arguments(SlurmOptions, SECTION, instantiate=False)
    return parser.format_help()
