"""Build the configured run of ``train fit`` without fitting, for the verbs that tune or wrap it.

Each verb parses its own few options with :mod:`argparse` and hands everything else (``--config``
layers and ``--key value`` overrides) to :func:`build_run`, so it reads configs exactly like
``train fit``. :func:`write_fragment` writes what a verb found as a config fragment that layers
onto later runs with ``--config``.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NoReturn

import yaml

from trainer_cli.config.keys import Layers
from trainer_cli.config.request import Request, option, read
from trainer_cli.errors import UserError
from trainer_cli.imports import heavy_import
from trainer_cli.runtime.run_entry import RunEntry

FIT_HELP = (
    "Every other option is `train fit`'s: --config FILE (repeatable) "
    "and --key.sub value overrides (`train fit --help`)."
)


class VerbParser(argparse.ArgumentParser):
    """An :class:`argparse.ArgumentParser` whose errors are :class:`UserError` (one ``error:`` line,
    exit 2, from ``train``'s main) instead of argparse's usage text and exit."""

    def error(self, message: str) -> NoReturn:  # type: ignore[override]
        raise UserError(f"{self.prog}: {message}")


def verb_parser(verb: str, description: str, epilog: str) -> argparse.ArgumentParser:
    """A :class:`VerbParser` for ``train <verb>``'s own options (no abbreviations, so no
    ``train fit`` flag is mistaken for one of the verb's)."""
    return VerbParser(
        prog=f"train {verb}",
        description=f"{description}\n\n{FIT_HELP}",
        epilog=epilog,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        allow_abbrev=False,
    )


def parse_verb_args(parser: argparse.ArgumentParser, args: Sequence[str]) -> tuple[argparse.Namespace, list[str]]:
    """Split ``args`` into the verb's own options and the rest (for :func:`build_run`).

    Raises:
        UserError: for a bad value of one of the verb's own options (with a :class:`VerbParser`).
    """
    return parser.parse_known_args(list(args))


def composed_fit_args(parser: argparse.ArgumentParser, request: Request) -> tuple[argparse.Namespace, Request, Layers]:
    """The verb's own options and its fit request, composed once (:func:`trainer_cli.config.compose.composed`:
    by ``train``'s precheck, else here), with their :class:`~trainer_cli.config.keys.Layers`.

    Raises:
        UserError: for a bad value of one of the verb's own options, or a bad config file.
    """
    from trainer_cli.config.compose import composed

    expanded, layers = composed(request)
    # (composing passes the verb's own options on as written); argparse takes words and leaves words: the
    # request's other items are those words read back (as train read them)
    opts, rest = parse_verb_args(parser, expanded.tokens())
    return opts, expanded.with_args(read(rest)), layers


def tool_run(request: Request, layers: Layers, verb: str) -> Any:
    """:func:`build_run` of a tool's composed fit request (:func:`composed_fit_args`), ``--run_dir DIR``
    read as :func:`from_run_dir` reads it (the run's stored config, composed here when it is the config)."""
    fit_args = from_run_dir(request, verb)
    stored = fit_args.has("config") and not request.has("config")
    return build_run(fit_args, None if stored else layers)


def build_run(request: Request, layers: Layers | None = None, entry: RunEntry | None = None) -> Any:
    """The :class:`trainer_cli.runtime.cli.TrainerCLI` of ``train fit ARGS`` (the command line ``request``),
    built but not run.

    Its ``.model``, ``.datamodule`` and ``.trainer`` are instantiated and ``.run_dir`` (with the
    resolved ``config.yaml``) exists; ``.run.ckpt_path`` is the checkpoint to start from
    (``--ckpt_path``, with ``last``/``best`` resolved in the run directory, :class:`trainer_cli.runtime.run.Run`).
    ``TRAINER_CLI_RUN_DIR`` is cleared again afterwards, so several runs can be built in one process.

    ``layers``: ``request`` is composed already (:func:`composed_fit_args`), with these layers. ``entry``:
    what the entry that builds it says about the run (``train``'s when not given: ``train cv`` gives its own
    resume line).

    Raises:
        UserError: for a bad config file or a value a constructor rejects.
    """
    with heavy_import():
        from trainer_cli.runtime.cli import TrainerCLI
        from trainer_cli.runtime.verbs import building_cli
    from trainer_cli.config.compose import compose_args

    expanded, layers = compose_args(request) if layers is None else (request, layers)
    with building_cli(None, layers, entry) as run:
        cli = TrainerCLI(args=expanded.tokens(), run=False, run_directory=run, layers=layers)
    return cli


def from_run_dir(request: Request, verb: str) -> Request:
    """``request`` of a tool that starts a new run (``lr-find``, ``scale-batch-size``) with ``--run_dir DIR``
    read as ``train fit --run_dir DIR`` reads it, the run's stored config (``DIR/config.yaml`` and its
    launcher settings) first when no ``--config`` is given, but ``--run_dir`` itself dropped: the tool's
    outputs go to a new run directory beside ``DIR`` (a run directory is never reused).

    Raises:
        UserError: when ``DIR`` holds no ``config.yaml``.
    """
    from trainer_cli.config.run_layers import no_run_there, with_stored_config

    run_dir = request.last("run_dir") or ("" if request.has("run_dir") else None)
    rest = request.without("run_dir")
    if run_dir is None:
        return rest
    if not (Path(run_dir) / "config.yaml").is_file():
        raise no_run_there(run_dir)
    stored = with_stored_config(rest.with_args([option("run_dir", run_dir), *rest.args]))
    expanded = stored.without("run_dir")
    if rest.has("config"):
        print(f"{verb}: --run_dir {run_dir} with --config: the given configs, results in a new run directory")
    else:
        print(f"{verb}: the config of {run_dir}; the results go to a new run directory beside it", flush=True)
    return expanded


def write_fragment(path: Path, values: dict[str, Any], description: str) -> None:
    """Write ``values`` as a config fragment that layers with ``--config`` (and composes as a
    Hydra group option: ``# @package _global_``), headed by a one-line ``description``."""
    header = f"# @package _global_\n# {description}\n"
    path.write_text(header + yaml.safe_dump(values, sort_keys=False))


def nested(dotted: str, value: Any) -> dict[str, Any]:
    """``nested("a.b.c", 1) == {"a": {"b": {"c": 1}}}``."""
    out: Any = value
    for key in reversed(dotted.split(".")):
        out = {key: out}
    return out


def drop_lr_scheduler(model: Any) -> None:
    """Make ``model.configure_optimizers`` return its optimizer(s) without the scheduler.

    For tuning runs of a few steps at a time (batch-size search): a scheduler sized for the real
    run (``OneCycleLR`` with ``total_steps``) would otherwise be stepped past its end across trials.
    """
    configure = model.configure_optimizers

    def optimizers_only() -> Any:
        out = configure()
        if isinstance(out, dict) and "optimizer" in out:
            return out["optimizer"]
        if isinstance(out, tuple) and len(out) == 2 and isinstance(out[0], list):
            return out[0]
        return out

    model.configure_optimizers = optimizers_only
