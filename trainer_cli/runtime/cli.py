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

import warnings
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any, ClassVar, Literal, Optional

import lightning.pytorch as pl
from jsonargparse import Namespace
from lightning.fabric.utilities.rank_zero import rank_zero_only
from lightning.pytorch.cli import LightningArgumentParser, LightningCLI, SaveConfigCallback

import trainer_cli.data  # noqa: F401 - registers the project's data modules for short names
import trainer_cli.models.classifier  # noqa: F401 - registers the project's models for short names
import trainer_cli.optim  # noqa: F401 - registers the project's schedulers for short names
from trainer_cli.callbacks.switches import NO_CHECKPOINTS, drop_switched_off
from trainer_cli.config.after_parse import check_backbone_kwargs, check_optimizer_config, check_trainer_minimums
from trainer_cli.config.explain import without_verb
from trainer_cli.config.extras import check_extras
from trainer_cli.config.incompatible import check_compatible
from trainer_cli.config.keys import Layers
from trainer_cli.config.request import Request, of_process, runs_as_script
from trainer_cli.errors import UserError, report_user_error
from trainer_cli.job import workdir
from trainer_cli.optim.param_groups import ParamGroups
from trainer_cli.optim.partials import instantiate_classes
from trainer_cli.rundir.resume import add_resume_arguments, check_weights_fit
from trainer_cli.runtime.auto_optimizers import add_automatic_groups, add_configure_optimizers
from trainer_cli.runtime.checkpointing import with_atomic_checkpoint_io
from trainer_cli.runtime.guard import _process_state_restored, explain_failure, remove_or_say_kept
from trainer_cli.runtime.lightning_folders import DEFAULT_NAME, DEFAULT_ROOT_DIR
from trainer_cli.runtime.links import DATA_TO_MODEL, link_unset_model_args
from trainer_cli.runtime.parser import TrainerArgumentParser
from trainer_cli.runtime.run import Run
from trainer_cli.runtime.run_entry import RunEntry
from trainer_cli.runtime.run_loggers import DEFAULT_LOGGER
from trainer_cli.runtime.run_record import RunRecord
from trainer_cli.runtime.script import (
    _stop_contract,
    as_lightning_cli_does,
    run_script_verb,
    script_args,
)
from trainer_cli.runtime.trainer_callbacks import ResumeOnce, added_callbacks


def _has_key(parser: LightningArgumentParser, key: str) -> bool:
    """Whether ``parser`` has an option ``key`` (``trainer.default_root_dir``, ``optimizer``)."""
    try:
        parser.get_default(key)
    except KeyError:
        return False
    return True


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

    # verb -> function: a user's script's launcher verbs (`python main.py submit`), given by trainer_cli.cli's class
    script_verbs: ClassVar[dict[str, Callable[..., int]]] = {}

    def __init__(
        self, *args: Any, run_directory: Run | None = None, layers: Layers | None = None, **kwargs: Any
    ) -> None:
        workdir.enter()  # a Slurm job run from its code snapshot: relative paths mean what they meant at submit
        # a user's script: its command line, read once (trainer_cli.config.request); None for a `train` verb,
        # whose request its caller read and composed (trainer_cli.runtime.verbs)
        self.request: Request | None = of_process() if run_directory is None else None
        request = self.request
        if request is not None and kwargs.get("args") is None and request.verb in self.script_verbs:
            raise SystemExit(run_script_verb(type(self), args, kwargs, request))
        kwargs.setdefault("parser_class", TrainerArgumentParser)
        # config.yaml: the run's record (run.Run.record); in a user's script LightningCLI's own callback
        # writes it where LightningCLI does (the Trainer's log_dir: the run directory there)
        kwargs.setdefault("save_config_callback", RunConfig if run_directory is not None else SaveConfigCallback)
        self._auto_optimizers = kwargs.get("auto_configure_optimizers", True)
        # LightningCLI's automatic optimizers are built when the model is (a step-wise scheduler cannot learn
        # its total steps then): the same groups are added and built lazily here (add_configure_optimizers)
        kwargs["auto_configure_optimizers"] = False
        self.config: Any = None
        self.layers = layers if layers is not None else Layers()  # shared by its parsers (init_parser)
        self._subcommands = kwargs.get("run", True)
        if run_directory is not None:
            self.run = run_directory
        else:  # a user's script (request read above): `python main.py` re-runs its record; a missing --ckpt_path
            # file is one line before anything is written when the script is the program, and fails where
            # LightningCLI's does when it is called from Python (args=..., a test)
            assert request is not None
            missing_is_error = kwargs.get("args") is None and runs_as_script(request)
            self.run = Run(None, RunEntry.script(request.entry, bool(self._subcommands), missing_is_error))
        self.verb_parser: LightningArgumentParser | None = None  # the parser of the verb being run
        self._core_parsers: list[LightningArgumentParser] = []
        self._data_links: dict[str, str] = {}  # DATA_TO_MODEL key -> model target key it links to
        self.applied_links: dict[str, Any] = {}  # model target key -> the value the link gave
        from trainer_cli.job import requeue_signal

        requeue_from_here = run_directory is None and requeue_signal.install()  # a user's script in a Slurm job
        whole_process = request is not None and kwargs.get("args") is None and runs_as_script(request)
        with _process_state_restored():
            try:
                with _stop_contract(self.run, whole_process):
                    super().__init__(*args, **kwargs)
            except Exception as err:
                if run_directory is not None:  # `train`: building_cli explains it
                    raise
                # a user's script run as the program: explained as under `train` (called from Python, only
                # the launcher's own UserError is); a start that failed before a checkpoint leaves nothing
                user_error = err if isinstance(err, UserError) else None
                explained = user_error is None and whole_process  # explain_failure removes or keeps the run
                user_error = user_error or (explain_failure(err, self.run, self.layers) if explained else None)
                if not explained:
                    remove_or_say_kept(self.run)
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
        if self.run.entry.follows_lightning and self.request is not None:  # a user's script: its errors point at its
            # own --help, and end it
            parser.help_command = self.request.entry  # type: ignore[attr-defined]
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
            if self.run.entry.follows_lightning:  # a user's script built with run=False: --ckpt_path resumes its fit,
                # but its stock LightningCLI has no such keys: its printed config and config.yaml leave them out
                parser.not_stock_keys = ("ckpt_path", "weights_only")  # type: ignore[attr-defined]
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
            help="Use exactly this run directory (resume in place; a Slurm job names its own). Not given: a new one.",
        )
        # --resume_schedule, --resume_force (trainer_cli.optim.schedule_resume, trainer_cli.rundir.resume)
        add_resume_arguments(parser)
        parser.add_class_arguments(ParamGroups, "param_groups")  # optimizer parameter groups (optim.param_groups)
        parser.add_argument(
            "--float32_matmul_precision",
            type=Optional[Literal["highest", "high", "medium"]],
            default=None,
            help="torch.set_float32_matmul_precision: 'high' lets float32 matmuls use TF32 tensor cores. "
            "Empty: torch's default.",
        )
        defaults = {"trainer.default_root_dir": DEFAULT_ROOT_DIR, "trainer.logger": DEFAULT_LOGGER}
        if self.run.entry.follows_lightning:  # a user's script keeps Lightning's defaults (lightning_logs/version_<N>)
            defaults = {}
        for key, value in defaults.items():  # the user's trainer_defaults and trainer class come first
            if key.split(".", 1)[1] not in self.trainer_defaults and _has_key(parser, key):
                parser.set_defaults({key: value})

    def parse_arguments(self, parser: LightningArgumentParser, args: Any) -> None:
        """LightningCLI's, after the launcher's arguments that follow the user's (optimizers, links);
        then an explicit ``--ckpt_path`` file is checked to be a complete checkpoint of the configured
        model before LightningCLI reads its hyperparameters."""
        # after the user's add_arguments_to_parser, as LightningCLI adds them
        add_automatic_groups(self._core_parsers, self._auto_optimizers)
        # a user's script (`python main.py fit ...`, or one built with run=False: `python main.py --config ...`)
        rebuilt = (
            args is None
            and self.request is not None
            and (
                self.request.verb in self.subcommands()
                if self._subcommands
                else self.request.verb is None and runs_as_script(self.request)
            )
        )
        if rebuilt:  # composed as under `train`
            args = script_args(self)
        with warnings.catch_warnings():
            if (
                args is not None and rebuilt
            ):  # the args built here from the command line: not the mistake LightningCLI warns of
                warnings.filterwarnings("ignore", message=".*LightningCLI's args parameter.*")
            super().parse_arguments(parser, args)
        verb = self.config.get("subcommand") if self._subcommands else None
        self.verb_parser = self._parser(verb) if verb else parser
        link_unset_model_args(self, self.verb_parser)  # the data->model links (trainer_cli.runtime.links)
        self.run.parsed(verb, self._subconfig(), DATA_TO_MODEL)

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
        link_targets = set(self._data_links.values()) | {without_verb(t) for t in user_links}
        parser = self.verb_parser
        assert parser is not None  # set by parse_arguments
        self.run.prepare(cfg, lambda: parser.dump(cfg, skip_none=False, skip_link_targets=False), link_targets)
        tree = self.run.config_tree()
        if tree is not None:  # LightningCLI's config_dump (the model's and data's hparams, lightning>=2.6's
            self.config_dump = tree  # attribute; it dumps the config only when unset): this tree, not a second dump

    def after_instantiate_classes(self) -> None:
        if self.run.trains and self.run.path is not None:  # the checkpoint's tensors decide what a resume may change
            check_weights_fit(
                self.model, self.run.ckpt_path, bool(self._subconfig().get("resume_force")), self.run.changes
            )
        add_configure_optimizers(self)  # trainer_cli.runtime.auto_optimizers
        init = self._subconfig_init()
        if (
            self.subcommand
            and not self.run.entry.follows_lightning  # a user's script passes what LightningCLI passes (torch decides)
            and "weights_only" in init
            and init.get("weights_only") is None
        ):
            # the checkpoint the verb starts from is read with torch's safe loader, whatever torch's default
            # or TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD (LightningCLI reads its hyperparameters so already)
            init["weights_only"] = True
        user_links = getattr(self.verb_parser, "link_values", {})
        self.applied_links.update({without_verb(k): v for k, v in user_links.items()})  # the user's own links
        self.run.record_links(self.applied_links)  # config.yaml is written when the verb starts (run.RunRecord)
        if (
            self.run.entry.follows_lightning and self.verb_parser is not None
        ):  # the script's SaveConfigCallback saves the record
            self.verb_parser.run_record = self.run.record(self.applied_links)  # type: ignore[attr-defined]
        self.run.keep_logs()

    def instantiate_classes(self) -> None:
        """LightningCLI's, the model's ``_partial_`` optimizer and scheduler built as partials (optim.partials)."""
        instantiate_classes(self)

    def instantiate_trainer(self, **kwargs: Any) -> pl.Trainer:
        """LightningCLI's, with the run's callbacks and checkpoint plugin added (the run summary,
        RNG states, last.ckpt, Slurm requeue, the checkpoint on SIGTERM, atomic checkpoint files)."""
        trainer_config = {**self._subconfig_init().get("trainer", {}), **kwargs}
        if "callbacks" not in trainer_config:  # a trainer class without callbacks: LightningCLI's warning
            return self._remember_trainer(super().instantiate_trainer(**kwargs))
        configured = trainer_config.get("callbacks") or []
        configured = list(configured) if isinstance(configured, list) else [configured]
        added = added_callbacks(self, trainer_config, configured)  # the run's (trainer_cli.runtime.trainer_callbacks)
        resume_once = not self._subcommands and self.run.trains and bool(self.run.ckpt_path)
        added += [ResumeOnce()] if resume_once else []
        callbacks = drop_switched_off({**trainer_config, "callbacks": configured + added})["callbacks"]
        if trainer_config.get("enable_checkpointing") is False and self.run.trains:
            print(NO_CHECKPOINTS, flush=True)
        extra: dict[str, Any] = {"callbacks": callbacks}
        if self.run_dir is not None and "default_root_dir" in trainer_config:
            extra["default_root_dir"] = str(self.run_dir)  # where hpc (Slurm requeue) checkpoints go
        if "plugins" in trainer_config:
            extra["plugins"] = with_atomic_checkpoint_io(trainer_config.get("plugins"))
        trainer = super().instantiate_trainer(**{**kwargs, **extra})
        if self.run.entry.follows_lightning:
            as_lightning_cli_does(self.run, trainer, added)
        if resume_once:
            # run=False: the script calls trainer.fit(model, ...) itself; Lightning's stateful checkpoint path
            # makes that call resume, once (trainer_callbacks.ResumeOnce clears it when the fit starts)
            trainer.ckpt_path = self.run.ckpt_path
        return self._remember_trainer(trainer)

    def _remember_trainer(self, trainer: pl.Trainer) -> pl.Trainer:
        self.run.bind(trainer)
        return trainer

    # -- end of a run ----------------------------------------------------------------------------
    def after_fit(self) -> None:
        if rank_zero_only.rank == 0 and self.run_dir is not None:  # type: ignore[attr-defined]
            from lightning.pytorch.loggers import TensorBoardLogger

            tensorboard = any(isinstance(logger, TensorBoardLogger) for logger in self.trainer.loggers)
            hint = f"\nTensorBoard:   tensorboard --logdir {self.run_dir}" if tensorboard else ""
            print(f"\nRun directory: {self.run_dir}{hint}", flush=True)
            from trainer_cli.rundir import metrics

            metrics.summary(Path(self.run_dir))  # the listings' summary, once the loggers are closed


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


for _verb in LightningCLI.subcommands():  # TrainerCLI_fit, ...: made at import, so a spawned process unpickles them
    verb_cli(_verb)
