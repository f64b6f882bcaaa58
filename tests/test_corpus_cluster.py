"""The corpus's projects submitted for real on the local cluster (long: each job trains for half a minute and
is requeued once), each from a copy outside this repository, as its user submits it: a package run with
``python -m`` (``tests/corpus/mlflow_cli``), a script built with ``run=False`` (``tests/corpus/lightning_example``),
a ``@hydra.main`` project's configs (``tests/corpus/hydra_main``) and a plain ``Trainer`` script's classes
(``tests/corpus/plain_trainer``) under ``train submit``, and lightning-hydra-template's project as it is
(``tests/foreign_lht``). The job runs the submitted code from its snapshot, is given SIGUSR1 mid-training
(what ``--signal=SIGUSR1@N`` sends before the time limit) once its newest checkpoint is written, requeues,
resumes at the step it saved and COMPLETES; every checkpoint it leaves is loaded in a fresh process where
importing trainer_cli fails: with the module's own ``load_from_checkpoint``, or, for the template's module
(its optimizer and scheduler arguments annotated with the classes, which ``load_from_checkpoint`` cannot
rebuild: docs/reference/compatibility.md), built from the checkpoint's hyperparameters as the template's
code builds it, its weights loaded strictly."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from corpus_support import git, loads, project, run, user_env, write_digits
from lht_support import lht_project
from slurm_support import LOCAL_PROFILE, job_id_from, slurm_cluster, wait_for_requeue, wait_for_state, wait_for_step  # noqa: F401
from test_corpus import _LOAD_WITH_NETWORK

QUIET = ["--trainer.enable_progress_bar", "false", "--trainer.enable_model_summary", "false"]


def _submit_requeue_complete(
    proj: Path, argv: list[str], env: dict[str, str], epochs: int, *more: str, profile: str = LOCAL_PROFILE
) -> tuple[Path, str, int]:
    """``python ARGV submit ...`` in ``proj``; SIGUSR1 once the run's newest checkpoint is written (an epoch
    done, ``epochs`` less one to go: the signal cannot come after the end); returns (run dir, job id, the
    requeue's step) after the job COMPLETED after one requeue, resumed where it saved."""
    flags = [*more, "--config", profile, "--trainer.devices", "1", "--trainer.max_epochs", str(epochs), *QUIET]
    done = run(proj, [*argv, "submit", *flags], env)
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    job_id = job_id_from(done.stdout)
    run_dir = Path(
        next(line.split(":", 1)[1].strip() for line in done.stdout.splitlines() if line.startswith("Run directory:"))
    )
    signalled_at = wait_for_step(run_dir, 1, timeout_s=300, job_id=job_id)  # training is under way, epochs to go
    subprocess.run(["scancel", "-s", "USR1", job_id], check=True, timeout=30)
    wait_for_requeue(job_id)
    log = run_dir / f"slurm-{job_id}.log"
    assert wait_for_state(job_id, timeout_s=400) == "COMPLETED", log.read_text()[-3000:]
    starts = [json.loads(line) for line in (run_dir / "history.jsonl").read_text().splitlines()]
    kinds = [(s["kind"], s["job"]["restart_count"]) for s in starts if s["kind"] in ("new", "requeue")]
    assert kinds == [("new", 0), ("requeue", 1)], starts
    saved_at = starts[-1]["global_step"]
    assert saved_at >= signalled_at > 0, "the restart resumed from the checkpoint, not from step 0"
    return run_dir, job_id, saved_at


@pytest.mark.long
def test_a_module_run_package_submits_requeues_and_completes(slurm_cluster: None, tmp_path: Path) -> None:  # noqa: F811
    """``python -m stormlit.trainer submit``: the job runs ``python -m stormlit.trainer`` from the snapshot."""
    data = write_digits(tmp_path / "outside" / "data")
    proj = project(tmp_path, "mlflow_cli")
    env = user_env(STORMLIT_DATA=str(data), MLFLOW_ALLOW_FILE_STORE="true")
    run_dir, job_id, saved_at = _submit_requeue_complete(proj, ["-m", "stormlit.trainer"], env, epochs=40)
    assert " -m stormlit.trainer fit --config " in (run_dir / "submit.sbatch").read_text()
    last = torch.load(run_dir / "checkpoints" / "last.ckpt", weights_only=True, map_location="cpu")
    assert last["global_step"] > saved_at, "trained on after the requeue (to the end or its EarlyStopping)"
    for ckpt in sorted((run_dir / "checkpoints").glob("*.ckpt")):
        (loaded,) = loads(proj, {"stormlit.module.SequenceClassifier": ckpt}, block=True)
        assert loaded["optimizer"] == ["AdamW", 0.01], loaded


@pytest.mark.long
def test_a_run_false_script_submits_requeues_and_completes(slurm_cluster: None, tmp_path: Path) -> None:  # noqa: F811
    """``python main.py submit`` of a ``run=False`` script: the job runs ``main.py`` without a verb; after the
    requeue the script's own ``trainer.fit`` resumes, then its test and predict run. Its data is found from
    ``__file__`` outside the project (``<project>/../Datasets``), which a code snapshot's copy of ``main.py``
    (``<run>/code/main.py``) cannot reach: the job runs the live script (``--slurm.snapshot false``)."""
    write_digits(tmp_path / "Datasets")
    proj = project(tmp_path, "lightning_example")
    run_dir, job_id, _ = _submit_requeue_complete(proj, ["main.py"], user_env(), 40, "--slurm.snapshot", "false")
    log = (run_dir / f"slurm-{job_id}.log").read_text()
    assert "PREDICTIONS (32, 10)" in log, log[-3000:]
    last = torch.load(run_dir / "checkpoints" / "last.ckpt", weights_only=True, map_location="cpu")
    assert last["global_step"] == 40 * 8, "every step of every epoch"  # 256 training rows, batch 32
    for ckpt in sorted((run_dir / "checkpoints").glob("*.ckpt")):
        (loaded,) = loads(proj, {"main.LitClassifier": ckpt}, block=False)  # main.py imports trainer_cli
        assert loaded["optimizer"] == ["Adam", 0.001], loaded


@pytest.mark.long
def test_hydra_main_configs_submit_requeue_and_complete(slurm_cluster: None, tmp_path: Path) -> None:  # noqa: F811
    """``train submit --config configs/train.yaml``: a ``@hydra.main`` project's configs, unchanged, queued
    from the project's root (its ``minvq`` package imported from the job's snapshot); each checkpoint loads
    as the project loads it (``Img2Img.load_from_checkpoint(path, model=VanillaAE(...))``)."""
    data = write_digits(tmp_path / "site" / "data")
    proj = project(tmp_path, "hydra_main")
    paths = proj / "configs" / "paths" / "default.yaml"  # the site's absolute paths, as the project writes them
    paths.write_text(
        paths.read_text()
        .replace("/data1/output/MinVQ", str(tmp_path / "site" / "out"))
        .replace("/data1/data", str(data))
    )
    git(proj, "commit", "-qam", "this site's paths")
    argv = ["-m", "trainer_cli"]
    run_dir, job_id, saved_at = _submit_requeue_complete(proj, argv, user_env(), 40, "--config", "configs/train.yaml")
    assert run_dir.parent.name == "img2img-ae-digits", run_dir  # the config's task_name
    assert " -m trainer_cli fit --config " in (run_dir / "submit.sbatch").read_text()
    last = torch.load(run_dir / "checkpoints" / "last.ckpt", weights_only=True, map_location="cpu")
    assert last["global_step"] == 40 * 8 > saved_at, "every step of every epoch"  # 256 training rows, batch 32
    ckpts = sorted((run_dir / "checkpoints").glob("*.ckpt"))
    done = subprocess.run(
        [sys.executable, "-c", _LOAD_WITH_NETWORK, *map(str, ckpts)],
        cwd=proj,
        env=user_env(PYTHONPATH=str(proj)),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.splitlines() == ["VanillaAE 0.003 64 False"] * len(ckpts), done.stdout


@pytest.mark.long
def test_plain_trainer_classes_submit_requeue_and_complete(slurm_cluster: None, tmp_path: Path) -> None:  # noqa: F811
    """``train submit --model ... --data ... --config callbacks.yaml``: a plain ``Trainer`` script's classes
    queued from the project's root (its ``detox`` package imported from the job's snapshot, the data from
    ``$DETOX_CACHE``), batches of 4 (64 steps an epoch: its ``EarlyStopping``, patience 3, cannot end the run
    before the signal); ``toxic.ckpt`` and last.ckpt load with ``ToxicClassifier.load_from_checkpoint``."""
    cache = write_digits(tmp_path / "shared" / "cache")
    proj = project(tmp_path, "plain_trainer")
    classes = ["--model", "detox.ml.module.ToxicClassifier", "--data", "detox.ml.datamodule.TokenizerDataModule"]
    more = [*classes, "--config", "callbacks.yaml", "--data.batch_size", "4"]
    run_dir, job_id, saved_at = _submit_requeue_complete(
        proj, ["-m", "trainer_cli"], user_env(DETOX_CACHE=str(cache)), 20, *more
    )
    last = torch.load(run_dir / "checkpoints" / "last.ckpt", weights_only=True, map_location="cpu")
    assert last["global_step"] > saved_at, "trained on after the requeue (to the end or its EarlyStopping)"
    names = sorted(p.name for p in (run_dir / "checkpoints").glob("*.ckpt"))
    assert "toxic.ckpt" in names and "last.ckpt" in names, names
    for name in names:
        (loaded,) = loads(proj, {"detox.ml.module.ToxicClassifier": run_dir / "checkpoints" / name}, block=True)
        assert loaded["optimizer"] == ["Adam", 0.01] and loaded["trainer_cli"] is False, loaded


_LOAD_LHT = """
import functools, importlib, sys, importlib.abc, torch
class Blocked(importlib.abc.MetaPathFinder):
    def find_spec(self, name, *args):
        if name.split(".")[0] == "trainer_cli":
            raise ImportError(name + " imported while loading a checkpoint")
sys.meta_path.insert(0, Blocked())
from src.models.mnist_module import MNISTLitModule
from src.models.components.simple_dense_net import SimpleDenseNet

def partial_of(config, called_with):  # a `{class_path, init_args}` hyperparameter as Hydra's _partial_ builds it
    module, _, name = config["class_path"].rpartition(".")
    args = {k: v for k, v in config["init_args"].items() if k != called_with}
    return functools.partial(getattr(importlib.import_module(module), name), **args)

for path in sys.argv[1:]:
    checkpoint = torch.load(path, weights_only=True, map_location="cpu")
    try:
        MNISTLitModule.load_from_checkpoint(path, map_location="cpu")
        print("load_from_checkpoint: loaded")
    except Exception as error:  # jsonargparse requires an optimizer class's `params` (the documented limit)
        print("load_from_checkpoint:", "required: params" in str(error))
    hp = checkpoint["hyper_parameters"]
    model = MNISTLitModule(
        net=SimpleDenseNet(**hp["net"]["init_args"]),
        optimizer=partial_of(hp["optimizer"], "params"),
        scheduler=partial_of(hp["scheduler"], "optimizer"),
        compile=hp["compile"],
    )
    model.load_state_dict(checkpoint["state_dict"])
    optimizer = model.hparams.optimizer(params=model.parameters())
    scheduler = model.hparams.scheduler(optimizer=optimizer)
    print(type(optimizer).__name__, optimizer.defaults["lr"], type(scheduler).__name__, "trainer_cli" in sys.modules)
"""


@pytest.mark.long
def test_lightning_hydra_template_submits_requeues_and_completes(slurm_cluster: None, tmp_path: Path) -> None:  # noqa: F811
    """``train submit --config_root configs --config experiment/example --config slurm/local``: the template's
    project as it is (its ``configs/`` and ``src/``, its MNIST in the git-ignored ``data/`` linked into the
    snapshot), requeued once and COMPLETED; every checkpoint (its ``epoch_NNN.ckpt`` and ``last.ckpt``, the
    launcher's ``resume.ckpt``) reads with
    ``torch.load(weights_only=True)`` and rebuilds the module from its hyperparameters (plain
    ``{class_path, init_args}`` dicts) as the template's own code builds it: the net, the optimizer and
    scheduler partials, the weights loaded strictly. ``MNISTLitModule.load_from_checkpoint(path)`` alone fails
    there, as docs/reference/compatibility.md says (jsonargparse requires the optimizer's ``params``)."""
    proj = lht_project(tmp_path / "project")
    git(proj, "init", "-q")
    git(proj, "add", ".")
    git(proj, "commit", "-qm", "template")
    argv = ["-m", "trainer_cli"]
    env = user_env()
    env.pop("PROJECT_ROOT", None)
    more = ["--config_root", "configs", "--config", "experiment/example"]
    run_dir, job_id, saved_at = _submit_requeue_complete(proj, argv, env, 40, *more, profile="slurm/local")
    assert run_dir.parent.name == "train", run_dir  # the template's task_name
    # the run's end is the launcher's resume point: the template's ModelCheckpoint(save_last=True) rewrites
    # its last.ckpt only with a new best val/acc (Lightning 2.6), which 40 validation digits stop giving early
    end = torch.load(run_dir / "checkpoints" / "resume.ckpt", weights_only=True, map_location="cpu")
    assert end["global_step"] == 40 * 4 > saved_at, "every step of every epoch"  # 240 training digits, batch 64
    ckpts = sorted((run_dir / "checkpoints").glob("*.ckpt"))
    assert any(c.name.startswith("epoch_") for c in ckpts), ckpts
    done = subprocess.run(
        [sys.executable, "-c", _LOAD_LHT, *map(str, ckpts)],
        cwd=proj,
        env=user_env(PYTHONPATH=str(proj)),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.splitlines() == ["load_from_checkpoint: True", "Adam 0.002 ReduceLROnPlateau False"] * len(
        ckpts
    ), done.stdout
