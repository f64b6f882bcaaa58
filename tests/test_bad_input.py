"""Bad input: every case exits 2 with one clear message, no traceback, and leaves an existing run
directory exactly as it was (file list, sizes and modification times).

The cases run through the real ``train`` entry point, all in one helper process
(``tests/bad_input_support.py``) to keep the suite fast; a few also run as separate processes to
show both ways report the same.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import forkserver
import pytest
from support import CONFIGS, DIGITS, REPO, quiet_args, run_helper, run_train

from trainer_cli.config import class_hints, explain
from trainer_cli.config.verbs import VERBS

SUPPORT = Path(__file__).with_name("bad_input_support.py")
MARKER = "PWNED"  # a file os.system / subprocess would create if a config could call them


def tree(root: Path) -> dict[str, tuple[int, int]]:
    """Every file under ``root``: relative path -> (size, mtime_ns)."""
    return {str(p.relative_to(root)): (p.stat().st_size, p.stat().st_mtime_ns) for p in sorted(root.rglob("*"))}


def write(path: Path, text: str) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return str(path)


def case_table(tmp: Path, root: Path, run: Path) -> dict[str, tuple[list[str], list[str]]]:
    """name -> (argv after `train`, fragments the message must contain)."""
    base = ["fit", "--config", DIGITS, "--trainer.default_root_dir", str(root), "--trainer.max_epochs", "1"]
    ckpt = str(run / "checkpoints" / "last.ckpt")
    truncated = tmp / "truncated.ckpt"
    truncated.write_bytes(Path(ckpt).read_bytes()[:5000])
    flipped = bytearray(Path(ckpt).read_bytes())
    flipped[len(flipped) // 2 : len(flipped) // 2 + 64] = bytes(64)
    (tmp / "corrupt.ckpt").write_bytes(bytes(flipped))
    cfg = tmp / "cfg"
    write(tmp / "cyc" / "experiment" / "b.yaml", "defaults:\n  - /experiment/a\n  - _self_\n")
    write(tmp / "user" / "optimizer" / "typo.yaml", "# @package _global_\n# a user's group file\noptimizer:\n  class_path: torch.optim.AdamWW\n")
    slurm = {  # `train submit` (issue 3): checked on the login node, before anything is queued
        "slurm_contradicts_trainer": (["submit", "--config", DIGITS, "--trainer.default_root_dir", str(root), "--trainer.num_nodes", "2", "--slurm.nodes", "3", "--dry-run"], ["--slurm.nodes 3 contradicts"]),
        "slurm_template_missing": (["submit", "--config", DIGITS, "--trainer.default_root_dir", str(root), "--slurm.template", str(tmp / "nope.sbatch.j2"), "--dry-run"], ["--slurm.template", "nope.sbatch.j2", "no such file"]),
        # found by testing on the local cluster (issue 12): queued, or a traceback, before
        "slurm_time_negative": (["submit", "--config", DIGITS, "--trainer.default_root_dir", str(root), "--slurm.time", "-5", "--dry-run"], ["--slurm.time -5: not a time limit sbatch takes", "HH:MM:SS"]),
        "slurm_time_malformed": (["submit", "--config", DIGITS, "--trainer.default_root_dir", str(root), "--slurm.time", "1:99", "--dry-run"], ["--slurm.time 1:99: not a time limit"]),
        "slurm_zero_nodes": (["submit", "--config", DIGITS, "--trainer.default_root_dir", str(root), "--trainer.num_nodes", "0", "--dry-run"], ["--trainer.num_nodes 0: must be a whole number of nodes, 1 or more"]),
        "slurm_requeue_mode_unknown": (["submit", "--config", DIGITS, "--trainer.default_root_dir", str(root), "--slurm.requeue_mode", "rerun", "--dry-run"], ["--slurm.requeue_mode rerun: choose requeue or resubmit"]),
        "slurm_resubmit_job_array": (["submit", "--config", DIGITS, "--trainer.default_root_dir", str(root), "--slurm.requeue_mode", "resubmit", "--slurm.cv_folds", "2", "--dry-run"], ["--slurm.requeue_mode resubmit and --slurm.cv_folds"]),
        "test_after_fit_on_submit": (["submit", "--config", DIGITS, "--trainer.default_root_dir", str(root), "--test_after_fit", "--dry-run"],
                                     ["--test_after_fit is train fit's", "on Slurm, --slurm.test_after_fit true"]),
        "test_after_fit_with_sweep": (["fit", "--config", DIGITS, "--trainer.default_root_dir", str(root), "--test_after_fit", "--sweep", "trainer.max_epochs=1,2"],
                                      ["--test_after_fit is train fit's (a plain fit, without --sweep)"]),
        "slurm_sweep_resubmit": (["submit", "--config", DIGITS, "--trainer.default_root_dir", str(root), "--sweep", "trainer.max_epochs=1,2", "--slurm.requeue_mode", "resubmit", "--dry-run"],
                                 ["--sweep with --slurm.requeue_mode resubmit"]),
        "slurm_sweep_resources_differ": (["submit", "--config", DIGITS, "--trainer.default_root_dir", str(root), "--sweep", "trainer.devices=1,2", "--dry-run"],
                                         ["sweep trial 1 (trainer.devices=2)", "share one resource request"]),
        "slurm_array_workers_without_sweep": (["submit", "--config", DIGITS, "--trainer.default_root_dir", str(root), "--slurm.array_workers", "2", "--dry-run"], ["--slurm.array_workers 2 without --sweep"]),
        "slurm_array_workers_zero": (["submit", "--config", DIGITS, "--trainer.default_root_dir", str(root), "--sweep", "optimizer.init_args.lr=loguniform(1e-3,1e-1)", "--sweep_sampler", "tpe",
                                      "--sweep_trials", "2", "--slurm.array_workers", "0", "--dry-run"], ["--slurm.array_workers 0: must be 1 or more"]),
        "slurm_name_escapes_root": (["submit", "--config", DIGITS, "--trainer.default_root_dir", str(root), "--name", "../../esc", "--dry-run"], ["--name '../../esc'", "no '..'"]),
        "slurm_secret_not_in_env": (["submit", "--config", DIGITS, "--trainer.default_root_dir", str(root), "--slurm.secrets", "[TRAINER_CLI_TEST_UNSET_TOKEN]", "--dry-run"],
                                    ["--slurm.secrets TRAINER_CLI_TEST_UNSET_TOKEN: not set in this shell", "export TRAINER_CLI_TEST_UNSET_TOKEN="]),
    } if "submit" in VERBS else {}
    return slurm | {
        # YAML and config files
        "yaml_syntax": (["fit", "--config", write(cfg / "syntax.yaml", "trainer:\n  max_epochs: 2\n   devices: [1\n")], ["YAML syntax error", "syntax.yaml", "line 3"]),
        "yaml_python_tag": (["fit", "--config", write(cfg / "tag.yaml", f"model: !!python/object/apply:os.system ['touch {MARKER}']\n")], ["tag.yaml", "python/object/apply:os.system"]),
        "config_missing": (["fit", "--config", "configs/experiment/digitz.yaml"], ["config file not found", "digitz", "Did you mean: digits"]),
        "config_is_directory": (["fit", "--config", str(tmp)], ["is a directory"]),
        "config_not_mapping": (["fit", "--config", write(cfg / "list.yaml", "- a\n- b\n")], ["must hold a mapping", "list.yaml"]),
        "config_flag_without_file": (["fit", "--config"], ["--config needs a file name"]),
        "defaults_missing_option": (["fit", "--config", write(cfg / "d1.yaml", "defaults:\n  - /model: cnnn\n  - _self_\n")], ["cannot compose", "d1.yaml", "cnnn"]),
        "defaults_missing_group": (["fit", "--config", write(cfg / "d2.yaml", "defaults:\n  - /modle: cnn\n  - _self_\n")], ["cannot compose", "modle"]),
        "interpolation_missing_key": ([*base, "--lr_scheduler.init_args.max_lr", "${optimizer.init_args.lrr}"], ["config interpolation", "optimizer.init_args.lrr"]),
        "interpolation_missing_key_in_file": ([*base, "--config", write(cfg / "interp.yaml", "lr_scheduler:\n  init_args:\n    max_lr: ${optimizer.init_args.lrr}\n")],
                                              ["interp.yaml line 3", "config interpolation", "optimizer.init_args.lrr"]),
        "interpolation_circular": ([*base, "--config", write(cfg / "circ.yaml", "name: ${run_dir}\nrun_dir: ${name}\n")], ["config interpolation", "ecursi"]),
        # unknown keys, at every level, with close matches
        # found as a new user (a project logging val_loss with the bundled callbacks/early_stopping preset): a traceback
        "early_stopping_metric_not_logged": ([*base, "--trainer.limit_train_batches", "2", "--trainer.limit_val_batches", "1", "--config",
                                              write(cfg / "es.yaml", "trainer:\n  callbacks+:\n    - class_path: lightning.pytorch.callbacks.EarlyStopping\n"
                                                    "      init_args:\n        monitor: val/nope\n")],
                                             ["metric `val/nope` which is not available", "val/loss", "monitor in the config"]),
        "unknown_verb": (["fitt"], ["unknown verb 'fitt'", "Did you mean: fit"]),
        "unknown_top_key_in_file": ([*base, "--config", write(cfg / "top.yaml", "optimiser:\n  lr: 0.1\n")], ["optimiser", "Did you mean: optimizer"]),
        "unknown_trainer_flag": ([*base, "--trainer.max_epohcs", "3"], ["max_epohcs", "Did you mean: trainer.max_epochs"]),
        "unknown_trainer_key_in_file": ([*base, "--config", write(cfg / "tr.yaml", "trainer:\n  max_epohcs: 3\n")], ["max_epohcs", "max_epochs"]),
        "flag_is_prefix_of_option": ([*base, "--trainer.max_epoch", "3"], ["unrecognized arguments: --trainer.max_epoch", "Did you mean: trainer.max_epochs"]),
        "unknown_model_option": ([*base, "--model.init_args.backbon", "mlp"], ["backbon", "Did you mean: backbone"]),
        "unknown_optimizer_option": ([*base, "--optimizer.init_args.lrr", "0.1"], ["lrr", "Did you mean: lr"]),
        "unknown_data_option_in_file": ([*base, "--config", write(cfg / "data.yaml", "data:\n  init_args:\n    batch_sise: 8\n")], ["batch_sise", "Did you mean: batch_size"]),
        "unknown_class_name": ([*base, "--optimizer", "AdamWW"], ["AdamWW", "Did you mean: AdamW"]),
        "unknown_backbone": ([*base, "--model.init_args.backbone", "resnet19"], ["unknown backbone 'resnet19'", "resnet18"]),
        # the same mistakes inside a config file name the file and line (issue 10)
        "file_unknown_key": ([*base, "--config", write(cfg / "tr2.yaml", "trainer:\n  max_epoch: 3\n")], ["tr2.yaml line 2", "'trainer.max_epoch'", "Did you mean: trainer.max_epochs"]),
        "file_unknown_key_lr_find": (["lr-find", "--config", DIGITS, "--config", str(cfg / "tr2.yaml")], ["tr2.yaml line 2", "Did you mean: trainer.max_epochs", "`train fit --help`"]),
        "file_unknown_key_cv": (["cv", "--folds", "2", "--config", DIGITS, "--config", str(cfg / "tr2.yaml")], ["tr2.yaml line 2", "Did you mean: trainer.max_epochs", "`train fit --help`"]),
        "file_misspelt_class_path": ([*base, "--config", write(cfg / "cp.yaml", "optimizer:\n  class_path: torch.optim.AdamWW\n")], ["cp.yaml line 2", "torch.optim.AdamWW", "Did you mean: torch.optim.AdamW"]),
        "flag_misspelt_class_path": ([*base, "--optimizer.class_path", "torch.optim.AdamWW"], ["torch.optim.AdamWW", "Did you mean: torch.optim.AdamW"]),
        "file_misspelt_module": ([*base, "--config", write(cfg / "mod.yaml", "optimizer:\n  class_path: torhc.optim.AdamW\n")], ["mod.yaml line 2", "unknown module 'torhc'", "Did you mean: torch"]),
        "file_wrong_type_value": ([*base, "--config", write(cfg / "lr.yaml", "optimizer:\n  init_args:\n    lr: abc\n")], ["lr.yaml line 3", "optimizer.init_args.lr: expected float, got 'abc'"]),
        "flag_wrong_type_value": ([*base, "--optimizer.lr", "abc"], ["optimizer.init_args.lr: expected float, got 'abc'"]),
        "file_unknown_class_name": ([*base, "--config", write(cfg / "cls.yaml", "# a comment\noptimizer: AdamWW\n")], ["cls.yaml line 2", "AdamWW", "Did you mean: AdamW"]),
        "file_unknown_callback": ([*base, "--config", write(cfg / "cb2.yaml", "trainer:\n  callbacks:\n    - class_path: EarlyStoping\n")], ["cb2.yaml line 2", "Did you mean: EarlyStopping"]),
        "group_file_misspelt_class_path": (["fit", "--config", write(tmp / "user" / "experiment" / "x.yaml", "defaults:\n  - /model: cnn\n  - /data: digits\n  - /optimizer: typo\n  - _self_\n"),
                                            "--trainer.default_root_dir", str(root)], ["x.yaml, from group file", "typo.yaml line 4", "Did you mean: torch.optim.AdamW"]),
        # a user's group file written like the bundled ones but without their `# @package _global_` line
        "group_file_without_package_line": (["fit", "--config", write(tmp / "nopkg" / "experiment" / "x.yaml", "# @package _global_\ndefaults:\n  - /model: mine\n  - /data: digits\n  - _self_\n"),
                                             "--config_root", write(tmp / "nopkg" / "model" / "mine.yaml", "model:\n  class_path: trainer_cli.models.ImageClassifier\n") and str(tmp / "nopkg"),
                                             "--trainer.default_root_dir", str(root)], ["holds model: again (model.model.class_path)", "`# @package _global_`"]),
        # an experiment extending digits with another class: the shipped group's options, or digits' own, stay merged
        "experiment_other_class_keeps_group_options": (["fit", "--config", write(tmp / "ext" / "experiment" / "a.yaml", "# @package _global_\ndefaults:\n  - /experiment/digits\n  - _self_\nmodel:\n  class_path: lightning.pytorch.demos.boring_classes.BoringModel\n"),
                                                        "--trainer.default_root_dir", str(root)], ["cnn.yaml line", "from the default /model of a defaults list", "`- override /model: null`"]),
        "experiment_drops_group_its_base_sets": (["fit", "--config", write(tmp / "ext" / "experiment" / "b.yaml", "# @package _global_\ndefaults:\n  - /experiment/digits\n  - override /optimizer: null\n  - _self_\n"),
                                                  "--trainer.default_root_dir", str(root)], ["digits.yaml line", "set by /experiment/digits itself", "`- override /optimizer: NAME`"]),
        "file_value_out_of_range": ([*base, "--config", write(cfg / "ls.yaml", "model:\n  init_args:\n    label_smoothing: 1.5\n")], ["ls.yaml line 3", "label_smoothing must be in [0, 1)"]),
        "empty_config_file": ([*base, "--config", write(cfg / "empty.yaml", "# nothing yet\n")], ["config file", "empty.yaml is empty"]),
        "yaml_alias_bomb": ([*base, "--config", write(cfg / "bomb.yaml", "a: &a [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
            f"{c}: &{c} [{', '.join([f'*{p}'] * 10)}]\n" for p, c in zip("abcdef", "bcdefg")))], ["bomb.yaml expands to", "over the limit"]),
        "defaults_cycle": (["fit", "--config", write(tmp / "cyc" / "experiment" / "a.yaml", "defaults:\n  - /experiment/b\n  - _self_\n"),
                            "--config_root", str(tmp / "cyc")], ["a.yaml", "defaults: lists form a cycle"]),
        "name_escapes_root": ([*base, "--name", "../../esc"], ["--name '../../esc'", "no '..'"]),
        "root_is_a_file": (["fit", "--config", DIGITS, "--trainer.default_root_dir", write(tmp / "a_file", "x")], ["cannot create the run directory", "Not a directory"]),
        "root_under_a_file": (["fit", "--config", DIGITS, "--trainer.default_root_dir", str(tmp / "a_file" / "sub")], ["cannot create the run directory", "Not a directory"]),
        "config_root_missing": (["fit", "--config_root", str(tmp / "no_root"), "--config", DIGITS], ["--config_root", "no_root: not a directory"]),
        # sweeps: every trial is checked before anything is written, the bad one named
        "sweep_bad_trial_value": ([*base, "--sweep", "trainer.max_epochs=2,abc"], ["sweep trial 1 (trainer.max_epochs=abc): trainer.max_epochs: expected int, got 'abc'"]),
        "sweep_unknown_key": ([*base, "--sweep", "trainer.max_epohcs=1,2"], ["sweep trial 0 (trainer.max_epohcs=1)", "Did you mean: trainer.max_epochs"]),
        "sweep_bad_distribution": ([*base, "--sweep", "optimizer.init_args.lr=loguniform(0,1)"], ["--sweep optimizer.init_args.lr=loguniform(0,1)", "0 < low < high"]),
        "sweep_results_not_a_sweep": (["sweep-results", str(run)], ["not a sweep directory", "sweep.json"]),
        "jobs_json_without_run": (["jobs", "--json"], ["--json prints one run's jobs and cost", "train jobs RUN --json"]),
        # wrong types
        "wrong_type_flag": ([*base, "--trainer.max_epochs", "ten"], ["trainer.max_epochs: expected int, got 'ten'"]),
        "wrong_type_in_file": ([*base, "--config", write(cfg / "type.yaml", "data:\n  init_args:\n    batch_size: big\n")], ["batch_size", "big"]),
        "wrong_type_bool": ([*base, "--trainer.enable_checkpointing", "maybe"], ["trainer.enable_checkpointing: expected bool, got 'maybe'"]),
        # values out of range
        "negative_lr": ([*base, "--optimizer.init_args.lr", "-0.1"], ["optimizer torch.optim.AdamW", "Invalid learning rate: -0.1"]),
        "zero_devices": ([*base, "--trainer.devices", "0"], ["devices", "0"]),
        "zero_batch_size": ([*base, "--data.init_args.batch_size", "0"], ["batch_size must be >= 1, got 0"]),
        "unknown_worker_start_method": ([*base, "--data.init_args.multiprocessing_context", "threads"], ["multiprocessing_context must be one of", "got 'threads'"]),
        "bad_fractions": ([*base, "--data.init_args.val_fraction", "0.9"], ["val_fraction and test_fraction"]),
        "label_smoothing_out_of_range": ([*base, "--model.init_args.label_smoothing", "1.5"], ["label_smoothing must be in [0, 1)"]),
        "zero_accumulate_grad_batches": ([*base, "--trainer.accumulate_grad_batches", "0"], ["--trainer.accumulate_grad_batches 0: must be 1 or more"]),
        "negative_max_epochs": ([*base, "--trainer.max_epochs", "-5"], ["max_epochs", "-5"]),
        "bad_precision": ([*base, "--trainer.precision", "17"], ["precision", "17"]),
        # class paths that are not what the key takes: never called
        "os_system_as_model": ([*base, "--model.class_path", "os.system", "--model.init_args.command", f"touch {MARKER}"], ["model: Import path os.system does not correspond to a subclass of LightningModule"]),
        "os_system_as_callback": ([*base, "--config", write(cfg / "cb.yaml", f"trainer:\n  callbacks:\n    - class_path: os.system\n      init_args:\n        command: touch {MARKER}\n")], ["trainer.callbacks: Import path os.system does not correspond to a subclass of Callback"]),
        "popen_as_data": ([*base, "--data.class_path", "subprocess.Popen", "--data.init_args.args", f"touch {MARKER}"], ["subprocess.Popen", "LightningDataModule"]),
        # data and checkpoints
        "missing_data_dir": ([*base, "--data", "trainer_cli.data.ImageFolderDataModule", "--data.init_args.data_dir", str(tmp / "no_such_dir")], ["image folder not found", "no_such_dir"]),
        "ckpt_missing": ([*base, "--ckpt_path", str(tmp / "nope.ckpt")], ["nope.ckpt", "file not found"]),
        "ckpt_truncated": ([*base, "--ckpt_path", str(truncated)], ["truncated.ckpt", "truncated"]),
        "ckpt_corrupt": ([*base, "--ckpt_path", str(tmp / "corrupt.ckpt")], ["corrupt.ckpt", "corrupt"]),
        "ckpt_not_a_checkpoint": ([*base, "--ckpt_path", write(tmp / "notes.ckpt", "hello")], ["notes.ckpt", "not a readable checkpoint"]),
        "ckpt_other_model": ([*base, "--model.init_args.backbone", "mlp", "--ckpt_path", ckpt], ["last.ckpt", "does not fit the model"]),
        "ckpt_last_none": (["fit", "--config", DIGITS, "--trainer.default_root_dir", str(tmp / "empty_root"), "--ckpt_path", "last"], ["no run of 'digits'", "last.ckpt"]),
        # resume and run directories
        "resume_architecture_changed": (["fit", "--run_dir", str(run), "--ckpt_path", "last", "--trainer.max_epochs", "2", "--model.init_args.backbone", "mlp"],
                                        ["cannot resume", "weights do not fit", "model.init_args.backbone: 'cnn' -> 'mlp'"]),
        "run_dir_reused": (["fit", "--run_dir", str(run)], ["never reused", "--ckpt_path last"]),
        # it resumed the newest run (issue 45)
        "run_dir_empty": (["fit", "--config", DIGITS, "--trainer.default_root_dir", str(root), "--run_dir", "", "--ckpt_path", "last"],
                          ["--run_dir is empty", "leave --run_dir out"]),
        # a folder that holds no run, resumed or evaluated: LightningCLI said `required: fit.model` (a new user's walkthrough)
        "run_dir_no_run_resumed": (["fit", "--run_dir", str(tmp), "--ckpt_path", "last"],
                                   [f"--run_dir {tmp}: no config.yaml there", "`train runs` lists them"]),
        "run_dir_missing_tested": (["test", "--run_dir", str(root / "digits" / "version_99")],
                                   [f"--run_dir {root / 'digits' / 'version_99'}: no such folder"]),
    }


@pytest.fixture(scope="module")
def outcome(tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    tmp = tmp_path_factory.mktemp("bad")
    root = tmp / "runs"
    done = run_train("fit", "--config", DIGITS, *quiet_args(root), "--trainer.limit_train_batches", "2", "--trainer.limit_val_batches", "2")
    assert done.returncode == 0, done.stderr[-3000:]
    run = root / "digits" / "version_0"
    table = case_table(tmp, root, run)
    work = tmp / "cwd"
    work.mkdir()
    (work / "configs").symlink_to(CONFIGS)
    cases = {name: {"argv": argv, "cwd": str(work)} for name, (argv, _) in table.items()}
    (tmp / "cases.json").write_text(json.dumps(cases))
    before = tree(run)
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    env.pop("TRAINER_CLI_RUN_DIR", None)
    run_helper(SUPPORT, str(tmp / "cases.json"), str(tmp / "out.json"), env=env)
    return {"table": table, "results": json.loads((tmp / "out.json").read_text()), "before": before, "after": tree(run), "root": root, "run": run, "work": work, "tmp": tmp}




def _names() -> list[str]:
    import tempfile

    # the table's keys do not depend on the paths: build it once over dummy files to list them
    with tempfile.TemporaryDirectory() as d:
        fake = Path(d) / "r"
        (fake / "checkpoints").mkdir(parents=True)
        (fake / "checkpoints" / "last.ckpt").write_bytes(b"0" * 10000)
        return list(case_table(Path(d), Path(d) / "runs", fake))


@pytest.mark.parametrize("name", _names())
def test_bad_input(outcome: dict, name: str) -> None:
    result = outcome["results"][name]
    _, fragments = outcome["table"][name]
    stderr = result["stderr"]
    assert result["code"] == 2, f"exit {result['code']}\n{stderr[-2000:]}"
    assert "Traceback" not in stderr + result["stdout"], stderr[-3000:]
    assert "error:" in stderr and "usage:" not in stderr
    message = stderr[stderr.index("error:"):]
    for fragment in fragments:
        assert fragment in message, f"{fragment!r} not in:\n{message[-2000:]}"


FROM_FLAGS = ("label_smoothing_out_of_range", "unknown_trainer_flag", "flag_misspelt_class_path", "flag_wrong_type_value", "unknown_class_name", "wrong_type_flag")


@pytest.mark.parametrize("name", FROM_FLAGS)
def test_a_flag_error_names_no_config_file(outcome: dict, name: str) -> None:
    """The digits experiment is layered too, but the bad value came from the flag."""
    message = outcome["results"][name]["stderr"]
    assert "error: " in message and ".yaml" not in message and "unknown class 'abc'" not in message


def test_existing_run_directory_untouched_and_nothing_called(outcome: dict) -> None:
    assert outcome["after"] == outcome["before"]
    assert not list(outcome["work"].rglob(MARKER)) and not (REPO / MARKER).exists()
    # failed starts leave no new run directory behind, but for the one that trained 2 steps before its mistake
    # showed (issue 45: a run that trained is never removed, and the message says what was kept)
    kept = outcome["results"]["early_stopping_metric_not_logged"]["stderr"]
    assert "Its 2 trained step(s) were not saved" in kept and "version_1 is kept (config.yaml, " in kept, kept[-2000:]
    assert sorted(p.name for p in (outcome["root"] / "digits").iterdir()) == ["version_0", "version_1"]


def test_at_least_30_cases() -> None:
    assert len(_names()) >= 30


@pytest.mark.skipif("submit" not in VERBS, reason="`train submit` (issue 3) is not merged in this branch")
def test_slurm_cases_are_in_the_suite() -> None:
    assert {"slurm_contradicts_trainer", "slurm_template_missing"} <= set(_names())


@pytest.mark.parametrize("name", ["unknown_trainer_flag", "interpolation_missing_key"])
def test_separate_process_agrees(outcome: dict, name: str) -> None:
    argv, _ = outcome["table"][name]
    done = run_train(*argv, cwd=outcome["work"])
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert done.stderr == outcome["results"][name]["stderr"]


USER_TASKS = '''import lightning.pytorch as pl


class ClassificationTask(pl.LightningModule):
    """The user's model, in their package: never imported by a config that names it."""
'''
USER_DATA = '''import lightning.pytorch as pl


class ClassificationTaskData(pl.LightningDataModule):
    """Close to the model's name, but a data module: not what model: takes."""
'''
USER_SCRIPT = '''from trainer_cli import TrainerCLI

if __name__ == "__main__":
    TrainerCLI()
'''


def test_did_you_mean_draws_from_the_users_package_first(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 45: a misspelt short class name under model: got the launcher's ClassificationDataModule and
    Association (a Slurm record); now the user's ClassificationTask of their package (as its class path) and
    never a class of another kind, from `train fit` and from the user's own script."""
    write(tmp_path / "mypkg" / "__init__.py", "")
    write(tmp_path / "mypkg" / "tasks.py", USER_TASKS)
    write(tmp_path / "mypkg" / "data.py", USER_DATA)
    write(tmp_path / "main.py", USER_SCRIPT)
    config = write(tmp_path / "config.yaml", "model:\n  class_path: ClassificationTsk\ntrainer:\n  max_epochs: 1\n")
    env = {k: v for k, v in os.environ.items() if k != "TRAINER_CLI_RUN_DIR"}
    for done in (run_train("fit", "--config", config, cwd=tmp_path),
                 forkserver.run_python([str(tmp_path / "main.py"), "fit", "--config", config], tmp_path, env, 600)):
        assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr[-2000:]
        (hint,) = [line for line in done.stderr.splitlines() if "Did you mean" in line]
        assert hint.endswith("unknown class 'ClassificationTsk'. Did you mean: mypkg.tasks.ClassificationTask?"), hint
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    assert class_hints.class_hint("ClassificationTsk", "models") == " Did you mean: mypkg.tasks.ClassificationTask?"
    assert class_hints.class_hint("ClassificationTsk", explain._kind_of("trainer.callbacks: Expected a dot import")) == ""
    hint = class_hints.class_hint("ClassificationTaskDat", "data")  # the user's first, then the launcher's of the kind
    assert hint == " Did you mean: mypkg.data.ClassificationTaskData, ClassificationDataModule?"
    assert "Association" not in class_hints.class_hint("Associaton", None), "a Slurm record is no class a config takes"


def test_packages_added_by_a_pth_are_no_user_code(tmp_path: Path) -> None:
    """A venv whose packages come from another folder through a ``.pth`` (``site.addsitedir``, as a lab's shared
    environment or ``--system-site-packages`` gives them): a misspelled class path is one line with its hint, not
    jsonargparse's frames shown as the user's code (a new user's walkthrough saw them)."""
    import subprocess
    import sys
    import sysconfig

    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    own = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                         capture_output=True, text=True, check=True).stdout.strip()  # fmt: skip
    (Path(own) / "zz_deps.pth").write_text(f"import site; site.addsitedir({sysconfig.get_paths()['purelib']!r})\n")
    done = subprocess.run(
        [python, "-m", "trainer_cli", "fit", "--config", DIGITS, "--model", "trainer_cli.models.classifier.ImageClassifer"],
        cwd=tmp_path, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr[-3000:]
    assert "Did you mean: trainer_cli.models.classifier.ImageClassifier?" in done.stderr, done.stderr
    assert not (tmp_path / "runs").exists()


def test_a_typo_in_a_nested_class_names_that_class(tmp_path: Path) -> None:
    """An option misspelt in a class inside another's init_args (the template's ``model.net``): the hint names
    the inner class and its close option, not the outer class's options (it said ``Holder takes: net.``)."""
    (tmp_path / "nested.py").write_text(
        "import lightning.pytorch as pl\nimport torch\n\n\n"
        "class DenseNet(torch.nn.Module):\n    def __init__(self, lin1_size: int = 16) -> None:\n"
        "        super().__init__()\n        self.lin = torch.nn.Linear(64, lin1_size)\n\n\n"
        "class Holder(pl.LightningModule):\n    def __init__(self, net: torch.nn.Module) -> None:\n"
        "        super().__init__()\n        self.net = net\n"
    )
    done = run_train("fit", "--model", "nested.Holder", "--model.init_args.net", "nested.DenseNet",
                     "--model.init_args.net.init_args.lin1_sise", "3", "--data", "trainer_cli.data.DigitsDataModule",
                     cwd=tmp_path, env={"PYTHONPATH": str(tmp_path)})  # fmt: skip
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr[-3000:]
    assert "unknown option 'lin1_sise' of nested.DenseNet. Did you mean: lin1_size?" in done.stderr, done.stderr
