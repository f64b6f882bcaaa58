"""trainer-cli: a config-driven command-line launcher for PyTorch Lightning training.

Importing this package is cheap: it does not import torch or Lightning.
"""

__version__ = "0.1.0"
