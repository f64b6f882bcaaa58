"""Save checkpoints in a loop with the CLI's AtomicCheckpointIO until killed (for the SIGKILL test)."""

import sys

import torch

from trainer_cli.checkpointing import AtomicCheckpointIO

if __name__ == "__main__":
    io = AtomicCheckpointIO()
    n = 0
    print("ready", flush=True)
    while True:
        n += 1
        io.save_checkpoint({"n": n, "w": torch.full((4_000_000,), float(n))}, sys.argv[1])
