"""Where runs are kept: the launcher's defaults (``<trainer.default_root_dir>/<name>``), and where
Lightning keeps a user's script's runs, as its own ``ModelCheckpoint`` and loggers choose: the
folder a script's new run is bound to (:meth:`trainer_cli.runtime.run.Run.bind_to_log_dir`)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from jsonargparse import Namespace

from trainer_cli.rundir import identity as loggers_mod

DEFAULT_ROOT_DIR = "runs"
DEFAULT_NAME = "run"  # --name: runs go to <trainer.default_root_dir>/<name>/version_<N>


def _first_logger(cfg: Namespace) -> Namespace | None:
    """The script's first logger config, when it is configured by class (``class_path``/``init_args``)."""
    logger = cfg.trainer.get("logger") if "logger" in cfg.trainer else None
    first = logger[0] if isinstance(logger, list) and logger else logger
    return first if isinstance(first, Namespace) and "class_path" in first else None


def lightning_log_root(cfg: Namespace) -> tuple[Path, str]:
    """Where Lightning keeps a script's runs: ``(save_dir, name)`` of its first logger when that is
    configured by class (``name`` defaults to ``lightning_logs``; a W&B logger's is its ``project``,
    as Lightning's), else ``(default_root_dir or the working directory, "lightning_logs")``; a
    ``--name`` other than the default replaces the name."""
    first = _first_logger(cfg)
    args = first.get("init_args") if first is not None else None
    args = args if isinstance(args, Namespace) else Namespace()
    root = Path(args.get("save_dir") or cfg.trainer.get("default_root_dir") or ".")
    name = args.get("name") if isinstance(args.get("name"), str) else "lightning_logs"
    if loggers_mod.takes_run_id(first):  # W&B: <save_dir>/<project>/<run id> (its name is a display name)
        name = args.get("project") or os.environ.get("WANDB_PROJECT") or "lightning_logs"
    if cfg.get("name") and cfg.name != DEFAULT_NAME:
        name = cfg.name
    return root, name or ""


def lightning_identity(cfg: Namespace) -> dict[str, Any] | None:
    """A new identity for a user's script's new run whose first logger names its folder by the run id
    (W&B: ``<save_dir>/<project>/<run id>``, where Lightning's ``ModelCheckpoint`` saves); None for a
    logger that numbers its versions (Lightning takes the next ``version_<N>``) or none."""
    first = _first_logger(cfg)
    if not loggers_mod.takes_run_id(first):
        return None
    identity = loggers_mod.new_identity("")
    identity["name"] = f"{lightning_log_root(cfg)[1]}/{identity['run_id']}"
    return identity


def lightning_run_dir(trainer: Any) -> Path | None:
    """The folder Lightning's own ``ModelCheckpoint`` saves into, less its ``checkpoints/``:
    ``<save_dir or default_root_dir>/<name>/<version>`` of the first logger (a W&B logger's name is its
    project, its version the run id); None without a logger (Lightning's folder is then
    ``default_root_dir`` itself)."""
    if not trainer.loggers:
        return None
    logger = trainer.loggers[0]
    save_dir = logger.save_dir if logger.save_dir is not None else trainer.default_root_dir
    version = logger.version if isinstance(logger.version, str) else f"version_{logger.version}"
    return Path(save_dir, str(logger.name), version)
