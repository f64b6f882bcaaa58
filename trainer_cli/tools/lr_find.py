"""``train lr-find``: Lightning's learning-rate range test on the configured run.

The learning rate grows from ``--min_lr`` to ``--max_lr`` over ``--num_training`` optimizer steps
while the training loss is recorded; the suggestion is the learning rate at the steepest descent
of the loss (L. N. Smith, "Cyclical Learning Rates for Training Neural Networks", WACV 2017;
implementation: ``lightning.pytorch.tuner.Tuner.lr_find``). The model and optimizer are restored
afterwards, nothing is trained.

Writes into a new run directory: ``lr_find.png`` (loss versus learning rate, the suggestion
marked), ``lr_find.json`` (the suggestion and the curve) and ``lr_find.yaml`` (a config fragment
setting the optimizer's learning rate, for ``--config``).
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from typing import Any

from trainer_cli.config.request import Request
from trainer_cli.errors import UserError
from trainer_cli.runtime.configured_run import (
    composed_fit_args,
    nested,
    tool_run,
    verb_parser,
    write_fragment,
)

PLOT_FILE = "lr_find.png"
RESULT_FILE = "lr_find.json"
FRAGMENT_FILE = "lr_find.yaml"

EPILOG = """\
example:
  train lr-find --config configs/experiment/digits.yaml --min_lr 1e-5 --max_lr 1
  # prints e.g.  suggested learning rate: 0.00316 -> --optimizer.lr 0.00316
  train fit --config configs/experiment/digits.yaml --config runs/digits/version_0/lr_find.yaml
  train lr-find --run_dir runs/digits/version_0   # the config of that run; results in a new run directory
"""


def main(request: Request) -> int:
    """``train lr-find [--min_lr F] [--max_lr F] [--num_training N] [--mode M] FIT_ARGS``.

    Raises:
        UserError: for a bad range, a run without an optimizer, or a curve too short to suggest from.
    """
    parser = verb_parser(
        "lr-find", "Learning-rate range test (Lightning's Tuner.lr_find) on the configured run.", EPILOG
    )
    parser.add_argument(
        "--min_lr", type=float, default=1e-6, help="Smallest learning rate tried (default: %(default)s)."
    )
    parser.add_argument("--max_lr", type=float, default=1.0, help="Largest learning rate tried (default: %(default)s).")
    parser.add_argument(
        "--num_training", type=int, default=100, help="Optimizer steps of the test (default: %(default)s)."
    )
    parser.add_argument(
        "--mode", choices=("exponential", "linear"), default="exponential", help="How the learning rate grows."
    )
    parser.add_argument(
        "--early_stop_threshold",
        type=float,
        default=4.0,
        help="Stop when the loss exceeds this multiple of the best loss; 0 never stops (default: %(default)s).",
    )
    opts, rest, layers = composed_fit_args(parser, request)  # composed once
    if not 0 < opts.min_lr < opts.max_lr:
        raise UserError(f"--min_lr {opts.min_lr} and --max_lr {opts.max_lr}: need 0 < min_lr < max_lr")
    if opts.num_training < 2:
        raise UserError(f"--num_training {opts.num_training}: need at least 2 steps (100 is usual)")

    cli = tool_run(rest, layers, "lr-find")
    optimizer = cli.config.get("optimizer")
    if not optimizer:
        raise UserError(
            "lr-find needs an optimizer in the config: add e.g. --optimizer AdamW or --config "
            "configs/optimizer/adamw.yaml"
        )
    trainer = cli.trainer
    # the test runs num_training steps however many epochs that takes (and a step-wise scheduler,
    # replaced by the finder's own, still sees a finite run)
    trainer.fit_loop.max_epochs = -1
    trainer.fit_loop.epoch_loop.max_steps = opts.num_training

    from lightning.pytorch.callbacks import TQDMProgressBar
    from lightning.pytorch.tuner import Tuner

    from trainer_cli.runtime import quiet

    # Lightning's own tqdm bar of the test: on a terminal with a tqdm progress bar only, never in a log file
    show_bar = sys.stderr.isatty() and isinstance(trainer.progress_bar_callback, TQDMProgressBar)
    with quiet.tuning(progress_bar=show_bar):
        finder = Tuner(trainer).lr_find(
            cli.model,
            datamodule=cli.datamodule,
            min_lr=opts.min_lr,
            max_lr=opts.max_lr,
            num_training=opts.num_training,
            mode=opts.mode,
            early_stop_threshold=opts.early_stop_threshold or None,
            update_attr=False,
        )
    assert finder is not None  # None only under fast_dev_run
    suggestion = finder.suggestion()
    run_dir = Path(cli.run_dir)
    save_plot(finder, run_dir / PLOT_FILE)
    result: dict[str, Any] = {
        "suggestion": suggestion,
        "min_lr": opts.min_lr,
        "max_lr": opts.max_lr,
        "num_training": opts.num_training,
        "mode": opts.mode,
        "steps_run": len(finder.results["loss"]),
        "lr": [float(v) for v in finder.results["lr"]],
        "loss": [float(v) if math.isfinite(v) else None for v in finder.results["loss"]],
    }
    (run_dir / RESULT_FILE).write_text(json.dumps(result, indent=2) + "\n")
    if suggestion is None:
        raise UserError(
            f"lr-find ran {result['steps_run']} steps, too few to suggest a learning rate (the loss diverged or the "
            f"data is small): raise --num_training or --min_lr. Curve: {run_dir / PLOT_FILE}"
        )
    lr = float(f"{suggestion:.3g}")
    fragment = nested("optimizer", {"class_path": optimizer["class_path"], "init_args": {"lr": lr}})
    write_fragment(run_dir / FRAGMENT_FILE, fragment, f"Learning rate suggested by `train lr-find` in {run_dir}.")
    print(f"\nsuggested learning rate: {lr:g}  (steepest loss descent, {opts.min_lr:g}..{opts.max_lr:g}, {opts.mode})")
    print(f"  flag:    --optimizer.lr {lr:g}")
    print(f"  config:  --config {run_dir / FRAGMENT_FILE}")
    print(f"  plot:    {run_dir / PLOT_FILE}")
    return 0


def save_plot(finder: Any, path: Path) -> None:
    """Save the loss-versus-learning-rate curve of a Lightning ``_LRFinder`` as a PNG, the suggestion
    marked with a red dot (Lightning's ``plot(suggest=True)``) and a labelled vertical line."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig = finder.plot(suggest=True)
    ax = fig.axes[0]
    suggestion = finder.suggestion()
    if suggestion is not None:
        ax.axvline(suggestion, color="red", linestyle="--", linewidth=1, label=f"suggestion {suggestion:.3g}")
        ax.legend()
    ax.set_title("train lr-find: training loss vs learning rate")
    fig.savefig(path, dpi=100, bbox_inches="tight")
    plt.close(fig)
