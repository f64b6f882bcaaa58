"""The engines that run submitted runs behind the scheduler seam (:mod:`trainer_cli.job.scheduler`).

``ray/``: the Ray engine (``train submit --scheduler ray``).
"""
