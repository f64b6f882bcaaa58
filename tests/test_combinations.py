"""Every shipped config group file layered onto the shipped experiments: each pair trains a few
steps with the experiment's default callbacks (model summary, best/last checkpoints, LR monitor)
on, or is refused before anything is built by :data:`trainer_cli.config.incompatible.INCOMPATIBLE` (exit 2,
one ``error:`` line, no run directory).

Which pairs run (the rule; about 6 minutes of run time over two processes on 2 loaded cores, half of it
the ResNet-sized pairs of :data:`LONG_PAIRS`, which run in the long tier only):

- digits (the cheap experiment) takes every group file in ``configs/<group>/`` but experiment/
  and slurm/.
- cifar10_resnet18, cifar10_fast and imagefolder_finetune take only the files that make a
  different pair there (:data:`PER_EXPERIMENT`): a model or data file other than the experiment's
  own (a torchvision backbone on other data, a project backbone on other image sizes), the
  precision files but the experiment's own (ResNets with BatchNorm, the batched CIFAR-10's float32 images under 64-true),
  and one file of each feature that acts on the model, its batches or its parameter groups
  (MixUp/CutMix on the data modules with their own batch hook, SAM and EMA with BatchNorm,
  discriminative LR and backbone fine-tuning on torchvision heads). The rest (loggers, debug
  flags, profilers, gradients, stability, callbacks, schedulers, strategies) act on the Trainer
  alone and behave the same on every experiment.
- digits with the MLflow and W&B logger files (:data:`ELSEWHERE_PAIRS`) runs in the long tier only: a default-tier
  test of ``tests/test_logger_runs.py`` trains digits with each of them (and kills, resumes, reads the store).
- Strategies that start processes (ddp_spawn, ddp_cpu_sim) run on digits only, each in a
  ``train`` process of its own (a launcher re-runs the command line); a 1-process ``ddp`` runs
  last in the shared process (its process group stays set).
- Everything else runs in two extra Python processes side by side, one per core (``run_cases``
  below, forked from the suite's fork server where it can: torch + Lightning are imported already), each pair under its own ``default_root_dir``.

make test runs only :func:`test_every_rule_is_met_by_a_shipped_file_on_digits` (the files digits refuses); the
matrix and the process-starting strategies run in the long tier, for make test's time (``tests/tiers.py``).

Every run uses ``limit_train_batches 2``, ``limit_val_batches 1``, ``max_epochs 1``, batch size 8
and no DataLoader workers. CIFAR-10 and the ImageFolder tree are tiny fakes in the official on-disk
layouts (``tests/support.py``). cifar10_fast runs with ``compile false`` (torch.compile of a
ResNet-18 on CPU takes minutes; the summary of a compiled model is skipped by design) and
imagefolder_finetune at ``image_size 32`` (224 x 224 ResNet-34 steps take seconds on CPU).
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import torch
from support import CONFIGS, REPO, run_helper, run_train, write_fake_cifar10, write_image_folder

EXPERIMENTS = ("digits", "cifar10_resnet18", "cifar10_fast", "imagefolder_finetune")
SKIPPED_GROUPS = {"experiment", "slurm"}
# beyond digits: the model, data and precision files that change what is built or how it computes (not
# the experiment's own choice again), and one file of each feature acting on the model, its batches or
# its parameter groups
PER_EXPERIMENT = {
    "cifar10_resnet18": ("model/cnn.yaml", "model/mlp.yaml", "data/digits.yaml", "data/image_folder.yaml",
                         "precision/64-true.yaml", "precision/bf16-mixed.yaml", "precision/16-mixed.yaml",
                         "regularization/mixup.yaml", "optimizer/sam.yaml", "averaging/ema.yaml",
                         "param_groups/discriminative_lr.yaml", "finetune/backbone.yaml"),
    "cifar10_fast": ("data/digits.yaml", "data/image_folder.yaml", "precision/64-true.yaml", "regularization/cutmix.yaml",
                     "model/cnn.yaml"),
    "imagefolder_finetune": ("data/digits.yaml", "data/cifar10.yaml", "model/cnn.yaml", "finetune/backbone.yaml",
                             "param_groups/discriminative_lr.yaml", "regularization/mixup_cutmix.yaml"),
}
# The pairs that train a ResNet-sized model for 6 to 24 s each (seconds of one run on 2 loaded cores,
# 2026-12-02; about 170 of the file's 343 s): the long tier's (test_resnet_sized_pairs_train). make test
# runs each of their group files on digits, and each experiment with its other pairs.
LONG_PAIRS = frozenset({
    ("cifar10_fast", "data/digits.yaml"), ("cifar10_fast", "precision/64-true.yaml"),
    ("cifar10_fast", "regularization/cutmix.yaml"), ("cifar10_resnet18", "averaging/ema.yaml"),
    ("cifar10_resnet18", "data/digits.yaml"), ("cifar10_resnet18", "optimizer/sam.yaml"),
    ("cifar10_resnet18", "param_groups/discriminative_lr.yaml"), ("cifar10_resnet18", "precision/64-true.yaml"),
    ("cifar10_resnet18", "precision/bf16-mixed.yaml"), ("imagefolder_finetune", "data/cifar10.yaml"),
    ("imagefolder_finetune", "finetune/backbone.yaml"), ("imagefolder_finetune", "param_groups/discriminative_lr.yaml"),
    ("imagefolder_finetune", "regularization/mixup_cutmix.yaml"),
})
# Pairs a default-tier test elsewhere trains with the same shipped file on digits, and more (a kill, a resume, a
# second run, the logger's own files read back); the long tier's here (test_resnet_sized_pairs_train): the
# loggers' imports and stores cost 14-30 s of this file's run (2026-12-02, load ~8)
ELSEWHERE_PAIRS = {
    ("digits", "logger/mlflow.yaml"): "test_logger_runs.py::test_mlflow_run_continued_after_a_kill",
    ("digits", "logger/wandb.yaml"): "test_logger_runs.py::test_wandb_cv_folds_in_one_process_are_one_run_each",
}
OWN_PROCESS = ("strategy/ddp_spawn.yaml", "strategy/ddp_cpu_sim.yaml")  # they start processes: own `train` process
LAST_IN_PROCESS = "strategy/ddp.yaml"  # a 1-process DDP leaves its process group set: run it last
EXPERIMENT_DATA = {"digits": "digits", "cifar10_resnet18": "cifar10", "cifar10_fast": "cifar10", "imagefolder_finetune": "image_folder"}
SPEED_FLAGS = {"cifar10_fast": ["--model.init_args.compile", "false"]}
TINY = [
    "--trainer.limit_train_batches", "2", "--trainer.limit_val_batches", "1", "--trainer.max_epochs", "1",
    "--trainer.log_every_n_steps", "1",
]


def group_files() -> list[str]:
    """``<group>/<file>.yaml`` for every shipped group file but experiment/ and slurm/."""
    return sorted(
        str(p.relative_to(CONFIGS)) for p in CONFIGS.glob("*/*.yaml") if p.parent.name not in SKIPPED_GROUPS
    )


def pairs() -> list[tuple[str, str]]:
    """(experiment, group file) pairs under the rule of the module docstring."""
    out = [("digits", f) for f in group_files()]
    out += [(e, f) for e, chosen in PER_EXPERIMENT.items() for f in group_files() if f.startswith(chosen)]
    return sorted(out, key=lambda pair: pair[1] == LAST_IN_PROCESS)


def data_flags(experiment: str, group_file: str, data_root: Path) -> list[str]:
    """Flags pointing the pair's data module at the tiny data (small batches, no workers)."""
    data = Path(group_file).stem if group_file.startswith("data/") else EXPERIMENT_DATA[experiment]
    flags = ["--data.init_args.batch_size", "8"]
    if data == "cifar10":
        flags += ["--data.init_args.data_dir", str(data_root / "cifar10"), "--data.init_args.val_size", "16",
                  "--data.init_args.num_workers", "0"]
    elif data == "image_folder":
        flags += ["--data.init_args.data_dir", str(data_root / "images"), "--data.init_args.image_size", "32",
                  "--data.init_args.num_workers", "0"]
    return flags


def pair_argv(experiment: str, group_file: str, root: Path, data_root: Path) -> list[str]:
    """``train fit`` arguments of one pair, writing under ``root``."""
    return [
        "fit", "--config", str(CONFIGS / "experiment" / f"{experiment}.yaml"), "--config", str(CONFIGS / group_file),
        "--trainer.default_root_dir", str(root), *TINY, *SPEED_FLAGS.get(experiment, []),
        *data_flags(experiment, group_file, data_root),
    ]


def pair_id(experiment: str, group_file: str) -> str:
    return f"{experiment}+{group_file[:-5].replace('/', '.')}"



@pytest.fixture(scope="module")
def tiny_data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """CIFAR-10 and an ImageFolder tree, tiny, in their official on-disk layouts."""
    root = tmp_path_factory.mktemp("combination_data")
    write_fake_cifar10(root / "cifar10")
    write_image_folder(root / "images")
    return root


def refusals() -> set[str]:
    """Every line the product refuses a declared pair with: :data:`trainer_cli.config.incompatible.INCOMPATIBLE`
    and the optional extras of :mod:`trainer_cli.config.extras` (as ``error: ...`` lines, prefixes)."""
    from trainer_cli.config.extras import NEEDS
    from trainer_cli.config.incompatible import INCOMPATIBLE

    return {f"error: {rule.message}" for rule in INCOMPATIBLE} | {
        f"needs the optional package {module!r}, which is not installed" for module, _ in NEEDS.values()
    }


def check_outcome(name: str, code: int, stderr: str, root: Path, group_file: str) -> str | None:
    """Whether one pair ran (run directory with config, checkpoints that reload) or was refused as
    declared (exit 2, one ``error:`` line, no run directory). Returns the refusal line, if refused."""
    runs = [d for d in root.glob("*/version_*") if d.is_dir()] if root.is_dir() else []
    if code != 0:
        lines = [line for line in stderr.strip().splitlines() if line.strip()]
        assert code == 2 and lines, f"{name}: exit {code}\n{stderr[-3000:]}"
        assert lines[-1].startswith("error: ") and "Traceback" not in stderr, f"{name}: {stderr[-3000:]}"
        assert any(lines[-1].startswith(r) or r in lines[-1] for r in refusals()), f"{name}: refused, not as declared: {lines[-1]}"
        assert not runs and not any(root.rglob("*")) if root.is_dir() else True, f"{name}: left {list(root.rglob('*'))}"
        return lines[-1]
    if group_file == "debug/fast_dev_run.yaml":  # a smoke test: no run directory (Lightning saves nothing under it)
        assert not runs, f"{name}: run directories {runs}"
        return None
    assert len(runs) == 1 and (runs[0] / "config.yaml").is_file(), f"{name}: run directories {runs}"
    last = runs[0] / "checkpoints" / "last.ckpt"
    assert last.is_file(), f"{name}: no last.ckpt in {runs[0]}"
    state = torch.load(last, map_location="cpu", weights_only=False)
    assert state["state_dict"] and state["global_step"] >= 1, name
    assert all(torch.isfinite(v).all() for v in state["state_dict"].values() if v.is_floating_point()), name
    return None


def run_pairs(chosen: list[tuple[str, str]], tmp_path: Path, tiny_data: Path) -> dict[str, str]:
    """Run the ``chosen`` pairs in two processes side by side, check each (:func:`check_outcome`) and
    return the refused ones' ``error:`` lines by pair id."""
    cases = {
        pair_id(e, f): {"argv": pair_argv(e, f, tmp_path / "runs" / pair_id(e, f), tiny_data), "cwd": str(tmp_path)}
        for e, f in chosen if f not in OWN_PROCESS
    }
    # two processes, one per core; pairs() puts the 1-process DDP last, so it stays last in its share
    names = list(cases)
    last = [n for n in names[-1:] if n == pair_id("digits", LAST_IN_PROCESS)]
    first = names[:len(names) - len(last)]
    shares = [first[0::2], first[1::2] + last]
    for i, share in enumerate(shares):
        (tmp_path / f"cases{i}.json").write_text(json.dumps({name: cases[name] for name in share}))
    with ThreadPoolExecutor(len(shares)) as pool:  # side by side, each forked from the suite's server where it can
        list(pool.map(lambda i: run_helper(__file__, "run", str(tmp_path / f"cases{i}.json"), str(tmp_path / f"results{i}.json"), env=_env()),
                      range(len(shares))))
    results = {k: v for i in range(len(shares)) for k, v in json.loads((tmp_path / f"results{i}.json").read_text()).items()}
    group_of = {pair_id(e, f): f for e, f in pairs()}
    refused, failed = {}, []
    for name, result in results.items():
        try:
            refused[name] = check_outcome(name, result["code"], result["stderr"], tmp_path / "runs" / name, group_of[name])
        except AssertionError as err:
            failed.append(str(err).splitlines()[0][:2000])
        shutil.rmtree(tmp_path / "runs" / name, ignore_errors=True)  # ~4.6 GB of checkpoints in all: not kept by pytest
    assert not failed, "\n".join(failed)
    assert len(results) == len(cases)
    return {name: line for name, line in refused.items() if line}


def test_every_shipped_config_file_on_every_experiment(tmp_path: Path, tiny_data: Path) -> None:
    """Every pair of :func:`pairs` but the ResNet-sized trainings of :data:`LONG_PAIRS` (their group
    files run here on digits, and each experiment here with its cheaper pairs) and the logger pairs of
    :data:`ELSEWHERE_PAIRS` (trained by the tests it names): each trains or is refused as declared, and
    every rule of the table that can apply on this machine is met."""
    assert set(LONG_PAIRS) | set(ELSEWHERE_PAIRS) <= set(pairs()), sorted(set(LONG_PAIRS) | set(ELSEWHERE_PAIRS) - set(pairs()))
    refused = run_pairs([p for p in pairs() if p not in LONG_PAIRS and p not in ELSEWHERE_PAIRS], tmp_path, tiny_data)
    # every rule of the table that can apply on this machine is met by some shipped pair
    from trainer_cli.config.incompatible import INCOMPATIBLE

    met = {rule.message for rule in INCOMPATIBLE if any(rule.message in line for line in refused.values())}
    on_gpu_only = {rule.message for rule in INCOMPATIBLE if "SAM" in rule.message}  # 16-mixed is refused first on CPU
    assert met | on_gpu_only == {rule.message for rule in INCOMPATIBLE}, sorted(refused.items())
    digits_refuses = {f for e, f in pairs() if e == "digits" and pair_id(e, f) in refused}
    assert digits_refuses == set(REFUSED_ON_DIGITS), f"make test's sibling checks {REFUSED_ON_DIGITS}; digits refuses {sorted(digits_refuses)}"


# the shipped files that digits refuses (16-mixed and FSDP on CPU, a torchvision backbone on 1-channel images, a
# strategy whose optional package is not installed): between them every rule of the table that applies on CPU
REFUSED_ON_DIGITS = ("precision/16-mixed.yaml", "strategy/fsdp.yaml", "model/resnet34.yaml", "strategy/deepspeed.yaml")


def test_every_rule_is_met_by_a_shipped_file_on_digits(tmp_path: Path, tiny_data: Path) -> None:
    """make test's part of the matrix (the whole matrix, :func:`test_every_shipped_config_file_on_every_experiment`,
    is in the long tier for make test's time: tests/tiers.py; the long test checks that these are the files digits
    refuses): each of :data:`REFUSED_ON_DIGITS` on digits is refused as declared (exit 2, one line, nothing
    written), and every rule of the table that can apply on this machine is met by one of them."""
    refused = run_pairs([("digits", f) for f in REFUSED_ON_DIGITS], tmp_path, tiny_data)
    assert set(refused) == {pair_id("digits", f) for f in REFUSED_ON_DIGITS}, refused
    from trainer_cli.config.incompatible import INCOMPATIBLE

    met = {rule.message for rule in INCOMPATIBLE if any(rule.message in line for line in refused.values())}
    on_gpu_only = {rule.message for rule in INCOMPATIBLE if "SAM" in rule.message}
    assert met | on_gpu_only == {rule.message for rule in INCOMPATIBLE}, sorted(refused.items())


# long (make test's 12 minutes): the same files on digits, and the experiments' cheaper pairs, are the test above
@pytest.mark.long
def test_resnet_sized_pairs_train(tmp_path: Path, tiny_data: Path) -> None:
    """The pairs of :data:`LONG_PAIRS` and :data:`ELSEWHERE_PAIRS` (each trains: none is refused)."""
    assert run_pairs(sorted(LONG_PAIRS | set(ELSEWHERE_PAIRS)), tmp_path, tiny_data) == {}


@pytest.mark.parametrize("group_file", OWN_PROCESS)
def test_process_starting_strategies_on_digits(tmp_path: Path, group_file: str) -> None:
    root = tmp_path / "runs"
    proc = run_train(*pair_argv("digits", group_file, root, tmp_path)[0:], timeout=600)
    check_outcome(pair_id("digits", group_file), proc.returncode, proc.stderr, root, group_file)



def test_rules_met_only_on_a_gpu() -> None:
    """SAM with 16-mixed is refused on any device (on CPU 16-mixed alone is refused first)."""
    from trainer_cli.config.incompatible import INCOMPATIBLE, check_compatible
    from trainer_cli.errors import UserError

    sam = {"class_path": "trainer_cli.optim.SAM"}
    with pytest.raises(UserError) as refused:
        check_compatible({"trainer": {"accelerator": "gpu", "precision": "16-mixed"}, "optimizer": sam})
    assert str(refused.value) == next(rule.message for rule in INCOMPATIBLE if "SAM" in rule.message)
    check_compatible({"trainer": {"accelerator": "gpu", "precision": "16-mixed"}, "optimizer": {"class_path": "torch.optim.SGD"}})
    check_compatible({"trainer": {"accelerator": "gpu", "precision": "bf16-mixed", "strategy": "fsdp"}, "optimizer": sam})

def _env() -> dict[str, str]:
    """The environment for the shared process: one intra-op thread (two cores, several runs)."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), str(REPO / "tests"), env.get("PYTHONPATH", "")])
    env.pop("TRAINER_CLI_RUN_DIR", None)
    return env


def run_cases(cases_file: str, out_file: str) -> None:
    """Run each case of ``cases_file`` in this process (see ``bad_input_support.run_case``), timing it."""
    import time

    from bad_input_support import run_case

    results = {}
    for name, case in json.loads(Path(cases_file).read_text()).items():
        start = time.perf_counter()
        results[name] = {**run_case(case["argv"], case["cwd"]), "seconds": time.perf_counter() - start}
    Path(out_file).write_text(json.dumps(results))


if __name__ == "__main__":  # python tests/test_combinations.py run CASES.json RESULTS.json
    run_cases(sys.argv[2], sys.argv[3])
