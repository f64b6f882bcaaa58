import torch
from lightning.pytorch import LightningModule
from torch.nn import functional as F


class SequenceClassifier(LightningModule):
    """A classifier whose output size comes from the data (a link with ``compute_fn``)."""

    def __init__(self, model_name: str = "tiny-mlp", num_labels: int = 2, learning_rate: float = 1e-2, hidden: int = 32):
        super().__init__()
        self.save_hyperparameters()
        self.net = torch.nn.Sequential(torch.nn.Linear(64, hidden), torch.nn.ReLU(), torch.nn.Linear(hidden, num_labels))

    def forward(self, x):
        return self.net(x)

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = F.cross_entropy(self(x), y)
        self.log("train_loss", loss, prog_bar=True)
        return loss

    def validation_step(self, batch, batch_idx):
        x, y = batch
        logits = self(x)
        self.log("val_loss", F.cross_entropy(logits, y), prog_bar=True)
        self.log("val_acc", (logits.argmax(-1) == y).float().mean())

    def test_step(self, batch, batch_idx):
        x, y = batch
        self.log("test_loss", F.cross_entropy(self(x), y))

    def configure_optimizers(self):
        return torch.optim.AdamW(self.parameters(), lr=self.hparams.learning_rate)
