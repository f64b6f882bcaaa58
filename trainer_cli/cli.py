"""The LightningCLI behind ``train fit|validate|test|predict``.

Model and data are in subclass mode: the project's classes resolve by short name and any
importable LightningModule / LightningDataModule plugs in through ``class_path``. The optimizer
and scheduler are chosen by name (``--optimizer AdamW``, ``--lr_scheduler OneCycleLR``) and built
lazily, so a step-wise scheduler learns the run's total steps from the trainer. Every run gets
its own directory (:mod:`trainer_cli.rundir`) holding the resolved ``config.yaml``, the git
commit, TensorBoard logs and checkpoints.
"""

from __future__ import annotations

import inspect
import os
import re
import sys
import warnings
from functools import partial, update_wrapper
from pathlib import Path
from types import MethodType
from typing import Any, Literal, Optional

import lightning.pytorch as pl
from jsonargparse import Namespace, set_parsing_settings
from lightning.fabric.utilities.rank_zero import rank_zero_only
from lightning.pytorch.cli import LightningArgumentParser, LightningCLI

import trainer_cli.callbacks  # noqa: F401 - registers the project's callbacks for short names
import trainer_cli.data  # noqa: F401 - registers the project's data modules for short names
import trainer_cli.models  # noqa: F401 - registers the project's models for short names
import trainer_cli.optim  # noqa: F401 - registers the project's schedulers for short names
from trainer_cli import rundir
from trainer_cli.callbacks import RunSummary
from trainer_cli.callbacks.progress import default_progress_bar
from trainer_cli.compose import expand_config_args
from trainer_cli.errors import UserError, did_you_mean
from trainer_cli.optim.configure import configure_optimizers, import_class

# configs say ${optimizer.init_args.lr}; under a subcommand the key is fit.optimizer...: resolve relative
set_parsing_settings(omegaconf_absolute_to_relative_paths=True)

DEFAULT_ROOT_DIR = "runs"
DEFAULT_NAME = "run"
DEFAULT_LOGGER = {"class_path": "lightning.pytorch.loggers.TensorBoardLogger", "init_args": {"save_dir": "runs", "default_hp_metric": False}}
# what flows from the data module to the model, stated once (links on instantiation)
DATA_TO_MODEL = ("num_classes", "in_channels", "image_size")


class TrainerArgumentParser(LightningArgumentParser):
    """LightningCLI's parser whose errors name close matches for unknown keys and class names."""

    def error(self, message: str, ex: Optional[Exception] = None) -> Any:  # type: ignore[override]
        return super().error(explain_parse_error(message, self), ex)


def _known_keys(parser: LightningArgumentParser) -> list[str]:
    keys = []
    for action in parser._actions:
        keys += [s.lstrip("-") for s in action.option_strings if s.startswith("--")]
    return keys


def explain_parse_error(message: str, parser: LightningArgumentParser) -> str:
    """Add close matches to jsonargparse's messages about unknown keys or class names."""
    extra = ""
    unknown = re.findall(r"(?:Unrecognized arguments|Key) ['\"]?--?([\w.]+)", message)
    unknown += re.findall(r"Key ['\"]([\w.]+)['\"] is not expected", message)
    known = _known_keys(parser)
    for key in dict.fromkeys(unknown):
        prefix, _, leaf = key.rpartition(".")
        siblings = [k for k in known if k.rpartition(".")[0] == prefix] or known
        hint = did_you_mean(key, siblings)
        if hint:
            extra += f"\n  unknown key {key!r}.{hint}"
    for name in dict.fromkeys(re.findall(r"Import path ([\w.]+) does not correspond", message)):
        from trainer_cli.listing import all_short_names

        hint = did_you_mean(name, all_short_names())
        extra += f"\n  unknown class {name!r}.{hint or ' See `train ls`.'}"
    return message.rstrip() + extra


class TrainerCLI(LightningCLI):
    """LightningCLI with layered configs, run directories and optimizers built from the trainer."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("parser_class", TrainerArgumentParser)
        kwargs.setdefault("save_config_callback", None)  # config.yaml is written into the run directory
        self.run_dir: Path | None = None
        self._created_run_dir = False
        argv = kwargs.get("args")
        self._verb = argv[0] if isinstance(argv, list) and argv and argv[0] in LightningCLI.subcommands() else None
        super().__init__(*args, **kwargs)

    def subcommands(self) -> dict[str, set[str]]:  # type: ignore[override]
        """Only the verb being run: building the parsers of all four costs start-up time."""
        every = LightningCLI.subcommands()
        return {self._verb: every[self._verb]} if self._verb else every

    def init_parser(self, **kwargs: Any) -> LightningArgumentParser:
        kwargs.setdefault("parser_mode", "omegaconf+")  # ${...} resolved after every layer and flag
        return super().init_parser(**kwargs)

    def add_arguments_to_parser(self, parser: LightningArgumentParser) -> None:
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
        parser.add_argument(
            "--float32_matmul_precision",
            type=Optional[Literal["highest", "high", "medium"]],
            default=None,
            help="torch.set_float32_matmul_precision: 'high' lets float32 matmuls use TF32 tensor cores. Empty: torch's default.",
        )
        parser.set_defaults({"trainer.default_root_dir": DEFAULT_ROOT_DIR, "trainer.logger": DEFAULT_LOGGER})
        for key in DATA_TO_MODEL:
            parser.link_arguments(f"data.{key}", f"model.init_args.{key}", apply_on="instantiate")

    # -- run directory ---------------------------------------------------------------------------
    def _subconfig(self) -> Namespace:
        return self.config[self.subcommand] if self.subcommand else self.config

    def _choose_run_dir(self, cfg: Namespace) -> Path:
        root = Path(cfg.trainer.default_root_dir or DEFAULT_ROOT_DIR)
        name = cfg.name
        if os.environ.get(rundir.ENV_RUN_DIR):  # a DDP process launched by the rank that chose it
            return Path(os.environ[rundir.ENV_RUN_DIR])
        if cfg.run_dir:
            return Path(cfg.run_dir)
        if cfg.get("ckpt_path") == "last":
            found = rundir.newest_resumable(root, name)
            if found is None:
                raise UserError(
                    f"--ckpt_path last: no run of {name!r} under {root} has {rundir.LAST_CKPT}; "
                    "start one with `train fit` first, or give a checkpoint file"
                )
            cfg.ckpt_path = str(found / rundir.LAST_CKPT)
            print(f"Resuming {found} from {cfg.ckpt_path}", flush=True)
            return found
        shared = rundir.slurm_shared_run_dir(root, name)
        if shared is not None:
            return shared
        self._created_run_dir = True
        return rundir.allocate(root, name)

    def _point_loggers_at(self, cfg: Namespace, run_dir: Path) -> None:
        logger = cfg.trainer.logger
        if logger is True:
            logger = cfg.trainer.logger = Namespace(DEFAULT_LOGGER | {"init_args": Namespace(DEFAULT_LOGGER["init_args"])})
        loggers = logger if isinstance(logger, list) else [logger]
        for item in loggers:
            if not isinstance(item, Namespace) or "class_path" not in item:
                continue
            params = inspect.signature(import_class(item.class_path)).parameters
            if item.get("init_args") is None:
                item.init_args = Namespace()
            for key, value in (("save_dir", str(run_dir.parent)), ("name", ""), ("version", run_dir.name)):
                if key in params:
                    item.init_args[key] = value

    def before_instantiate_classes(self) -> None:
        cfg = self._subconfig()
        if cfg.get("float32_matmul_precision"):
            import torch

            torch.set_float32_matmul_precision(cfg.float32_matmul_precision)
        self._config_text = self._parser(self.subcommand).dump(cfg, skip_none=False)
        self.run_dir = self._choose_run_dir(cfg).absolute()
        os.environ[rundir.ENV_RUN_DIR] = str(self.run_dir)  # DDP processes launched from here share it
        self._point_loggers_at(cfg, self.run_dir)
        cfg.trainer.default_root_dir = str(self.run_dir)  # where hpc (Slurm requeue) checkpoints go

    def instantiate_classes(self) -> None:
        try:
            super().instantiate_classes()
        except BaseException:
            if self._created_run_dir and self.run_dir is not None and not any(self.run_dir.iterdir()):
                self.run_dir.rmdir()  # nothing of a failed start is left behind
            raise

    def after_instantiate_classes(self) -> None:
        assert self.run_dir is not None
        if rank_zero_only.rank == 0:
            self.run_dir.mkdir(parents=True, exist_ok=True)
            config_file = self.run_dir / "config.yaml"
            if not config_file.exists():  # a resumed run keeps the config it started with
                config_file.write_text(self._config_text)
                rundir.write_git_info(self.run_dir)

    def instantiate_trainer(self, **kwargs: Any) -> pl.Trainer:
        """LightningCLI's, plus the run summary printed when training starts."""
        trainer_config = {**self._get(self.config_init, "trainer", default={}), **kwargs}
        callbacks = [self._get(self.config_init, c) for c in self._parser(self.subcommand).callback_keys]
        callbacks.append(RunSummary(str(self.run_dir) if self.run_dir else None))
        callbacks += default_progress_bar(trainer_config, callbacks)
        return self._instantiate_trainer(trainer_config, callbacks)

    # -- optimizers ------------------------------------------------------------------------------
    def _add_configure_optimizers_method_to_model(self, subcommand: Optional[str]) -> None:
        """Like LightningCLI's, but the optimizer and scheduler are built when Lightning asks for them
        (so ``total_steps`` can come from ``trainer.estimated_stepping_batches``)."""
        if not self.auto_configure_optimizers:
            return
        optimizer_init = self._get(self.config_init, "optimizer")
        if not optimizer_init:
            return
        scheduler_init = self._get(self.config_init, "lr_scheduler")
        to_dict = lambda v: v.as_dict() if isinstance(v, Namespace) else v  # noqa: E731
        fn = partial(configure_optimizers, optimizer_init=to_dict(optimizer_init), lr_scheduler_init=to_dict(scheduler_init))
        update_wrapper(fn, configure_optimizers)
        self.model.configure_optimizers = MethodType(fn, self.model)

    # -- end of a run ----------------------------------------------------------------------------
    def after_fit(self) -> None:
        if rank_zero_only.rank == 0 and self.run_dir is not None:
            print(f"\nRun directory: {self.run_dir}\nTensorBoard:   tensorboard --logdir {self.run_dir}", flush=True)


def run_subcommand(verb: str, args: list[str]) -> int:
    """``train <verb> ...`` for a LightningCLI subcommand; returns the exit code.

    Raises:
        UserError: for a bad config file, a bad value found while building, or missing data.
    """
    args = expand_config_args(args)
    env_before = os.environ.get(rundir.ENV_RUN_DIR)
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*LightningCLI's args parameter.*")
            TrainerCLI(args=[verb, *args])
    except (ValueError, TypeError) as err:
        if _raised_by_user_config(err):
            raise UserError(str(err)) from None
        raise
    finally:
        if env_before is None:
            os.environ.pop(rundir.ENV_RUN_DIR, None)
    return 0


def _raised_by_user_config(err: Exception) -> bool:
    """A ValueError/TypeError raised by a constructor's own argument check counts as user input."""
    tb = err.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    return tb is not None and tb.tb_frame.f_code.co_name == "__init__"


class _Parsed(Exception):
    """Raised to stop a :class:`TrainerCLI` right after parsing (see :func:`parse_config`)."""


def parse_config(verb: str, args: list[str]) -> tuple[LightningArgumentParser, Namespace]:
    """Compose and type-check ``train <verb> ARGS`` exactly as the verb would, building nothing.

    Returns the subcommand's parser and its parsed (resolved) config; ``parser.dump(config)``
    gives the YAML that ``train <verb> --config`` re-runs. No model, data or trainer is built and
    no run directory is made, so it is quick (used by ``train submit``).

    Raises:
        UserError: for a bad config file; a bad key or value exits 2 with jsonargparse's message.
    """
    captured: dict[str, Any] = {}

    class _ParseOnlyCLI(TrainerCLI):
        def before_instantiate_classes(self) -> None:
            captured["parser"] = self._parser(self.subcommand)
            captured["config"] = self._subconfig()
            raise _Parsed

    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*LightningCLI's args parameter.*")
            _ParseOnlyCLI(args=[verb, *expand_config_args(args)])
    except _Parsed:
        pass
    return captured["parser"], captured["config"]
