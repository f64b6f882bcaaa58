"""Slurm launching: ``train submit`` (options, resources, templates, submission) and ``train jobs``.

Nothing here imports torch until the fit arguments are parsed, so ``train jobs`` answers at once.
"""
