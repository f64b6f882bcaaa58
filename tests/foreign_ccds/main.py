"""The project's training entry: LightningCLI over the model and the processed data, with TrainerCLI
swapped in (the only change)."""

from trainer_cli import TrainerCLI

from ccds_digits.dataset import ProcessedData
from ccds_digits.modeling.model import PointClassifier

if __name__ == "__main__":
    TrainerCLI(PointClassifier, ProcessedData)
