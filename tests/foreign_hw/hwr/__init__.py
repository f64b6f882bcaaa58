"""A small handwriting recogniser (a test project: no trainer_cli import in the package)."""
