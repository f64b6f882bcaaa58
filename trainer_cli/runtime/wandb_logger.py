"""Lightning's ``WandbLogger`` whose W&B step is the trainer's global step, so it continues across a resume.

Lightning's logger calls ``run.log(metrics)`` without a step: W&B's own step (``_step``) then counts
the log calls of the process, and a resumed run (``--ckpt_path last``, a Slurm requeue) starts it at 0
again, under the steps the first part logged (W&B drops a step lower than one it has when the
resumed offline run is synced). Here every ``run.log`` gets ``step=<global step>``: the row of each
step is W&B's step, the first part and the resumed part form one increasing series, and rows logged
at one step (training metrics, the learning rate, validation at an epoch end) are one row.

:func:`in_place_of_lightnings` puts this class in place of Lightning's (a subclass: the same arguments) in the
logger configs of every run of the launcher (:class:`trainer_cli.runtime.run.Run`), before they are given the
run's identity (:mod:`trainer_cli.rundir.identity`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Optional

from lightning.fabric.utilities.rank_zero import rank_zero_only
from lightning.pytorch.loggers import WandbLogger as LightningWandbLogger

LIGHTNING_CLASS = "lightning.pytorch.loggers.WandbLogger"
CLASS_PATH = f"{__name__}.WandbLogger"


class WandbLogger(LightningWandbLogger):
    """Lightning's ``WandbLogger`` (same arguments) logging each row at ``step`` = the trainer's
    global step (W&B's ``_step``), so the step goes on from the checkpoint when a run resumes."""

    @rank_zero_only
    def log_metrics(self, metrics: Mapping[str, float], step: Optional[int] = None) -> None:
        if step is None or getattr(self, "_wandb_init", {}).get("sync_tensorboard"):  # W&B steps it itself: Lightning's
            super().log_metrics(metrics, step)
            return
        prefix = getattr(self, "_prefix", "")
        named = {f"{prefix}{self.LOGGER_JOIN_CHAR}{k}" if prefix else k: v for k, v in metrics.items()}
        run: Any = self.experiment
        if step < run.step:  # after a resume, before the checkpoint's step: W&B would drop it with a warning
            return
        run.log(dict(named, **{"trainer/global_step": step}), step=step)


def in_place_of_lightnings(loggers: list[Any]) -> None:
    """Name this class in place of Lightning's ``WandbLogger`` in the logger configs ``loggers``
    (``class_path``/``init_args`` namespaces; others are left as they are)."""
    for item in loggers:
        if hasattr(item, "get") and item.get("class_path") == LIGHTNING_CLASS:
            item.class_path = CLASS_PATH
