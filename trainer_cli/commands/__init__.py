"""Verbs around a training run: ``lr-find``, ``scale-batch-size``, ``cv`` and ``export``.

One module per verb; each takes the same ``--config`` layers and overrides as ``train fit``.
"""
