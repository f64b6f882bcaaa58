"""What runs inside a fit process around Lightning: TrainerCLI, the run, checkpointing, quiet logs."""
