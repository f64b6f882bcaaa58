"""The LightningCLI behind ``train fit|validate|test|predict``.

Model and data are in subclass mode: the project's classes resolve by short name and any
importable LightningModule / LightningDataModule plugs in through ``class_path``. The optimizer
and scheduler are chosen by name (``--optimizer AdamW``, ``--lr_scheduler OneCycleLR``) and built
lazily, so a step-wise scheduler learns the run's total steps from the trainer. Every run gets
its own directory (:mod:`trainer_cli.rundir.policy`) holding the resolved ``config.yaml``, the git
commit, the run id every logger logs under (``run.json``, :mod:`trainer_cli.rundir.identity`), the logger
files and checkpoints.
"""

from __future__ import annotations

import inspect
import logging
import os
import sys
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from functools import partial, update_wrapper
from pathlib import Path
from typing import Any, Literal, Optional

import lightning.pytorch as pl
import yaml
from jsonargparse import Namespace, set_parsing_settings
from lightning.fabric.utilities.rank_zero import rank_zero_only
from lightning.pytorch.callbacks import BasePredictionWriter, ModelCheckpoint
from lightning.pytorch.cli import LightningArgumentParser, LightningCLI, LRSchedulerTypeTuple, SaveConfigCallback
from torch.optim import Optimizer

import trainer_cli.callbacks  # noqa: F401 - registers the project's callbacks for short names
import trainer_cli.data  # noqa: F401 - registers the project's data modules for short names
import trainer_cli.models.classifier  # noqa: F401 - registers the project's models for short names
import trainer_cli.optim  # noqa: F401 - registers the project's schedulers for short names
from trainer_cli.callbacks import LastCheckpoint, PredictionCSVWriter, RunSummary
from trainer_cli.callbacks.last_checkpoint import writes_last
from trainer_cli.callbacks.progress import default_progress_bar
from trainer_cli.callbacks.slurm_requeue import SynchronizedRequeue
from trainer_cli.callbacks.switches import NO_CHECKPOINTS, drop_switched_off
from trainer_cli.config.after_parse import (
    check_backbone_kwargs,
    check_optimizer_config,
    check_trainer_minimums,
    with_checkpoint_class,
)
from trainer_cli.config.compose import Layers, compose_args, with_stored_config
from trainer_cli.config.explain import (
    as_user_error,
    explain_parse_error,
    locate,
    user_code_error,
    without_verb,
)
from trainer_cli.config.extras import check_extras
from trainer_cli.config.incompatible import check_compatible
from trainer_cli.errors import ConfigError, UserError, disk_full_error, is_disk_full, report_user_error
from trainer_cli.imports import import_class
from trainer_cli.job import workdir
from trainer_cli.job.requeue_signal import under_slurm_batch
from trainer_cli.optim.configure import configure_optimizers
from trainer_cli.optim.param_groups import ParamGroups
from trainer_cli.optim.schedule_resume import ScheduleOnResume
from trainer_cli.rundir import policy as rundir
from trainer_cli.rundir import record as run_records
from trainer_cli.rundir.resume import add_resume_arguments, check_weights_fit
from trainer_cli.runtime import quiet
from trainer_cli.runtime.checkpointing import ResumeState, with_atomic_checkpoint_io
from trainer_cli.runtime.run import (
    DEFAULT_LOGGER,
    DEFAULT_NAME,
    DEFAULT_ROOT_DIR,
    EXIT_INTERRUPTED,
    Run,
    RunRecord,
    is_checkpoint_file,
)

# what flows from the data module to the model, stated once (links on instantiation)
DATA_TO_MODEL = ("num_classes", "in_channels", "image_size")


CONFIG_HELP = (
    "--config FILE is repeatable (later layers win; short forms like experiment/digits work). "
    "--config_root DIR (repeatable) and $TRAINER_CLI_CONFIG_PATH add user config roots, folders laid out like "
    "configs/, searched before the bundled configs. "
    "train fit --sweep KEY=V1,V2 (repeatable; range(), uniform(), loguniform(), randint(), choice() with "
    "--sweep_trials N --sweep_seed S) runs one fit per trial in a sweep directory (`train sweep-results --help`). "
    "Data->model links: the model's num_classes, in_channels and image_size take the data module's value where the "
    "model takes the argument, it was left at its default and the data module declares it (a value you set is kept); "
    "config.yaml records the value used."
)


class TrainerArgumentParser(LightningArgumentParser):
    """LightningCLI's parser whose errors name close matches for unknown keys and class names, and
    the config file and line a bad value came from (in its command line's :attr:`layers`)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("epilog", CONFIG_HELP)  # `train fit --help`
        super().__init__(*args, **kwargs)
        self.layers = Layers()  # where each value of the command line parsed was written (TrainerCLI sets them)
        self.exits = False  # a user's script: an error ends the process here, as LightningCLI's parser does
        self.stock_keys_only = False  # a user's script: a printed config holds only what LightningCLI takes (dump)

    def link_arguments(  # type: ignore[override]
        self, source: Any, target: str, compute_fn: Any = None, apply_on: str = "parse", **kwargs: Any
    ) -> None:
        """jsonargparse's; the target is remembered, so the launcher's own data->model links leave
        a key the user's CLI links alone. A link applied when the classes are built (``apply_on=
        "instantiate"``) has the value it gives recorded (:attr:`link_values`, the run's config.yaml
        holds it: the value the object was built with, not the constructor's default)."""
        if apply_on == "instantiate" and (compute_fn is not None or isinstance(source, str)):
            compute_fn = partial(_recorded_link, compute_fn, target, self.link_values)
        super().link_arguments(source, target, compute_fn, apply_on, **kwargs)
        self.link_targets = getattr(self, "link_targets", set()) | {target}
        if apply_on == "instantiate":
            self.instantiate_link_targets = getattr(self, "instantiate_link_targets", set()) | {target}

    @property
    def link_values(self) -> dict[str, Any]:
        """``{target key: value}`` of the links applied when the classes were built (YAML values only)."""
        if "_link_values" not in self.__dict__:
            self.__dict__["_link_values"] = {}
        return self.__dict__["_link_values"]  # type: ignore[no-any-return]

    def error(self, message: str, ex: Optional[Exception] = None) -> Any:  # type: ignore[override]
        """jsonargparse's for its inner parsers (``exit_on_error=False``: it tries the next type);
        for the command line's own a :class:`trainer_cli.errors.ConfigError` (the key, its file and
        line, the message with close matches), rendered where the command started (``train``'s
        ``main``). In a user's script (:attr:`exits`) the parser is where the command started, as
        LightningCLI's: it renders the error and exits 2 (LightningCLI catches that ``SystemExit``
        to add its own line, e.g. for a checkpoint's hyperparameters).

        Raises:
            ConfigError: for a key or value of the command line the parser refuses.
            SystemExit: 2, in a user's script, after one ``error:`` line on stderr.
        """
        message = explain_parse_error(message, getattr(ex, "subcommand_parser", None) or self)
        if not self.exit_on_error:
            return super().error(message, ex)
        verb = (getattr(ex, "subcommand_parser", None) or self).prog.split()[-1]
        verb = verb if verb in LightningCLI.subcommands() else "fit"  # lr-find, cv, ...: fit's options
        key, origin = locate(message, self.layers)  # a value from a --config file: the file and line
        hint = _replaced_class_hint(str(origin or ""), message)
        command = getattr(self, "help_command", "train")  # or the user's script (TrainerCLI.init_parser)
        error = ConfigError(message, key, origin, hint, f"`{command} {verb} --help` lists every option")
        if self.exits:
            sys.exit(report_user_error(error))
        raise error

    def dump(self, namespace: Namespace, *args: Any, **kwargs: Any) -> str:  # type: ignore[override]
        """jsonargparse's; in a user's script (:attr:`stock_keys_only`) a dump that leaves the link targets
        out, as ``--print_config`` and a plain ``save`` do, holds only what the script's stock LightningCLI
        takes: the launcher's own keys (:data:`trainer_cli.rundir.record.LAUNCHER_KEYS`) are left out, as the
        run's config.yaml leaves them out. The run's record (a dump with the link targets) keeps them, for
        ``launcher.yaml``."""
        if self.stock_keys_only and kwargs.get("skip_link_targets", True) and isinstance(namespace, Namespace):
            namespace = namespace.clone()
            for key in run_records.LAUNCHER_KEYS:
                if key in namespace:
                    del namespace[key]
        return super().dump(namespace, *args, **kwargs)  # type: ignore[no-any-return]

    def save(self, cfg: Namespace, path: Any, *args: Any, overwrite: bool = False, **kwargs: Any) -> None:  # type: ignore[override]
        """jsonargparse's; in a user's script the run's record (:meth:`trainer_cli.runtime.run.Run.record`:
        the resolved config with the linked values and a header) is what LightningCLI's
        SaveConfigCallback saves into the run directory; a config it saves elsewhere (no logger: stock's
        ``config.yaml`` in ``default_root_dir``, :meth:`trainer_cli.runtime.run.Run.bind_to_log_dir`) is
        stock's text."""
        record = getattr(self, "run_record", None)
        record_dir = getattr(self, "record_dir", None)
        if record is None or (record_dir is not None and Path(path).absolute().parent != record_dir):
            return super().save(cfg, path, *args, overwrite=overwrite, **kwargs)
        target = Path(path)
        if target.exists() and not overwrite:
            raise ValueError(f"Refusing to overwrite existing file: {target}")  # jsonargparse's rule
        run_records.write(target, record)  # config.yaml as LightningCLI reads it, launcher.yaml beside
        return None

    def parse_object(self, obj: Any, namespace: Optional[Namespace] = None, *args: Any, **kwargs: Any) -> Namespace:  # type: ignore[override]
        """jsonargparse's; a stock checkpoint's hyperparameters apply to the configured model
        (:func:`trainer_cli.config.after_parse.with_checkpoint_class`)."""
        return super().parse_object(with_checkpoint_class(obj, namespace), namespace, *args, **kwargs)


def _recorded_link(compute_fn: Any, target: str, values: dict[str, Any], *sources: Any) -> Any:
    """A link's value (``compute_fn`` of the sources, or the one source as it is), recorded in
    ``values`` under ``target`` when it is a plain YAML value (a number, a string, a list of them)."""
    value = compute_fn(*sources) if compute_fn is not None else sources[0]
    try:
        yaml.safe_dump(value)
    except yaml.YAMLError:
        return value
    values[target] = value
    return value


@contextmanager
def _process_state_restored() -> Iterator[None]:
    """Around building and running a :class:`TrainerCLI`: the launcher's process-global settings
    (jsonargparse's ``omegaconf_absolute_to_relative_paths``, the quiet warning and log filters of
    :mod:`trainer_cli.runtime.quiet`, ``TRAINER_CLI_RUN_DIR``) apply inside and are put back afterwards, so a
    plain LightningCLI built later in the same process behaves as it would alone."""
    env_before = os.environ.get(rundir.ENV_RUN_DIR)
    relative_before = False  # jsonargparse's default; it has no public getter to read another value back
    # configs say ${optimizer.init_args.lr}; under a subcommand the key is fit.optimizer...: resolve relative
    set_parsing_settings(omegaconf_absolute_to_relative_paths=True)
    try:
        with warnings.catch_warnings(), quiet.installed():
            yield
    finally:
        set_parsing_settings(omegaconf_absolute_to_relative_paths=relative_before)
        if env_before is None:
            os.environ.pop(rundir.ENV_RUN_DIR, None)
        else:
            os.environ[rundir.ENV_RUN_DIR] = env_before


def _has_key(parser: LightningArgumentParser, key: str) -> bool:
    """Whether ``parser`` has an option ``key`` (``trainer.default_root_dir``, ``optimizer``)."""
    try:
        parser.get_default(key)
    except KeyError:
        return False
    return True


def _added_any(parser: LightningArgumentParser, kind: str) -> bool:
    """Whether the user's ``add_arguments_to_parser`` added optimizers (``kind="optimizers"``) or
    schedulers: LightningArgumentParser's record of ``add_optimizer_args``/``add_lr_scheduler_args``,
    read, as LightningCLI reads it, to add the automatic ones only when there are none."""
    return bool(vars(parser).get("_" + kind))


def _automatic(parser: Any, kind: str) -> list[tuple[str, Any]]:
    """The ``(key, class)`` of each optimizer (``kind="optimizers"``) or scheduler group added with
    ``link_to="AUTOMATIC"`` (LightningArgumentParser's record, read as LightningCLI reads it)."""
    return [
        (key, cls) for key, (cls, link_to) in (vars(parser).get("_" + kind) or {}).items() if link_to == "AUTOMATIC"
    ]


def _with_class_path(cls: Any, value: Any) -> dict[str, Any] | None:
    """A group's instantiated config as ``{"class_path", "init_args"}`` (a group of one class holds
    only its init args)."""
    if not value:
        return None
    value = value.as_dict() if isinstance(value, Namespace) else dict(value)
    if not isinstance(cls, tuple) and "class_path" not in value:
        return {"class_path": f"{cls.__module__}.{cls.__qualname__}", "init_args": value}
    return value


def _linked_value(key: str, target: str, current: Any, applied: dict[str, Any], data: Any) -> Any:
    """The value a data->model link gives ``target``: the data module's ``key`` attribute (the
    model's own ``current`` value when the data module was not built or lacks it); the value used
    is recorded in ``applied`` (for config.yaml)."""
    if data is None or not hasattr(data, key):
        return current
    applied[target] = getattr(data, key)
    return applied[target]


def _parameters(target: Any) -> dict[str, Any]:
    """The keyword parameters of a class's ``__init__`` (or a callable) with their defaults; a class
    whose ``__init__`` takes ``**kwargs`` also has its base classes' (as jsonargparse resolves them)."""
    params: dict[str, Any] = {}
    for klass in getattr(target, "__mro__", (target,)):
        init = klass.__dict__.get("__init__") if isinstance(klass, type) else klass
        if init is None:
            continue
        try:
            signature = inspect.signature(init)
        except (TypeError, ValueError):
            break
        forwards = False
        for name, p in signature.parameters.items():
            if p.kind == p.VAR_KEYWORD:
                forwards = True
            elif p.kind != p.VAR_POSITIONAL and name != "self":
                params.setdefault(name, p.default)
        if not forwards:
            break
    return params


def _class_of(model_cfg: Any, fixed: Any, subclass_mode: bool) -> Any:
    """The model class a parsed ``model`` config builds (its ``class_path`` in subclass mode)."""
    if not subclass_mode:
        return fixed
    class_path = model_cfg.get("class_path") if isinstance(model_cfg, Namespace) else None
    if not class_path:
        return None
    try:
        return import_class(class_path)
    except (ImportError, AttributeError, ValueError):
        return None


def _declares(cls: type, key: str) -> bool:
    """Whether a data module class declares ``key``: a class attribute, an annotation or an ``__init__`` argument."""
    annotations: dict[str, Any] = {}
    for klass in getattr(cls, "__mro__", ()):
        annotations.update(getattr(klass, "__annotations__", {}))
    return hasattr(cls, key) or key in annotations or key in _parameters(cls)


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


def _other_format_configs(args: list[str]) -> bool:
    """Whether a ``--config`` file of ``args`` exists and is not YAML by its name (jsonnet, JSON)."""
    files = [b for a, b in zip(args, args[1:]) if a == "--config"] + [
        a.partition("=")[2] for a in args if a.startswith("--config=")
    ]
    return any(Path(f).suffix not in (".yaml", ".yml", "") and Path(f).is_file() for f in files)


def _fixed_class_configs(args: list[str], fixed: dict[str, type]) -> list[str]:
    """In a script whose model or data class is fixed (LightningCLI's ``subclass_mode_*=False``), a
    ``--config`` written in subclass form (``train fit``'s config.yaml: ``class_path`` + ``init_args``)
    naming that same class reads as its ``init_args``, so a run made with ``train`` resumes and tests
    under the script.

    Raises:
        UserError: for a config naming another class than the one the script builds.
    """
    out = list(args)
    for i in range(len(out) - 1):
        if out[i] != "--config":
            continue
        value = out[i + 1]
        try:
            tree = yaml.safe_load(Path(value).read_text() if "\n" not in value and Path(value).is_file() else value)
        except (OSError, ValueError, yaml.YAMLError):
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
        if changed:
            out[i + 1] = yaml.safe_dump(tree, sort_keys=False)
    return out


def _replaced_class_hint(where: str, message: str) -> str:
    """For an experiment that names another class than its group default (``model: class_path:
    mymodels.TinyNet`` over ``/experiment/digits``): Hydra merged the group file's init_args into
    it. Say how to drop them."""
    marker = ", from group file "
    if marker not in where or "Problem with given class_path" not in message:
        return ""
    group = Path(where.split(marker, 1)[1].rsplit(" line ", 1)[0]).parent.name
    return (
        f"\n  (the option comes from the default /{group} of a defaults list; an experiment that names another "
        f"class keeps its init_args: add `- override /{group}: null` to the experiment's defaults list)"
    )


class RunConfig(SaveConfigCallback):
    """LightningCLI's ``SaveConfigCallback`` for a run directory: the run's record (the resolved
    config with the data->model link values and the values the launcher set, :meth:`Run.record`)
    is ``<run>/config.yaml``, written once by global rank 0 (a resumed run keeps its own);
    without a run directory (``fast_dev_run``) the config goes to the Trainer's ``log_dir``, as
    LightningCLI puts it.
    ``save_config_kwargs`` (``config_filename``, ``overwrite``, ``save_to_log_dir``) keep their meaning;
    ``save_config`` is called as LightningCLI calls it. No collective: it runs on rank 0 alone."""

    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        if self.already_saved or not trainer.is_global_zero:
            return
        record = next((c for c in trainer.callbacks if isinstance(c, RunRecord)), None)  # type: ignore[attr-defined]
        run = record.run if record is not None else None
        if run is not None and run.path is not None:
            run.freeze()  # the record is the run directory's (a log_dir elsewhere is a shared store: MLflow's, W&B's)
        elif self.save_to_log_dir and trainer.log_dir is not None:  # no run directory (fast_dev_run): LightningCLI's
            target = Path(trainer.log_dir) / self.config_filename
            if target.exists() and not self.overwrite:
                raise RuntimeError(
                    f"{target} exists already: delete it, or set save_config_kwargs={{'overwrite': True}}"
                )
            target.parent.mkdir(parents=True, exist_ok=True)
            self.parser.save(
                self.config, str(target), skip_none=False, overwrite=self.overwrite, multifile=self.multifile
            )
        self.save_config(trainer, pl_module, stage)
        self.already_saved = True


class TrainerCLI(LightningCLI):
    """LightningCLI with layered configs, run directories and optimizers built from the trainer.

    A drop-in for ``LightningCLI`` in a user's own script: every constructor argument and hook of
    LightningCLI keeps its meaning (positional model/data classes in either mode, ``trainer_class``,
    ``trainer_defaults``, ``seed_everything_default``, ``parser_kwargs``, ``args`` as a list or a dict,
    ``run=False``, ``auto_configure_optimizers``, the model's own ``configure_optimizers``, subclasses
    that add arguments and links). Constructing it leaves no process-global state behind
    (environment variables, parsing settings, warning filters, log filters), but for one: in a Slurm
    job run from its code snapshot it first changes to the directory the job was submitted from
    (:func:`trainer_cli.job.workdir.enter`), before any class of the user's is built.

    Built on LightningCLI's public hooks only: ``init_parser`` and ``add_core_arguments_to_parser``
    (the launcher's own options: ``--name``, ``--run_dir``, ``--param_groups``, ...),
    ``parse_arguments`` (after the user's ``add_arguments_to_parser``: the ``--optimizer`` /
    ``--lr_scheduler`` groups when ``auto_configure_optimizers``, the data->model links; an explicit
    ``--ckpt_path`` file is checked), ``before_instantiate_classes`` / ``after_instantiate_classes``
    and ``instantiate_trainer`` (the run directory, :class:`trainer_cli.runtime.run.Run`).

    The data->model links (:data:`DATA_TO_MODEL`: ``num_classes``, ``in_channels``, ``image_size``)
    apply only where the model declares the argument, the data module has the attribute, the model's
    value was not set by the user (it equals the signature default) and the user's CLI does not link
    the same key itself. The value used is recorded in the run's ``config.yaml``.

    Args:
        run_directory: The run's directory policy (:class:`trainer_cli.runtime.run.Run`); one for the verb
            being run when not given. The caller keeps it to clean up after an error.
        layers: Where each value of ``args`` was written (:func:`trainer_cli.config.compose.compose_args`),
            for error messages naming a file and line; a user's script composes its own.
        *args: LightningCLI's positional arguments (model class, data module class, ...).
        **kwargs: LightningCLI's keyword arguments.
    """

    def __init__(
        self, *args: Any, run_directory: Run | None = None, layers: Layers | None = None, **kwargs: Any
    ) -> None:
        workdir.enter()  # a Slurm job run from its code snapshot: relative paths mean what they meant at submit
        if run_directory is None and kwargs.get("args") is None and len(sys.argv) > 1 and sys.argv[1] == "submit":
            raise SystemExit(_submit_from_script(type(self), args, kwargs, sys.argv[0], sys.argv[2:]))
        kwargs.setdefault("parser_class", TrainerArgumentParser)
        # config.yaml: the run's record (run.Run.record); in a user's script LightningCLI's own callback
        # writes it where LightningCLI does (the Trainer's log_dir: the run directory there)
        kwargs.setdefault("save_config_callback", RunConfig if run_directory is not None else SaveConfigCallback)
        self._auto_optimizers = kwargs.get("auto_configure_optimizers", True)
        # LightningCLI's automatic optimizers are built when the model is (a step-wise scheduler cannot learn
        # its total steps then): the same groups are added and built lazily here (_add_configure_optimizers)
        kwargs["auto_configure_optimizers"] = False
        self.config: Any = None
        self.layers = layers if layers is not None else Layers()  # shared by its parsers (init_parser)
        self._subcommands = kwargs.get("run", True)
        self.run = run_directory if run_directory is not None else Run(None)
        if run_directory is None:  # a user's script
            # a missing --ckpt_path file: one line before anything is written when the script is the program;
            # called from Python (args=..., a test), it fails where LightningCLI's does
            self.run.missing_is_error = kwargs.get("args") is None and _runs_as_script()
            self.run.checkpoint_hparams_win = True
            self.run.follows_lightning = True  # files where LightningCLI puts them (run.Run.bind_to_log_dir)
            self.run.command = f"python {sys.argv[0]}"  # the user's script: its record is re-run with it
            self.run.resume_command = f"{self.run.command} fit --run_dir {{path}} --ckpt_path last"
        self.verb_parser: LightningArgumentParser | None = None  # the parser of the verb being run
        self._core_parsers: list[LightningArgumentParser] = []
        self._data_links: dict[str, str] = {}  # DATA_TO_MODEL key -> model target key it links to
        self.applied_links: dict[str, Any] = {}  # model target key -> the value the link gave
        from trainer_cli.job import requeue_signal

        requeue_from_here = run_directory is None and requeue_signal.install()  # a user's script in a Slurm job
        whole_process = run_directory is None and kwargs.get("args") is None and _runs_as_script()
        with _process_state_restored():
            try:
                with _stop_contract(self.run, whole_process):
                    super().__init__(*args, **kwargs)
            except Exception as err:
                if run_directory is not None:  # `train`: building_cli explains it
                    raise
                # a user's script run as the program: explained as under `train` (called from Python, only
                # the launcher's own UserError is); a start that failed before a checkpoint leaves nothing
                user_error = (
                    err
                    if isinstance(err, UserError)
                    else explain_failure(err, self.run, self.layers)
                    if whole_process
                    else None
                )
                self.run.remove_if_untrained()
                if user_error is not None and kwargs.get("args") is None:
                    raise SystemExit(report_user_error(user_error)) from None  # from the command line: exit 2
                raise
            finally:
                if requeue_from_here:
                    requeue_signal.ignore_from_now()
                if run_directory is None:  # a user script whose Trainer did not run (run=False, a mock): nothing left
                    self.run.release_if_unused()

    @property
    def run_dir(self) -> Path | None:
        """The run directory (:attr:`trainer_cli.runtime.run.Run.path`)."""
        return self.run.path

    def init_parser(self, **kwargs: Any) -> LightningArgumentParser:
        kwargs.setdefault("parser_mode", "omegaconf+")  # ${...} resolved after every layer and flag
        kwargs.setdefault("allow_abbrev", False)  # a misspelt --trainer.max_epoch is an error, not a prefix match
        parser = super().init_parser(**kwargs)
        parser.layers = self.layers  # type: ignore[attr-defined]  # (a user's parser_class may lack it: set, not declared)
        if self.run.follows_lightning:  # a user's script: its errors point at its own --help, and end it
            parser.help_command = f"python {sys.argv[0]}"  # type: ignore[attr-defined]
            parser.exits = True  # type: ignore[attr-defined]
            parser.stock_keys_only = True  # type: ignore[attr-defined]  # --print_config: what stock prints
        return parser

    def add_core_arguments_to_parser(self, parser: LightningArgumentParser) -> None:
        """LightningCLI's (trainer, model, data), then the launcher's own options. Here, not in
        ``add_arguments_to_parser``: a user's subclass overrides that without calling ``super()``."""
        super().add_core_arguments_to_parser(parser)
        self._core_parsers.append(parser)
        if not self._subcommands:  # built without fit (lr-find, cv, ...): fit's own options (ckpt_path,
            # weights_only) are accepted, so that a run's config.yaml reads here as it is
            parser.add_method_arguments(pl.Trainer, "fit", skip=set(LightningCLI.subcommands()["fit"]))
        parser.add_argument(
            "--name",
            type=str,
            default=DEFAULT_NAME,
            help="Experiment name: each run goes to <trainer.default_root_dir>/<name>/version_<N>.",
        )
        parser.add_argument(
            "--run_dir",
            type=Optional[str],
            default=None,
            help="Use exactly this run directory (resume in place; `train submit` sets it). Empty: a new one.",
        )
        add_resume_arguments(
            parser
        )  # --resume_schedule, --resume_force (trainer_cli.optim.schedule_resume, trainer_cli.rundir.resume)
        parser.add_class_arguments(
            ParamGroups, "param_groups"
        )  # optimizer parameter groups (trainer_cli.optim.param_groups)
        parser.add_argument(
            "--float32_matmul_precision",
            type=Optional[Literal["highest", "high", "medium"]],
            default=None,
            help="torch.set_float32_matmul_precision: 'high' lets float32 matmuls use TF32 tensor cores. "
            "Empty: torch's default.",
        )
        defaults = {"trainer.default_root_dir": DEFAULT_ROOT_DIR, "trainer.logger": DEFAULT_LOGGER}
        if self.run.follows_lightning:  # a user's script keeps Lightning's defaults (lightning_logs/version_<N>)
            defaults = {}
        for key, value in defaults.items():  # the user's trainer_defaults and trainer class come first
            if key.split(".", 1)[1] not in self.trainer_defaults and _has_key(parser, key):
                parser.set_defaults({key: value})

    def parse_arguments(self, parser: LightningArgumentParser, args: Any) -> None:
        """LightningCLI's, after the launcher's arguments that follow the user's (optimizers, links);
        then an explicit ``--ckpt_path`` file is checked to be a complete checkpoint of the configured
        model before LightningCLI reads its hyperparameters."""
        for core in self._core_parsers:  # after the user's add_arguments_to_parser, as LightningCLI adds them
            if self._auto_optimizers and not _added_any(core, "optimizers"):
                core.add_optimizer_args((Optimizer,))  # --optimizer NAME
            if self._auto_optimizers and not _added_any(core, "lr_schedulers"):
                core.add_lr_scheduler_args(LRSchedulerTypeTuple)
        rebuilt = args is None and self._subcommands and len(sys.argv) > 1 and sys.argv[1] in self.subcommands()
        if rebuilt:
            # a user's script (`python main.py fit ...`): config short forms and Hydra composition,
            # `--run_dir DIR` alone resumes with the run's own config.yaml, as under `train`
            fixed = _fixed_classes(
                self._model_class, self.datamodule_class, self.subclass_mode_model, self.subclass_mode_data
            )
            try:
                expanded, layers = compose_args(sys.argv[2:], fixed)
                args = [sys.argv[1], *with_stored_config(expanded)]
                self.layers[:] = layers  # in place: the parsers hold this object
            except UserError:
                if not _other_format_configs(sys.argv[2:]):
                    raise  # a YAML file with a mistake, a missing file: one line naming it, as under `train`
                args = None  # not a YAML file (jsonnet, ...): the parser reads it as LightningCLI would
            if args is not None:
                args = _fixed_class_configs(args, fixed)
        with warnings.catch_warnings():
            if args is not None and rebuilt:  # the args built here from sys.argv: not the mistake LightningCLI warns of
                warnings.filterwarnings("ignore", message=".*LightningCLI's args parameter.*")
            super().parse_arguments(parser, args)
        verb = self.config.get("subcommand") if self._subcommands else None
        self.verb_parser = self._parser(verb) if verb else parser
        if self.run.verb is None:
            self.run.verb = verb
        self._link_unset_model_args(self.verb_parser)
        self.run.check_checkpoint(self._subconfig(), DATA_TO_MODEL)

    def _link_unset_model_args(self, parser: LightningArgumentParser) -> None:
        """Add the data->model links (:data:`DATA_TO_MODEL`) that apply to the parsed classes: the
        model declares the argument and the user left it at its default, the data module declares
        the attribute, and the user's CLI does not link the key itself. After parsing, when the
        classes are known: a model without the argument gets nothing (not even in its hparams)."""
        cfg = self._subconfig()
        model_cfg, data_cfg = cfg.get("model"), cfg.get("data")
        model_class = _class_of(model_cfg, self._model_class, self.subclass_mode_model)
        data_class = _class_of(data_cfg, self.datamodule_class, self.subclass_mode_data)
        if model_class is None or data_class is None or not isinstance(model_cfg, Namespace):
            return
        params = _parameters(model_class)
        user_targets: set[str] = getattr(parser, "link_targets", set())
        for key in DATA_TO_MODEL:
            target = f"model.init_args.{key}" if self.subclass_mode_model else f"model.{key}"
            if key not in params or not _declares(data_class, key):
                continue
            if target in user_targets or f"model.{key}" in user_targets or f"model.init_args.{key}" in user_targets:
                continue  # the user's own link on the same key wins
            if self._data_links.get(key) == target:
                continue  # linked by an earlier parse with this parser (ConfigParser)
            if params[key] is not inspect.Parameter.empty and model_cfg.get(target.split(".", 1)[1]) != params[key]:
                continue  # set by the user: their value stays
            current = model_cfg.get(target.split(".", 1)[1])
            # a plain function, not a bound method: the parser travels with the Trainer to ddp_spawn's processes
            parser.link_arguments(
                "data",
                target,
                compute_fn=partial(_linked_value, key, target, current, self.applied_links),
                apply_on="instantiate",
            )
            self._data_links[key] = target

    def _subconfig(self) -> Namespace:
        verb = self.config.get("subcommand") if self.config is not None else None
        return self.config[verb] if verb else self.config

    def _subconfig_init(self) -> Namespace:
        return self.config_init[self.subcommand] if self.subcommand else self.config_init

    def before_instantiate_classes(self) -> None:
        cfg = self._subconfig()
        if not isinstance(
            cfg.get("trainer"), Namespace
        ):  # a trainer_class without arguments: nothing to check or place
            return
        check_extras(cfg.trainer)  # a missing optional package (deepspeed, wandb, mlflow) before building
        check_compatible(cfg)  # declared incompatible pairs (trainer_cli.config.incompatible.INCOMPATIBLE)
        if cfg.get("float32_matmul_precision"):
            import torch

            torch.set_float32_matmul_precision(cfg.float32_matmul_precision)
        check_backbone_kwargs(cfg)  # before the dump: config.yaml holds the options the backbone gets
        assert self.verb_parser is not None
        check_optimizer_config(cfg)
        check_trainer_minimums(cfg)
        # filled when the classes are built: compared on resume by the checkpoint's tensors, not the record
        user_links: set[str] = getattr(self.verb_parser, "instantiate_link_targets", set())
        self.run.link_targets = set(self._data_links.values()) | {without_verb(t) for t in user_links}
        parser = self.verb_parser
        assert parser is not None  # set by parse_arguments
        self.run.prepare(cfg, lambda: parser.dump(cfg, skip_none=False, skip_link_targets=False))

    def after_instantiate_classes(self) -> None:
        if self.run.trains and self.run.path is not None:  # the checkpoint's tensors decide what a resume may change
            check_weights_fit(
                self.model, self.run.ckpt_path, bool(self._subconfig().get("resume_force")), self.run.changes
            )
        self._add_configure_optimizers()
        init = self._subconfig_init()
        if (
            self.subcommand
            and not self.run.follows_lightning  # a user's script passes what LightningCLI passes (torch decides)
            and "weights_only" in init
            and init.get("weights_only") is None
        ):
            # the checkpoint the verb starts from is read with torch's safe loader, whatever torch's default
            # or TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD (LightningCLI reads its hyperparameters so already)
            init["weights_only"] = True
        user_links = getattr(self.verb_parser, "link_values", {})
        self.applied_links.update({without_verb(k): v for k, v in user_links.items()})  # the user's own links
        self.run.linked = self.applied_links  # config.yaml is written when the verb starts (run.RunRecord)
        if (
            self.run.follows_lightning and self.verb_parser is not None
        ):  # the script's SaveConfigCallback saves the record
            self.verb_parser.run_record = self.run.record(self.applied_links)  # type: ignore[attr-defined]
        self.run.keep_logs()

    def instantiate_trainer(self, **kwargs: Any) -> pl.Trainer:
        """LightningCLI's, with the run's callbacks and checkpoint plugin added (the run summary,
        RNG states, last.ckpt, Slurm requeue, the checkpoint on SIGTERM, atomic checkpoint files)."""
        trainer_config = {**self._subconfig_init().get("trainer", {}), **kwargs}
        if "callbacks" not in trainer_config:  # a trainer class without callbacks: LightningCLI's warning
            return self._remember_trainer(super().instantiate_trainer(**kwargs))
        configured = trainer_config.get("callbacks") or []
        configured = list(configured) if isinstance(configured, list) else [configured]
        added: list[Any] = [RunSummary(str(self.run_dir) if self.run_dir else None)]
        if self.subcommand == "predict" and not any(isinstance(c, BasePredictionWriter) for c in configured):
            added.append(PredictionCSVWriter())  # predictions.csv in the run directory
        added += [ResumeState(), ScheduleOnResume(self._subconfig().get("resume_schedule"))]
        known = [*configured, *self._lightning_cli_callbacks()]
        if trainer_config.get("enable_checkpointing") is not False and not trainer_config.get("fast_dev_run"):
            added += self._checkpoint_callbacks(known)
        if under_slurm_batch():  # SIGUSR1 -> checkpoint + requeue (trainer_cli.job.requeue_signal)
            added.append(SynchronizedRequeue())
        added += self.run.callbacks(known, added)
        added += default_progress_bar(trainer_config, added)
        callbacks = drop_switched_off({**trainer_config, "callbacks": configured + added})["callbacks"]
        if trainer_config.get("enable_checkpointing") is False and self.run.trains:
            print(NO_CHECKPOINTS, flush=True)
        extra: dict[str, Any] = {"callbacks": callbacks}
        if self.run_dir is not None and "default_root_dir" in trainer_config:
            extra["default_root_dir"] = str(self.run_dir)  # where hpc (Slurm requeue) checkpoints go
        if "plugins" in trainer_config:
            extra["plugins"] = with_atomic_checkpoint_io(trainer_config.get("plugins"))
        trainer = super().instantiate_trainer(**{**kwargs, **extra})
        if self.run.follows_lightning:
            self._as_lightning_cli_does(trainer, added)
        return self._remember_trainer(trainer)

    def _lightning_cli_callbacks(self) -> list[Any]:
        """The callbacks LightningCLI adds to the Trainer itself, beside ``trainer.callbacks``: those of
        the parser's ``callback_keys`` (``parser.add_lightning_class_args(ModelCheckpoint, ...)``) and
        of ``trainer_defaults["callbacks"]``."""
        keys = getattr(self.verb_parser, "callback_keys", None) or []
        found = [self._subconfig_init().get(key) for key in keys]
        defaults = self.trainer_defaults.get("callbacks") or []
        return [c for c in [*found, *(defaults if isinstance(defaults, list) else [defaults])] if c is not None]

    def _checkpoint_callbacks(self, known: list[Any]) -> list[Any]:
        """The checkpoint callbacks the run adds to ``known``, every callback the Trainer is given
        (``trainer.callbacks``, :meth:`_lightning_cli_callbacks`): Lightning's default ``ModelCheckpoint``
        where none of them is one (as stock LightningCLI's run has it; a model's ``configure_callbacks``
        returning one replaces it, by Lightning's rule), so two never write the same files; and the
        run's resume checkpoint, ``checkpoints/last.ckpt`` (:class:`~trainer_cli.callbacks.LastCheckpoint`),
        unless one of them saves that file already (a ``save_last`` one: :func:`writes_last`)."""
        added: list[Any] = []
        if not any(isinstance(c, ModelCheckpoint) for c in known):
            added.append(ModelCheckpoint())
        folder = self.run_dir / rundir.LAST_CKPT.parent if self.run_dir is not None else None
        if not any(writes_last(c, folder, rundir.LAST_CKPT.name) for c in known):
            added.append(LastCheckpoint())  # its dirpath: the run's checkpoints/ (Run.callbacks, bind_to_log_dir)
        return added

    def _remember_trainer(self, trainer: pl.Trainer) -> pl.Trainer:
        self.run.trainer = trainer
        return trainer

    def _as_lightning_cli_does(self, trainer: pl.Trainer, added: list[Any]) -> None:
        """A user's script: the run directory is the Trainer's ``log_dir`` (a new run), the run's own
        callbacks come after the script's and LightningCLI's (its SaveConfigCallback first, as
        LightningCLI orders them; checkpoint callbacks last, as Lightning orders them), and a run
        started in a given directory (``--run_dir``: a resume, a Slurm job) keeps the config.yaml it holds."""
        from lightning.pytorch.callbacks import Checkpoint

        self.run.bind_to_log_dir(trainer)
        ours = {id(c) for c in added}
        callbacks: list[Any] = trainer.callbacks  # type: ignore[attr-defined]
        # stable
        trainer.callbacks = sorted(callbacks, key=lambda c: (isinstance(c, Checkpoint), id(c) in ours))  # type: ignore[attr-defined]
        if (
            self.run.path is not None and not self.run.created and not self.run.late
        ):  # --run_dir (resumed, a Slurm job's)
            for callback in callbacks:
                if isinstance(callback, SaveConfigCallback) and (self.run.path / callback.config_filename).is_file():
                    callback.already_saved = True

    # -- optimizers ------------------------------------------------------------------------------
    def _add_configure_optimizers(self) -> None:
        """The model's ``configure_optimizers`` from the optimizer and scheduler groups, by
        LightningCLI's rule (``auto_configure_optimizers``: the one optimizer and at most one scheduler
        group added with ``link_to="AUTOMATIC"``; the model's own stays when none is configured), built
        when Lightning asks: a step-wise scheduler gets ``total_steps`` from
        ``trainer.estimated_stepping_batches``. A CLI subclass that overrides ``configure_optimizers``
        gets the built optimizer and scheduler, as LightningCLI gives them.

        Raises:
            MisconfigurationException: for more than one automatic optimizer or scheduler group (LightningCLI's rule).
        """
        if not self._auto_optimizers:
            return
        parser = self.verb_parser
        optimizers = _automatic(parser, "optimizers")
        schedulers = _automatic(parser, "lr_schedulers")
        if not optimizers:
            return
        if len(optimizers) > 1 or len(schedulers) > 1:
            from lightning.pytorch.utilities.exceptions import MisconfigurationException

            raise MisconfigurationException(
                f"{type(self).__name__} builds configure_optimizers from one optimizer and at most one lr_scheduler "
                f"group added as 'AUTOMATIC', found {optimizers + schedulers}: link the groups and implement "
                "configure_optimizers"
            )
        init = self._subconfig_init()
        optimizer_init = _with_class_path(optimizers[0][1], init.get(optimizers[0][0]))
        if not optimizer_init:
            return  # registered automatically, not given: the model's own configure_optimizers
        scheduler_init = _with_class_path(schedulers[0][1], init.get(schedulers[0][0])) if schedulers else None
        from lightning.pytorch.utilities import rank_zero_info
        from lightning.pytorch.utilities.model_helpers import is_overridden

        if is_overridden("configure_optimizers", self.model) and self.run.follows_lightning:
            from lightning.pytorch.utilities import rank_zero_warn

            # a user's script: LightningCLI's own warning, naming the user's CLI class
            rank_zero_warn(
                f"`{self.model.__class__.__name__}.configure_optimizers` will be overridden by "
                f"`{self.__class__.__name__}.configure_optimizers`."
            )
        elif is_overridden("configure_optimizers", self.model):  # LightningCLI's rule, said in the config's terms
            built = f"optimizer {optimizer_init.get('class_path')}"
            if scheduler_init:
                built += f" and lr_scheduler {scheduler_init.get('class_path')}"
            rank_zero_info(
                f"note: {type(self.model).__name__}.configure_optimizers is not used: the config's {built} "
                "replace it (LightningCLI's rule); leave `optimizer` out of the config to use the model's own"
            )
        if type(self).configure_optimizers is not LightningCLI.configure_optimizers:  # the user's CLI builds them
            from types import MethodType

            from lightning.pytorch.cli import instantiate_class

            optimizer = instantiate_class(self.model.parameters(), optimizer_init)
            scheduler = instantiate_class(optimizer, scheduler_init) if scheduler_init else None
            user_fn = partial(self.configure_optimizers, optimizer=optimizer, lr_scheduler=scheduler)
            update_wrapper(user_fn, self.configure_optimizers)
            self.model.configure_optimizers = MethodType(user_fn, self.model)
            return
        # a partial holding the model, not a bound method: it pickles whole (ddp_spawn sends the
        # model to its processes; a bound method would come back as the class's configure_optimizers)
        fn = partial(
            configure_optimizers,
            self.model,
            optimizer_init=optimizer_init,
            lr_scheduler_init=scheduler_init,
            param_groups=init.get("param_groups"),
        )
        update_wrapper(fn, configure_optimizers)
        self.model.configure_optimizers = fn

    # -- end of a run ----------------------------------------------------------------------------
    def after_fit(self) -> None:
        if rank_zero_only.rank == 0 and self.run_dir is not None:  # type: ignore[attr-defined]
            from lightning.pytorch.loggers import TensorBoardLogger

            tensorboard = any(isinstance(logger, TensorBoardLogger) for logger in self.trainer.loggers)
            hint = f"\nTensorBoard:   tensorboard --logdir {self.run_dir}" if tensorboard else ""
            print(f"\nRun directory: {self.run_dir}{hint}", flush=True)


def run_subcommand(verb: str, args: list[str], composed: tuple[list[str], Layers] | None = None) -> int:
    """``train <verb> ...`` for a LightningCLI subcommand; returns the exit code.

    ``composed``: ``args`` composed already (:func:`trainer_cli.config.compose.compose_args`, as ``train``'s
    precheck does), taken as they are.

    With ``--run_dir DIR`` and no ``--config``, the run's stored ``DIR/config.yaml`` is the config
    (resuming takes the config stored with the run). A run directory this call created is removed
    again when the run fails on a user error before it saved a checkpoint. After SIGTERM or Ctrl-C
    during training: the exit code is 143 or 130, with one line saying how to resume.

    Raises:
        ConfigError: for a key or value the parser refuses (a :class:`UserError`).
        UserError: for a bad config file, a bad value found while building, missing data, or a
            checkpoint that does not fit the model.
    """
    args, layers = composed or compose_args(args)
    args = with_stored_config(args)
    with building_cli(verb, layers) as run, run.stops_with_exit_code():
        verb_cli(verb)(args=[verb, *args], run_directory=run, layers=layers)
    return 0


def verb_cli(verb: str, base: type[TrainerCLI] | None = None) -> type[TrainerCLI]:
    """``base`` (TrainerCLI) with the parser of ``verb`` alone: building the parsers of all four
    subcommands costs start-up time. ``subcommands`` stays a staticmethod, as LightningCLI's."""
    base = base or TrainerCLI
    name = f"{base.__name__}_{verb}"
    if base is TrainerCLI and name in globals():
        return globals()[name]  # type: ignore[no-any-return]
    cls = type(
        name,
        (base,),
        {"subcommands": staticmethod(partial(_one_verb, verb)), "__module__": base.__module__, "__qualname__": name},
    )
    if base is TrainerCLI:  # a module global: the CLI pickles (ddp_spawn sends the config callback's parser along)
        globals()[name] = cls
    return cls


def _one_verb(verb: str) -> dict[str, set[str]]:
    return {verb: LightningCLI.subcommands()[verb]}


@contextmanager
def building_cli(verb: Optional[str] = None, layers: Layers | None = None) -> Iterator[Run]:
    """Around building a :class:`TrainerCLI` (give it the :class:`trainer_cli.runtime.run.Run` this yields):
    LightningCLI's warning about ``args`` silenced, errors of the user's input reported as
    :class:`UserError` (naming the file and line of a value in the command line's ``layers``) and exceptions of the
    user's own code before the first step with their
    frames (a run directory this created removed again when it saved no checkpoint),
    and ``TRAINER_CLI_RUN_DIR`` cleared again afterwards when it was not set before (so one process
    can build several runs)."""
    env_before = os.environ.get(rundir.ENV_RUN_DIR)
    run = Run(verb)
    quiet.install()  # library messages that do not apply to a launcher run (trainer_cli.runtime.quiet)
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*LightningCLI's args parameter.*")
            yield run
    except UserError:
        run.remove_if_untrained()
        raise
    except KeyboardInterrupt:  # Ctrl-C or SIGTERM while building, before training started
        raise SystemExit(_stopped_before_training(run)) from None
    except Exception as err:
        user_error = explain_failure(err, run, layers)
        if user_error is None:
            raise
        raise user_error from None
    finally:
        if env_before is None:
            os.environ.pop(rundir.ENV_RUN_DIR, None)


def explain_failure(err: Exception, run: Run, layers: Layers | None) -> UserError | None:
    """The :class:`UserError` that ``err``, raised while ``run`` was built or trained, stands for:
    the user's input (a value, with the file and line of ``layers`` that set it), a full disk, or an
    exception of the user's own code before the first step, shown with their frames; None for a bug
    (its traceback is kept). A run directory that saved no checkpoint is removed first, except after
    a crash in training that is not the user's input (its logs are kept). For both entries: ``train``
    (:func:`building_cli`) and a user's script (:class:`TrainerCLI` from the command line)."""
    started = run.trainer is not None and run.trainer.global_step > 0  # a crash in training keeps its logs
    if is_disk_full(err):  # the run's records, logs or metrics (a checkpoint's own error is a UserError already)
        user_error: UserError | None = disk_full_error(err, run.path)
    else:
        user_error = as_user_error(err, run.ckpt_path, layers) or (None if started else user_code_error(err))
    if not started or user_error is not None:
        run.remove_if_untrained()
    return user_error


def _stopped_before_training(run: Run) -> int:
    """After Ctrl-C or SIGTERM while building, before training started: the run directory this made
    is removed, one line says so; returns the exit code (130 or 143)."""
    from trainer_cli.job import stop_signals

    run.remove_if_untrained()
    cause = stop_signals.cause()
    print(
        f"\nStopped by {stop_signals.NAMES.get(cause, 'Ctrl-C')} before training started; nothing was saved.",
        file=sys.stderr,
        flush=True,
    )
    return stop_signals.EXIT_CODES.get(cause, EXIT_INTERRUPTED)


def _runs_as_script() -> bool:
    """Whether this process is the user's script run from the command line (``python main.py fit``,
    or a DDP rank Lightning started the same way): ``sys.argv[0]`` is the ``__main__`` module's file."""
    main_file = getattr(sys.modules.get("__main__"), "__file__", None)
    try:
        return bool(main_file) and bool(sys.argv) and Path(sys.argv[0]).resolve() == Path(str(main_file)).resolve()
    except OSError:
        return False


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


class _Parsed(Exception):
    """Raised to stop a :class:`TrainerCLI` right after parsing (see :func:`parse_config`)."""


def _submit_from_script(
    cli_class: type, args: tuple[Any, ...], kwargs: dict[str, Any], script: str, rest: list[str]
) -> int:
    """``python main.py submit ARGS`` for a user's script with TrainerCLI: ``train submit`` with the
    script's own CLI (its classes, links and defaults) parsing the fit arguments, and the job
    running ``python main.py fit --config <frozen config>``; returns the exit code."""
    import inspect

    from trainer_cli.launch import fit_job

    def parse(fit_args: list[str], layers: Layers) -> tuple[LightningArgumentParser, Namespace]:
        return parse_config("fit", fit_args, expand=False, cli=(cli_class, args, kwargs), layers=layers)

    given = inspect.signature(LightningCLI.__init__).bind_partial(None, *args, **kwargs).arguments
    fixed = _fixed_classes(
        given.get("model_class"),
        given.get("datamodule_class"),
        bool(given.get("subclass_mode_model", False)),
        bool(given.get("subclass_mode_data", False)),
    )
    try:
        return fit_job.main(rest, parse, script=str(Path(script).absolute()), fixed=fixed)
    except UserError as err:
        return report_user_error(err)


def parse_config(
    verb: str,
    args: list[str],
    expand: bool = True,
    cli: tuple[type, tuple[Any, ...], dict[str, Any]] | None = None,
    layers: Layers | None = None,
) -> tuple[LightningArgumentParser, Namespace]:
    """Compose and type-check ``train <verb> ARGS`` exactly as the verb would, building nothing.

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
        args, layers = compose_args(args)
    return ConfigParser(verb, cli).parse(args, layers)


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

    def parse(self, args: list[str], layers: Layers | None = None) -> tuple[LightningArgumentParser, Namespace]:
        """Type-check ``train <verb> ARGS`` (``--config`` values expanded, see :func:`parse_config`).

        Raises:
            ConfigError: for a key or value the parser refuses.
            UserError: for a bad config file.
        """
        if self._built is not None:
            built = self._built
            built.layers[:] = layers or Layers()  # in place: its parsers hold this object
            with _process_state_restored(), warnings.catch_warnings():
                warnings.filterwarnings("ignore", message=".*LightningCLI's args parameter.*")
                built.parse_arguments(built.parser, [self.verb, *args])
            assert built.verb_parser is not None  # set by parse_arguments
            config = built._subconfig()
            if not is_checkpoint_file(config.get("ckpt_path")):
                return built.verb_parser, config
        built = self._build(args, layers)
        config = built._subconfig()
        if not is_checkpoint_file(config.get("ckpt_path")):
            self._built = built
        assert built.verb_parser is not None
        return built.verb_parser, config

    def _build(self, args: list[str], layers: Layers | None) -> TrainerCLI:
        """A TrainerCLI that parses ``args`` and stops before it builds anything."""
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
        run = Run(self.verb)
        run.follows_lightning = self.cli is not None  # a user's script: Lightning's defaults, as its own fit parses
        try:
            with warnings.catch_warnings():
                warnings.filterwarnings("ignore", message=".*LightningCLI's args parameter.*")
                verb_cli(self.verb, _ParseOnlyCLI)(
                    *cli_args, **{**cli_kwargs, "args": [self.verb, *args], "run_directory": run, "layers": layers}
                )
        except _Parsed:
            pass
        finally:
            seed_log.setLevel(level)
        return captured["cli"]


for _verb in LightningCLI.subcommands():  # TrainerCLI_fit, ...: made at import, so a spawned process unpickles them
    verb_cli(_verb)
