"""trainer-cli: a config-driven command-line launcher for PyTorch Lightning training.

Importing this package is cheap: it does not import torch or Lightning.
"""

__version__ = "0.1.0"


def __getattr__(name: str) -> object:
    """``from trainer_cli import TrainerCLI``: imported on first use (it imports Lightning)."""
    if name == "TrainerCLI":
        from trainer_cli.cli import TrainerCLI

        return TrainerCLI
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["TrainerCLI", "__version__"]
