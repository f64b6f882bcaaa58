"""Save checkpoints in a loop with the CLI's AtomicCheckpointIO, in forked children that the test
kills with SIGKILL (one import of torch and Lightning for many kills).

Usage: ``python atomic_save_loop.py TARGET KILLS``; prints each child's pid, then waits for it to die.
"""

import os
import sys

import torch

from trainer_cli.runtime.checkpointing import AtomicCheckpointIO

if __name__ == "__main__":
    target, kills = sys.argv[1], int(sys.argv[2])
    for child in range(kills):
        pid = os.fork()
        if pid == 0:
            io, n = AtomicCheckpointIO(), 0
            while True:
                n += 1
                io.save_checkpoint({"n": n, "child": child, "w": torch.full((2_000_000,), float(n))}, target)
        print(pid, flush=True)
        os.waitpid(pid, 0)
