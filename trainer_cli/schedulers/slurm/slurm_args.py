"""The ``slurm:`` section of ``train submit`` read from a command line: site profile files and
``--slurm.*`` flags.

Slurm options are not Trainer arguments, so they are taken out of the command line before the
fit arguments are parsed (:func:`trainer_cli.config.spec.split`, with ``slurm`` as the engine's section):
a ``slurm:`` key of any ``--config`` file (including one composed from a Hydra ``defaults:`` list such as
``- /slurm: local``) and every ``--slurm.KEY VALUE`` flag. They are parsed, in command-line order,
against :class:`trainer_cli.schedulers.slurm.options.SlurmOptions` with jsonargparse, whose help text comes from
the attribute docstrings.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import yaml

from trainer_cli.errors import UserError, did_you_mean
from trainer_cli.schedulers.slurm.container import ContainerOptions
from trainer_cli.schedulers.slurm.options import SECTION, SlurmOptions


def parse_slurm_options(layers: Sequence[Mapping[str, Any] | Sequence[str]]) -> SlurmOptions:
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
        if isinstance(layer, Mapping):
            argv += ["--cfg", yaml.safe_dump({SECTION: dict(layer)})]
        else:
            argv += layer
    known = [SECTION] + [f"{SECTION}.{name}" for name in SlurmOptions.__dataclass_fields__]  # --slurm FILE too
    known += [f"{SECTION}.container.{name}" for name in ContainerOptions.__dataclass_fields__]
    for layer in layers:
        keys = [f"{SECTION}.{k}" for k in layer] if isinstance(layer, Mapping) else [layer[0][2:].split("=")[0]]
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
    import argparse

    from jsonargparse import ArgumentParser, set_parsing_settings

    # off by default in jsonargparse: without it the options' help holds only their types (`train submit
    # --help` prints and exits: nothing parsed after it reads the setting)
    set_parsing_settings(docstring_parse_attribute_docstrings=True)
    parser = ArgumentParser(prog="train submit", usage=argparse.SUPPRESS, add_help=False)  # the verb's usage says it
    parser.add_class_arguments(SlurmOptions, SECTION, instantiate=False)
    return parser.format_help()
