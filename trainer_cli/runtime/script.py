"""A user's own script with :class:`trainer_cli.runtime.cli.TrainerCLI` (``python main.py fit ...``): its
command line composed as ``train``'s is, its fixed classes, the stop contract of ``train`` when the
script is the program, and its launcher verbs (``submit``: the function the public
:class:`trainer_cli.cli.TrainerCLI` gives, :attr:`~trainer_cli.runtime.cli.TrainerCLI.script_verbs`)."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import yaml
from lightning.pytorch.cli import LightningCLI, SaveConfigCallback

from trainer_cli.config.compose import compose_args
from trainer_cli.config.request import Arg, Request, option
from trainer_cli.config.run_layers import with_stored_config
from trainer_cli.errors import UserError, report_user_error
from trainer_cli.imports import import_class
from trainer_cli.runtime.guard import _stopped_before_training
from trainer_cli.runtime.run import Run


def _fixed_classes(
    model_class: Any, datamodule_class: Any, subclass_mode_model: bool, subclass_mode_data: bool
) -> dict[str, type]:
    """The sections whose class a LightningCLI built with these arguments fixes (``model``, ``data``:
    a class given and its subclass mode off), with the class."""
    fixed = {
        "model": None if subclass_mode_model else model_class,
        "data": None if subclass_mode_data else datamodule_class,
    }
    return {k: v for k, v in fixed.items() if isinstance(v, type)}


def _other_format_configs(request: Request) -> bool:
    """Whether a ``--config`` file of ``request`` exists and is not YAML by its name (jsonnet, JSON)."""
    return any(Path(f).suffix not in (".yaml", ".yml", "") and Path(f).is_file() for f in request.values("config"))


def _fixed_class_configs(request: Request, fixed: dict[str, type]) -> Request:
    """In a script whose model or data class is fixed (LightningCLI's ``subclass_mode_*=False``), a
    ``--config`` written in subclass form (``train fit``'s config.yaml: ``class_path`` + ``init_args``)
    naming that same class reads as its ``init_args``, so a run made with ``train`` resumes and tests
    under the script.

    Raises:
        UserError: for a config naming another class than the one the script builds.
    """
    out: list[Arg] = []
    for arg in request:
        value = arg.value
        if arg.name != "config" or value is None:
            out.append(arg)
            continue
        try:
            tree = yaml.safe_load(Path(value).read_text() if "\n" not in value and Path(value).is_file() else value)
        except (OSError, ValueError, yaml.YAMLError):
            out.append(arg)
            continue
        changed = False
        for key, cls in fixed.items():
            node = tree.get(key) if isinstance(tree, dict) else None
            if not isinstance(node, dict) or "class_path" not in node:
                continue
            try:
                named = import_class(str(node["class_path"]))
            except (ImportError, AttributeError, ValueError):
                named = None
            if named is not cls:
                raise UserError(
                    f"{value}: {key}.class_path is {node['class_path']}, but this script builds "
                    f"{cls.__module__}.{cls.__qualname__} "
                    f"(its CLI takes that class's arguments only): run the config with `train fit --config {value}`, "
                    f"or build the CLI with subclass_mode_{'model' if key == 'model' else 'data'}=True"
                )
            tree[key] = node.get("init_args") or {}
            changed = True
        out.append(option("config", yaml.safe_dump(tree, sort_keys=False)) if changed else arg)
    return request.with_args(out)


@contextmanager
def _stop_contract(run: Run, whole_process: bool) -> Iterator[None]:
    """Around a user's script run as a program (``whole_process``): SIGTERM or Ctrl-C during training
    saves ``last.ckpt`` and ends the process with exit code 143 or 130 and the resume line, as under
    ``train``; before training, one line and nothing left. The signals themselves are Lightning's to
    handle here: the script imported Lightning (and torch started threads) before TrainerCLI could
    block them as ``train`` does first thing (:mod:`trainer_cli.job.stop_signals`). A script
    called from Python (a test, a notebook) is left as it is."""
    if not whole_process:
        yield
        return
    from trainer_cli.job import stop_signals

    code: int | None = None
    try:
        try:
            with run.stops_with_exit_code():
                yield
            code = 0
        except KeyboardInterrupt:
            code = _stopped_before_training(run)
            raise SystemExit(code) from None
    except SystemExit as stop:
        code = stop.code if isinstance(stop.code, int) else code if code is not None else 1
        raise
    finally:
        stop_signals.disarm(finished=True)
        stop_signals.note(f"exit {code}" if code is not None else "error")


def as_lightning_cli_does(run: Run, trainer: pl.Trainer, added: list[Any]) -> None:
    """A user's script: the run directory is the Trainer's ``log_dir`` (a new run), the run's own
    callbacks come after the script's and LightningCLI's (its SaveConfigCallback first, as
    LightningCLI orders them; checkpoint callbacks last, as Lightning orders them), and a run
    started in a given directory (``--run_dir``: a resume, a Slurm job) keeps the config.yaml it holds."""
    from lightning.pytorch.callbacks import Checkpoint

    run.bind_to_log_dir(trainer)
    ours = {id(c) for c in added}
    callbacks: list[Any] = trainer.callbacks  # type: ignore[attr-defined]
    # stable
    trainer.callbacks = sorted(callbacks, key=lambda c: (isinstance(c, Checkpoint), id(c) in ours))  # type: ignore[attr-defined]
    if run.path is not None and not run.created and not run.late:  # --run_dir (resumed, a Slurm job's)
        for callback in callbacks:
            if isinstance(callback, SaveConfigCallback) and (run.path / callback.config_filename).is_file():
                callback.already_saved = True


def script_args(cli: Any) -> list[str] | None:
    """The words LightningCLI parses (its ``args``) for a user's script (``python main.py fit ...``, ``cli`` its
    TrainerCLI), built from its command line (:func:`trainer_cli.config.request.of_process`): config short forms
    and Hydra composition, ``--run_dir DIR`` alone resumes with the run's own config.yaml, as under ``train``; a
    config written for ``train fit`` reads under a fixed class (:func:`_fixed_class_configs`). None where a
    ``--config`` is not a YAML file (jsonnet, ...): the parser reads the command line as LightningCLI would. The
    layers the command line was composed from go into ``cli.layers``, in place (the parsers hold that object).

    Raises:
        UserError: for a YAML config with a mistake, a missing file, a config naming another class
            than the script fixes.
    """
    fixed = _fixed_classes(cli._model_class, cli.datamodule_class, cli.subclass_mode_model, cli.subclass_mode_data)
    request: Request | None = cli.request  # the script's command line, read once (TrainerCLI.__init__)
    assert request is not None  # (a user's script: its TrainerCLI read it)
    try:
        expanded, layers = compose_args(request, fixed)
        expanded = with_stored_config(expanded, layers=layers)  # the run's record's layers first
        cli.layers[:] = layers  # in place: the parsers hold this object
    except UserError:
        if not _other_format_configs(request):
            raise  # a YAML file with a mistake, a missing file: one line naming it, as under `train`
        return None  # not a YAML file (jsonnet, ...): the parser reads it as LightningCLI would
    verb = [str(request.verb)] if request.verb else []  # run=False: no verb
    return [*verb, *_fixed_class_configs(expanded, fixed).tokens()]


def script_has_verbs(cli_class: type, args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    """Whether a user's script's LightningCLI takes subcommands (``fit``, ``test``, ...): not when its
    constructor is given ``run=False`` (the script calls ``trainer.fit`` itself)."""
    given = inspect.signature(LightningCLI.__init__).bind_partial(None, *args, **kwargs).arguments
    return bool(given.get("run", True))


def run_script_verb(cli_class: type, args: tuple[Any, ...], kwargs: dict[str, Any], request: Request) -> int:
    """A launcher verb of a user's script with TrainerCLI (``python main.py submit ARGS``: ``train submit``
    with the script's own CLI, its classes, links and defaults, parsing the fit arguments, and the job
    running ``python main.py fit --config <frozen config>``); returns the exit code.

    The verb's function is ``cli_class.script_verbs[request.verb]`` (the public :class:`trainer_cli.cli.TrainerCLI`
    gives ``submit``, from the layer that may import the submit library): it takes the request, the script's
    CLI (class, positional and keyword arguments), ``script`` (the script's path) and ``fixed`` (the sections
    whose class the script fixes), and returns an exit code.
    """
    verb: Callable[..., int] = cli_class.script_verbs[request.verb]  # type: ignore[attr-defined]
    given = inspect.signature(LightningCLI.__init__).bind_partial(None, *args, **kwargs).arguments
    fixed = _fixed_classes(
        given.get("model_class"),
        given.get("datamodule_class"),
        bool(given.get("subclass_mode_model", False)),
        bool(given.get("subclass_mode_data", False)),
    )
    try:
        script = str(Path(str(request.script)).absolute())
        return int(verb(request, (cli_class, args, kwargs), script=script, fixed=fixed))
    except UserError as err:
        return report_user_error(err)
