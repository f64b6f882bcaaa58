"""Plain ``nn.Module`` backbones and the LightningModules that wrap them."""

from trainer_cli.models.classifier import ImageClassifier

__all__ = ["ImageClassifier"]
