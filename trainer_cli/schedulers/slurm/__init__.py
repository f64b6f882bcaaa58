"""The Slurm engine, all of its login-node side in this folder: the scheduler behind the seam
(:mod:`~trainer_cli.schedulers.slurm.engine`), ``train submit`` (:mod:`~trainer_cli.schedulers.slurm.submit`:
its options, :mod:`~trainer_cli.schedulers.slurm.options` and
:mod:`~trainer_cli.schedulers.slurm.slurm_args`; the plan, :mod:`~trainer_cli.schedulers.slurm.fit_job`, on
the run placed as every engine places it, :mod:`trainer_cli.schedulers.run_plan`; the checks and sizing
against the partitions; the sbatch templates' rendering and queueing; containers; secrets; announced
maintenance), sweeps as job arrays and their workers
(:mod:`~trainer_cli.schedulers.slurm.sweep`, :mod:`~trainer_cli.schedulers.slurm.sweep_worker`), ``train
doctor`` and the checks it runs in every task (:mod:`~trainer_cli.schedulers.slurm.probe`), ``train init``
and the site profile, why a job waits (:mod:`~trainer_cli.schedulers.slurm.pending`).

What runs inside a job, with the standard library alone (the batch script runs it on a host without the
launcher's packages: a container job's ``<run>/.launcher``), is :data:`JOB_STEPS`: the batch script's steps
around its ``srun`` (:mod:`~trainer_cli.schedulers.slurm.batch`: the job's start, and at its end the
decision: done, failed, requeued, resubmitted), the stall watchdog
(:mod:`~trainer_cli.schedulers.slurm.watchdog`), what a process asks Slurm of the job it runs in
(:mod:`~trainer_cli.schedulers.slurm.in_job`), and the one runner and reader of Slurm's commands
(:mod:`~trainer_cli.schedulers.slurm.commands`, :mod:`~trainer_cli.schedulers.slurm.output`). What runs
inside the training process whatever the engine (the requeue signal's record, the restart policy, the
ranks' progress notes) is in :mod:`trainer_cli.job`, the lowest layer.
"""

JOB_STEPS = ("batch", "watchdog", "in_job", "commands", "output")
"""The modules of this folder that run inside a job (the module's description), standard library only."""
