"""Moved to :mod:`trainer_cli.runtime.cli`; this path stays for users' ``main.py`` for a release."""

from trainer_cli.runtime.cli import TrainerCLI as TrainerCLI  # noqa: F401
