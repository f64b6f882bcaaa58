"""Typed hyperparameter sweeps: ``--sweep KEY=VALUES`` on ``train fit`` (trials one after another
here) and ``train submit`` (one Slurm job array, a task per trial), and ``train sweep-results``."""
