"""Moved to :mod:`trainer_cli.runtime.wandb_logger`; this path stays for the config.yaml files that name it."""

from trainer_cli.runtime.wandb_logger import WandbLogger as WandbLogger  # noqa: F401
