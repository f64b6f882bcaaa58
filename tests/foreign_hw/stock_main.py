"""The recogniser's entry point as the project wrote it: stock LightningCLI."""

from lightning.pytorch.cli import LightningCLI

from hwr.cli import build

if __name__ == "__main__":
    build(LightningCLI)
