"""A user's stock Lightning project under `train` (issue 18, defect 3): the config its
``LightningCLI(SmallNet, BlobData)`` script prints (no ``class_path``) runs with ``--model`` /
``--data`` before or after ``--config``, says which flag to add without them, and the checkpoints
its script writes (the model class fixed in code, or chosen in subclass mode) resume and test.

The project is ``tests/foreign`` (package ``lit_foreign``, no trainer_cli import), run here as its
user runs it: ``python plain_main.py ...`` with stock LightningCLI.
"""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

import forkserver
import pytest
import yaml
from foreign_support import DATA, FOREIGN, MODEL, SUPPORT, foreign_env
from support import DIGITS, quiet_args, run_helper, run_train

STEPS_PER_EPOCH = 8  # BlobData: 128 samples, batches of 16


def user_script(script: str, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """``python tests/foreign/SCRIPT ARGS`` in ``cwd``, as the user runs their project."""
    done = forkserver.run_python([str(FOREIGN / script), *args], cwd, foreign_env(), 600)
    assert done.returncode == 0, done.stderr[-3000:]
    return done


@pytest.fixture(scope="module")
def stock(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The stock config (printed by the user's script, hidden_dim changed to 24, one epoch) and the
    checkpoint each kind of stock script writes with it (``pos``: the model class fixed in code,
    ``sub``: subclass mode)."""
    tmp = tmp_path_factory.mktemp("stock")
    printed = yaml.safe_load(user_script("plain_main.py", "fit", "--print_config", cwd=tmp).stdout)
    assert "class_path" not in printed["model"] and "class_path" not in printed["data"]
    printed["model"]["hidden_dim"] = 24
    printed["trainer"]["max_epochs"] = 1
    cfg = tmp / "cfg.yaml"
    cfg.write_text(yaml.safe_dump(printed, sort_keys=False))
    user_script("plain_main.py", "fit", "--config", str(cfg), cwd=tmp)
    user_script("plain_subclass_main.py", "fit", "--model", MODEL, "--config", str(cfg), cwd=tmp)
    found = {}
    for kind, version in (("pos", 0), ("sub", 1)):
        [ckpt] = (tmp / "foreign_logs" / "blobs" / f"version_{version}" / "checkpoints").glob("*.ckpt")
        found[kind] = ckpt
    return {"tmp": tmp, "cfg": cfg, **found}


def train(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    done = run_train(*args, cwd=cwd, env=foreign_env())
    assert done.returncode == 0, done.stderr[-3000:]
    return done


def metrics(root: Path) -> list[dict[str, str]]:
    """The rows of the one run's ``metrics.csv`` under ``root`` (the user's CSVLogger, pointed into the run)."""
    [file] = root.rglob("metrics.csv")
    with file.open() as f:
        return list(csv.DictReader(f))


def test_checkpoints_differ_as_stock_scripts_write_them(stock: dict[str, Path]) -> None:
    import torch

    pos = torch.load(stock["pos"], weights_only=True)["hyper_parameters"]
    sub = torch.load(stock["sub"], weights_only=True)["hyper_parameters"]
    assert "_class_path" not in pos and sub["_class_path"] == MODEL
    assert pos["hidden_dim"] == sub["hidden_dim"] == 24 and pos["num_classes"] == 4  # from the user's link


def expected_test_loss(ckpt: Path) -> float:
    """The test loss of the checkpoint's weights on BlobData's test split, computed here."""
    sys.path.insert(0, str(FOREIGN))
    try:
        import torch
        from lit_foreign.data import BlobData
        from lit_foreign.model import SmallNet
    finally:
        sys.path.remove(str(FOREIGN))
    state = torch.load(ckpt, weights_only=True)
    model = SmallNet(**{k: v for k, v in state["hyper_parameters"].items() if not k.startswith("_")})
    model.load_state_dict(state["state_dict"])
    x, y = BlobData(n_labels=4)._split(3).tensors
    with torch.no_grad():
        return float(torch.nn.functional.cross_entropy(model(x), y))


@pytest.mark.parametrize("kind", ["pos", "sub"])
def test_stock_checkpoint_resumes_and_tests(stock: dict[str, Path], kind: str, tmp_path: Path) -> None:
    """Resume one more epoch from the stock checkpoint, then test it; ``--model``/``--data`` after
    ``--config`` for one kind, before it for the other."""
    classes = ["--model", MODEL, "--data", DATA]
    config = ["--config", str(stock["cfg"])]
    ordered = [*config, *classes] if kind == "pos" else [*classes, *config]
    fit_root, test_root = tmp_path / "fit", tmp_path / "test"
    done = train(stock["tmp"], "fit", *ordered, "--trainer.default_root_dir", str(fit_root),
                 "--trainer.max_epochs", "2", "--ckpt_path", str(stock[kind]))
    assert "Run directory:" in done.stdout
    import torch

    last = torch.load(next(fit_root.rglob("last.ckpt")), weights_only=True)
    assert last["global_step"] == 2 * STEPS_PER_EPOCH  # one more epoch on top of the stock one
    trained = [r for r in metrics(fit_root) if r.get("train_loss")]
    assert trained and {r["epoch"] for r in trained} == {"1"}  # epoch 0 came from the checkpoint
    [run_dir] = [p.parent for p in fit_root.rglob("config.yaml")]
    recorded = yaml.safe_load((run_dir / "config.yaml").read_text())
    assert recorded["model"]["class_path"] == MODEL and recorded["model"]["init_args"]["hidden_dim"] == 24

    train(stock["tmp"], "test", *ordered, "--trainer.default_root_dir", str(test_root), "--ckpt_path", str(stock[kind]))
    [row] = [r for r in metrics(test_root) if r.get("test_loss")]
    assert float(row["test_loss"]) == pytest.approx(expected_test_loss(stock[kind]), rel=1e-4)


def test_stock_mistakes_say_what_to_add(stock: dict[str, Path], tmp_path: Path) -> None:
    """Without ``--model`` (or ``--data``): one line naming the config's line and the flag; a stock
    checkpoint given with a model it does not fit: one line naming the arguments. Exit 2, nothing
    made on disk."""
    cfg = str(stock["cfg"])
    cases = {
        "no_model": {"argv": ["fit", "--config", cfg, "--data", DATA], "cwd": str(tmp_path)},
        "no_data": {"argv": ["fit", "--config", cfg, "--model", MODEL], "cwd": str(tmp_path)},
        "ckpt_of_another_model": {
            "argv": ["test", "--model", "lit_foreign.broken.CheckedNet", "--data", DATA, "--ckpt_path", str(stock["pos"])],
            "cwd": str(tmp_path),
        },
    }
    (tmp_path / "cases.json").write_text(json.dumps(cases))
    run_helper(SUPPORT, str(tmp_path / "cases.json"), str(tmp_path / "out.json"), env=foreign_env())
    results = json.loads((tmp_path / "out.json").read_text())
    text = stock["cfg"].read_text().splitlines()
    expected = {
        key: f"error: in {cfg} line {text.index(f'{key}:') + 1}: the config's {key}: has no class_path (a config printed "
        f"by a LightningCLI script with a fixed {key} class?): add --{key} pkg.Class (anywhere on the command line) or "
        f"{key}.class_path: pkg.Class to the config"
        for key in ("model", "data")
    }
    expected["ckpt_of_another_model"] = (
        f"error: --ckpt_path {stock['pos']} does not fit the model lit_foreign.broken.CheckedNet: its hyperparameters "
        "hidden_dim, in_features, lr, loss_weight are not arguments of it (a checkpoint of another model? its class is "
        "not recorded: --model names it)"
    )
    for name, line in (("no_model", expected["model"]), ("no_data", expected["data"]),
                       ("ckpt_of_another_model", expected["ckpt_of_another_model"])):
        result = results[name]
        assert result["code"] == 2 and "Traceback" not in result["stderr"], result["stderr"][-2000:]
        assert result["stderr"].strip() == line
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cases.json", "out.json"]


def test_printed_config_submits_from_the_users_script(stock: dict[str, Path], tmp_path: Path) -> None:
    """``python main.py submit --config <printed>``: the script fixes the model and data classes, so
    the printed config needs no ``class_path`` here, as under ``python main.py fit``."""
    done = forkserver.run_python([str(FOREIGN / "main.py"), "submit", "--config", str(stock["cfg"]), "--trainer.accelerator", "cpu",
                                  "--trainer.devices", "1", "--dry-run"], tmp_path, foreign_env(), 600)
    assert done.returncode == 0, done.stderr[-3000:]
    # where `python main.py fit` puts the script's runs: its logger's <save_dir>/<name>/version_<N>
    assert f"{FOREIGN / 'main.py'} fit --config {tmp_path}/foreign_logs/blobs/version_0/config.yaml" in done.stdout
    assert not (tmp_path / "foreign_logs").exists() and not (tmp_path / "runs").exists()


def _history(run: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in (run / "history.jsonl").read_text().splitlines()]


def test_stock_run_resumes_with_last_and_tests_with_best(stock: dict[str, Path], tmp_path: Path) -> None:
    """A run stock LightningCLI made (its ModelCheckpoint's ``epoch=0-step=8.ckpt`` alone, no ``last.ckpt``)
    resumes with ``--ckpt_path last`` from that file (by the step saved in it) and tests with ``best``: its
    ModelCheckpoint has no monitor, so Lightning's best_model_path, the latest file, said so in one line."""
    import shutil

    import torch

    run = tmp_path / "foreign_logs" / "blobs" / "version_0"
    shutil.copytree(stock["pos"].parents[1], run)
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == ["epoch=0-step=8.ckpt"]
    user_script("main.py", "fit", "--run_dir", str(run), "--ckpt_path", "last", "--trainer.max_epochs", "2", cwd=tmp_path)
    assert torch.load(run / "checkpoints" / "last.ckpt", weights_only=True)["global_step"] == 2 * STEPS_PER_EPOCH
    user_script("main.py", "test", "--run_dir", str(run), "--ckpt_path", "best", cwd=tmp_path)
    fit, test = _history(run)
    assert Path(str(fit["checkpoint"])).name == "epoch=0-step=8.ckpt" and fit["global_step"] == STEPS_PER_EPOCH
    assert Path(str(test["checkpoint"])).name == "epoch=1-step=16.ckpt", test
    assert test["why"] == "--ckpt_path best: no ModelCheckpoint of the run monitors a metric, so its latest file"


def test_damaged_checkpoint_hint_names_the_runs_own_files(stock: dict[str, Path], tmp_path: Path) -> None:
    """A damaged ``--ckpt_path`` file: the hint names the complete checkpoints beside it as the project's
    callback named them (``epoch=0-step=8.ckpt``), not the launcher's ``best-*.ckpt``."""
    from trainer_cli.errors import UserError
    from trainer_cli.runtime.checkpointing import check_checkpoint_file

    folder = tmp_path / "checkpoints"
    folder.mkdir()
    good = folder / stock["pos"].name
    good.write_bytes(stock["pos"].read_bytes())
    bad = folder / "epoch=1-step=16.ckpt"
    bad.write_bytes(good.read_bytes()[:2000])  # cut short
    with pytest.raises(UserError) as err:
        check_checkpoint_file(str(bad))
    assert str(err.value).endswith(f"; use another checkpoint of the run: {good}"), err.value
    good.unlink()
    with pytest.raises(UserError) as err:
        check_checkpoint_file(str(bad))
    assert str(err.value).endswith(f"; no other complete checkpoint is in {folder}: give another checkpoint file")


def test_every_checkpoint_loads_with_plain_lightning(stock: dict[str, Path], tmp_path: Path) -> None:
    """``Class.load_from_checkpoint(path)`` with no other argument and ``torch.load(path, weights_only=True)``,
    in a fresh process where importing trainer_cli fails, on the checkpoints of the stock scripts (class fixed,
    subclass mode), of the TrainerCLI script, and of ``train fit`` on a module taking its optimizer and scheduler
    as ``OptimizerCallable``/``LRSchedulerCallable`` partials: the restored module's own configure_optimizers
    builds the optimizer and scheduler it was trained with. The shipped ImageClassifier (whose class is
    trainer_cli's) loads too: nothing the launcher adds to a checkpoint stops it."""
    user_script("main.py", "fit", "--config", str(stock["cfg"]), cwd=tmp_path)
    [script_ckpt] = (tmp_path / "foreign_logs" / "blobs" / "version_0" / "checkpoints").glob("last.ckpt")
    partial = ["--model", "lit_foreign.partial_model.PartialNet", "--data", DATA, "--trainer.max_epochs", "1",
               "--model.optimizer", "torch.optim.Adam", "--model.optimizer.lr", "0.01", "--model.scheduler",
               "torch.optim.lr_scheduler.StepLR", "--model.scheduler.step_size", "3"]  # fmt: skip
    train(tmp_path, "fit", *partial, "--trainer.default_root_dir", str(tmp_path / "partial"))
    train(tmp_path, "fit", "--config", DIGITS, *quiet_args(tmp_path / "shipped"), "--trainer.limit_train_batches", "2",
          "--trainer.limit_val_batches", "1")  # fmt: skip
    [partial_ckpt] = (tmp_path / "partial").rglob("last.ckpt")
    [shipped_ckpt] = (tmp_path / "shipped").rglob("last.ckpt")
    loads = str(Path(__file__).with_name("checkpoint_loads.py"))
    pairs = [f"{MODEL}={stock['pos']}", f"{MODEL}={stock['sub']}", f"{MODEL}={script_ckpt}",
             f"lit_foreign.partial_model.PartialNet={partial_ckpt}"]  # fmt: skip
    fresh = {"cwd": tmp_path, "env": foreign_env(), "capture_output": True, "text": True, "timeout": 300}
    done = subprocess.run([sys.executable, loads, "--block", *pairs], **fresh)  # never the fork server's preloads
    assert done.returncode == 0, done.stderr[-3000:]
    loaded = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    sgd = {"loaded": "SmallNet", "trainer_cli": False, "optimizer": ["SGD", 0.1], "scheduler": None}
    assert loaded[:3] == [sgd] * 3
    assert loaded[3] == {"loaded": "PartialNet", "trainer_cli": False, "optimizer": ["Adam", 0.01], "scheduler": "StepLR"}
    done = subprocess.run([sys.executable, loads, f"trainer_cli.models.ImageClassifier={shipped_ckpt}"], **fresh)
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout.splitlines()[-1])["loaded"] == "ImageClassifier"
