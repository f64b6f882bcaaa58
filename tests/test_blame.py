"""Messages name where a value was written: the file and line a key came from, or the command-line flag.

On the project of lightning-hydra-template's shape (``tests/foreign_lht``), run as ``train`` runs it: an
unknown option or a wrong value of a class nested in another's ``init_args`` (the model's ``net``) given as a
flag names the flag, not the experiment file that sets the model around it; written in a file, it names that
file and the option's line. The note on the Hydra keys a layer ignores names each key under the file that wrote it: the
experiment's ``logger.wandb`` is not blamed on a ``--config logger/csv`` layered after it.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from lht_support import lht_project
from support import run_train

EXPERIMENT = ["fit", "--config_root", "configs", "--config", "experiment/example"]


def _lines(stderr: str, prefix: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith(prefix)]


@pytest.mark.parametrize(
    ("option", "value", "explained"),
    [
        (
            "lin1_sise",
            "64",
            "unknown option 'lin1_sise' of src.models.components.simple_dense_net.SimpleDenseNet. Did you mean: "
            "lin1_size",
        ),
        ("lin1_size", "abc", "SimpleDenseNet': lin1_size: expected int, got 'abc'"),
    ],
    ids=["misspelt", "wrong-type"],
)
def test_a_nested_class_option_in_a_flag_names_the_flag(
    tmp_path: Path, option: str, value: str, explained: str
) -> None:
    """The experiment file sets ``model:`` (and its ``net:``), but the option refused came from the flag."""
    project = lht_project(tmp_path / "project")
    flag = f"--model.init_args.net.init_args.{option}"
    done = run_train(*EXPERIMENT, flag, value, "--print_config", cwd=project)
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr[-3000:]
    errors = _lines(done.stderr, "error:")
    assert len(errors) == 1, done.stderr[-3000:]
    assert errors[0].startswith(f"error: from the command-line flag {flag}: model: "), errors[0]
    assert ".yaml" not in errors[0] and explained in done.stderr, done.stderr[-3000:]


def test_a_nested_class_option_misspelt_in_a_file_names_its_file_and_line(tmp_path: Path) -> None:
    project = lht_project(tmp_path / "project")
    typo = project / "configs" / "experiment" / "typo.yaml"
    typo.write_text("# @package _global_\ndefaults:\n  - override /model: mnist\nmodel:\n  net:\n    lin1_sise: 32\n")
    done = run_train("fit", "--config_root", "configs", "--config", "experiment/typo", "--print_config", cwd=project)
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr[-3000:]
    errors = _lines(done.stderr, "error:")
    assert len(errors) == 1 and errors[0].startswith(f"error: in {typo} line 6: model: "), done.stderr[-3000:]
    assert "unknown option 'lin1_sise'" in done.stderr and "command-line flag" not in done.stderr


def test_the_hydra_keys_note_names_the_file_each_key_came_from(tmp_path: Path) -> None:
    """``logger.wandb`` and ``logger.aim`` (no ``_target_``) are the experiment's: a ``logger/csv`` layered
    after it merges its named entries by name, as Hydra does, but its note names only its own key."""
    project = lht_project(tmp_path / "project")
    configs = project / "configs"
    for csv in ("logger/csv", str(configs / "logger" / "csv.yaml")):
        done = run_train(*EXPERIMENT, "--config", csv, "--print_config", cwd=project)
        assert done.returncode == 0, done.stderr[-3000:]
        notes = _lines(done.stderr, "note:")
        experiment = f"note: {configs / 'experiment' / 'example.yaml'}: Hydra keys ignored: "
        assert [n for n in notes if "logger.wandb" in n or "logger.aim" in n] == [
            n for n in notes if n.startswith(experiment)
        ], done.stderr[-3000:]
        assert any("logger.wandb, logger.aim (no _target_" in n for n in notes), done.stderr[-3000:]
        assert (
            f"note: {configs / 'logger' / 'csv.yaml'}: Hydra keys ignored: logger.csv.save_dir (made from "
            "Hydra's run folder: the run directory is the launcher's)" in notes
        ), done.stderr[-3000:]


def test_a_key_ignored_for_a_later_layer_is_named_with_its_own_file(tmp_path: Path) -> None:
    """A logger of an earlier file whose ``save_dir`` a later file makes Hydra's run folder (through ``paths``)
    is left out when that later file's loggers merge with it by name: the note names the key with the file
    that wrote it, not the later one."""
    project = lht_project(tmp_path / "project")
    mine, later = project / "mine.yaml", project / "later.yaml"
    mine.write_text(
        "# @package _global_\npaths:\n  my_logs: logs_here\nlogger:\n  mine:\n"
        "    _target_: lightning.pytorch.loggers.csv_logs.CSVLogger\n    save_dir: ${paths.my_logs}\n"
    )
    later.write_text(
        "# @package _global_\npaths:\n  my_logs: ${hydra:runtime.output_dir}\nlogger:\n  csv:\n"
        "    _target_: lightning.pytorch.loggers.csv_logs.CSVLogger\n    save_dir: .\n"
    )
    done = run_train(*EXPERIMENT, "--config", str(mine), "--config", str(later), "--print_config", cwd=project)
    assert done.returncode == 0, done.stderr[-3000:]
    notes = _lines(done.stderr, "note:")
    assert (
        f"note: {mine}: Hydra keys ignored: logger.mine.save_dir (made from Hydra's run folder: the run "
        "directory is the launcher's)" in notes
    ), done.stderr[-3000:]
    assert not [n for n in notes if "logger.mine" in n and not n.startswith(f"note: {mine}:")], done.stderr[-3000:]
