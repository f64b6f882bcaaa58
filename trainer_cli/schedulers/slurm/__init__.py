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

What the batch script runs around its ``srun`` step, with the standard library alone, is
:mod:`~trainer_cli.schedulers.slurm.batch` (the job's start, and at its end the decision: done, failed,
requeued, resubmitted). What runs inside the training process of a job (the requeue signal's record, the
restart policy, the stall watchdog) and the one runner and reader of Slurm's commands are in
:mod:`trainer_cli.job`, the lowest layer.
"""
