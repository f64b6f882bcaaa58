"""The login-node verbs over every engine's jobs: ``train jobs`` (:mod:`trainer_cli.launch.jobs`, with
its DETAIL cell, :mod:`trainer_cli.launch.job_detail`) and ``train cancel`` (:mod:`trainer_cli.launch.cancel`).
Each job is asked of its own engine (:mod:`trainer_cli.schedulers`); the Slurm-specific parts are in
:mod:`trainer_cli.schedulers.slurm`.

Nothing here imports torch, so ``train jobs`` answers at once.
"""
