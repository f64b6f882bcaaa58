"""LightningDataModules for image classification."""

from trainer_cli.data.cifar10 import CIFAR10DataModule
from trainer_cli.data.digits import DigitsDataModule
from trainer_cli.data.image_folder import ImageFolderDataModule

__all__ = ["CIFAR10DataModule", "DigitsDataModule", "ImageFolderDataModule"]
