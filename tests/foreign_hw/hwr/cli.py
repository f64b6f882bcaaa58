"""The project's CLI: instantiate-time links, a checkpoint callback of its own, its own config saver."""

from __future__ import annotations

from typing import Any

from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.cli import SaveConfigCallback

from hwr.data import StrokeDataBase
from hwr.model import Recognizer


class HwrSaveConfig(SaveConfigCallback):
    """Saves the config as LightningCLI does, and logs it as the run's hyperparameters."""

    def save_config(self, trainer: Any, pl_module: Any, stage: str) -> None:
        if trainer.logger is not None:
            trainer.logger.log_hyperparams({"config_file": self.config_filename})


TRAINER_DEFAULTS: dict[str, Any] = {
    "max_epochs": 4,
    "log_every_n_steps": 2,
    "enable_progress_bar": False,
    "enable_model_summary": False,
    "logger": {"class_path": "lightning.pytorch.loggers.WandbLogger", "init_args": {"project": "hwr"}},
}


def build(cli_class: type, args: Any = None, run: bool = True, **kwargs: Any) -> Any:
    """``cli_class(Recognizer, StrokeDataBase, subclass_mode_data=True, ...)`` with the project's links."""

    class HwrCLI(cli_class):  # type: ignore[misc, valid-type]
        def add_arguments_to_parser(self, parser: Any) -> None:
            super().add_arguments_to_parser(parser)
            parser.add_lightning_class_args(ModelCheckpoint, "my_model_checkpoint")
            parser.set_defaults(
                {"my_model_checkpoint.monitor": "train_loss", "my_model_checkpoint.mode": "max",
                 "my_model_checkpoint.save_top_k": 1}
            )
            parser.link_arguments("data.num_classes", "model.num_classes", apply_on="instantiate")
            parser.link_arguments("data.input_dim", "model.input_dim", apply_on="instantiate")
            parser.link_arguments(
                "data.num_classes", "model.hidden", compute_fn=lambda n: 8 * n, apply_on="instantiate"
            )

    kwargs.setdefault("trainer_defaults", TRAINER_DEFAULTS)
    kwargs.setdefault("seed_everything_default", 3)
    kwargs.setdefault("save_config_callback", HwrSaveConfig)
    return HwrCLI(Recognizer, StrokeDataBase, subclass_mode_data=True,
                  args=args, run=run, **kwargs)
