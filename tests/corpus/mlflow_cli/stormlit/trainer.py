"""The project's LightningCLI entry (``python -m stormlit.trainer fit``), of the shape of
dbozbay/stormy-ai's ``stormy/trainer.py`` (read from the search index's stored text; its commit was not
recorded there): a LightningCLI subclass adding ``EarlyStopping`` and a top-3 ``ModelCheckpoint`` with
``add_lightning_class_args`` and ``set_defaults``, a link with ``compute_fn``, an ``MLFlowLogger``
(``lazy_instance``, the local file store ``./mlruns``) in ``trainer_defaults``, a ``SaveConfigCallback``
subclass that writes the config into the MLflow run's folder, and ``cli_main(args: ArgsType = None)``.
Written for this suite, with TrainerCLI swapped in by its one line (``lightning.pytorch.cli`` -> ``trainer_cli.cli``)."""

import os

from jsonargparse import lazy_instance
from lightning.pytorch.callbacks import EarlyStopping, ModelCheckpoint
from trainer_cli.cli import ArgsType, LightningCLI, SaveConfigCallback
from lightning.pytorch.loggers import MLFlowLogger

from stormlit.datamodule import TokenizedDataModule
from stormlit.module import SequenceClassifier


class MLFlowSaveConfigCallback(SaveConfigCallback):
    """Saves the config into the MLflow run's folder instead of the log_dir."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, save_to_log_dir=False, **kwargs)

    def save_config(self, trainer, pl_module, stage: str) -> None:
        if isinstance(trainer.logger, MLFlowLogger):
            run_dir = os.path.join(str(trainer.logger.save_dir), str(trainer.logger.experiment_id), str(trainer.logger.run_id))
            os.makedirs(run_dir, exist_ok=True)
            self.parser.save(self.config, os.path.join(run_dir, self.config_filename), skip_none=False, overwrite=True)
        else:
            super().save_config(trainer, pl_module, stage)


class MyLightningCLI(LightningCLI):
    def add_arguments_to_parser(self, parser):
        parser.add_lightning_class_args(EarlyStopping, "early_stopping")
        parser.set_defaults({"early_stopping.monitor": "val_loss", "early_stopping.patience": 3, "early_stopping.mode": "min"})
        parser.add_lightning_class_args(ModelCheckpoint, "checkpoint")
        parser.set_defaults(
            {
                "checkpoint.monitor": "val_loss",
                "checkpoint.filename": "finetuned-{epoch:02d}-{val_loss:.4f}",
                "checkpoint.save_top_k": 3,
            }
        )
        parser.link_arguments("data.label_columns", "model.num_labels", compute_fn=lambda label_columns: len(label_columns))
        parser.link_arguments("model.model_name", "data.model_name")


def cli_main(args: ArgsType = None):
    MyLightningCLI(
        SequenceClassifier,
        TokenizedDataModule,
        args=args,
        seed_everything_default=1234,
        save_config_callback=MLFlowSaveConfigCallback,
        trainer_defaults={
            "max_epochs": 10,
            "deterministic": True,
            "logger": lazy_instance(MLFlowLogger, experiment_name="lightning_logs"),
        },
    )


if __name__ == "__main__":
    cli_main()
