"""The recogniser's entry point, with TrainerCLI swapped in for LightningCLI (the only change)."""

from trainer_cli import TrainerCLI as LightningCLI

from hwr.cli import build

if __name__ == "__main__":
    build(LightningCLI)
