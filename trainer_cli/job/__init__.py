"""Inside a Slurm job (standard library and filelock at import): job state, restarts, signals, Slurm commands
and what they say of submitted jobs (status)."""
