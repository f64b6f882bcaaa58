"""Every shipped config group file layered onto the shipped experiments: each pair trains a few
steps with the experiment's default callbacks (model summary, best/last checkpoints, LR monitor)
on, or is refused before anything is built by :data:`trainer_cli.compat.INCOMPATIBLE` (exit 2,
one ``error:`` line, no run directory).

Which pairs run (the rule, to stay within ~2 minutes on 2 cores):

- digits (the cheap experiment) takes every group file in ``configs/<group>/`` but experiment/
  and slurm/.
- cifar10_resnet18, cifar10_fast and imagefolder_finetune take the group files whose effect
  depends on the model, the data or the precision (:data:`PER_EXPERIMENT_GROUPS`: model, data,
  precision, regularization, optimizer, scheduler, param_groups, finetune, averaging): the rest
  (loggers, debug flags, profilers, gradients, stability, callbacks) act on the Trainer alone and
  behave the same on every experiment.
- Strategies that start processes (ddp_spawn, ddp_cpu_sim) and DDP run on digits only, each in a
  process of its own (a launcher re-runs the command line; the process group stays set).
- Everything else runs in ONE extra Python process (``tests/bad_input_support.py``: starting
  torch + Lightning once), each pair under its own ``default_root_dir``.

Every run uses ``limit_train_batches 2``, ``limit_val_batches 1``, ``max_epochs 1``, batch size 8
and no DataLoader workers. CIFAR-10 and the ImageFolder tree are tiny fakes in the official on-disk
layouts (``tests/fake_datasets.py``). cifar10_fast runs with ``compile false`` (torch.compile of a
ResNet-18 on CPU takes minutes; the summary of a compiled model is skipped by design) and
imagefolder_finetune at ``image_size 32`` (224 x 224 ResNet-34 steps take seconds on CPU).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from conftest import REPO, run_train
from fake_datasets import write_fake_cifar10, write_image_folder

CONFIGS = REPO / "configs"
EXPERIMENTS = ("digits", "cifar10_resnet18", "cifar10_fast", "imagefolder_finetune")
SKIPPED_GROUPS = {"experiment", "slurm"}
PER_EXPERIMENT_GROUPS = {"model", "data", "precision", "regularization", "optimizer", "scheduler", "param_groups", "finetune", "averaging"}
OWN_PROCESS = {"strategy/ddp.yaml", "strategy/ddp_spawn.yaml", "strategy/ddp_cpu_sim.yaml"}
EXPERIMENT_DATA = {"digits": "digits", "cifar10_resnet18": "cifar10", "cifar10_fast": "cifar10", "imagefolder_finetune": "image_folder"}
SPEED_FLAGS = {"cifar10_fast": ["--model.init_args.compile", "false"], "imagefolder_finetune": []}
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
    out += [(e, f) for e in EXPERIMENTS[1:] for f in group_files() if f.split("/")[0] in PER_EXPERIMENT_GROUPS]
    return out


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


def _discover() -> None:  # python tests/test_combinations.py OUT_DIR [EXPERIMENTS]
    out = Path(sys.argv[1])
    (out / "data").mkdir(parents=True, exist_ok=True)
    write_fake_cifar10(out / "data" / "cifar10")
    write_image_folder(out / "data" / "images")
    cases = {
        pair_id(e, f): {"argv": pair_argv(e, f, out / "runs" / pair_id(e, f), out / "data"), "cwd": str(out)}
        for e, f in pairs() if f not in OWN_PROCESS and (len(sys.argv) < 3 or e in sys.argv[2].split(","))
    }
    (out / "cases.json").write_text(json.dumps(cases))
    print(len(cases), "cases")


def run_cases(cases_file: str, out_file: str) -> None:
    """Run each case of ``cases_file`` in this process (see ``bad_input_support.run_case``), timing it."""
    import time

    from bad_input_support import run_case

    results = {}
    for name, case in json.loads(Path(cases_file).read_text()).items():
        start = time.perf_counter()
        results[name] = {**run_case(case["argv"], case["cwd"]), "seconds": time.perf_counter() - start}
    Path(out_file).write_text(json.dumps(results))


if __name__ == "__main__":
    if sys.argv[1] == "run":
        run_cases(sys.argv[2], sys.argv[3])
    else:
        _discover()
