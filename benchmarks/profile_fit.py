"""Where ``train fit``'s per-step time goes on the digits MLP: ``python -m benchmarks.profile_fit [STEPS]``.

Runs the overhead benchmark's ``train fit`` side (the launcher's defaults, 1 torch thread) once to
warm up, then once under :mod:`cProfile`, and prints the cumulative time per optimizer step of
the parts of a step (cProfile inflates Python-heavy parts, so read the shares, not the absolute
figures), then the functions with the most own time. cProfile sees the training thread only: the
checkpoint files written by ``AsyncAtomicCheckpointIO``'s worker thread are not in it.
"""

from __future__ import annotations

import cProfile
import pstats
import sys

import torch

from benchmarks.overhead import NO_VAL, run_fit
from tests.support import CONFIGS, DIGITS

# (label, file path fragment, function name): cumulative time of each, per step
PARTS = [
    ("whole training loop (Lightning's epoch loop advance)", "training_epoch_loop.py", "advance"),
    ("  model: forward + loss + train_acc update (training_step)", "models/classifier.py", "training_step"),
    ("  backward (autograd)", "lightning/pytorch/core/module.py", "backward"),
    ("  AdamW step, own work (torch)", "torch/optim/adam.py", "adam"),
    ("  next batch (StatefulDataLoader)", "stateful_dataloader.py", "__next__"),
    ("  callback hooks, all callbacks (Lightning's dispatch)", "lightning/pytorch/trainer/call.py", "_call_callback_hooks"),
    ("    of which checkpoint saves on the training thread (copy; the write is on a worker)", "model_checkpoint.py", "_save_checkpoint"),
    ("    of which LearningRateMonitor", "lr_monitor.py", "on_train_batch_start"),
    ("  logger connector: step metrics (Lightning)", "logger_connector.py", "update_train_step_metrics"),
    ("  TensorBoard writes (log steps only)", "fabric/loggers/tensorboard.py", "log_metrics"),
]


def main(argv: list[str]) -> int:
    steps = int(argv[0]) if argv else 400
    torch.set_num_threads(1)
    args = ["--config", DIGITS, "--config", str(CONFIGS / "model" / "mlp.yaml"), "--trainer.max_steps", str(steps), *NO_VAL]
    run_fit(args)  # warm-up: imports, first allocations
    profiler = cProfile.Profile()
    profiler.enable()
    run_fit(args)
    profiler.disable()
    stats = pstats.Stats(profiler)
    cumulative: dict[tuple[str, str], float] = {}
    for (path, _, name), (_, _, _, cum, _) in stats.stats.items():  # type: ignore[attr-defined]
        for _, fragment, function in PARTS:
            if name == function and fragment in path:
                cumulative[(fragment, function)] = max(cumulative.get((fragment, function), 0.0), cum)
    print(f"train fit, digits MLP, {steps} steps under cProfile: cumulative ms per step")
    for label, fragment, function in PARTS:
        print(f"  {1e3 * cumulative.get((fragment, function), 0.0) / steps:7.3f}  {label}")
    print()
    stats.sort_stats("tottime").print_stats(15)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
