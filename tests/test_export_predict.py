"""``train export`` (plain PyTorch rebuild, torch.export program) and ``train predict``'s CSV, on
the checkpoint of one short digits run."""

from __future__ import annotations

import csv
import importlib.util
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import forkserver
import pytest
import torch
from support import DIGITS, quiet_args, run_train
from test_sizing import check_sizing_from
from tuning_support import train_digits

# the README's plain-PyTorch recipe; fails if anything imports Lightning
PLAIN_LOAD = textwrap.dedent(
    """
    import json, sys
    import torch
    from trainer_cli.models.registry import build_backbone

    export, batch_file, out_file = sys.argv[1:]
    spec = json.load(open(f"{export}/module.json"))
    net = build_backbone(**spec["build_backbone"]).eval()
    net.load_state_dict(torch.load(f"{export}/weights.pt", weights_only=True))
    program = torch.export.load(f"{export}/program.pt2").module()

    images = torch.load(batch_file)
    with torch.no_grad():
        outputs = {"net": net(images), "program": program(images), "program_odd_batch": program(images[:5])}
    imported = [m for m in sys.modules if m.split(".")[0] in ("lightning", "pytorch_lightning", "lightning_fabric")]
    assert not imported, imported
    torch.save(outputs, out_file)
    """
)


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Run directory of one short digits training run."""
    return train_digits(tmp_path_factory.mktemp("export") / "runs")


def digits_test_batch(n: int = 64) -> torch.Tensor:
    """The first ``n`` test images of the digits data module, ``[n, 1, 8, 8]``."""
    from trainer_cli.data import DigitsDataModule

    data = DigitsDataModule()
    data.setup("test")
    assert data.test_set is not None
    return torch.stack([data.test_set[i][0] for i in range(n)])


def test_a_submission_of_its_shape_is_sized_from_this_run(trained: Path, tmp_path: Path) -> None:
    """trainer_cli/schedulers/slurm/sizing.py on this module's fit (tests/test_sizing.py)."""
    check_sizing_from(trained, tmp_path)


def test_export_reloads_in_plain_pytorch_with_identical_predictions(trained: Path, tmp_path: Path) -> None:
    ckpt = trained / "checkpoints" / "last.ckpt"
    proc = run_train("export", "--ckpt", str(ckpt), "--torch_export")
    assert proc.returncode == 0, proc.stderr[-3000:]
    export = trained / "export"
    spec = json.loads((export / "module.json").read_text())
    assert spec["class_path"] == "trainer_cli.models.backbones.CNN"
    assert spec["lightning_module"] == "trainer_cli.models.ImageClassifier"
    assert spec["input_shape"] == [1, 8, 8]
    assert sorted(spec["files"]) == ["module.json", "program.pt2", "weights.pt"]

    images = digits_test_batch()
    torch.save(images, tmp_path / "batch.pt")
    script = tmp_path / "plain_load.py"
    script.write_text(PLAIN_LOAD)
    done = subprocess.run(
        [sys.executable, str(script), str(export), str(tmp_path / "batch.pt"), str(tmp_path / "out.pt")],
        cwd=tmp_path, capture_output=True, text=True, timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    outputs = torch.load(tmp_path / "out.pt")

    from trainer_cli.models import ImageClassifier

    module = ImageClassifier.load_from_checkpoint(ckpt, map_location="cpu").eval()
    with torch.no_grad():
        expected = module(images)
    assert expected.shape == (64, 10)
    assert torch.equal(outputs["net"], expected)  # bit for bit: same modules, same weights, same ops
    torch.testing.assert_close(outputs["program"], expected, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(outputs["program_odd_batch"], expected[:5], rtol=1e-5, atol=1e-6)


def test_export_never_overwrites_and_names_the_onnx_extra(trained: Path, tmp_path: Path) -> None:
    ckpt = str(trained / "checkpoints" / "last.ckpt")
    out = tmp_path / "taken"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    proc = run_train("export", "--ckpt", ckpt, "--out", str(out))
    assert proc.returncode == 2 and "already exists and is not empty" in proc.stderr
    assert [p.name for p in out.iterdir()] == ["keep.txt"]

    proc = run_train("export", "--ckpt", str(tmp_path / "missing.ckpt"))
    assert proc.returncode == 2 and "file not found" in proc.stderr and "Traceback" not in proc.stderr

    proc = run_train("export", "--ckpt", ckpt, "--out", str(tmp_path / "onnx"), "--onnx")
    if importlib.util.find_spec("onnx") and importlib.util.find_spec("onnxscript"):
        assert proc.returncode == 0, proc.stderr[-3000:]
        assert (tmp_path / "onnx" / "model.onnx").stat().st_size > 1000
    else:
        assert proc.returncode == 2
        assert "pip install 'trainer-cli[onnx]'" in proc.stderr
        assert not (tmp_path / "onnx").exists()


def test_predict_writes_index_class_and_probabilities(trained: Path, tmp_path: Path) -> None:
    ckpt = trained / "checkpoints" / "last.ckpt"
    root = tmp_path / "runs"
    proc = run_train("predict", "--config", DIGITS, *quiet_args(root), "--ckpt_path", str(ckpt))
    assert proc.returncode == 0, proc.stderr[-3000:]
    (csv_path,) = root.glob("digits/version_*/predictions.csv")
    with csv_path.open() as f:
        rows = list(csv.reader(f))
    header, body = rows[0], rows[1:]
    assert header == ["index", "predicted"] + [f"prob_{c}" for c in range(10)]

    from trainer_cli.data import DigitsDataModule
    from trainer_cli.models import ImageClassifier

    data = DigitsDataModule()
    data.setup("predict")
    assert data.test_set is not None and len(body) == len(data.test_set)
    assert [int(r[0]) for r in body] == list(range(len(body)))
    probs = torch.tensor([[float(p) for p in r[2:]] for r in body])
    torch.testing.assert_close(probs.sum(dim=1), torch.ones(len(body)), atol=1e-4, rtol=0)
    module = ImageClassifier.load_from_checkpoint(ckpt, map_location="cpu").eval()
    images = torch.stack([data.test_set[i][0] for i in range(len(body))])
    with torch.no_grad():
        expected = module(images).softmax(dim=-1)
    assert [int(r[1]) for r in body] == expected.argmax(dim=1).tolist()
    torch.testing.assert_close(probs, expected, atol=1e-5, rtol=1e-4)


# a checkpoint whose callback state holds an object that runs a command when unpickled
CRAFT = textwrap.dedent(
    """
    import os, sys
    import torch

    class Payload:
        def __reduce__(self):
            return (os.system, (f"touch {sys.argv[2]}",))

    ckpt = torch.load(sys.argv[1], map_location="cpu", weights_only=True)
    ckpt["callbacks"][next(iter(ckpt["callbacks"]))]["payload"] = Payload()
    torch.save(ckpt, sys.argv[3])
    """
)


def crafted_checkpoint(source: Path, marker: Path, tmp_path: Path) -> Path:
    """A copy of ``source`` whose first callback state, unpickled in full, touches ``marker``."""
    script, crafted = tmp_path / "craft.py", tmp_path / "crafted.ckpt"
    script.write_text(CRAFT)
    # forked from the suite's server where it can (it only writes a file; the loads under test are train's)
    done = forkserver.run_python([str(script), str(source), str(marker), str(crafted)], tmp_path, dict(os.environ), 300)
    assert done.returncode == 0, done.stderr[-3000:]
    return crafted


@pytest.mark.parametrize("verb", ["export", "fit", "validate", "test", "predict", "lr-find", "cv"])
def test_a_crafted_checkpoint_is_refused_in_one_line_and_nothing_runs(
    trained: Path, tmp_path: Path, verb: str
) -> None:
    """Every verb that reads a checkpoint uses torch's safe loader: the crafted object is never built."""
    marker = tmp_path / "pwned"
    crafted = crafted_checkpoint(trained / "checkpoints" / "last.ckpt", marker, tmp_path)
    out = tmp_path / "out"
    own = {"lr-find": ["--num_training", "20"], "cv": ["--folds", "2"]}.get(verb, [])
    if verb == "export":
        proc = run_train("export", "--ckpt", str(crafted), "--out", str(out))
    else:
        proc = run_train(verb, *own, "--config", DIGITS, *quiet_args(tmp_path / "runs"), "--ckpt_path", str(crafted))
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr + proc.stdout
    errors = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(errors) == 1 and errors[0].startswith("error: ") and "crafted.ckpt" in errors[0], proc.stderr
    assert "refused by torch's safe loader" in errors[0] and "GLOBAL posix.system" in errors[0], errors[0]
    if verb == "export":
        assert "--trust_checkpoint" in errors[0]
    assert not marker.exists() and not out.exists()


def test_export_trust_checkpoint_is_the_explicit_opt_in(trained: Path, tmp_path: Path) -> None:
    """``--trust_checkpoint`` (documented in --help) loads with the full unpickler: the file's object is built."""
    marker = tmp_path / "trusted"
    crafted = crafted_checkpoint(trained / "checkpoints" / "last.ckpt", marker, tmp_path)
    help_text = run_train("export", "--help").stdout
    assert "--trust_checkpoint" in help_text and "weights_only=False" in help_text
    proc = run_train("export", "--ckpt", str(crafted), "--out", str(tmp_path / "out"), "--trust_checkpoint")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert marker.exists()


def test_export_records_the_input_transform_that_gives_the_trained_accuracy(tmp_path: Path) -> None:
    """Raw scikit-learn digits, fed as module.json's ``input_transform`` says, score in plain torch
    as the checkpoint does on the data module's test split; the [0, 1] pixels alone do not."""
    root = tmp_path / "runs"
    proc = run_train("fit", "--config", DIGITS, *quiet_args(root, epochs=2))
    assert proc.returncode == 0, proc.stderr[-3000:]
    run = root / "digits" / "version_0"
    proc = run_train("export", "--run_dir", str(run))  # the run's best checkpoint
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Input: (raw * 0.0625 - mean) / std" in proc.stdout
    spec = json.loads((run / "export" / "module.json").read_text())
    transform = spec["input_transform"]
    assert transform["scale"] == 1 / 16 and len(transform["mean"]) == len(transform["std"]) == 1

    from sklearn.datasets import load_digits

    from trainer_cli.data import DigitsDataModule
    from trainer_cli.models import ImageClassifier
    from trainer_cli.models.registry import build_backbone

    data = DigitsDataModule()
    data.setup("test")
    assert data.test_set is not None
    images, labels = data.test_set.tensors  # type: ignore[attr-defined]
    module = ImageClassifier.load_from_checkpoint(spec["checkpoint"], map_location="cpu").eval()
    with torch.no_grad():
        trained_acc = (module(images).argmax(1) == labels).float().mean().item()
    assert trained_acc > 0.8

    digits = load_digits()
    _, _, test_idx = data.split_indices(torch.tensor(digits.target))
    raw = torch.tensor(digits.images[test_idx], dtype=torch.float32).unsqueeze(1)  # pixels 0..16
    target = torch.tensor(digits.target[test_idx])
    assert torch.equal(target, labels)
    net = build_backbone(**spec["build_backbone"]).eval()
    net.load_state_dict(torch.load(run / "export" / "weights.pt", weights_only=True))
    mean, std = (torch.tensor(transform[k]).view(1, -1, 1, 1) for k in ("mean", "std"))
    with torch.no_grad():
        plain_acc = (net((raw * transform["scale"] - mean) / std).argmax(1) == target).float().mean().item()
        unnormalised_acc = (net(raw * transform["scale"]).argmax(1) == target).float().mean().item()
    assert plain_acc == pytest.approx(trained_acc, abs=1e-6)
    assert unnormalised_acc < trained_acc - 0.2
