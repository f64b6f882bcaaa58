"""The verb runner of ``train fit|validate|test|predict``: a :class:`trainer_cli.runtime.cli.TrainerCLI`
built for one verb and run (:func:`run_subcommand`, the functions :data:`trainer_cli.__main__.TARGETS`
names), and the parse of a verb's command line that builds nothing (:func:`parse_config`,
:class:`ConfigParser`: ``train submit``, sweeps, cross-validation)."""

from __future__ import annotations

import logging
import shlex
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, Optional

from jsonargparse import Namespace
from lightning.pytorch.cli import LightningArgumentParser

from trainer_cli.config.compose import compose_args, composed
from trainer_cli.config.keys import Layers
from trainer_cli.config.request import Request
from trainer_cli.config.run_layers import with_stored_config
from trainer_cli.errors import UserError
from trainer_cli.rundir.layout import CONFIG_FILE
from trainer_cli.rundir.policy import test_after_fit_args
from trainer_cli.runtime import quiet
from trainer_cli.runtime.cli import TrainerCLI, verb_cli
from trainer_cli.runtime.guard import (
    _process_state_restored,
    _stopped_before_training,
    explain_failure,
    remove_or_say_kept,
)
from trainer_cli.runtime.run import Run
from trainer_cli.runtime.run_choice import is_checkpoint_file
from trainer_cli.runtime.run_entry import RunEntry
from trainer_cli.runtime.script import script_has_verbs


def run_subcommand(verb: str, request: Request, test_after_fit: bool = False) -> int:
    """``train <verb> ...`` (the command line ``request``) for a LightningCLI subcommand; returns the exit code.

    A request composed already (:attr:`~trainer_cli.config.request.Request.composed`: by ``train``'s precheck,
    :func:`trainer_cli.config.compose.compose_args`) is taken as it is composed.

    With ``--run_dir DIR`` and no ``--config``, the run's stored ``DIR/config.yaml`` is the config
    (resuming takes the config stored with the run). A run directory this call created is removed
    again when the run fails on a user error before it saved a checkpoint. After SIGTERM or Ctrl-C
    during training: the exit code is 143 or 130, with one line saying how to resume.

    ``test_after_fit`` (``train fit --test_after_fit``): a fit that trained to its end is followed by
    ``train test`` on the run's best checkpoint, as ``--slurm.test_after_fit`` queues it in a job
    (:func:`trainer_cli.rundir.policy.test_after_fit_args`).

    Raises:
        ConfigError: for a key or value the parser refuses (a :class:`UserError`).
        UserError: for a bad config file, a bad value found while building, missing data, or a
            checkpoint that does not fit the model.
    """
    expanded, layers = composed(request)
    expanded = with_stored_config(expanded, verb=verb, layers=layers)
    print_classes = _chosen_classes(verb, expanded, layers)
    try:
        with building_cli(verb, layers) as run, run.stops_with_exit_code():
            verb_cli(verb)(args=[verb, *expanded.tokens()], run_directory=run, layers=layers)
    except SystemExit as stop:  # --help prints and exits
        if print_classes is not None and stop.code in (0, None):
            print_classes()
        raise
    if test_after_fit and run.path is not None:
        test, *test_args = test_after_fit_args(run.path / CONFIG_FILE)
        print(f"\nTest after fit: train {shlex.join([test, *test_args])}", flush=True)
        # the test job's command line (words, as --slurm.test_after_fit's job runs it), read as train reads its argv
        return run_subcommand(test, Request.of(test_args, test))
    return 0


HELP_FLAGS = ("-h", "--help")
# the sections whose class a config chooses; `--<key>.help CLASS` prints that class's options
CLASS_SECTIONS = ("model", "data", "optimizer", "lr_scheduler")


def _chosen_classes(verb: str, request: Request, layers: Layers) -> Callable[[], None] | None:
    """``--help`` with a config (``train fit --config experiment/digits --help``): LightningCLI's help
    names only ``--model.help CLASS`` for a class a config chooses, so this returns what prints, after
    it, the options of each class the command line chooses, as ``--model.help CLASS`` prints them.
    None for a bare ``--help``, no ``--help``, or a command line that does not parse without it (the
    help alone then)."""
    rest = request.with_args(a for a in request if a.tokens[0] not in HELP_FLAGS)  # (--help=... is not one)
    if len(rest.args) == len(request.args) or not rest.args:
        return None
    try:
        parser, config = parse_config(verb, rest, expand=False, layers=layers)
    except UserError:
        return None
    chosen = [
        (key, config[key]["class_path"])
        for key in CLASS_SECTIONS
        if isinstance(config.get(key), Namespace) and config[key].get("class_path")
    ]

    def print_classes() -> None:
        for key, class_path in chosen:
            print(f"\n# --{key}: {class_path} (what `--{key}.help {class_path}` prints)\n", flush=True)
            try:
                parser.parse_args([f"--{key}.help", class_path])
            except SystemExit:
                pass

    return print_classes


@contextmanager
def building_cli(
    verb: Optional[str] = None, layers: Layers | None = None, entry: RunEntry | None = None
) -> Iterator[Run]:
    """Around building a :class:`TrainerCLI` (give it the :class:`trainer_cli.runtime.run.Run` this yields):
    LightningCLI's warning about ``args`` silenced, errors of the user's input reported as
    :class:`UserError` (naming the file and line of a value in the command line's ``layers``) and exceptions of the
    user's own code before the first step with their
    frames (a run directory this created removed again when it saved no checkpoint). What the run exports
    for its processes ends with the TrainerCLI that built it (:mod:`trainer_cli.runtime.guard`), so one
    process can build several runs. ``entry``: what the entry says about the run (``train``'s when not
    given, :class:`trainer_cli.runtime.run_entry.RunEntry`)."""
    run = Run(verb, entry)
    quiet.install()  # library messages that do not apply to a launcher run (trainer_cli.runtime.quiet)
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*LightningCLI's args parameter.*")
            yield run
    except UserError:
        remove_or_say_kept(run)
        raise
    except KeyboardInterrupt:  # Ctrl-C or SIGTERM while building, before training started
        raise SystemExit(_stopped_before_training(run)) from None
    except Exception as err:
        user_error = explain_failure(err, run, layers)
        if user_error is None:
            raise
        raise user_error from None


class _Parsed(Exception):
    """Raised to stop a :class:`TrainerCLI` right after parsing (see :func:`parse_config`)."""


def parse_config(
    verb: str,
    request: Request,
    expand: bool = True,
    cli: tuple[type, tuple[Any, ...], dict[str, Any]] | None = None,
    layers: Layers | None = None,
) -> tuple[LightningArgumentParser, Namespace]:
    """Compose and type-check ``train <verb> ARGS`` (the command line ``request``) exactly as the verb would,
    building nothing.

    Returns the subcommand's parser and its parsed (resolved) config; ``parser.dump(config)``
    gives the YAML that ``train <verb> --config`` re-runs. No model, data or trainer is built and
    no run directory is made, so it is quick (used by ``train submit``). To parse several command
    lines with one parser (sweep trials), use a :class:`ConfigParser`.

    With ``expand=False`` the ``--config`` values are taken as already expanded by
    :func:`trainer_cli.config.compose.compose_args` (file paths or composed YAML text), with its ``layers``
    (for error messages naming a file and line). ``cli`` is a user's TrainerCLI subclass with its
    constructor arguments (``python main.py submit``): it parses.

    Raises:
        ConfigError: for a key or value the parser refuses (jsonargparse's message explained, with
            the file and line it was written on).
        UserError: for a bad config file.
    """
    if expand:
        request, layers = compose_args(request)
    return ConfigParser(verb, cli).parse(request, layers)


class ConfigParser:
    """``train <verb>``'s parse (:func:`parse_config`) for many command lines: the parser is built by
    the first parse and reused by the next (building LightningCLI's parser costs more than a parse).

    A command line with a ``--ckpt_path`` file gets a parser of its own: LightningCLI applies the
    checkpoint's hyperparameters while it is being built. The data->model links an earlier parse
    added stay on the parser: they apply when classes are built, which a parse-only use never does,
    and a dump with ``skip_link_targets=False`` (what a run records) does not depend on them.

    Args:
        verb: ``fit``, ``validate``, ``test`` or ``predict``.
        cli: A user's TrainerCLI subclass with its constructor arguments (see :func:`parse_config`).
    """

    def __init__(self, verb: str, cli: tuple[type, tuple[Any, ...], dict[str, Any]] | None = None) -> None:
        self.verb = verb
        self.cli = cli
        self._built: TrainerCLI | None = None

    def parse(self, request: Request, layers: Layers | None = None) -> tuple[LightningArgumentParser, Namespace]:
        """Type-check ``train <verb> ARGS`` (a request, ``--config`` values expanded: see :func:`parse_config`).

        Raises:
            ConfigError: for a key or value the parser refuses.
            UserError: for a bad config file.
        """
        if self._built is not None:
            built = self._built
            built.layers[:] = layers or Layers()  # in place: its parsers hold this object
            with _process_state_restored(), warnings.catch_warnings():
                warnings.filterwarnings("ignore", message=".*LightningCLI's args parameter.*")
                built.parse_arguments(built.parser, self._with_verb(request))
            assert built.verb_parser is not None  # set by parse_arguments
            config = built._subconfig()
            if not is_checkpoint_file(config.get("ckpt_path")):
                return built.verb_parser, config
        built = self._build(request, layers)
        config = built._subconfig()
        if not is_checkpoint_file(config.get("ckpt_path")):
            self._built = built
        assert built.verb_parser is not None
        return built.verb_parser, config

    def _with_verb(self, request: Request) -> list[str]:
        """The words the CLI parses (LightningCLI's ``args``): the verb first, but for a user's script built with
        ``run=False`` (no subcommands: ``python main.py --config ...``)."""
        words = request.tokens()
        return [self.verb, *words] if self.cli is None or script_has_verbs(*self.cli) else words

    def _build(self, request: Request, layers: Layers | None) -> TrainerCLI:
        """A TrainerCLI that parses ``request`` and stops before it builds anything."""
        captured: dict[str, TrainerCLI] = {}
        cli_class, cli_args, cli_kwargs = self.cli or (TrainerCLI, (), {})

        class _ParseOnlyCLI(cli_class):  # type: ignore[misc, valid-type]
            def before_instantiate_classes(self) -> None:
                captured["cli"] = self
                raise _Parsed

        seed_log = logging.getLogger(
            "lightning.fabric.utilities.seed"
        )  # "Seed set to 42": said by the run, not the parse
        level = seed_log.level
        seed_log.setLevel(logging.WARNING)
        # a user's script: Lightning's defaults, as its own fit parses
        run = Run(self.verb, RunEntry(follows_lightning=self.cli is not None))
        try:
            with warnings.catch_warnings():
                warnings.filterwarnings("ignore", message=".*LightningCLI's args parameter.*")
                verb_cli(self.verb, _ParseOnlyCLI)(
                    *cli_args,
                    **{**cli_kwargs, "args": self._with_verb(request), "run_directory": run, "layers": layers},
                )
        except _Parsed:
            pass
        finally:
            seed_log.setLevel(level)
        return captured["cli"]
