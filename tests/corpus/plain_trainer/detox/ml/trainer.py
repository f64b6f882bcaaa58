"""The project's own training script, of the shape of Cozmo18/detoxy@36daef3f89bf ``detoxy/ml/trainer.py``:
a plain ``Trainer`` built in a ``train`` function that ``jsonargparse.CLI`` exposes, a ``ModelCheckpoint``
with its own ``dirpath`` and a ``monitor`` with a hyphen (``val-loss``), ``EarlyStopping``, data from the
project's config (an environment variable). Written for this suite; its classes run under
``train fit --model detox.ml.module.ToxicClassifier --data detox.ml.datamodule.TokenizerDataModule``."""

import lightning.pytorch as pl
from jsonargparse import CLI
from lightning.pytorch.callbacks import EarlyStopping, ModelCheckpoint

from detox.ml.config import CONFIG
from detox.ml.datamodule import TokenizerDataModule
from detox.ml.module import ToxicClassifier


def train(learning_rate: float = 1e-2, batch_size: int = 16, max_epochs: int = 2, ckpt_dir: str = CONFIG.ckpt_dir) -> None:
    checkpoint = ModelCheckpoint(dirpath=ckpt_dir, filename="toxic", monitor="val-loss", mode="min", save_top_k=1)
    trainer = pl.Trainer(callbacks=[EarlyStopping(monitor="val-loss", mode="min"), checkpoint], max_epochs=max_epochs)
    trainer.fit(ToxicClassifier(learning_rate=learning_rate), datamodule=TokenizerDataModule(batch_size=batch_size))
    trainer.test(ckpt_path="best", datamodule=TokenizerDataModule(batch_size=batch_size))


if __name__ == "__main__":
    CLI(train, as_positional=False)
