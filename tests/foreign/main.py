"""The user's script with TrainerCLI swapped in for LightningCLI (the only change)."""

from trainer_cli import TrainerCLI

from lit_foreign.cli import build

if __name__ == "__main__":
    build(TrainerCLI)
