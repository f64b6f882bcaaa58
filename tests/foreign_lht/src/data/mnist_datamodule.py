"""A LightningDataModule of lightning-hydra-template's shape (``src/data/mnist_datamodule.py``):
torchvision's MNIST read from ``data_dir`` (its raw idx files under ``<data_dir>/MNIST/raw/``), train
and test sets joined and split by ``train_val_test_split`` with a fixed generator."""

from typing import Any, Optional

import torch
from lightning import LightningDataModule
from torch.utils.data import ConcatDataset, DataLoader, Dataset, random_split
from torchvision.datasets import MNIST
from torchvision.transforms import transforms


class MNISTDataModule(LightningDataModule):
    """MNIST from ``data_dir``, downloaded there when missing (the test writes the files first)."""

    def __init__(
        self,
        data_dir: str = "data/",
        train_val_test_split: tuple[int, int, int] = (55_000, 5_000, 10_000),
        batch_size: int = 64,
        num_workers: int = 0,
        pin_memory: bool = False,
    ) -> None:
        super().__init__()
        self.save_hyperparameters(logger=False)
        self.transforms = transforms.Compose([transforms.ToTensor(), transforms.Normalize((0.1307,), (0.3081,))])
        self.data_train: Optional[Dataset] = None
        self.data_val: Optional[Dataset] = None
        self.data_test: Optional[Dataset] = None
        self.batch_size_per_device = batch_size

    @property
    def num_classes(self) -> int:
        return 10

    def prepare_data(self) -> None:
        MNIST(self.hparams.data_dir, train=True, download=True)
        MNIST(self.hparams.data_dir, train=False, download=True)

    def setup(self, stage: Optional[str] = None) -> None:
        if self.trainer is not None:
            if self.hparams.batch_size % self.trainer.world_size != 0:
                raise RuntimeError(f"Batch size ({self.hparams.batch_size}) is not divisible by {self.trainer.world_size}")
            self.batch_size_per_device = self.hparams.batch_size // self.trainer.world_size
        if not self.data_train and not self.data_val and not self.data_test:
            trainset = MNIST(self.hparams.data_dir, train=True, transform=self.transforms)
            testset = MNIST(self.hparams.data_dir, train=False, transform=self.transforms)
            self.data_train, self.data_val, self.data_test = random_split(
                ConcatDataset([trainset, testset]),
                self.hparams.train_val_test_split,
                generator=torch.Generator().manual_seed(42),
            )

    def _loader(self, dataset: Any, shuffle: bool) -> DataLoader:
        return DataLoader(
            dataset,
            batch_size=self.batch_size_per_device,
            num_workers=self.hparams.num_workers,
            pin_memory=self.hparams.pin_memory,
            shuffle=shuffle,
        )

    def train_dataloader(self) -> DataLoader:
        return self._loader(self.data_train, True)

    def val_dataloader(self) -> DataLoader:
        return self._loader(self.data_val, False)

    def test_dataloader(self) -> DataLoader:
        return self._loader(self.data_test, False)
