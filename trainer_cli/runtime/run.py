"""One run's directory, as a Lightning run sees it: loggers, callbacks, stop codes.

A run of ``train fit|validate|test|predict`` (and of the verbs built on ``fit``: ``cv``,
``lr-find``, ``scale-batch-size``) lives in one directory, ``<trainer.default_root_dir>/<name>/
version_<N>``. The policy (which directory, which checkpoint a start resumes from and why, the
frozen config, the history, what is removed) is :mod:`trainer_cli.rundir.policy`'s; :class:`Run` applies
it to a LightningCLI run. :class:`trainer_cli.runtime.cli.TrainerCLI` calls it at four points (after
parsing, before building, after building, when the verb stops). Its parts, each with its own
reason to change: :mod:`trainer_cli.runtime.run_entry` (what the entry that starts it says: ``train``
or a user's script), :mod:`trainer_cli.runtime.run_choice` (which directory and checkpoint),
:mod:`trainer_cli.runtime.run_loggers` (where its loggers log), :mod:`trainer_cli.runtime.run_record`
(the config as a tree, dumped once, and the record made from it), :mod:`trainer_cli.runtime.run_stop`
(how a stopped run ends), :mod:`trainer_cli.runtime.lightning_folders` (where runs are kept). The parts
return values; only :class:`Run` sets its attributes, through its own methods (no module assigns a run's
attributes from outside: ``tests/test_run_value.py``).

In the order they are applied (:meth:`Run.prepare`):

1. **New run** (no ``--run_dir``, no ``--ckpt_path last|best``): a fresh ``version_<N>``
   (:func:`trainer_cli.rundir.policy.plan`; a user's script's: the folder Lightning's own
   ``ModelCheckpoint`` saves into, never the project's root: :meth:`Run.bind_to_log_dir`); DDP processes
   that Lightning launches inherit it through ``TRAINER_CLI_RUN_DIR``; Slurm tasks started together share
   ``<name>/job_<SLURM_JOB_ID>``.
2. **Resume** (``--ckpt_path last`` or ``best``): without ``--run_dir``, the newest run of
   ``<name>`` with a checkpoint; the checkpoint by :func:`trainer_cli.rundir.policy.resume_checkpoint`.
   A run that already reached ``max_epochs``/``max_steps`` is not trained again (one line, exit
   0). Settings changed since the run started are listed (``resume: ...``), and refused when they
   would not resume correctly (:mod:`trainer_cli.rundir.resume`).
3. **Explicit ``--run_dir``** (``train submit`` sets it): exactly that directory. If it already holds
   a checkpoint, ``fit`` refuses to start over in it unless told ``--ckpt_path last``, except in a
   Slurm job: a (re)started or resubmitted job of that run continues from its newest checkpoint
   (the Slurm requeue rule: a run never goes back; :func:`trainer_cli.rundir.policy.resume_checkpoint`).
4. **Identity**: ``run.json`` (written once) holds the run id every logger uses
   (:mod:`trainer_cli.rundir.identity`): TensorBoard/CSV version, W&B run id, MLflow run id. Loggers and
   checkpoints are pointed into the directory whatever the logger.
5. **Freeze** (:meth:`Run.freeze`): the resolved ``config.yaml`` and ``git.txt`` are written by
   global rank 0 when the run starts. ``config.yaml`` describes the run as it is now: a resume that
   changes the config keeps the earlier one as ``config.prev-<N>.yaml`` and rewrites it atomically
   with the new values (how that start resumed, ``ckpt_path``/``resume_*``, is not carried over).
   Every start (new, resume, extension, requeue, resubmission, an evaluation) appends one record
   to ``history.jsonl``: time, kind, checkpoint, global step, Slurm job and restart, the changes
   (:mod:`trainer_cli.rundir.history`). A model argument may change on resume when the checkpoint's
   tensors still fit the model (:func:`trainer_cli.rundir.resume.check_weights_fit`); a changed length
   of a step-wise schedule prints one line and follows ``--resume_schedule``
   (:mod:`trainer_cli.optim.schedule_resume`); ``--resume_force true`` lets a refused change through.
6. **Stop** (:meth:`Run.stopped`): after SIGTERM or Ctrl-C during training, a checkpoint is saved
   (``InterruptCheckpoint``), one line says how to resume, and the exit code is 143 or 130.
7. **Cleanup** (:meth:`Run.remove_if_untrained`): a directory this run made is removed again when
   the run fails on a user error or is stopped before it trained a step or saved a checkpoint, with
   the folders above it that this start made and that are left empty. Nothing a run saved is ever
   removed, and a run that trained is kept whatever stopped it (Ctrl-C, SIGTERM, a crash): its
   config, events and metrics stay, and the stop says what was kept (:mod:`trainer_cli.runtime.run_stop`).
"""

from __future__ import annotations

import copy
import json
import shutil
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Optional

from jsonargparse import Namespace
from lightning.fabric.utilities.rank_zero import rank_zero_only

from trainer_cli.job import export
from trainer_cli.rundir import discard, freezing, history, layout, live
from trainer_cli.rundir import identity as loggers_mod
from trainer_cli.rundir import policy as rundir
from trainer_cli.rundir import record as run_records
from trainer_cli.runtime import run_choice, run_loggers, run_stop
from trainer_cli.runtime.checkpointing import InterruptCheckpoint, check_checkpoint_file
from trainer_cli.runtime.lightning_folders import (
    DEFAULT_ROOT_DIR,
    lightning_log_root,
    lightning_run_dir,
)
from trainer_cli.runtime.run_choice import is_checkpoint_file
from trainer_cli.runtime.run_entry import RunEntry
from trainer_cli.runtime.run_record import (
    RunRecord,
    build_record,
    changed_keys,
    plain,
    pointed_tree,
)

FIT_LIKE = ("fit", None)  # None: built without running a verb (cv folds, lr-find): they train too
EXIT_INTERRUPTED = 130  # 128 + SIGINT, as shells report it
EXIT_SIGTERM = 143  # 128 + SIGTERM


class Run:
    """The run directory of one ``train <verb>`` (see the module's description for the rules).

    Args:
        verb: ``fit``, ``validate``, ``test``, ``predict``, or None for a run built without a verb
            (``cv``, ``lr-find``, ``scale-batch-size``: they train like ``fit``; a user's script's,
            until its command line is parsed: :meth:`parsed`).
        entry: The entry's facts (``train``'s when not given).

    Attributes:
        path: The run directory (absolute), once :meth:`prepare` chose it.
        created: Whether this run made the directory (only then is it ever removed).
        ckpt_path: The checkpoint the verb starts from: ``--ckpt_path`` as given, and after
            :meth:`prepare` a ``last``/``best`` resolved to the file in the run directory.
        interrupt_checkpoint: The callback that saves on SIGTERM / Ctrl-C (:meth:`callbacks`).
        trainer: The verb's Trainer, once built (:meth:`bind`).
        entry: What the entry that starts it says about it (:class:`RunEntry`), given when it is built.
    """

    def __init__(self, verb: Optional[str], entry: RunEntry | None = None) -> None:
        self.verb = verb
        self.entry = entry if entry is not None else RunEntry()
        self.path: Path | None = None
        self.created = False
        self.made_from: Path | None = None  # the highest folder this run made (path or above it)
        self.ckpt_path: Optional[str] = None
        self.interrupt_checkpoint: InterruptCheckpoint | None = None
        self.trainer: Any = None
        self._checked: set[str] = set()
        # the resolved config as a tree, dumped and read once (prepare): before pointing, then as the
        # Trainer is built; its text as dumped while unchanged (None once changed; kept for a non-YAML dump)
        self._tree: dict[str, Any] | None = None
        self._body: str | None = ""
        self._launcher_set: dict[str, Any] = {}
        self._identity: dict[str, Any] = {}
        self.linked: dict[str, Any] = {}  # values the data->model links gave (record_links), for the record
        self._mlflow_uris: list[str] = []
        self.late = False  # the directory is Lightning's, bound once the Trainer is built
        self.changes: list[str] = []  # the config changes this resume makes (rundir.resume), for history.jsonl
        self.resumed_because: str | None = None  # the rule that chose the checkpoint, for history.jsonl
        self.inexact: dict[str, int] | None = None  # a resume replaying and skipping data: history.jsonl
        self._history_written = False
        self._records_config = False  # a script's run whose record goes where its log_dir is not (bind_to_log_dir)

    @property
    def trains(self) -> bool:
        return self.verb in FIT_LIKE

    # -- after parsing ---------------------------------------------------------------------------
    def parsed(self, verb: Optional[str], cfg: Namespace, model_keys: tuple[str, ...]) -> None:
        """The command line is parsed: ``verb`` is the run's where it was built without one (a user's
        script), and an explicit ``--ckpt_path`` file is checked to be a complete checkpoint of the
        configured model (before LightningCLI reads the model's hyperparameters from it).

        Raises:
            UserError: for a truncated, corrupt or foreign checkpoint.
        """
        from trainer_cli.config.after_parse import check_checkpoint_model, checkpoint_hparams

        if self.verb is None:
            self.verb = verb
        self.ckpt_path = cfg.get("ckpt_path")
        if is_checkpoint_file(self.ckpt_path) and (self.entry.missing_is_error or Path(str(self.ckpt_path)).exists()):
            check_checkpoint_file(self.ckpt_path)
            if not self.entry.checkpoint_hparams_win:
                check_checkpoint_model(self.ckpt_path, cfg.get("model"), model_keys)
            else:  # read as LightningCLI is about to: a file its safe loader refuses is one line
                checkpoint_hparams(str(self.ckpt_path))
            self._checked.add(str(self.ckpt_path))

    # -- before building -------------------------------------------------------------------------
    def prepare(self, cfg: Namespace, dump: Callable[[], str], link_targets: set[str]) -> Path | None:
        """Choose the directory (rules 1-3), resolve ``--ckpt_path last|best`` in ``cfg``, point the
        loggers and checkpoints at it (rule 4); returns the directory. ``dump`` gives the resolved
        config as YAML: before pointing (what a resume compares with) and after it (what
        :meth:`freeze` writes: the values the Trainer is built from). ``link_targets``: the model keys
        links fill when the classes are built (the checkpoint's tensors decide whether they may change).

        Raises:
            UserError: for a bad ``--name``, an unwritable root, nothing to resume, a checkpoint that
                cannot be read, or a run directory that would be reused.
            SystemExit: 0 when ``--ckpt_path last`` names a finished run (nothing to train).
        """
        self._body = dump()  # the one dump of the config: a tree from here on (run_record)
        self._tree = run_records.tree_of(self._body)  # None for a dump that is not YAML (jsonnet mode)
        if cfg.trainer.get("fast_dev_run"):  # a smoke test: Lightning logs and saves nothing for it, nor do we
            return None
        ckpt_dumped = plain(cfg.get("ckpt_path"))
        choice = run_choice.choose(cfg, self.trains, self.entry.follows_lightning, self._tree, link_targets)
        self.created, self.made_from = choice.created, choice.made_from  # rules 1-3
        self.resumed_because, self.changes, self.inexact = choice.resumed_because, choice.changes, choice.inexact
        self._checked |= {choice.checked} if choice.checked else set()
        chosen = choice.path
        if chosen is None:  # a user's script's new run: the Trainer's log_dir (bind_to_log_dir)
            self.late = True
            self._identity, self._mlflow_uris = run_loggers.identify_late(cfg)
            return None
        self.path = chosen.absolute()
        self.ckpt_path = cfg.get("ckpt_path")
        # renamed any moment now
        retired_by_rank_0 = rank_zero_only.rank != 0 and str(self.ckpt_path).endswith(layout.USED_SUFFIX)  # type: ignore[attr-defined]
        missing_left_to_lightning = not self.entry.missing_is_error and not Path(str(self.ckpt_path)).exists()
        if (
            is_checkpoint_file(self.ckpt_path)
            and str(self.ckpt_path) not in self._checked
            and not retired_by_rank_0
            and not missing_left_to_lightning
        ):
            check_checkpoint_file(self.ckpt_path)
        export.export(layout.ENV_RUN_DIR, str(self.path))  # DDP processes launched from here share it
        root = Path(cfg.trainer.get("default_root_dir") or DEFAULT_ROOT_DIR).absolute()
        # a script's logger that logs to <save_dir>/<name>/<version> already is not moved
        log_root = Path(*lightning_log_root(cfg)).absolute() if self.entry.follows_lightning else None
        logs_here = log_root is not None and self.path.is_relative_to(log_root)
        logger_dumped = run_loggers.logger_value(cfg)
        self._identity, self._mlflow_uris = run_loggers.point_loggers(
            cfg, self.path, self.entry.follows_lightning, in_place=self.path.parent == log_root
        )
        # the record keeps the root: re-running it makes a new run beside this one
        self._point_tree(
            cfg,
            dump,
            {
                "ckpt_path": (ckpt_dumped, plain(cfg.get("ckpt_path"))),
                "trainer.logger": (logger_dumped, run_loggers.logger_value(cfg)),
            },
        )
        if not self.created:  # a start in a run's directory: what the launcher set for it stays named where it
            # still holds (the record parsed holds those values as they were set: setting them changed nothing now)
            self._launcher_set = run_records.still_set(self.path / layout.CONFIG_FILE, self._tree, self._launcher_set)
        if "default_root_dir" in cfg.trainer:  # the Trainer gets the run directory (TrainerCLI.instantiate_trainer)
            self._launcher_set["trainer.default_root_dir (the Trainer's: this run directory)"] = (
                cfg.trainer.default_root_dir
            )
        if not logs_here:
            run_loggers.say_moved(self.path, self._launcher_set, root)
        return self.path

    def _point_tree(self, cfg: Namespace, dump: Callable[[], str], changed: dict[str, tuple[Any, Any]]) -> None:
        """The config as the Trainer is built from it: the dumped tree with the values set since the dump
        (``changed``: ``{dotted key: (value then, value now)}``), and :attr:`_launcher_set`, what changed."""
        before = self._tree
        if before is None:  # a dump that is not YAML: its text as the Trainer is built from it (no tree)
            self._body = dump()
            self._launcher_set = {}
            return
        self._tree = pointed_tree(before, changed)
        if self._tree != before:
            self._body = None  # dumped from the tree where it is written
        self._launcher_set = changed_keys(before, self._tree)

    def config_tree(self) -> dict[str, Any] | None:
        """The resolved config as the Trainer is built from it (:meth:`prepare`), as a new tree: what
        LightningCLI's ``config_dump`` (the model's and data's hyperparameters) is, without dumping it
        again; None before :meth:`prepare` or for a dump that is not YAML."""
        return copy.deepcopy(self._tree) if self._tree is not None else None

    def callbacks(self, configured: list[Any], added: list[Any]) -> list[Any]:
        """The callbacks the run directory needs (the checkpoint on SIGTERM / Ctrl-C); and every
        ``ModelCheckpoint`` of ``configured`` + ``added`` without a ``dirpath`` saves into it."""
        if self.late:  # Lightning's own ModelCheckpoint dirpath is the log_dir's checkpoints/ (bind_to_log_dir)
            self.interrupt_checkpoint = InterruptCheckpoint(str(layout.LAST_CKPT.parent))
            return [RunRecord(self), self.interrupt_checkpoint]
        if self.path is None:
            return []
        self.interrupt_checkpoint = InterruptCheckpoint(str(self.path / layout.LAST_CKPT.parent))
        loggers_mod.checkpoints_in_run_dir([*configured, *added, self.interrupt_checkpoint], self.path)
        return [RunRecord(self), self.interrupt_checkpoint]

    def bind(self, trainer: Any) -> None:
        """The verb's Trainer, once built: its loggers and callbacks are the run's from here on."""
        self.trainer = trainer

    def record_links(self, linked: dict[str, Any]) -> None:
        """The values the data->model links (and the user's own links) gave when the classes were built:
        the record (``config.yaml``) holds them (:meth:`freeze`)."""
        self.linked = linked

    def bind_to_log_dir(self, trainer: Any) -> None:
        """A user's script's run, once its Trainer is built. A new run (:attr:`late`): the run directory
        is the folder Lightning's own ``ModelCheckpoint`` saves into, less its ``checkpoints/``
        (:func:`lightning_run_dir`: ``<save_dir>/<name>/version_<N>`` of a TensorBoard or CSV logger,
        ``<save_dir>/<project>/<run id>`` of W&B's, ``default_root_dir`` without a logger), and where that
        is the working directory (the project's root: no logger, no ``default_root_dir``) a new
        ``lightning_logs/version_<N>`` in it, never a folder every run shares. DDP processes launched
        from here share it. Every run: each ``ModelCheckpoint`` without a ``dirpath`` saves into
        ``<run>/checkpoints``, and the script's config goes into the run directory where that is not the
        ``log_dir`` LightningCLI saves it in (:meth:`freeze` writes it)."""
        if self.path is None and not self.late:
            return
        if self.path is None:
            chosen = (lightning_run_dir(trainer) or Path(trainer.default_root_dir)).absolute()
            if chosen == Path.cwd().absolute():  # the project's root (no logger, default_root_dir "."): versioned
                made = rundir.first_missing(chosen / "lightning_logs")
                self.path, self.created = rundir.allocate(chosen, "lightning_logs"), True
                self.made_from = made or self.path
            else:
                self.made_from = rundir.first_missing(chosen)
                self.path, self.created = chosen, self.made_from is not None
            export.export(layout.ENV_RUN_DIR, str(self.path))
            if self.interrupt_checkpoint is not None:
                self.interrupt_checkpoint.ckpt_path = str(self.path / layout.LAST_CKPT)
            from trainer_cli.callbacks.run_summary import RunSummary

            for callback in trainer.callbacks:
                if isinstance(callback, RunSummary) and callback.run_dir is None:
                    callback.run_dir = str(self.path)
        # Lightning's own dirpath (<folder>/checkpoints), made absolute: a resume with --run_dir finds them
        loggers_mod.checkpoints_in_run_dir(trainer.callbacks, self.path)
        self._record_in_run_dir(trainer)

    def _record_in_run_dir(self, trainer: Any) -> None:
        """Where the Trainer's ``log_dir`` is not the run directory, the run's record goes into the run
        directory (:meth:`freeze`). A logger's folder shared by its runs (a W&B logger's ``save_dir``):
        the script's ``SaveConfigCallback`` does not save into it (where LightningCLI would refuse to
        overwrite an earlier run's config). No logger: ``log_dir`` is ``default_root_dir``, and the
        script's ``SaveConfigCallback`` saves there as LightningCLI does (stock's ``config.yaml``, the
        stock parser's keys only: Lightning's own LightningCLI tests read it there, and a second run
        is refused as stock refuses it), while the run's files stay in its own directory."""
        from lightning.pytorch.cli import SaveConfigCallback

        assert self.path is not None
        log_dir = trainer.log_dir
        if log_dir is not None and Path(log_dir).absolute() == self.path:
            return
        for callback in trainer.callbacks:
            if isinstance(callback, SaveConfigCallback) and callback.save_to_log_dir:
                self._records_config = True
                if trainer.loggers:
                    callback.save_to_log_dir = False
                else:  # stock's text where stock saves it: the run's record is saved in the run directory only
                    callback.parser.record_dir = self.path  # type: ignore[attr-defined]

    # -- after building --------------------------------------------------------------------------
    def freeze(self) -> None:
        """Write ``config.yaml`` and ``git.txt`` unless the run has them (rule 5), rewrite ``config.yaml``
        when a resume changed it and append this start to ``history.jsonl`` (once), and record the
        logger runs made now (MLflow's run id, for a resume). Global rank 0 only; called when the
        verb starts (:class:`RunRecord`), so a CLI built with ``run=False`` and never run leaves nothing."""
        if self.path is None or rank_zero_only.rank != 0:  # type: ignore[attr-defined]
            return
        self.path.mkdir(parents=True, exist_ok=True)
        shared_folder = self.late and not self.created  # a script's default root without a logger: the user's folder
        if not shared_folder:
            live.enter(self.path)  # before its first write into the run (trainer_cli.rundir.live)
        if self._identity and not (self.path / loggers_mod.RUN_FILE).exists():  # released unused (run=False), now used
            (self.path / loggers_mod.RUN_FILE).write_text(json.dumps(self._identity, indent=2) + "\n")
        record = self.record(self.linked)
        written = False  # config.yaml written from this record here: it holds the link values
        if self.entry.follows_lightning and not self._records_config:
            # the script's SaveConfigCallback writes config.yaml into its log_dir (TrainerArgumentParser.save)
            freezing.record_code(self.path)
        elif not (
            self.path / layout.CONFIG_FILE
        ).exists():  # the run's first start (a resume that changes it rewrites it: history.record_start)
            written = freezing.freeze(self.path, record)
        else:
            freezing.record_code(self.path)
        if (
            not self._history_written and not shared_folder
        ):  # config.yaml rewritten when the config changed on resume, history.jsonl
            self._history_written = True
            written |= history.record_start(
                self.path, self.verb, self.ckpt_path, self.changes, record, self.resumed_because, self.inexact
            )
        if self.trains and not shared_folder and not written:  # frozen before its classes were built (train
            # submit, a sweep trial)
            run_records.fill(self.path / layout.CONFIG_FILE, self.linked)  # the link values built: not a change
        if self.trainer is not None:
            loggers_mod.record_logger_runs(self.trainer.loggers, self.path, self._mlflow_uris)

    # -- when the verb stops ---------------------------------------------------------------------
    @contextmanager
    def stops_with_exit_code(self) -> Iterator[None]:
        """Around running the verb: SIGTERM or Ctrl-C during training ends the process with exit
        code 143 or 130 and the resume line (:meth:`stopped`), not Lightning's ``SystemExit``
        (whose code 0 would read as success to a shell or Slurm); a Slurm SIGUSR1 that saved its
        checkpoint and stopped training ends it with ``EXIT_REQUEUE`` (75), for the batch script
        to restart the job (:func:`trainer_cli.schedulers.slurm.batch.end_of_step`)."""
        from trainer_cli.job import requeue_signal
        from trainer_cli.job.jobstate import EXIT_REQUEUE

        try:
            yield
        except (SystemExit, KeyboardInterrupt) as stop:
            if requeue_signal.requested():
                raise SystemExit(EXIT_REQUEUE) from None
            code = self.stopped(stop, requeued=requeue_signal.requeue_in_progress())
            if code is None:
                raise
            raise SystemExit(code) from None
        if requeue_signal.requested():
            raise SystemExit(EXIT_REQUEUE)

    def stopped(self, stop: BaseException, requeued: bool) -> int | None:
        """The exit code after ``stop`` (SystemExit or KeyboardInterrupt) ended the verb, with the
        resume line printed (rule 6); None when ``stop`` is not an interrupted training (re-raise it).

        Args:
            stop: What ended the verb.
            requeued: Whether the Slurm job is being requeued (it resumes on its own: no hint).
        """
        return run_stop.exit_code(self, stop, requeued)

    def finish_loggers(self) -> None:
        """End the logger runs held by this process (W&B's current run, which a new ``WandbLogger``
        in the same process would otherwise join), so that the next run built here (the next
        ``train cv`` fold) logs to its own."""
        from lightning.pytorch.loggers import WandbLogger

        for logger in self.trainer.loggers if self.trainer is not None else []:
            if isinstance(logger, WandbLogger) and rank_zero_only.rank == 0:  # type: ignore[attr-defined]
                logger.experiment.finish()

    def record(self, linked: dict[str, Any]) -> run_records.Record:
        """The record ``config.yaml`` is written from (:func:`trainer_cli.runtime.run_record.build_record`):
        the resolved config the Trainer, model, data, callbacks and loggers were built from, the
        data->model link values filled in, and a header naming the values the launcher set."""
        return build_record(
            self._tree, self._body, self._launcher_set, linked, self.entry.follows_lightning, self.entry.command
        )

    def keep_logs(self) -> None:
        """Before the Trainer runs (global rank 0): a resumed run's CSV metrics file is kept
        (:func:`trainer_cli.rundir.identity.keep_csv_metrics`; the writer must not have started)."""
        if self.path is not None and self.trainer is not None and rank_zero_only.rank == 0:  # type: ignore[attr-defined]
            loggers_mod.keep_csv_metrics(self.trainer.loggers)

    def release_if_unused(self) -> None:
        """Remove the directory this run made when nothing but its identity was written into it
        (a CLI built with ``run=False`` whose Trainer has not run: :class:`RunRecord` writes it
        again when it does)."""
        if self.created and self.path is not None and self.path.is_dir():
            if {p.name for p in self.path.iterdir()} <= {loggers_mod.RUN_FILE}:
                shutil.rmtree(self.path, ignore_errors=True)
                if self.made_from is not None:
                    discard.remove_made_folders(self.path, self.made_from)

    @property
    def trained(self) -> bool:
        """Whether this start trained: a batch trained by this process, or a global step past 0 (a
        resumed run's count included)."""
        if self.interrupt_checkpoint is not None and self.interrupt_checkpoint.trained:
            return True
        return self.trainer is not None and self.trainer.global_step > 0

    def remove_if_untrained(self) -> bool:
        """Remove the directory if this run made it, trained nothing and nothing in it is a checkpoint,
        and the folders this start made above it that are left empty (rule 7). Returns whether the
        directory is gone."""
        if not self.created or self.path is None or self.trained:
            return False
        removed = discard.discard_if_untrained(self.path)
        if self.made_from is not None:
            discard.remove_made_folders(self.path, self.made_from)
        return removed
