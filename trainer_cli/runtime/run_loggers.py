"""Where a run's loggers log (rule 4 of :mod:`trainer_cli.runtime.run`): every logger the config names
is pointed into the run directory and logs the run's identity (``run.json``,
:mod:`trainer_cli.rundir.identity`: TensorBoard/CSV version, W&B run id, MLflow run id); the default
logger where the config asks for one; one line where logs go elsewhere than the config said. Changes
when a logger is added or its options move; returns values that :class:`trainer_cli.runtime.run.Run`
keeps."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from jsonargparse import Namespace
from lightning.fabric.utilities.rank_zero import rank_zero_only

from trainer_cli.rundir import identity as loggers_mod
from trainer_cli.rundir import policy as rundir
from trainer_cli.runtime import wandb_logger
from trainer_cli.runtime.lightning_folders import DEFAULT_ROOT_DIR, lightning_identity, lightning_log_root
from trainer_cli.runtime.run_record import plain

DEFAULT_LOGGER = {
    "class_path": "lightning.pytorch.loggers.TensorBoardLogger",
    "init_args": {"save_dir": "runs", "default_hp_metric": False},
}


def logger_value(cfg: Namespace) -> Any:
    """``trainer.logger`` as plain data (None for a trainer class without a logger argument)."""
    return plain(cfg.trainer.get("logger")) if "logger" in cfg.trainer else None


def point_loggers(
    cfg: Namespace, path: Path, follows_lightning: bool, in_place: bool = False
) -> tuple[dict[str, Any], list[str]]:
    """Every logger of ``cfg`` logs the identity of the run in ``path``; returns that identity and the
    MLflow tracking URIs the loggers use. ``in_place``: the run directory is the folder the script's
    loggers make themselves, where they keep logging (:func:`trainer_cli.rundir.identity.point_loggers_at`);
    ``follows_lightning``: the default logger logs where Lightning's would (a user's script)."""
    if "logger" not in cfg.trainer:  # a trainer class without a logger argument
        return {}, []
    logger = cfg.trainer.logger
    if logger is True or logger is None:  # None: stock LightningCLI's "the default logger"; off is `false`
        init_args = Namespace(DEFAULT_LOGGER["init_args"])
        if follows_lightning:  # Lightning's default logger logs to <default_root_dir or .>/lightning_logs
            save_dir, name = lightning_log_root(cfg)
            init_args.save_dir, init_args.name = str(save_dir), name
        logger = cfg.trainer.logger = Namespace(DEFAULT_LOGGER | {"init_args": init_args})
    loggers = logger if isinstance(logger, list) else [logger]
    for item in loggers:
        if isinstance(item, Namespace) and "class_path" in item and item.get("init_args") is None:
            item.init_args = Namespace()
    wandb_logger.in_place_of_lightnings(loggers)  # its W&B step is the global step, on from a resume
    identity = loggers_mod.run_identity(path, f"{cfg.name}/{path.name}")
    root = Path(cfg.trainer.get("default_root_dir") or DEFAULT_ROOT_DIR)
    uris = loggers_mod.point_loggers_at(
        [i for i in loggers if isinstance(i, Namespace)], path, root, identity, in_place=in_place
    )
    return identity, uris


def identify_late(cfg: Namespace) -> tuple[dict[str, Any], list[str]]:
    """A user's script's new run has its identity from its first start, as every run does: the loggers
    that take a run id get it now (returned with the MLflow tracking URIs); ``run.json`` is written into
    the directory Lightning chooses (:meth:`trainer_cli.runtime.run.Run.freeze`), where a resume reads it
    back."""
    root, name = lightning_log_root(cfg)
    identity = lightning_identity(cfg) or loggers_mod.new_identity(f"{name}/{rundir.next_dir(root, name).name}")
    logger = cfg.trainer.get("logger") if "logger" in cfg.trainer else None
    loggers = logger if isinstance(logger, list) else [logger]
    wandb_logger.in_place_of_lightnings(loggers)
    return identity, loggers_mod.identify_loggers([i for i in loggers if isinstance(i, Namespace)], identity)


def say_moved(path: Path, launcher_set: dict[str, Any], root: Path) -> None:
    """One line (global rank 0) naming the loggers' folders the config gave outside ``root`` that the
    run directory ``path`` replaced (``launcher_set``: the values the launcher set)."""
    moved = {
        k: v
        for k, v in launcher_set.items()
        if ".logger" in k
        and k.endswith(("save_dir", ".name"))
        and isinstance(v, str)
        and v not in ("", DEFAULT_ROOT_DIR, "lightning_logs")
        and not Path(v).absolute().is_relative_to(root)
    }
    if moved and rank_zero_only.rank == 0:  # type: ignore[attr-defined]
        print(
            f"Logs go to the run directory {path} (" + ", ".join(f"{k} was {v!r}" for k, v in moved.items()) + ")",
            flush=True,
        )
