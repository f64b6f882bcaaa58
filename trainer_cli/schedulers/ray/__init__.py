"""The Ray engine: ``train submit --scheduler ray`` (:mod:`~trainer_cli.schedulers.ray.submit`), the
scheduler behind the seam (:mod:`~trainer_cli.schedulers.ray.engine`), the job's driver that starts and
restarts the worker group (:mod:`~trainer_cli.schedulers.ray.driver`) and its options
(:mod:`~trainer_cli.schedulers.ray.options`). Ray is an optional extra: ``pip install 'trainer-cli[ray]'``.
"""
