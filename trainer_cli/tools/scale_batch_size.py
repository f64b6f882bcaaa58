"""``train scale-batch-size``: Lightning's batch-size finder on the configured run.

Runs a few training steps at growing batch sizes until one runs out of memory, the limit is
reached, or the batch would exceed the training set (``lightning.pytorch.tuner.Tuner.scale_batch_size``,
which scales the data module's ``batch_size``). ``power`` mode doubles from ``--init_val``;
``binsearch`` then bisects between the last size that fitted and the first that did not. The model
is restored afterwards, nothing is trained.

Writes into a new run directory ``batch_size.json`` (the result and the search settings) and
``batch_size.yaml`` (a config fragment setting ``data.init_args.batch_size``, for ``--config``).
"""

from __future__ import annotations

import json
from pathlib import Path

from trainer_cli.config.request import Request
from trainer_cli.errors import UserError
from trainer_cli.runtime.configured_run import (
    composed_fit_args,
    drop_lr_scheduler,
    nested,
    tool_run,
    verb_parser,
    write_fragment,
)

RESULT_FILE = "batch_size.json"
FRAGMENT_FILE = "batch_size.yaml"

EPILOG = """\
example:
  train scale-batch-size --config configs/experiment/cifar10_resnet18.yaml --mode binsearch --max_val 4096
  # prints e.g.  largest batch size that fits: 1024 -> --data.batch_size 1024
  train fit --config configs/experiment/cifar10_resnet18.yaml --config runs/cifar10/version_3/batch_size.yaml
  train scale-batch-size --run_dir runs/digits/version_0   # the config of that run; results in a new run directory
"""


def main(request: Request) -> int:
    """``train scale-batch-size [--mode M] [--init_val N] [--max_trials N] [--max_val N] FIT_ARGS``.

    Raises:
        UserError: for bad limits, or a data module without a ``batch_size`` attribute.
    """
    parser = verb_parser(
        "scale-batch-size", "Largest batch size that fits (Lightning's Tuner.scale_batch_size).", EPILOG
    )
    parser.add_argument(
        "--mode", choices=("power", "binsearch"), default="power", help="Search strategy (default: %(default)s)."
    )
    parser.add_argument("--init_val", type=int, default=2, help="First batch size tried (default: %(default)s).")
    parser.add_argument("--max_trials", type=int, default=25, help="Most batch sizes tried (default: %(default)s).")
    parser.add_argument(
        "--max_val", type=int, default=8192, help="Largest batch size considered (default: %(default)s)."
    )
    parser.add_argument(
        "--steps_per_trial", type=int, default=3, help="Training steps per batch size (default: %(default)s)."
    )
    parser.add_argument(
        "--margin",
        type=float,
        default=0.05,
        help="binsearch only: fraction taken off the result as headroom, in [0, 1) (default: %(default)s).",
    )
    opts, rest, layers = composed_fit_args(parser, request)  # composed once
    problems = []
    if not 1 <= opts.init_val <= opts.max_val:
        problems.append(f"--init_val {opts.init_val} and --max_val {opts.max_val}: need 1 <= init_val <= max_val")
    if opts.max_trials < 1 or opts.steps_per_trial < 1:
        problems.append(f"--max_trials {opts.max_trials} and --steps_per_trial {opts.steps_per_trial}: need both >= 1")
    if not 0 <= opts.margin < 1:
        problems.append(f"--margin {opts.margin}: need 0 <= margin < 1")
    if problems:
        raise UserError("; ".join(problems))

    cli = tool_run(rest, layers, "scale-batch-size")
    if cli.datamodule is None or not hasattr(cli.datamodule, "batch_size"):
        raise UserError("scale-batch-size scales the data module's `batch_size` attribute: this data module has none")
    drop_lr_scheduler(cli.model)
    from lightning.pytorch.tuner import Tuner

    from trainer_cli.runtime import quiet

    with quiet.tuning(progress_bar=False):  # Tuner.scale_batch_size shows no bar of its own
        found = Tuner(cli.trainer).scale_batch_size(
            cli.model,
            datamodule=cli.datamodule,
            mode=opts.mode,
            steps_per_trial=opts.steps_per_trial,
            init_val=opts.init_val,
            max_trials=opts.max_trials,
            max_val=opts.max_val,
            margin=opts.margin if opts.mode == "binsearch" else 0.0,
        )
    if found is None:  # only under fast_dev_run
        raise UserError("scale-batch-size does not run under trainer.fast_dev_run: drop that setting")
    run_dir = Path(cli.run_dir)
    result = {
        "batch_size": found,
        "mode": opts.mode,
        "init_val": opts.init_val,
        "max_trials": opts.max_trials,
        "max_val": opts.max_val,
        "steps_per_trial": opts.steps_per_trial,
        "train_samples": _train_samples(cli.datamodule),
    }
    (run_dir / RESULT_FILE).write_text(json.dumps(result, indent=2) + "\n")
    fragment = nested("data.init_args.batch_size", found)
    write_fragment(
        run_dir / FRAGMENT_FILE,
        fragment,
        f"Batch size found by `train scale-batch-size --mode {opts.mode}` in {run_dir}.",
    )
    print(f"\nlargest batch size that fits: {found}  ({opts.mode}, from {opts.init_val}, at most {opts.max_val})")
    if result["train_samples"] is not None and found >= result["train_samples"]:
        print(
            f"  note:    stopped at the training set's size ({result['train_samples']} samples), not at a memory limit"
        )
    print(f"  flag:    --data.batch_size {found}")
    print(f"  config:  --config {run_dir / FRAGMENT_FILE}")
    return 0


def _train_samples(datamodule: object) -> int | None:
    """Size of the data module's training set, when it has one."""
    train_set = getattr(datamodule, "train_set", None)
    try:
        return len(train_set) if train_set is not None else None  # type: ignore[arg-type]
    except TypeError:
        return None
