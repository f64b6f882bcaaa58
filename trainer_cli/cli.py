"""The LightningCLI behind ``train fit|validate|test|predict``.

Model and data are in subclass mode: the project's classes resolve by short name and any
importable LightningModule / LightningDataModule plugs in through ``class_path``. The optimizer
and scheduler are chosen by name (``--optimizer AdamW``, ``--lr_scheduler OneCycleLR``) and built
lazily, so a step-wise scheduler learns the run's total steps from the trainer. Every run gets
its own directory (:mod:`trainer_cli.rundir`) holding the resolved ``config.yaml``, the git
commit, the run id every logger logs under (``run.json``, :mod:`trainer_cli.loggers`), the logger
files and checkpoints.
"""

from __future__ import annotations

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
from jsonargparse import Namespace, set_parsing_settings
from lightning.fabric.utilities.rank_zero import rank_zero_only
from lightning.pytorch.callbacks import BasePredictionWriter, ModelCheckpoint
from lightning.pytorch.cli import LightningArgumentParser, LightningCLI, LRSchedulerTypeTuple
from torch.optim import Optimizer

import trainer_cli.callbacks  # noqa: F401 - registers the project's callbacks for short names
import trainer_cli.data  # noqa: F401 - registers the project's data modules for short names
import trainer_cli.models.classifier  # noqa: F401 - registers the project's models for short names
import trainer_cli.optim  # noqa: F401 - registers the project's schedulers for short names
from trainer_cli import quiet, rundir
from trainer_cli.callbacks import PredictionCSVWriter, RunSummary
from trainer_cli.callbacks.slurm_requeue import SynchronizedRequeue
from trainer_cli.callbacks.switches import drop_switched_off
from trainer_cli.callbacks.progress import default_progress_bar
from trainer_cli.compat import check_compatible
from trainer_cli.compose import expand_config_args
from trainer_cli.checkpointing import ResumeState, with_atomic_checkpoint_io
from trainer_cli.errors import EXIT_USER_ERROR, UserError
from trainer_cli.explain import _raised_by_user_config, as_user_error, explain_parse_error, locate_in_files  # noqa: F401 - re-exported
from trainer_cli.extras import check_extras
from trainer_cli.launch.requeue_signal import under_slurm_batch
from trainer_cli.preflight import check_backbone_kwargs, check_optimizer_config, check_trainer_minimums
from trainer_cli.resume import with_stored_config
from trainer_cli.optim.configure import configure_optimizers
from trainer_cli.optim.param_groups import ParamGroups
from trainer_cli.run import DEFAULT_LOGGER, DEFAULT_ROOT_DIR, EXIT_INTERRUPTED, EXIT_SIGTERM, FIT_LIKE, Run  # noqa: F401 - re-exported

# configs say ${optimizer.init_args.lr}; under a subcommand the key is fit.optimizer...: resolve relative
set_parsing_settings(omegaconf_absolute_to_relative_paths=True)

DEFAULT_NAME = "run"
# what flows from the data module to the model, stated once (links on instantiation)
DATA_TO_MODEL = ("num_classes", "in_channels", "image_size")


CONFIG_HELP = (
    "--config FILE is repeatable (later layers win; short forms like experiment/digits work). "
    "--config_root DIR (repeatable) and $TRAINER_CLI_CONFIG_PATH add user config roots, folders laid out like "
    "configs/, searched before the bundled configs. "
    "train fit --sweep KEY=V1,V2 (repeatable; range(), uniform(), loguniform(), randint(), choice() with "
    "--sweep_trials N --sweep_seed S) runs one fit per trial in a sweep directory (`train sweep-results --help`)."
)


class TrainerArgumentParser(LightningArgumentParser):
    """LightningCLI's parser whose errors name close matches for unknown keys and class names, and
    the config file and line a bad value came from."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("epilog", CONFIG_HELP)  # `train fit --help`
        super().__init__(*args, **kwargs)

    def error(self, message: str, ex: Optional[Exception] = None) -> Any:  # type: ignore[override]
        message = explain_parse_error(message, getattr(ex, "subcommand_parser", None) or self)
        if not self.exit_on_error:
            return super().error(message, ex)
        verb = (getattr(ex, "subcommand_parser", None) or self).prog.split()[-1]
        verb = verb if verb in LightningCLI.subcommands() else "fit"  # lr-find, cv, ...: fit's options
        where = locate_in_files(message)  # a value from a --config file: name the file and line
        hint = _replaced_class_hint(where, message)
        print(f"error: {where + ': ' if where else ''}{message}{hint}\n  (`train {verb} --help` lists every option)", file=sys.stderr)
        sys.exit(EXIT_USER_ERROR)


def _replaced_class_hint(where: str, message: str) -> str:
    """For an experiment that names another class than its group default (``model: class_path:
    mymodels.TinyNet`` over ``/experiment/digits``): Hydra merged the group file's init_args into
    it. Say how to drop them."""
    marker = ", from group file "
    if marker not in where or "Problem with given class_path" not in message:
        return ""
    group = Path(where.split(marker, 1)[1].rsplit(" line ", 1)[0]).parent.name
    return (f"\n  (the option comes from the default /{group} of a defaults list; an experiment that names another "
            f"class keeps its init_args: add `- override /{group}: null` to the experiment's defaults list)")


class TrainerCLI(LightningCLI):
    """LightningCLI with layered configs, run directories and optimizers built from the trainer.

    Built on LightningCLI's public hooks only: ``parse_arguments`` (checks an explicit
    ``--ckpt_path`` file before LightningCLI reads the model's hyperparameters from it),
    ``add_arguments_to_parser`` (the optimizer and scheduler groups, added with
    ``auto_configure_optimizers=False`` so that they are built lazily, see
    :mod:`trainer_cli.optim.configure`), ``before_instantiate_classes`` / ``after_instantiate_classes``
    and ``instantiate_trainer`` (the run directory, :class:`trainer_cli.run.Run`).

    Args:
        run_directory: The run's directory policy (:class:`trainer_cli.run.Run`); one for the verb
            being run when not given. The caller keeps it to clean up after an error.
        *args, **kwargs: LightningCLI's.
    """

    def __init__(self, *args: Any, run_directory: Run | None = None, **kwargs: Any) -> None:
        kwargs.setdefault("parser_class", TrainerArgumentParser)
        kwargs.setdefault("save_config_callback", None)  # config.yaml is written into the run directory
        kwargs["auto_configure_optimizers"] = False  # added in add_arguments_to_parser, built lazily
        self.config: Any = None
        self._subcommands = kwargs.get("run", True)
        argv = kwargs.get("args")
        self._verb = argv[0] if isinstance(argv, list) and argv and argv[0] in LightningCLI.subcommands() else None
        self.run = run_directory if run_directory is not None else Run(self._verb)
        self.verb_parser: LightningArgumentParser | None = None  # the parser of the verb being run
        super().__init__(*args, **kwargs)

    @property
    def run_dir(self) -> Path | None:
        """The run directory (:attr:`trainer_cli.run.Run.path`)."""
        return self.run.path

    def subcommands(self) -> dict[str, set[str]]:  # type: ignore[override]
        """Only the verb being run: building the parsers of all four costs start-up time."""
        every = LightningCLI.subcommands()
        return {self._verb: every[self._verb]} if self._verb else every

    def init_parser(self, **kwargs: Any) -> LightningArgumentParser:
        kwargs.setdefault("parser_mode", "omegaconf+")  # ${...} resolved after every layer and flag
        kwargs.setdefault("allow_abbrev", False)  # a misspelt --trainer.max_epoch is an error, not a prefix match
        return super().init_parser(**kwargs)

    def add_arguments_to_parser(self, parser: LightningArgumentParser) -> None:
        self.verb_parser = parser  # called for the verb's parser only (subcommands()), or the one parser
        if not self._subcommands:  # built without fit (lr-find, cv, ...): fit's own options (ckpt_path,
            # weights_only) are accepted, so that a run's config.yaml reads here as it is
            parser.add_method_arguments(pl.Trainer, "fit", skip=set(LightningCLI.subcommands()["fit"]))
        parser.add_optimizer_args((Optimizer,))  # --optimizer NAME, as LightningCLI's automatic one
        parser.add_lr_scheduler_args(LRSchedulerTypeTuple)
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
        parser.add_class_arguments(ParamGroups, "param_groups")  # optimizer parameter groups (trainer_cli.optim.param_groups)
        parser.add_argument(
            "--float32_matmul_precision",
            type=Optional[Literal["highest", "high", "medium"]],
            default=None,
            help="torch.set_float32_matmul_precision: 'high' lets float32 matmuls use TF32 tensor cores. Empty: torch's default.",
        )
        parser.set_defaults({"trainer.default_root_dir": DEFAULT_ROOT_DIR, "trainer.logger": DEFAULT_LOGGER})
        for key in DATA_TO_MODEL:
            parser.link_arguments(f"data.{key}", f"model.init_args.{key}", apply_on="instantiate")

    def parse_arguments(self, parser: LightningArgumentParser, args: Any) -> None:
        """LightningCLI's; then an explicit ``--ckpt_path`` file is checked to be a complete
        checkpoint of the configured model before LightningCLI reads its hyperparameters."""
        super().parse_arguments(parser, args)
        self.run.check_checkpoint(self._subconfig(), DATA_TO_MODEL)

    def _subconfig(self) -> Namespace:
        verb = self.config.get("subcommand") if self.config is not None else None
        return self.config[verb] if verb else self.config

    def _subconfig_init(self) -> Namespace:
        return self.config_init[self.subcommand] if self.subcommand else self.config_init

    def before_instantiate_classes(self) -> None:
        cfg = self._subconfig()
        check_extras(cfg.trainer)  # a missing optional package (deepspeed, wandb, mlflow) before building
        check_compatible(cfg)  # declared incompatible pairs (trainer_cli.compat.INCOMPATIBLE)
        if cfg.get("float32_matmul_precision"):
            import torch

            torch.set_float32_matmul_precision(cfg.float32_matmul_precision)
        check_backbone_kwargs(cfg)  # before the dump: config.yaml holds the options the backbone gets
        assert self.verb_parser is not None
        config_text = self.verb_parser.dump(cfg, skip_none=False)
        check_optimizer_config(cfg)
        check_trainer_minimums(cfg)
        self.run.prepare(cfg, config_text)

    def after_instantiate_classes(self) -> None:
        self._add_configure_optimizers()
        self.run.freeze()

    def instantiate_trainer(self, **kwargs: Any) -> pl.Trainer:
        """LightningCLI's, with the run's callbacks and checkpoint plugin added (the run summary,
        RNG states, last.ckpt, Slurm requeue, the checkpoint on SIGTERM, atomic checkpoint files)."""
        trainer_config = {**self._subconfig_init().get("trainer", {}), **kwargs}
        configured = trainer_config.get("callbacks") or []
        configured = list(configured) if isinstance(configured, list) else [configured]
        added: list[Any] = [RunSummary(str(self.run_dir) if self.run_dir else None)]
        if self.subcommand == "predict" and not any(isinstance(c, BasePredictionWriter) for c in configured):
            added.append(PredictionCSVWriter())  # predictions.csv in the run directory
        added.append(ResumeState())
        if trainer_config.get("enable_checkpointing") is not False and not any(isinstance(c, ModelCheckpoint) for c in configured):
            added.append(ModelCheckpoint(save_last=True))  # a config without one (stock LightningCLI's): Lightning's default, plus last.ckpt
        if under_slurm_batch():  # SIGUSR1 -> checkpoint + requeue (trainer_cli.launch.requeue_signal)
            added.append(SynchronizedRequeue())
        added += self.run.callbacks(configured, added)
        added += default_progress_bar(trainer_config, added)
        callbacks = drop_switched_off({**trainer_config, "callbacks": configured + added})["callbacks"]
        plugins = with_atomic_checkpoint_io(trainer_config.get("plugins"))
        self.run.trainer = super().instantiate_trainer(**{**kwargs, "callbacks": callbacks, "plugins": plugins})
        return self.run.trainer

    # -- optimizers ------------------------------------------------------------------------------
    def _add_configure_optimizers(self) -> None:
        """The model's ``configure_optimizers`` built from the ``optimizer`` / ``lr_scheduler`` configs
        when Lightning asks (so ``total_steps`` can come from ``trainer.estimated_stepping_batches``),
        as LightningCLI's automatic one sets it on the model; a model's own stays when no optimizer
        is configured."""
        init = self._subconfig_init()
        optimizer_init = init.get("optimizer")
        if not optimizer_init:
            return
        to_dict = lambda v: v.as_dict() if isinstance(v, Namespace) else v  # noqa: E731
        # a partial holding the model, not a bound method: it pickles whole (ddp_spawn sends the
        # model to its processes; a bound method would come back as the class's configure_optimizers)
        fn = partial(
            configure_optimizers, self.model, optimizer_init=to_dict(optimizer_init),
            lr_scheduler_init=to_dict(init.get("lr_scheduler")), param_groups=init.get("param_groups"),
        )
        update_wrapper(fn, configure_optimizers)
        self.model.configure_optimizers = fn

    # -- end of a run ----------------------------------------------------------------------------
    def after_fit(self) -> None:
        if rank_zero_only.rank == 0 and self.run_dir is not None:
            from lightning.pytorch.loggers import TensorBoardLogger

            tensorboard = any(isinstance(logger, TensorBoardLogger) for logger in self.trainer.loggers)
            hint = f"\nTensorBoard:   tensorboard --logdir {self.run_dir}" if tensorboard else ""
            print(f"\nRun directory: {self.run_dir}{hint}", flush=True)


def run_subcommand(verb: str, args: list[str]) -> int:
    """``train <verb> ...`` for a LightningCLI subcommand; returns the exit code.

    With ``--run_dir DIR`` and no ``--config``, the run's stored ``DIR/config.yaml`` is the config
    (resuming takes the config stored with the run). A run directory this call created is removed
    again when the run fails on a user error before it saved a checkpoint. After SIGTERM or Ctrl-C
    during training: the exit code is 143 or 130, with one line saying how to resume.

    Raises:
        UserError: for a bad config file, a bad value found while building, missing data, or a
            checkpoint that does not fit the model.
    """
    args = with_stored_config(expand_config_args(args))
    with building_cli(verb) as run, run.stops_with_exit_code():
        TrainerCLI(args=[verb, *args], run_directory=run)
    return 0


@contextmanager
def building_cli(verb: Optional[str] = None) -> Iterator[Run]:
    """Around building a :class:`TrainerCLI` (give it the :class:`trainer_cli.run.Run` this yields):
    LightningCLI's warning about ``args`` silenced, errors of the user's input reported as
    :class:`UserError` (a run directory this created removed again when it saved no checkpoint),
    and ``TRAINER_CLI_RUN_DIR`` cleared again afterwards when it was not set before (so one process
    can build several runs)."""
    env_before = os.environ.get(rundir.ENV_RUN_DIR)
    run = Run(verb)
    quiet.install()  # library messages that do not apply to a launcher run (trainer_cli.quiet)
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*LightningCLI's args parameter.*")
            yield run
    except UserError:
        run.remove_if_untrained()
        raise
    except KeyboardInterrupt:  # Ctrl-C or SIGTERM while building, before training started
        from trainer_cli.launch import stop_signals

        run.remove_if_untrained()
        cause = stop_signals.cause()
        print(f"\nStopped by {stop_signals.NAMES.get(cause, 'Ctrl-C')} before training started; nothing was saved.", file=sys.stderr, flush=True)
        raise SystemExit(stop_signals.EXIT_CODES.get(cause, EXIT_INTERRUPTED)) from None
    except Exception as err:
        user_error = as_user_error(err, run.ckpt_path)
        if user_error is None:
            raise
        run.remove_if_untrained()
        raise user_error from None
    finally:
        if env_before is None:
            os.environ.pop(rundir.ENV_RUN_DIR, None)


class _Parsed(Exception):
    """Raised to stop a :class:`TrainerCLI` right after parsing (see :func:`parse_config`)."""


def parse_config(verb: str, args: list[str], expand: bool = True) -> tuple[LightningArgumentParser, Namespace]:
    """Compose and type-check ``train <verb> ARGS`` exactly as the verb would, building nothing.

    Returns the subcommand's parser and its parsed (resolved) config; ``parser.dump(config)``
    gives the YAML that ``train <verb> --config`` re-runs. No model, data or trainer is built and
    no run directory is made, so it is quick (used by ``train submit``).

    With ``expand=False`` the ``--config`` values are taken as already expanded by
    :func:`trainer_cli.compose.expand_config_args` (file paths or composed YAML text).

    Raises:
        UserError: for a bad config file; a bad key or value exits 2 with jsonargparse's message.
    """
    captured: dict[str, Any] = {}

    class _ParseOnlyCLI(TrainerCLI):
        def before_instantiate_classes(self) -> None:
            captured["parser"] = self.verb_parser
            captured["config"] = self._subconfig()
            raise _Parsed

    seed_log = logging.getLogger("lightning.fabric.utilities.seed")  # "Seed set to 42": said by the run, not the parse
    level = seed_log.level
    seed_log.setLevel(logging.WARNING)
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*LightningCLI's args parameter.*")
            _ParseOnlyCLI(args=[verb, *(expand_config_args(args) if expand else args)])
    except _Parsed:
        pass
    finally:
        seed_log.setLevel(level)
    return captured["parser"], captured["config"]
