"""The corpus of project shapes (``tests/corpus``, see its README): each shape copied outside this repository
into a git repository of its own, run the way its user runs it (fit, resume, test, the printed config read
back by the stock entry, a submit's dry run), and every checkpoint it leaves loaded with the module's own
``load_from_checkpoint`` in a fresh process.

- ``lightning_example``: Lightning's ``examples/pytorch/basics/backbone_image_classifier.py``
  (Lightning-AI/pytorch-lightning@021e6b11da0e): ``run=False``, the script's own ``fit``/``test``/``predict``,
  data from ``__file__`` outside the project, a backbone ``nn.Module`` argument.
- ``mlflow_cli``: dbozbay/stormy-ai's ``stormy/trainer.py`` (the search index's stored text; no commit was
  recorded): a package run with ``python -m``, a LightningCLI subclass with ``add_lightning_class_args``
  (EarlyStopping, a top-3 ModelCheckpoint), a ``compute_fn`` link, ``ArgsType``, an MLflow file store logger,
  a SaveConfigCallback subclass, data from an environment variable.
- ``hydra_main``: donglinkang2021/MinVQVAE@a22527f5e4cc ``train.py``: a ``@hydra.main`` script (no LightningCLI),
  the LightningModule in group ``task``, the data module in ``dataset``, a network and values interpolated
  into them; its configs run unchanged under ``train fit --config configs/train.yaml``.
- ``plain_trainer``: Cozmo18/detoxy@36daef3f89bf ``detoxy/ml/trainer.py``: a plain ``Trainer`` script behind
  ``jsonargparse.CLI``; its classes run under ``train fit --model ... --data ...`` with its callbacks as a
  config (a ``ModelCheckpoint`` with a hyphenated ``monitor``), data from an environment variable.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml
from corpus_support import git, loads, project, run, user_env, write_digits
from support import CONFIGS

LOCAL_PROFILE = str(CONFIGS / "slurm" / "local.yaml")


def _ok(done, what: str) -> str:
    assert done.returncode == 0, f"{what} exited {done.returncode}:\n{done.stderr[-3000:]}"
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    return done.stdout


def _step(ckpt: Path) -> int:
    return int(torch.load(ckpt, weights_only=True, map_location="cpu")["global_step"])


def _stock(script: Path) -> Path:
    """The same entry with stock LightningCLI (the swap undone), beside it."""
    text = script.read_text().replace("from trainer_cli import TrainerCLI as LightningCLI", "from lightning.pytorch.cli import LightningCLI")
    text = text.replace("from trainer_cli.cli import", "from lightning.pytorch.cli import")
    stock = script.with_name("stock_" + script.name)
    stock.write_text(text)
    return stock


def test_lightning_example_run_false_fits_resumes_and_loads(tmp_path: Path) -> None:
    """``python main.py`` (``run=False``: the script calls fit, test and predict): a run folder under
    ``lightning_logs``; ``--run_dir ... --ckpt_path last`` makes the script's own ``trainer.fit`` resume in the
    same folder (the resume line, the step carried on, no second version, no event file outside it); its
    printed config reads back in the stock script; the checkpoints load with ``LitClassifier.load_from_checkpoint``."""
    write_digits(tmp_path / "Datasets")  # <project>/../Datasets, as the example finds it from __file__
    proj = project(tmp_path, "lightning_example")
    env = user_env()
    quick = ["--trainer.limit_train_batches", "4", "--trainer.enable_progress_bar", "false"]
    out = _ok(run(proj, ["main.py", "--trainer.max_epochs", "1", *quick], env), "fit")
    assert "PREDICTIONS (32, 10)" in out, out[-2000:]
    run_dir = proj / "lightning_logs" / "version_0"
    assert (run_dir / "config.yaml").is_file() and _step(run_dir / "checkpoints" / "last.ckpt") == 4

    again = run(proj, ["main.py", "--run_dir", "lightning_logs/version_0", "--ckpt_path", "last", "--trainer.max_epochs", "2", *quick], env)
    out = _ok(again, "resume")
    assert "Resuming lightning_logs/version_0 from" in out and "(step 4, 1 epochs done)" in out, out[-2000:]
    assert _step(run_dir / "checkpoints" / "last.ckpt") == 8
    assert sorted(p.name for p in (proj / "lightning_logs").iterdir()) == ["version_0"]
    outside = [p for p in proj.rglob("events.out.tfevents.*") if run_dir not in p.parents]
    assert not outside, outside

    printed = _ok(run(proj, ["main.py", "--print_config"], env), "--print_config")
    (proj / "printed.yaml").write_text(printed)
    _ok(run(proj, [str(_stock(proj / "main.py")), "--config", "printed.yaml", "--print_config"], env), "the stock script reading it")

    dry = run(proj, ["main.py", "submit", "--config", LOCAL_PROFILE, "--trainer.devices", "1", "--dry-run"], env)
    srun = next(line for line in _ok(dry, "submit --dry-run").splitlines() if line.startswith("srun "))
    assert "/code/main.py --config " in srun and " fit " not in srun, srun  # run=False: the script takes no verb

    ckpts = sorted((run_dir / "checkpoints").glob("*.ckpt"))
    assert [c.name for c in ckpts] == ["epoch=1-step=8.ckpt", "last.ckpt"], ckpts  # Lightning keeps its newest
    # main.py imports trainer_cli (the swapped import): its classes load it; both files in one process
    loaded_all = loads(proj, [("main.LitClassifier", ckpt) for ckpt in ckpts], block=False)
    assert len(loaded_all) == len(ckpts), loaded_all
    for loaded in loaded_all:
        assert loaded["optimizer"] == ["Adam", 0.001], loaded


@pytest.mark.long  # 2 minutes of make test's 12 under load: test_corpus_cluster.py's submit of it is long too
def test_mlflow_cli_package_fits_resumes_tests_and_loads(tmp_path: Path) -> None:
    """``python -m stormlit.trainer fit``: without ``MLFLOW_ALLOW_FILE_STORE`` MLflow refuses its file store:
    one line naming the logger, no traceback, nothing made. Then the run lives in the MLflow run's folder
    (``mlruns/<experiment>/<run id>``), its top-3 ``finetuned-*`` files and last.ckpt beside; a resume
    continues the same MLflow run; ``test --run_dir``; the printed config reads back in the stock entry;
    every checkpoint loads with ``SequenceClassifier.load_from_checkpoint`` where trainer_cli cannot be imported."""
    data = write_digits(tmp_path / "outside" / "data")
    proj = project(tmp_path, "mlflow_cli")
    entry = ["-m", "stormlit.trainer"]
    quick = ["--trainer.limit_train_batches", "4", "--trainer.enable_progress_bar", "false"]
    refused = run(proj, [*entry, "fit", "--trainer.max_epochs", "1", *quick], user_env(STORMLIT_DATA=str(data)))
    assert refused.returncode != 0 and "Traceback" not in refused.stderr, refused.stderr[-3000:]
    lines = [line for line in refused.stderr.splitlines() if line.startswith("error:")]
    assert len(lines) == 1 and "MLFlowLogger could not be built" in lines[0] and "MLFLOW_ALLOW_FILE_STORE" in lines[0], refused.stderr
    assert not list(proj.glob("mlruns/*/*/checkpoints")), "a refused start made a run"

    env = user_env(STORMLIT_DATA=str(data), MLFLOW_ALLOW_FILE_STORE="true")
    _ok(run(proj, [*entry, "fit", "--trainer.max_epochs", "2", *quick], env), "fit")
    (run_dir,) = [p.parent for p in proj.glob("mlruns/*/*/checkpoints")]
    names = sorted(p.name for p in (run_dir / "checkpoints").iterdir())
    assert names[-1] == "last.ckpt" and len([n for n in names if n.startswith("finetuned-epoch=")]) == 2, names
    assert (run_dir / "config.yaml").is_file() and _step(run_dir / "checkpoints" / "last.ckpt") == 8

    out = _ok(run(proj, [*entry, "fit", "--run_dir", str(run_dir), "--ckpt_path", "last", "--trainer.max_epochs", "3", *quick], env), "resume")
    assert "(step 8, 2 epochs done)" in out, out[-2000:]
    assert _step(run_dir / "checkpoints" / "last.ckpt") == 12
    assert [p.parent for p in proj.glob("mlruns/*/*/checkpoints")] == [run_dir]  # the same MLflow run

    out = _ok(run(proj, [*entry, "test", "--run_dir", str(run_dir)], env), "test")
    assert "test_loss" in out, out[-2000:]

    printed = _ok(run(proj, [*entry, "fit", "--print_config"], env), "--print_config")
    (proj / "printed.yaml").write_text(printed)
    assert "num_labels" not in yaml.safe_load(printed)["model"]  # a link's target, given by the link, as stock prints it
    stock = _stock(proj / "stormlit" / "trainer.py")
    _ok(run(proj, ["-m", f"stormlit.{stock.stem}", "fit", "--config", "printed.yaml", "--print_config"], env), "stock reading it")

    dry = run(proj, [*entry, "submit", "--config", LOCAL_PROFILE, "--trainer.devices", "1", "--dry-run"], env)
    srun = next(line for line in _ok(dry, "submit --dry-run").splitlines() if line.startswith("srun "))
    assert " -m stormlit.trainer fit --config " in srun, srun  # run as the user runs it, from the snapshot's folder

    ckpts = sorted((run_dir / "checkpoints").glob("*.ckpt"))
    for ckpt in ckpts:
        (loaded,) = loads(proj, {"stormlit.module.SequenceClassifier": ckpt}, block=True)
        assert loaded["optimizer"] == ["AdamW", 0.01] and loaded["trainer_cli"] is False, loaded


def test_plain_trainer_scripts_classes_under_train(tmp_path: Path) -> None:
    """A plain ``Trainer`` script's classes under ``train fit --model ... --data ...`` with its callbacks as a
    config: the run's ``toxic.ckpt`` (monitor ``val-loss``) and last.ckpt; a resume; ``test --run_dir`` takes
    the best file; a submit's dry run of the run's config; both checkpoints load where trainer_cli cannot be
    imported."""
    cache = write_digits(tmp_path / "shared" / "cache")
    proj = project(tmp_path, "plain_trainer")
    env = user_env(DETOX_CACHE=str(cache), PYTHONPATH=str(tmp_path / "plain_trainer"))
    classes = ["--model", "detox.ml.module.ToxicClassifier", "--data", "detox.ml.datamodule.TokenizerDataModule"]
    quick = ["--trainer.limit_train_batches", "4", "--trainer.enable_progress_bar", "false"]
    _ok(run(proj, ["-m", "trainer_cli", "fit", *classes, "--config", "callbacks.yaml", "--trainer.max_epochs", "2", *quick], env), "fit")
    run_dir = proj / "runs" / "run" / "version_0"
    assert sorted(p.name for p in (run_dir / "checkpoints").iterdir()) == ["last.ckpt", "toxic.ckpt"]

    out = _ok(run(proj, ["-m", "trainer_cli", "fit", "--run_dir", str(run_dir), "--ckpt_path", "last", "--trainer.max_epochs", "3", *quick], env), "resume")
    assert "(step 8, 2 epochs done)" in out and _step(run_dir / "checkpoints" / "last.ckpt") == 12, out[-2000:]

    out = _ok(run(proj, ["-m", "trainer_cli", "test", "--run_dir", str(run_dir)], env), "test")
    assert "toxic.ckpt" in out and "test-loss" in out, out[-2000:]

    dry = run(proj, ["-m", "trainer_cli", "submit", "--config", str(run_dir / "config.yaml"), "--config", LOCAL_PROFILE, "--trainer.devices", "1", "--dry-run"], env)
    out = _ok(dry, "submit --dry-run")
    assert "# Code:" in out and "(dry run: not taken)" in out, out[-3000:]

    pairs = [("detox.ml.module.ToxicClassifier", c) for c in sorted((run_dir / "checkpoints").glob("*.ckpt"))]
    loaded_all = loads(proj, pairs, block=True)  # both files in one process
    assert len(loaded_all) == len(pairs) == 2, loaded_all
    for loaded in loaded_all:
        assert loaded["optimizer"] == ["Adam", 0.01] and loaded["trainer_cli"] is False, loaded


_LOAD_WITH_NETWORK = """
import sys, importlib.abc, torch
class Blocked(importlib.abc.MetaPathFinder):
    def find_spec(self, name, *args):
        if name.split(".")[0] == "trainer_cli":
            raise ImportError(name + " imported while loading a checkpoint")
sys.meta_path.insert(0, Blocked())
from minvq.img2img import Img2Img
from minvq.models import VanillaAE
for path in sys.argv[1:]:
    torch.load(path, weights_only=True, map_location="cpu")
    module = Img2Img.load_from_checkpoint(path, model=VanillaAE(64, 8, [32, 16]), map_location="cpu")
    print(type(module.model).__name__, module.hparams["learning_rate"], module.hparams["vis_kwargs"]["in_dim"], "trainer_cli" in sys.modules)
"""


def test_hydra_main_script_configs_run_under_train_unchanged(tmp_path: Path) -> None:
    """A ``@hydra.main`` script's project (MinVQVAE's shape: the LightningModule in group ``task``, its network
    in group ``model`` interpolated into it, the data module in group ``dataset``, ``trainer: {_target_:
    lightning.Trainer, logger: ${logger}}``, values in group ``train``, data at an absolute path outside the
    project): its own ``python train.py`` runs; ``train fit --config configs/train.yaml`` runs the same configs
    unchanged (task -> model, dataset -> data, the interpolated groups resolved and dropped, the logger into the
    run folder); a resume; ``test --run_dir``; a submit's dry run; each checkpoint loads as the project loads it
    (``Img2Img.load_from_checkpoint(path, model=VanillaAE(...))``: the network is left out of its
    hyperparameters) and with ``weights_only=True``, where trainer_cli cannot be imported."""
    data = write_digits(tmp_path / "site" / "data")
    proj = project(tmp_path, "hydra_main")
    paths = proj / "configs" / "paths" / "default.yaml"  # the site's absolute paths, as the project writes them
    paths.write_text(paths.read_text().replace("/data1/output/MinVQ", str(tmp_path / "site" / "out")).replace("/data1/data", str(data)))
    git(proj, "commit", "-qam", "this site's paths")
    env = user_env(PYTHONPATH=str(proj))
    quick = ["+trainer.limit_train_batches=2", "+trainer.limit_val_batches=2", "+trainer.enable_progress_bar=false"]
    _ok(run(proj, ["train.py", "train.epochs=1", *quick], env), "python train.py")
    stock = sorted((tmp_path / "site" / "out" / "logs" / "tensorboard").glob("*/version_0/checkpoints/*.ckpt"))
    assert len(stock) == 1, stock

    quick = ["--trainer.limit_train_batches", "2", "--trainer.limit_val_batches", "2", "--trainer.enable_progress_bar", "false"]
    done = run(proj, ["-m", "trainer_cli", "fit", "--config", "configs/train.yaml", *quick], env)
    _ok(done, "train fit")
    assert "Hydra keys ignored: project_name" in done.stderr and "model (resolved into" in done.stderr, done.stderr[-2000:]
    run_dir = proj / "runs" / "img2img-ae-digits" / "version_0"
    assert sorted(p.name for p in (run_dir / "checkpoints").iterdir()) == ["epoch=1-step=4.ckpt", "last.ckpt"]
    assert list(run_dir.glob("events.out.tfevents.*")), sorted(p.name for p in run_dir.iterdir())
    config = yaml.safe_load((run_dir / "config.yaml").read_text())
    assert config["model"]["class_path"] == "minvq.img2img.Img2Img" and config["data"]["init_args"]["data_dir"] == str(data)

    out = _ok(run(proj, ["-m", "trainer_cli", "fit", "--run_dir", str(run_dir), "--ckpt_path", "last", "--trainer.max_epochs", "3", *quick], env), "resume")
    assert "(step 4, 2 epochs done)" in out and _step(run_dir / "checkpoints" / "last.ckpt") == 6, out[-2000:]

    out = _ok(run(proj, ["-m", "trainer_cli", "test", "--run_dir", str(run_dir), "--trainer.limit_test_batches", "2"], env), "test")
    assert "test_loss" in out, out[-2000:]

    dry = run(proj, ["-m", "trainer_cli", "submit", "--config", "configs/train.yaml", "--config", LOCAL_PROFILE, "--dry-run"], env)
    out = _ok(dry, "submit --dry-run")
    assert "# Code:" in out and "(dry run: not taken)" in out, out[-3000:]

    ckpts = [*sorted((run_dir / "checkpoints").glob("*.ckpt"))]
    done = subprocess.run([sys.executable, "-c", _LOAD_WITH_NETWORK, *map(str, ckpts)], cwd=proj, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.splitlines() == ["VanillaAE 0.003 64 False"] * len(ckpts), done.stdout
