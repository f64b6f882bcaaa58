"""The user's script as written for stock Lightning."""

from lightning.pytorch.cli import LightningCLI

from lit_foreign.cli import build

if __name__ == "__main__":
    build(LightningCLI)
