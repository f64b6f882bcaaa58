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
import shutil
import sys
import warnings
from functools import partial, update_wrapper
from pathlib import Path
from types import MethodType
from typing import Any, Optional

import lightning.pytorch as pl
import yaml
from jsonargparse import Namespace, set_parsing_settings
from lightning.fabric.utilities.rank_zero import rank_zero_only
from lightning.pytorch.cli import LightningArgumentParser, LightningCLI
from lightning.pytorch.utilities.exceptions import SIGTERMException

import trainer_cli.callbacks  # noqa: F401 - registers the project's callbacks for short names
import trainer_cli.data  # noqa: F401 - registers the project's data modules for short names
import trainer_cli.models  # noqa: F401 - registers the project's models for short names
import trainer_cli.optim  # noqa: F401 - registers the project's schedulers for short names
from trainer_cli import rundir
from trainer_cli.callbacks import RunSummary
from trainer_cli.compose import expand_config_args
from trainer_cli.checkpointing import CTRL_C, AtomicCheckpointIO, InterruptCheckpoint, ResumeState, check_checkpoint_file
from trainer_cli.errors import EXIT_USER_ERROR, UserError, did_you_mean
from trainer_cli.resume import compare_for_resume, stored_config
from trainer_cli.optim.configure import configure_optimizers, import_class

# configs say ${optimizer.init_args.lr}; under a subcommand the key is fit.optimizer...: resolve relative
set_parsing_settings(omegaconf_absolute_to_relative_paths=True)

DEFAULT_ROOT_DIR = "runs"
DEFAULT_NAME = "run"
DEFAULT_LOGGER = {"class_path": "lightning.pytorch.loggers.TensorBoardLogger", "init_args": {"save_dir": "runs", "default_hp_metric": False}}
# what flows from the data module to the model, stated once (links on instantiation)
DATA_TO_MODEL = ("num_classes", "in_channels", "image_size")
EXIT_INTERRUPTED = 130  # 128 + SIGINT, as shells report it
EXIT_SIGTERM = 143  # 128 + SIGTERM
_CURRENT: list["TrainerCLI"] = []  # the CLI being run by run_subcommand, for cleanup on a user error


class TrainerArgumentParser(LightningArgumentParser):
    """LightningCLI's parser whose errors name close matches for unknown keys and class names."""

    def error(self, message: str, ex: Optional[Exception] = None) -> Any:  # type: ignore[override]
        message = explain_parse_error(message, getattr(ex, "subcommand_parser", None) or self)
        if not self.exit_on_error:
            return super().error(message, ex)
        verb = (getattr(ex, "subcommand_parser", None) or self).prog.split()[-1]
        print(f"error: {message}\n  (`train {verb} --help` lists every option)", file=sys.stderr)
        sys.exit(EXIT_USER_ERROR)


def _known_keys(parser: LightningArgumentParser) -> list[str]:
    keys = []
    for action in parser._actions:
        keys += [s.lstrip("-") for s in action.option_strings if s.startswith("--")]
    return keys


def _class_options(class_path: str) -> list[str]:
    """Constructor argument names of ``class_path`` (empty when it can't be imported)."""
    try:
        return [p for p in inspect.signature(import_class(class_path)).parameters if p not in {"self", "args", "kwargs"}]
    except Exception:  # noqa: BLE001 - only for a hint
        return []


def _short_names() -> list[str]:
    """Every short class name a config may use (``train ls``), or the registry's when that is absent."""
    try:
        from trainer_cli.listing import all_short_names
    except ImportError:
        from trainer_cli.registry import backbone_names

        import torch.optim

        return backbone_names() + [n for n in dir(torch.optim) if n[:1].isupper()] + [
            n for n in dir(torch.optim.lr_scheduler) if n[:1].isupper()
        ]
    return list(all_short_names())


def explain_parse_error(message: str, parser: LightningArgumentParser) -> str:
    """Add close matches to jsonargparse's messages about unknown keys, options or class names."""
    extra = ""
    unknown = re.findall(r"(?:[Uu]nrecognized arguments:?|Key) ['\"]?--?([\w.]+)", message)
    unknown += re.findall(r"Key ['\"]([\w.]+)['\"] is not expected", message)
    unknown += re.findall(r"does not accept option ['\"]([\w.]+)['\"]", message)
    known = [k for k in _known_keys(parser) if not k.endswith(".help")]
    for key in dict.fromkeys(unknown):
        prefix, _, leaf = key.rpartition(".")
        siblings = [k for k in known if k.rpartition(".")[0] == prefix]
        if not siblings and prefix:  # the section itself is misspelt: `optimiser.lr`
            first = key.split(".")[0]
            hint = did_you_mean(first, {k.split(".")[0] for k in known})
            extra += f"\n  unknown section {first!r}.{hint}" if hint else ""
            continue
        hint = did_you_mean(key, siblings or known)
        if hint:
            extra += f"\n  unknown key {key!r}.{hint}"
    # "Problem with given class_path 'torch.optim.AdamW': ... Option 'lrr' is not accepted" / "Key 'x' is not expected"
    for class_path, body in re.findall(r"class_path '([\w.]+)':\n((?:\s{6,}.*\n?)+)", message):
        for option in dict.fromkeys(re.findall(r"(?:Option|Key) '([\w.]+)' is not (?:accepted|expected)", body)):
            options = _class_options(class_path)
            hint = did_you_mean(option.rpartition(".")[2], options) or f" {class_path.rpartition('.')[2]} takes: {', '.join(options)}."
            extra += f"\n  unknown option {option!r} of {class_path}.{hint}"
    names = re.findall(r"Import path (\w+) does not correspond", message)  # a short name, not a dotted path
    names += re.findall(r"Expected a dot import path string: (\w+)", message)
    for name in dict.fromkeys(names):
        hint = did_you_mean(name, _short_names())
        extra += f"\n  unknown class {name!r}.{hint or ' See `train ls`.'}"
    return summarize_union_error(message).rstrip() + extra


_NOT_ERRORS = ("Does not validate against any", "Expected a <class 'NoneType'>", "a class path (str)", "a dict with", "a dict without")
_TYPE_ERROR = re.compile(r"Expected an? (?:<class '([\w.]+)'>|typing\.Literal\[(.*)\])")


def summarize_union_error(message: str) -> str:
    """jsonargparse's report for a value no type of a key accepts, in one or two lines.

    ``Parser key "trainer.max_epochs": Does not validate against any of the Union subtypes ...
    Given value: ten`` becomes ``trainer.max_epochs: expected int, got 'ten'``; for a class it keeps
    only the class's own complaint (``Option 'lrr' is not accepted``, ``Import path os.system does
    not correspond to a subclass of LightningModule``). Other messages are returned unchanged.
    """
    head = re.match(r'Parser key "([^"]+)":', message)
    if head is None or "Does not validate against any of the Union subtypes" not in message:
        return message
    body = message.split("Given value type:")[0]
    items: list[str] = []
    for line in body.splitlines()[1:]:
        text = line.strip()
        if not text or text.startswith(("Subtypes:", "Errors:")):
            continue
        if text.startswith("- "):
            items.append(text[2:])
        elif items:
            items[-1] += " " + text
    items = [i for i in items if not i.startswith(_NOT_ERRORS)]
    subclass = [i.split(" Subclass types expect")[0] for i in items if "does not correspond to a subclass" in i]
    items = subclass or [i.split(" Subclass types expect")[0] for i in items]
    if not items:
        return message
    key = head.group(1)
    given = re.search(r"^\s*Given value: (.*)$", message, re.M)
    types = [_TYPE_ERROR.fullmatch(i) for i in items]
    if all(types) and given:
        expected = " or ".join(m.group(1) or f"one of {m.group(2)}" for m in types if m)
        return f"{key}: expected {expected}, got {given.group(1)!r}"
    return f"{key}: " + "; ".join(dict.fromkeys(items))


class TrainerCLI(LightningCLI):
    """LightningCLI with layered configs, run directories and optimizers built from the trainer."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("parser_class", TrainerArgumentParser)
        kwargs.setdefault("save_config_callback", None)  # config.yaml is written into the run directory
        self.run_dir: Path | None = None
        self._created_run_dir = False
        self.config: Any = None
        _CURRENT[:] = [self]
        super().__init__(*args, **kwargs)

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
            check_checkpoint_model(ckpt_path, cfg.get("model"))
        super()._parse_ckpt_path()

    # -- run directory ---------------------------------------------------------------------------
    def _subconfig(self) -> Namespace:
        return self.config[self.subcommand] if self.subcommand else self.config

    def _choose_run_dir(self, cfg: Namespace) -> Path:
        root = Path(cfg.trainer.default_root_dir or DEFAULT_ROOT_DIR)
        name = cfg.name
        if os.environ.get(rundir.ENV_RUN_DIR):  # a DDP process launched by the rank that chose it
            return Path(os.environ[rundir.ENV_RUN_DIR])
        if cfg.run_dir:
            run_dir = Path(cfg.run_dir)
            if cfg.get("ckpt_path") == "last":
                last = run_dir / rundir.LAST_CKPT
                if not last.is_file():
                    raise UserError(f"--run_dir {run_dir} --ckpt_path last: {last} does not exist; nothing to resume")
                cfg.ckpt_path = str(last)
            elif (run_dir / rundir.LAST_CKPT).is_file() and not cfg.get("ckpt_path") and not any(run_dir.glob("hpc_ckpt_*.ckpt")):
                if os.environ.get("SLURM_RESTART_COUNT", "0") not in {"", "0"}:  # requeued after a failure
                    cfg.ckpt_path = str(run_dir / rundir.LAST_CKPT)
                    print(f"Slurm requeue: resuming {run_dir} from {cfg.ckpt_path}", flush=True)
                    return run_dir
                raise UserError(
                    f"--run_dir {run_dir} already holds a trained run ({rundir.LAST_CKPT}); a run directory is never "
                    "reused: add --ckpt_path last to resume it, or drop --run_dir to start a new run"
                )
            return run_dir
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
        self._config_text = self._parser(self.subcommand).dump(cfg, skip_none=False)
        check_optimizer_config(cfg)
        check_trainer_minimums(cfg)
        self.run_dir = self._choose_run_dir(cfg).absolute()
        ckpt_path = cfg.get("ckpt_path")
        if ckpt_path and ckpt_path not in {"last", "best", "hpc", "registry"} and "://" not in ckpt_path:
            check_checkpoint_file(ckpt_path)
        stored = stored_config(self.run_dir) if not self._created_run_dir else None
        if stored is not None and ckpt_path and self.subcommand == "fit":
            for change in compare_for_resume(stored, yaml.safe_load(self._config_text), self.run_dir):
                print(f"resume: {change} (changed since the run started)", flush=True)
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
        callbacks.append(ResumeState())
        if self.run_dir is not None:
            self._interrupt_checkpoint = InterruptCheckpoint(str(self.run_dir / rundir.LAST_CKPT.parent))
            callbacks.append(self._interrupt_checkpoint)
        trainer_config["plugins"] = with_atomic_checkpoint_io(trainer_config.get("plugins"))
        return self._instantiate_trainer(trainer_config, callbacks)

    def _run_subcommand(self, subcommand: str) -> None:
        """LightningCLI's, plus: a resume hint and a non-zero exit after SIGTERM / Ctrl-C."""
        try:
            super()._run_subcommand(subcommand)
        except (SystemExit, KeyboardInterrupt) as stop:
            if getattr(self, "trainer", None) is None or not self.trainer.interrupted:
                raise
            ctrl_c = bool(CTRL_C) or not isinstance(stop, SIGTERMException)
            code = EXIT_INTERRUPTED if ctrl_c else EXIT_SIGTERM
            if rank_zero_only.rank == 0:
                print(self._resume_hint("SIGTERM" if code == EXIT_SIGTERM else "Ctrl-C"), file=sys.stderr, flush=True)
            raise SystemExit(code) from None

    def _resume_hint(self, cause: str) -> str:
        saved = getattr(self, "_interrupt_checkpoint", None)
        where = f"checkpoint saved: {saved.saved}" if saved is not None and saved.saved else "no checkpoint was saved"
        return (
            f"\nTraining stopped by {cause} at epoch {self.trainer.current_epoch}, step {self.trainer.global_step}; {where}.\n"
            f"Resume with:  train fit --run_dir {self.run_dir} --ckpt_path last"
        )

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

    With ``--run_dir DIR`` and no ``--config``, the run's stored ``DIR/config.yaml`` is the config
    (resuming takes the config stored with the run). A run directory this call created is removed
    again when the run fails on a user error before it saved a checkpoint.

    Raises:
        UserError: for a bad config file, a bad value found while building, missing data, or a
            checkpoint that does not fit the model.
    """
    args = with_stored_config(expand_config_args(args))
    env_before = os.environ.get(rundir.ENV_RUN_DIR)
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*LightningCLI's args parameter.*")
            TrainerCLI(args=[verb, *args])
    except UserError:
        _remove_failed_run_dir()
        raise
    except Exception as err:
        user_error = as_user_error(err)
        if user_error is None:
            raise
        _remove_failed_run_dir()
        raise user_error from None
    finally:
        _CURRENT.clear()
        if env_before is None:
            os.environ.pop(rundir.ENV_RUN_DIR, None)
    return 0


def with_stored_config(args: list[str]) -> list[str]:
    """Put ``--config <run_dir>/config.yaml`` first when ``--run_dir`` names a run and no --config is given."""
    if any(a == "--config" or a.startswith("--config=") for a in args):
        return args
    run_dir = None
    for i, arg in enumerate(args):
        if arg == "--run_dir" and i + 1 < len(args):
            run_dir = args[i + 1]
        elif arg.startswith("--run_dir="):
            run_dir = arg.split("=", 1)[1]
    if run_dir and (Path(run_dir) / "config.yaml").is_file():
        return ["--config", str(Path(run_dir) / "config.yaml"), *args]
    return args


def as_user_error(err: Exception) -> UserError | None:
    """The :class:`UserError` a library exception stands for, or None when it is a bug."""
    from lightning.fabric.utilities.exceptions import MisconfigurationException
    from omegaconf.errors import OmegaConfBaseException

    cause = err.__cause__  # jsonargparse wraps a constructor's own error while instantiating
    if isinstance(err, ValueError) and isinstance(cause, Exception) and str(err).startswith("Does not validate"):
        if isinstance(cause, UserError):
            return cause
        return as_user_error(cause)
    if isinstance(err, MisconfigurationException):
        return UserError(str(err).strip().splitlines()[0])
    if isinstance(err, OmegaConfBaseException):
        return UserError(f"config interpolation: {omegaconf_message(err)}")
    if isinstance(err, RuntimeError) and "Error(s) in loading state_dict" in str(err):
        cli = _CURRENT[0] if _CURRENT else None
        ckpt = cli._subconfig().get("ckpt_path") if cli is not None and cli.config is not None else None
        lines = [ln.strip() for ln in str(err).splitlines() if ln.strip()]
        return UserError(f"checkpoint {ckpt} does not fit the model (from another model?): {' '.join(lines[1:3])[:400]}")
    if isinstance(err, (ValueError, TypeError)) and _raised_by_user_config(err):
        return UserError(str(err))
    return None


def omegaconf_message(err: Exception) -> str:
    """OmegaConf's message with the key it concerns: ``Interpolation key 'x' not found (at optimizer.lr)``."""
    message = str(err).strip().splitlines()[0]
    key = getattr(err, "full_key", None)
    key = re.sub(r"^(fit|validate|test|predict)\.", "", key) if key else None
    return f"{message} (at {key})" if key else message


def _remove_failed_run_dir() -> None:
    cli = _CURRENT[0] if _CURRENT else None
    if cli is None or not cli._created_run_dir or cli.run_dir is None or not cli.run_dir.is_dir():
        return
    if any(cli.run_dir.rglob("*.ckpt")):
        return  # it trained: keep what it made
    shutil.rmtree(cli.run_dir, ignore_errors=True)


def check_checkpoint_model(ckpt_path: str, model: Any) -> None:
    """Compare the hyperparameters stored in a checkpoint with the configured model.

    Linked values (``num_classes``, ``in_channels``, ``image_size``) are left out: they come from the data.

    Raises:
        UserError: naming the checkpoint and every hyperparameter that differs.
    """
    import torch

    if not isinstance(model, Namespace) or not model.get("class_path"):
        return
    try:
        hparams = torch.load(ckpt_path, weights_only=True, map_location="cpu", mmap=True).get("hyper_parameters") or {}
    except Exception as err:  # noqa: BLE001 - any unpickling problem is a bad file
        raise UserError(f"--ckpt_path {ckpt_path}: cannot read the checkpoint ({str(err).splitlines()[0]})") from None
    stored_class = hparams.get("_class_path")
    if stored_class and stored_class != model.class_path:
        raise UserError(f"--ckpt_path {ckpt_path} is a checkpoint of {stored_class}, not of the configured model {model.class_path}")
    init_args = model.get("init_args") or Namespace()
    differ = [
        f"{key}: checkpoint {hparams[key]!r}, config {init_args[key]!r}"
        for key in init_args.keys()
        if key in hparams and key not in DATA_TO_MODEL and hparams[key] != init_args[key]
    ]
    if differ:
        raise UserError(
            f"--ckpt_path {ckpt_path} does not fit the model (a checkpoint from another model): "
            + "; ".join(f"model.init_args.{d}" for d in differ)
            + ". Use the checkpoint's config (its run directory's config.yaml) or another checkpoint"
        )


# trainer integers Lightning accepts at construction but fails on later (e.g. a division by zero)
TRAINER_MINIMUMS = {"accumulate_grad_batches": 1, "num_nodes": 1, "check_val_every_n_epoch": 1, "log_every_n_steps": 1}


def check_trainer_minimums(cfg: Namespace) -> None:
    """Raises UserError for a trainer integer below its minimum (:data:`TRAINER_MINIMUMS`)."""
    trainer = cfg.get("trainer") or Namespace()
    problems = [
        f"--trainer.{key} {trainer[key]}: must be {low} or more"
        for key, low in TRAINER_MINIMUMS.items()
        if isinstance(trainer.get(key), int) and not isinstance(trainer.get(key), bool) and trainer[key] < low
    ]
    if problems:
        raise UserError("; ".join(problems))


def check_optimizer_config(cfg: Namespace) -> None:
    """Build the configured optimizer and scheduler on one dummy parameter, so a bad value (a
    negative learning rate, betas out of range) is reported before anything is built.

    Raises:
        UserError: naming the section and the optimizer's or scheduler's own message.
    """
    import torch

    from trainer_cli.optim.configure import TOTAL_STEPS_ARG, is_step_wise

    optimizer_init, scheduler_init = cfg.get("optimizer"), cfg.get("lr_scheduler")
    if not isinstance(optimizer_init, Namespace) or not optimizer_init.get("class_path"):
        return
    try:
        optimizer = import_class(optimizer_init.class_path)([torch.nn.Parameter(torch.zeros(1))], **dict(optimizer_init.get("init_args") or {}))
    except (ValueError, TypeError) as err:
        raise UserError(f"optimizer {optimizer_init.class_path}: {err}") from None
    if not isinstance(scheduler_init, Namespace) or not scheduler_init.get("class_path"):
        return
    cls = import_class(scheduler_init.class_path)
    kwargs = dict(scheduler_init.get("init_args") or {})
    if is_step_wise(cls) and kwargs.get(TOTAL_STEPS_ARG) is None:
        kwargs[TOTAL_STEPS_ARG] = 1000
    try:
        cls(optimizer, **kwargs)
    except (ValueError, TypeError) as err:
        raise UserError(f"lr_scheduler {scheduler_init.class_path}: {err}") from None


def with_atomic_checkpoint_io(plugins: Any) -> list[Any]:
    """``plugins`` plus :class:`AtomicCheckpointIO` unless a CheckpointIO plugin is already given."""
    from lightning.fabric.plugins import CheckpointIO

    items = [] if plugins is None else list(plugins) if isinstance(plugins, (list, tuple)) else [plugins]
    if not any(isinstance(p, CheckpointIO) for p in items):
        items.append(AtomicCheckpointIO())
    return items


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
