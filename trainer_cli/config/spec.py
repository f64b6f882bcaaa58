"""The run a submission asks for, as one value: :class:`RunSpec`, built once from the :class:`Request`.

``train submit`` (and ``python main.py submit``, and the scheduler seam's ``render``) reads the command line
once (:class:`~trainer_cli.config.request.Request`), then builds the run's spec once with :func:`build`:
the config layers in order, each with where it came from (a bundled file, a user config root, a run's
stored config, a site profile), the fit's arguments with every ``--config`` expanded, the engine's own
option layers taken out (``slurm:`` sections and ``--slurm.*`` flags, for the engine that names the
section), and the composed, type-checked config, parsed by the function the caller gives (the launcher's
LightningCLI parse, or a user's TrainerCLI's), nothing built. What reads it: the plan of a submission
(:func:`trainer_cli.schedulers.slurm.fit_job.plan`: resources, sizing, the run folder, the frozen ``config.yaml``,
``--dry-run``'s text), the Ray engine's submission (:mod:`trainer_cli.schedulers.ray.submit`) and the
Slurm engine's draft (:class:`trainer_cli.schedulers.slurm.engine.SlurmDraft`), which carries it from ``render``
to ``submit``.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from trainer_cli.config.class_flags import place_class_flags
from trainer_cli.config.compose import config_text, take_config_roots
from trainer_cli.config.keys import Layers
from trainer_cli.config.request import Arg, Request, option
from trainer_cli.config.run_layers import stored_configs, with_run_settings
from trainer_cli.config.yaml_files import load_yaml_file
from trainer_cli.errors import UserError

ParseFit = Callable[[Request, Layers], tuple[Any, Any]]
"""Composes and type-checks ``train fit ARGS`` (a request whose ``--config`` values are expanded, with the
command line's layers), building nothing: returns the fit parser and the parsed config
(:func:`trainer_cli.runtime.verbs.parse_config`)."""

EngineLayer = Mapping[str, Any] | tuple[str, ...]
"""One layer of an engine's own options: a config file's section (a mapping), or one flag as written."""


@dataclass(frozen=True)
class RunSpec:
    """A run as a submission asks for it: built once by :func:`build`, read by the plan and the engines.

    Attributes:
        verb: The verb the run's job runs (``fit``).
        request: The command line it was built from (read once).
        fit_args: The fit's request as parsed: every ``--config`` expanded, the engine's options taken out.
        layers: Where each key was written (for error messages).
        engine_layers: The engine's own option layers in command-line order (see :data:`EngineLayer`).
        parser: The parser that checked the config (it dumps the frozen ``config.yaml``).
        fixed: The sections whose class a user's script fixes (``{"model": MyModel}``), else empty.
    """

    verb: str
    request: Request
    fit_args: Request
    layers: Layers
    engine_layers: tuple[EngineLayer, ...]
    parser: Any
    _config: Any = field(repr=False)
    fixed: Mapping[str, type] = field(default_factory=dict)

    @property
    def config(self) -> Any:
        """The composed, type-checked config (a jsonargparse ``Namespace``): a copy each time, so the
        spec stays as it was built whatever a reader changes in it."""
        return self._config.clone()

    @property
    def run_dir(self) -> str | None:
        """``--run_dir`` as the config holds it (None: a new run)."""
        value = self._config.get("run_dir")
        return str(value) if value else None

    @property
    def ckpt_path(self) -> str | None:
        """``ckpt_path`` as the config holds it (``last``, a path, or None)."""
        value = self._config.get("ckpt_path")
        return str(value) if value else None

    @property
    def scheduler(self) -> str | None:
        """``--scheduler`` (None: the default engine)."""
        return self.request.last("scheduler")

    @property
    def sweep(self) -> tuple[str, ...]:
        """The ``--sweep KEY=VALUES`` specs, in order."""
        return tuple(self.request.values("sweep"))

    @property
    def dry_run(self) -> bool:
        return self.request.dry_run

    @property
    def check(self) -> bool:
        return self.request.check


def build(
    request: Request,
    parse: ParseFit,
    section: str,
    fixed: Mapping[str, type] | None = None,
    verb: str = "fit",
    check_engine: Callable[[list[Any]], object] | None = None,
) -> RunSpec:
    """The spec of ``request``: its layers split (:func:`split`), its fit arguments parsed by ``parse``.

    Args:
        request: The submission's command line.
        parse: Composes and type-checks the fit's arguments (see :data:`ParseFit`).
        section: The name of the engine's own options (``slurm``): taken out before the parse.
        fixed: The sections whose class a user's script fixes (placed as ``train fit`` places them).
        verb: The verb the run's job runs.
        check_engine: Reads the engine's option layers before the parse, so that a bad engine option is
            reported before the fit's parse imports Lightning (raises its UserError).

    Raises:
        UserError: for a missing config file, bad YAML, a bad engine section, or a config the parse refuses.
    """
    fixed = dict(fixed or {})
    fit_args, engine_layers, layers = split(request, section, fixed)
    if check_engine is not None:
        check_engine(list(engine_layers))
    parser, config = parse(fit_args, layers)
    return RunSpec(verb, request, fit_args, layers, tuple(engine_layers), parser, config, fixed)


def split(request: Request, section: str, fixed: Collection[str] = ()) -> tuple[Request, list[EngineLayer], Layers]:
    """Separate a submission's arguments into fit arguments and the engine's option layers.

    Every ``--config`` value is expanded (composed if it has a ``defaults:`` list); its ``section:``
    key, if any, is taken out and the rest passed on as YAML text. ``--SECTION.KEY VALUE``,
    ``--SECTION.KEY=VALUE`` and ``--SECTION FILE`` (a file of the engine's options alone) are taken out
    too, and so are the launcher's ``--dry-run``, ``--check`` and ``--scheduler``. With ``--run_dir RUN``
    the run's ``config.yaml`` goes first, under the given ``--config`` files (often a site profile alone).

    Returns:
        ``(fit_args, engine_layers, layers)``: the fit's request with ``--config`` already expanded (for
        :func:`trainer_cli.runtime.verbs.parse_config` with ``expand=False``), the engine's layers in
        command-line order and the fit arguments' :class:`~trainer_cli.config.keys.Layers` (where each key
        was written, for error messages).

    Raises:
        UserError: for a missing config file, bad YAML, a section that is not a mapping, or a
            ``--SECTION.*`` flag without a value.
    """
    request = request.with_args([*stored_configs(request, under_configs=True), *request])
    roots, request = take_config_roots(request)  # --config_root DIR: user config roots
    fit_args: list[Arg] = []
    engine: list[EngineLayer] = []
    provenance = Layers()
    for arg in request:
        if arg.name == "config":
            if arg.value is None:
                raise UserError(f"{arg.flag} needs a file name")
            for file in with_run_settings(arg.value, request):  # a run's config.yaml: its launcher.yaml too
                fit_args.append(
                    option("config", _strip_section(config_text(file, provenance, roots), file, section, engine))
                )
        elif arg.name == section or (arg.name or "").startswith(section + "."):
            if arg.value is None:
                raise UserError(f"{arg.flag} needs a value")
            engine.append(tuple(arg.tokens))
        elif arg.name in ("dry_run", "check", "scheduler"):  # the launcher's own
            continue
        else:
            provenance.note_flag(arg.tokens[0])  # for error messages: a later flag wins over an earlier file
            fit_args.append(arg)
    # a stock config's --model/--data anywhere, as train fit
    return place_class_flags(request.with_args(fit_args), provenance, fixed), engine, provenance


def _strip_section(text: str, source: str, section: str, engine: list[EngineLayer]) -> str:
    """Take the ``section:`` key out of one expanded ``--config`` value (a path or YAML text)."""
    is_path = "\n" not in text and Path(text).is_file()
    data = load_yaml_file(Path(text)) if is_path else yaml.safe_load(text)
    if not isinstance(data, dict) or section not in data:
        return text
    options = data.pop(section)
    if options is not None:
        if not isinstance(options, dict):
            raise UserError(
                f"{source}: `{section}:` must be a mapping of {section.capitalize()} options, found {options!r}"
            )
        engine.append(options)
    return yaml.safe_dump(data, sort_keys=False) if data else "{}"
