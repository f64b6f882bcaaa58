"""The plain script the start-up benchmark compares ``train fit`` with: import torch, torchvision
and scikit-learn, load the digits, build the digits experiment's CNN, take one AdamW step, and
print the wall-clock time when that first optimizer step is done."""

import importlib.util
import sys
import time
from pathlib import Path

import sklearn.datasets
import torch
import torchvision  # noqa: F401 - what a plain image-classification script imports

FIRST_STEP_MARK = "BENCH_FIRST_STEP_DONE_AT"  # benchmarks.clock.FIRST_STEP_MARK (not imported: it imports lightning)


def load_backbones():  # the project's CNN without importing the package (which would import lightning)
    path = Path(__file__).resolve().parents[1] / "trainer_cli" / "models" / "backbones.py"
    spec = importlib.util.spec_from_file_location("backbones", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main() -> None:
    torch.manual_seed(42)
    digits = sklearn.datasets.load_digits()
    x = torch.tensor(digits.images, dtype=torch.float32).unsqueeze(1) / 16.0
    y = torch.tensor(digits.target)
    x = (x - x.mean()) / x.std()
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=64, shuffle=True)
    model = load_backbones().CNN(num_classes=10, in_channels=1, image_size=8, width=32, stages=2, dropout=0.1)
    opt = torch.optim.AdamW(model.parameters(), lr=0.01, weight_decay=0.01)
    xb, yb = next(iter(loader))
    loss = torch.nn.functional.cross_entropy(model(xb), yb)
    opt.zero_grad()
    loss.backward()
    opt.step()
    print(f"{FIRST_STEP_MARK} {time.time():.6f}", flush=True)


if __name__ == "__main__":
    sys.exit(main())
