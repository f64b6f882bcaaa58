"""The user's script with TrainerCLI swapped in for LightningCLI (the only change: the import line)."""

from trainer_cli.cli import LightningCLI

from lit_foreign.cli import build

if __name__ == "__main__":
    build(LightningCLI)
