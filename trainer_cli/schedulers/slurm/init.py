"""``train init``: a site profile to start from, so that no step of the docs needs a clone.

On a host with Slurm (``sinfo`` on ``PATH``), ``train init`` writes a commented site profile read
from the cluster (:mod:`trainer_cli.schedulers.slurm.site_profile`): the ``slurm:`` options ``train submit
--config`` takes, with the partition, time limit, CPUs, memory, GPUs, account, QOS and the
environment to activate on the compute nodes chosen and the alternatives commented. ``train init
NAME`` copies a bundled config out instead (``slurm/example_gpu``, ``experiment/digits``), on any
host. It never overwrites a file.
"""

from __future__ import annotations

import argparse
import os
import pwd
from collections.abc import Sequence
from datetime import date
from pathlib import Path

from trainer_cli.config.paths import configs_dir
from trainer_cli.errors import UserError, close_matches
from trainer_cli.schedulers.slurm import commands as slurm_commands
from trainer_cli.schedulers.slurm import site_profile

DEFAULT_PROFILE = "my_site.yaml"
"""Where ``train init`` writes the profile it reads from the cluster (the name the docs use)."""

DESCRIPTION = """\
Write a commented site profile read from this Slurm cluster, for `train submit --config`: the
partition, time limit, CPUs, memory, GPUs, account and QOS chosen (the alternatives in comments),
the environment to activate on the nodes, the preemption and requeue settings, and what could not
be read. With NAME, copy that bundled config out instead (no Slurm needed). Never overwrites a file.
"""
HELP_EPILOG = """\
examples:
  train init                            read this cluster: writes my_site.yaml
  train init --partition gpu -o gpu.yaml
  train init slurm/example_gpu          copy a bundled config out (no Slurm needed): example_gpu.yaml
  train init experiment/digits -o configs/experiment/mine.yaml
then:
  train submit --config experiment/digits --config my_site.yaml --check
"""


def bundled_names() -> list[str]:
    """Every bundled config as ``group/name`` (``slurm/example_gpu``), sorted."""
    root = configs_dir()
    return sorted(str(p.relative_to(root).with_suffix("")) for p in root.glob("*/*.yaml"))


def bundled_config(name: str) -> Path:
    """The bundled config ``name`` (``slurm/example_gpu``; ``configs/`` and ``.yaml`` may be given).

    Raises:
        UserError: for a name no bundled config has, listing the names.
    """
    key = name.removeprefix("configs/").removesuffix(".yaml")
    names = bundled_names()
    if key in names:
        return configs_dir() / f"{key}.yaml"
    close = close_matches(key, names)
    hint = f"did you mean {', '.join(close)}? " if close else ""
    raise UserError(f"train init {name}: no bundled config of that name; {hint}bundled: {', '.join(names)}")


def write_new(path: Path, text: str) -> None:
    """Write ``text`` to ``path``, which must not exist (its folders are made).

    Raises:
        UserError: when ``path`` exists (it is left as it is).
    """
    refusal = f"train init: {path} exists; not overwritten (name another file with --output)"
    if path.exists() or path.is_symlink():
        raise UserError(refusal)
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        with open(path, "x") as out:
            out.write(text)
    except FileExistsError:
        raise UserError(refusal) from None


def main(args: Sequence[str]) -> int:
    """``train init [NAME] [--output FILE] [--partition P] [--accelerator gpu|cpu]``; returns 0.

    Raises:
        UserError: for a file that exists, an unknown bundled name or partition, or no Slurm here
            without a NAME.
    """
    parser = argparse.ArgumentParser(
        prog="train init",
        description=DESCRIPTION,
        epilog=HELP_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "name", nargs="?", help="a bundled config to copy out, e.g. slurm/example_gpu (`train ls configs`)"
    )
    parser.add_argument(
        "--output", "-o", type=Path, help=f"the file to write (default: {DEFAULT_PROFILE}, or NAME's file name)"
    )
    parser.add_argument("--partition", help="the partition to write the profile for (default: the cluster's default)")
    parser.add_argument(
        "--accelerator",
        choices=("gpu", "cpu"),
        help="the trainer's accelerator (default: gpu where the partition's nodes list GPUs in their Gres, else cpu)",
    )
    opts = parser.parse_args(list(args))
    if opts.name:
        given = [f"--{key}" for key in ("partition", "accelerator") if getattr(opts, key)]
        if given:
            raise UserError(
                f"train init {opts.name} copies a bundled config; {' and '.join(given)} "
                f"only appl{'y' if len(given) > 1 else 'ies'} to a profile read "
                f"from the cluster (train init without a name): drop {'them' if len(given) > 1 else 'it'}"
            )
        source = bundled_config(opts.name)
        target = opts.output or Path(source.name)
        write_new(target, source.read_text())
        print(f"written: {target} (a copy of the bundled {source.parent.name}/{source.stem}: edit it)")
        return 0
    if not slurm_commands.installed("sinfo"):
        raise UserError(
            "train init: no Slurm here (sinfo not found); run it on a login node of your cluster, or copy a bundled "
            "profile to edit: train init slurm/example_gpu"
        )
    target = opts.output or Path(DEFAULT_PROFILE)
    if target.exists() or target.is_symlink():  # before asking Slurm
        write_new(target, "")
    facts = site_profile.read_facts(pwd.getpwuid(os.getuid()).pw_name)
    partition = site_profile.choose_partition(facts.partitions, opts.partition)
    has_gpus = min((n.gpus() for n in partition.nodes), default=0) > 0
    accelerator = opts.accelerator or ("gpu" if has_gpus else "cpu")
    text = site_profile.render(facts, partition, accelerator, date.today().isoformat())
    write_new(target, text)
    print(f"written: {target} (Slurm cluster {facts.cluster_name}, partition {partition.name}, user {facts.user})")
    for line in facts.unread:
        print(f"could not read: {line}")
    print(f"next: train submit --config experiment/digits --config {target} --check")
    return 0
