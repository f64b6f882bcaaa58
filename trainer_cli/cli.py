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

import inspect
import os
import shutil
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
from lightning.pytorch.cli import LightningArgumentParser, LightningCLI
from lightning.pytorch.utilities.exceptions import SIGTERMException

import trainer_cli.callbacks  # noqa: F401 - registers the project's callbacks for short names
import trainer_cli.data  # noqa: F401 - registers the project's data modules for short names
import trainer_cli.models.classifier  # noqa: F401 - registers the project's models for short names
import trainer_cli.optim  # noqa: F401 - registers the project's schedulers for short names
from trainer_cli import loggers as loggers_mod
from trainer_cli import quiet, rundir
from trainer_cli.callbacks import PredictionCSVWriter, RunSummary
from trainer_cli.callbacks.slurm_requeue import SynchronizedRequeue, requeue_in_progress
from trainer_cli.callbacks.switches import drop_switched_off
from trainer_cli.callbacks.progress import default_progress_bar
from trainer_cli.compat import check_compatible
from trainer_cli.compose import expand_config_args
from trainer_cli.checkpointing import CTRL_C, InterruptCheckpoint, ResumeState, check_checkpoint_file, with_atomic_checkpoint_io
from trainer_cli.errors import EXIT_USER_ERROR, UserError
from trainer_cli.explain import _raised_by_user_config, as_user_error, explain_parse_error, locate_in_files  # noqa: F401 - re-exported
from trainer_cli.extras import check_extras
from trainer_cli.imports import import_class
from trainer_cli.launch.requeue_signal import under_slurm_batch
from trainer_cli.preflight import check_backbone_kwargs, check_checkpoint_model, check_optimizer_config, check_trainer_minimums
from trainer_cli.resume import compare_for_resume, stored_config, with_stored_config
from trainer_cli.optim.configure import configure_optimizers
from trainer_cli.optim.param_groups import ParamGroups

# configs say ${optimizer.init_args.lr}; under a subcommand the key is fit.optimizer...: resolve relative
set_parsing_settings(omegaconf_absolute_to_relative_paths=True)

DEFAULT_ROOT_DIR = "runs"
DEFAULT_NAME = "run"
DEFAULT_LOGGER = {"class_path": "lightning.pytorch.loggers.TensorBoardLogger", "init_args": {"save_dir": "runs", "default_hp_metric": False}}
# what flows from the data module to the model, stated once (links on instantiation)
DATA_TO_MODEL = ("num_classes", "in_channels", "image_size")
FIT_LIKE = ("fit", None)  # None: built without running a verb (cv folds, lr-find): they train too
EXIT_INTERRUPTED = 130  # 128 + SIGINT, as shells report it
EXIT_SIGTERM = 143  # 128 + SIGTERM
_CURRENT: list["TrainerCLI"] = []  # the CLI being run by run_subcommand, for cleanup on a user error


CONFIG_HELP = (
    "--config FILE is repeatable (later layers win; short forms like experiment/digits work). "
    "--config_root DIR (repeatable) and $TRAINER_CLI_CONFIG_PATH add user config roots, folders laid out like "
    "configs/, searched before the bundled configs."
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
        print(f"error: {where + ': ' if where else ''}{message}\n  (`train {verb} --help` lists every option)", file=sys.stderr)
        sys.exit(EXIT_USER_ERROR)


class TrainerCLI(LightningCLI):
    """LightningCLI with layered configs, run directories and optimizers built from the trainer."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("parser_class", TrainerArgumentParser)
        kwargs.setdefault("save_config_callback", None)  # config.yaml is written into the run directory
        self.run_dir: Path | None = None
        self._created_run_dir = False
        self.config: Any = None
        _CURRENT[:] = [self]
        self._subcommands = kwargs.get("run", True)
        argv = kwargs.get("args")
        self._verb = argv[0] if isinstance(argv, list) and argv and argv[0] in LightningCLI.subcommands() else None
        super().__init__(*args, **kwargs)

    def subcommands(self) -> dict[str, set[str]]:  # type: ignore[override]
        """Only the verb being run: building the parsers of all four costs start-up time."""
        every = LightningCLI.subcommands()
        return {self._verb: every[self._verb]} if self._verb else every

    def init_parser(self, **kwargs: Any) -> LightningArgumentParser:
        kwargs.setdefault("parser_mode", "omegaconf+")  # ${...} resolved after every layer and flag
        kwargs.setdefault("allow_abbrev", False)  # a misspelt --trainer.max_epoch is an error, not a prefix match
        return super().init_parser(**kwargs)

    def add_arguments_to_parser(self, parser: LightningArgumentParser) -> None:
        if not self._subcommands:  # built without fit (lr-find, cv, ...): fit's own options (ckpt_path,
            # weights_only) are accepted, so that a run's config.yaml reads here as it is; not used
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

    def _parse_ckpt_path(self) -> None:
        """LightningCLI's (the model config follows the checkpoint's hyperparameters), after checking
        the file is a complete checkpoint of the configured model."""
        subcommand = self.config.get("subcommand")
        cfg = self.config[subcommand] if subcommand else None
        ckpt_path = cfg.get("ckpt_path") if cfg is not None else None
        if ckpt_path and ckpt_path not in {"last", "best", "hpc", "registry"} and "://" not in ckpt_path:
            check_checkpoint_file(ckpt_path)
            check_checkpoint_model(ckpt_path, cfg.get("model"), DATA_TO_MODEL)
        super()._parse_ckpt_path()

    # -- run directory ---------------------------------------------------------------------------
    def _subconfig(self) -> Namespace:
        return self.config[self.subcommand] if self.subcommand else self.config

    def _choose_run_dir(self, cfg: Namespace) -> Path:
        root = Path(cfg.trainer.default_root_dir or DEFAULT_ROOT_DIR)
        name = cfg.name
        ckpt = cfg.get("ckpt_path")
        child = bool(os.environ.get(rundir.ENV_RUN_DIR))  # a DDP process launched by the rank that chose it
        if child or cfg.run_dir:
            run_dir = Path(os.environ[rundir.ENV_RUN_DIR] if child else cfg.run_dir)
            if cfg.run_dir and not ckpt and self.subcommand in FIT_LIKE and rundir.newest_checkpoint(run_dir) is not None:
                if not os.environ.get("SLURM_JOB_ID"):
                    raise UserError(
                        f"--run_dir {run_dir} already holds a trained run (a checkpoint); a run directory is never "
                        "reused: add --ckpt_path last to resume it, or drop --run_dir to start a new run"
                    )
                ckpt = "last"  # a (re)started Slurm job of this run: continue from its newest checkpoint
        elif ckpt in {"last", "best"}:
            found = rundir.newest_resumable(root, name)
            if found is None:
                raise UserError(
                    f"--ckpt_path {ckpt}: no run of {name!r} under {root} has a checkpoint ({rundir.LAST_CKPT} or hpc_ckpt_*.ckpt); "
                    "start one with `train fit` first, or give a checkpoint file"
                )
            run_dir = found
        else:
            shared = rundir.slurm_shared_run_dir(root, name)
            if shared is not None:
                return shared
            self._created_run_dir = True
            return rundir.allocate(root, name)
        if ckpt and self.subcommand in FIT_LIKE and not child:  # before anything is chosen or renamed
            stored = stored_config(run_dir)
            for change in compare_for_resume(stored, yaml.safe_load(self._config_text), run_dir) if stored else []:
                print(f"resume: {change} (changed since the run started)", flush=True)
        if ckpt in {"last", "best"}:
            cfg.ckpt_path = str(self._resolve_run_checkpoint(cfg, run_dir, ckpt, announce=not child))
        return run_dir

    def _resolve_run_checkpoint(self, cfg: Namespace, run_dir: Path, which: str, announce: bool) -> Path:
        """The file ``--ckpt_path last|best`` means in ``run_dir``: the newest checkpoint by global step
        (hpc ones retired once chosen) or the best by the monitored score. A finished run is not
        trained again (one line, exit 0) unless the config asks for more epochs or steps."""
        if which == "best":
            best = rundir.best_checkpoint(run_dir)
            if best is None:
                raise UserError(
                    f"--ckpt_path best: {run_dir} has no best checkpoint (no ModelCheckpoint with a monitor saved one); "
                    "use --ckpt_path last or give a checkpoint file"
                )
            if announce:
                print(f"Using the best checkpoint of {run_dir}: {best}", flush=True)
            return best
        newest = rundir.newest_checkpoint(run_dir)
        if newest is None:
            raise UserError(f"--run_dir {run_dir} --ckpt_path last: no complete checkpoint in {run_dir}; nothing to resume")
        if self.subcommand in FIT_LIKE and _is_finished(cfg.trainer, newest):
            print(
                f"{run_dir} is finished ({newest.epochs_done} epochs, step {newest.global_step}; "
                f"max_epochs={cfg.trainer.max_epochs}, max_steps={cfg.trainer.max_steps}): nothing to train. "
                "Pass a larger --trainer.max_epochs (or max_steps) to continue it.",
                flush=True,
            )
            raise SystemExit(0)
        if self.subcommand in FIT_LIKE:  # global rank 0 renames; the other ranks load it by its new name
            newest = rundir.retire_hpc_checkpoints(run_dir, newest, rename=announce and rank_zero_only.rank == 0)
        if announce and rank_zero_only.rank == 0:
            print(f"Resuming {run_dir} from {newest.path} (step {newest.global_step}, {newest.epochs_done} epochs done)", flush=True)
        return newest.path

    def _point_loggers_at(self, cfg: Namespace, run_dir: Path) -> None:
        """Every logger logs this run's identity (``run.json``, :mod:`trainer_cli.loggers`)."""
        logger = cfg.trainer.logger
        if logger is True or logger is None:  # None: stock LightningCLI's "the default logger"; off is `false`
            logger = cfg.trainer.logger = Namespace(DEFAULT_LOGGER | {"init_args": Namespace(DEFAULT_LOGGER["init_args"])})
        loggers = logger if isinstance(logger, list) else [logger]
        for item in loggers:
            if isinstance(item, Namespace) and "class_path" in item and item.get("init_args") is None:
                item.init_args = Namespace()
        identity = loggers_mod.run_identity(run_dir, f"{cfg.name}/{run_dir.name}")
        root = Path(cfg.trainer.default_root_dir or DEFAULT_ROOT_DIR)
        loggers_mod.point_loggers_at([i for i in loggers if isinstance(i, Namespace)], run_dir, root, identity)

    def before_instantiate_classes(self) -> None:
        cfg = self._subconfig()
        check_extras(cfg.trainer)  # a missing optional package (deepspeed, wandb, mlflow) before building
        check_compatible(cfg)  # declared incompatible pairs (trainer_cli.compat.INCOMPATIBLE)
        if cfg.get("float32_matmul_precision"):
            import torch

            torch.set_float32_matmul_precision(cfg.float32_matmul_precision)
        check_backbone_kwargs(cfg)  # before the dump: config.yaml holds the options the backbone gets
        self._config_text = self._parser(self.subcommand).dump(cfg, skip_none=False)
        check_optimizer_config(cfg)
        check_trainer_minimums(cfg)
        self.run_dir = self._choose_run_dir(cfg).absolute()
        ckpt_path = cfg.get("ckpt_path")
        retired_by_rank_0 = rank_zero_only.rank != 0 and str(ckpt_path).endswith(rundir.USED_SUFFIX)  # renamed any moment now
        if ckpt_path and ckpt_path not in {"last", "best", "hpc", "registry"} and "://" not in ckpt_path and not retired_by_rank_0:
            check_checkpoint_file(ckpt_path)
        os.environ[rundir.ENV_RUN_DIR] = str(self.run_dir)  # DDP processes launched from here share it
        self._point_loggers_at(cfg, self.run_dir)
        cfg.trainer.default_root_dir = str(self.run_dir)  # where hpc (Slurm requeue) checkpoints go

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
        configured = trainer_config.get("callbacks") or []
        configured = configured if isinstance(configured, list) else [configured]
        if self.subcommand == "predict" and not any(isinstance(c, BasePredictionWriter) for c in configured):
            callbacks.append(PredictionCSVWriter())  # predictions.csv in the run directory
        callbacks.append(ResumeState())
        if trainer_config.get("enable_checkpointing") is not False and not any(
            isinstance(c, ModelCheckpoint) for c in [*callbacks, *configured]
        ):  # a config without one (stock LightningCLI's): Lightning's default, plus last.ckpt to resume
            callbacks.append(ModelCheckpoint(save_last=True))
        if under_slurm_batch():  # SIGUSR1 -> checkpoint + requeue (trainer_cli.launch.requeue_signal)
            callbacks.append(SynchronizedRequeue())
        if self.run_dir is not None:
            self._interrupt_checkpoint = InterruptCheckpoint(str(self.run_dir / rundir.LAST_CKPT.parent))
            callbacks.append(self._interrupt_checkpoint)
        trainer_config["plugins"] = with_atomic_checkpoint_io(trainer_config.get("plugins"))
        callbacks += default_progress_bar(trainer_config, callbacks)
        if self.run_dir is not None:  # whatever the logger (Lightning's default dir follows it)
            loggers_mod.checkpoints_in_run_dir([*callbacks, *configured], self.run_dir)
        trainer = self._instantiate_trainer(drop_switched_off(trainer_config), callbacks)
        if self.run_dir is not None and rank_zero_only.rank == 0:
            loggers_mod.record_logger_runs(trainer.loggers, self.run_dir)  # MLflow's run id, for a resume
        return trainer

    def _run_subcommand(self, subcommand: str) -> None:
        """LightningCLI's, plus: a resume hint and a non-zero exit after SIGTERM / Ctrl-C (a run
        directory this made is removed again when nothing was saved in it)."""
        try:
            super()._run_subcommand(subcommand)
        except (SystemExit, KeyboardInterrupt) as stop:
            if getattr(self, "trainer", None) is None or not self.trainer.interrupted:
                raise
            ctrl_c = bool(CTRL_C) or not isinstance(stop, SIGTERMException)
            code = EXIT_INTERRUPTED if ctrl_c else EXIT_SIGTERM
            if rank_zero_only.rank == 0 and not requeue_in_progress():  # a requeued job resumes on its own
                print(self._resume_hint("SIGTERM" if code == EXIT_SIGTERM else "Ctrl-C"), file=sys.stderr, flush=True)
            raise SystemExit(code) from None

    def _resume_hint(self, cause: str) -> str:
        saved = getattr(self, "_interrupt_checkpoint", None)
        stopped = f"\nTraining stopped by {cause} at epoch {self.trainer.current_epoch}, step {self.trainer.global_step}"
        if saved is not None and saved.saved:
            where = f"checkpoint saved: {saved.saved}"
        elif self.run_dir is not None and any(self.run_dir.rglob("*.ckpt")):  # kept: it saved something
            where = "nothing trained since its last checkpoint"
        else:
            if self._created_run_dir and self.run_dir is not None and rank_zero_only.rank == 0:
                shutil.rmtree(self.run_dir, ignore_errors=True)
            return f"{stopped}, before any batch was trained; nothing was saved (run directory {self.run_dir} removed)."
        return f"{stopped}; {where}.\nResume with:  train fit --run_dir {self.run_dir} --ckpt_path last"

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
        # a partial holding the model, not a bound method: it pickles whole (ddp_spawn sends the
        # model to its processes; a bound method would come back as the class's configure_optimizers)
        fn = partial(
            configure_optimizers, self.model, optimizer_init=to_dict(optimizer_init), lr_scheduler_init=to_dict(scheduler_init),
            param_groups=self._get(self.config_init, "param_groups"),
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


def _is_finished(trainer: Namespace, ckpt: rundir.RunCheckpoint) -> bool:
    """Whether ``ckpt`` already reached the trainer config's ``max_epochs`` or ``max_steps``."""
    max_epochs, max_steps = trainer.get("max_epochs"), trainer.get("max_steps")
    if max_epochs is None and (max_steps is None or max_steps == -1):
        max_epochs = 1000  # Lightning's default
    return (max_epochs not in (None, -1) and ckpt.epochs_done >= max_epochs) or (
        max_steps not in (None, -1) and ckpt.global_step >= max_steps
    )


def run_subcommand(verb: str, args: list[str]) -> int:
    """``train <verb> ...`` for a LightningCLI subcommand; returns the exit code.

    With ``--run_dir DIR`` and no ``--config``, the run's stored ``DIR/config.yaml`` is the config
    (resuming takes the config stored with the run). A run directory this call created is removed
    again when the run fails on a user error before it saved a checkpoint.

    Raises:
        UserError: for a bad config file, a bad value found while building, missing data, or a
            checkpoint that does not fit the model.
    """
    args = with_stored_config(expand_config_args(args))
    with building_cli():
        TrainerCLI(args=[verb, *args])
    return 0


@contextmanager
def building_cli() -> Iterator[None]:
    """Around building a :class:`TrainerCLI`: LightningCLI's warning about ``args`` silenced, errors
    of the user's input reported as :class:`UserError` (a run directory this created removed again
    when it saved no checkpoint), and ``TRAINER_CLI_RUN_DIR`` cleared again afterwards when it was
    not set before (so one process can build several runs)."""
    env_before = os.environ.get(rundir.ENV_RUN_DIR)
    quiet.install()  # library messages that do not apply to a launcher run (trainer_cli.quiet)
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*LightningCLI's args parameter.*")
            yield
    except UserError:
        _remove_failed_run_dir()
        raise
    except KeyboardInterrupt:  # Ctrl-C while building, before training started
        _remove_failed_run_dir()
        print("\nStopped by Ctrl-C before training started; nothing was saved.", file=sys.stderr, flush=True)
        raise SystemExit(EXIT_INTERRUPTED) from None
    except Exception as err:
        user_error = as_user_error(err, _current_ckpt_path())
        if user_error is None:
            raise
        _remove_failed_run_dir()
        raise user_error from None
    finally:
        _CURRENT.clear()
        if env_before is None:
            os.environ.pop(rundir.ENV_RUN_DIR, None)


def _current_ckpt_path() -> str | None:
    cli = _CURRENT[0] if _CURRENT else None
    return cli.config[cli.config.subcommand].get("ckpt_path") if cli is not None and cli.config is not None else None


def _remove_failed_run_dir() -> None:
    cli = _CURRENT[0] if _CURRENT else None
    if cli is None or not cli._created_run_dir or cli.run_dir is None or not cli.run_dir.is_dir():
        return
    if any(cli.run_dir.rglob("*.ckpt")):
        return  # it trained: keep what it made
    shutil.rmtree(cli.run_dir, ignore_errors=True)


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
            captured["parser"] = self._parser(self.subcommand)
            captured["config"] = self._subconfig()
            raise _Parsed

    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*LightningCLI's args parameter.*")
            _ParseOnlyCLI(args=[verb, *(expand_config_args(args) if expand else args)])
    except _Parsed:
        pass
    return captured["parser"], captured["config"]
