"""Verbs around a training run: ``lr-find``, ``scale-batch-size``, ``cv``, ``export``, ``completion``, ``ls``."""
