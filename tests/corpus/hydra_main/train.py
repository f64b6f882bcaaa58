"""A ``@hydra.main`` training script (no LightningCLI): the shape of donglinkang2021/MinVQVAE's ``train.py``
(a22527f5e4cc). Hydra composes ``configs/train.yaml``; the data module, the LightningModule (group ``task``,
its network from group ``model`` by interpolation) and the ``Trainer`` (``_target_: lightning.Trainer``, its
logger from group ``logger`` by interpolation) are built with ``hydra.utils.instantiate``; fit, then test.
Data from an absolute path in ``configs/paths/default.yaml``, outside the project."""

import hydra
from lightning import LightningDataModule, LightningModule, Trainer
from omegaconf import DictConfig


@hydra.main(config_path="configs", config_name="train", version_base=None)
def main(cfg: DictConfig) -> None:
    dm: LightningDataModule = hydra.utils.instantiate(cfg.dataset)
    model: LightningModule = hydra.utils.instantiate(cfg.task)
    trainer: Trainer = hydra.utils.instantiate(cfg.trainer)
    trainer.fit(model, dm)
    trainer.test(model, dm)


if __name__ == "__main__":
    main()
