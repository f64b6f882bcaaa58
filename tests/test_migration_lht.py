"""docs/migration/lightning-hydra-template.md, run as written, on a project of the template's shape
(``tests/foreign_lht``: its module with the Hydra ``_partial_`` optimizer and scheduler arguments called as
``self.hparams.optimizer(params=...)``, its data module reading MNIST's raw files from ``${paths.data_dir}``,
git-ignored, and the template's ``configs/`` files in ``_target_`` style, as in
https://github.com/ashleve/lightning-hydra-template at commit bddbc24b82ab6ccfa6243e815a49dc5bfe8d4144:
``train.yaml``, ``experiment/example.yaml`` of ``override`` lines, ``callbacks/default.yaml`` composing its
named callbacks, ``logger/``, ``trainer/default.yaml`` and ``cpu.yaml``, ``paths/``, ``extras/``, ``hydra/``).

Nothing is migrated: ``configs/`` and ``src/`` stay as they are (:mod:`trainer_cli.config.hydra_style` reads
them); the page's ``bash`` commands run in page order in the project's root, in-process
(``trainer_cli.__main__.main``). The default tier runs the fit, its resume and the test (a few seconds
of training); the ``long`` one every command: the fit that tests when it ends and the Optuna sweep too.
tests/test_readme_commands.py leaves this page to this test (:data:`test_readme_commands.OWN_TEST`).
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest
import torch
import yaml
from lht_support import LHT, lht_project
from lightning.pytorch import LightningModule
from lightning.pytorch.cli import OptimizerCallable
from support import REPO
from test_readme_commands import markdown_sections
from torch.optim.lr_scheduler import LRScheduler

PAGE = REPO / "docs" / "migration" / "lightning-hydra-template.md"
CHEAP = ("fit", "test")  # the default tier's verbs: the sweep, --test_after_fit and submit are the long one's
# the template's `scheduler: torch.optim.lr_scheduler` (a module, not a type) is Unvalidated to jsonargparse, which
# still builds the class given there (deprecated in 4.51: from 5.0 the module gets the config; it calls its hparams)
UNVALIDATED = pytest.mark.filterwarnings(r"ignore:\s*Instantiating a subclass spec given as value for a type")


def page_steps() -> list[str | tuple[str, str]]:
    """The page's steps in page order, as tests/test_readme_commands.py reads a page: its commands, and the
    files of its fenced blocks with a ``title`` (``(name, text)``)."""
    return markdown_sections(PAGE, by_section=False)["top"][0]


def page_files() -> dict[str, str]:
    """``{path: text}`` of the page's ``yaml title="PATH"`` blocks."""
    return dict(step for step in page_steps() if isinstance(step, tuple))


def page_commands() -> list[str]:
    """The page's ``bash`` commands, in page order."""
    return [step for step in page_steps() if isinstance(step, str)]


def migrate(tmp_path: Path) -> Path:
    """The project copied: the page writes no file of it (its ``configs/`` and ``src/`` run as they are)."""
    assert not page_files(), f"the page rewrites {sorted(page_files())}: the template's files should run as they are"
    return lht_project(tmp_path / "project")


def run_page(
    project: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], verbs: tuple[str, ...] | None
) -> list[str]:
    """Run the page's commands (of ``verbs`` only, without --sweep/--test_after_fit, when given) in ``project``."""
    from trainer_cli.__main__ import main

    monkeypatch.chdir(project)
    monkeypatch.syspath_prepend(str(project))
    ran = []
    for command in page_commands():
        argv = shlex.split(command)[1:]
        if verbs is not None and (argv[0] not in verbs or "--sweep" in argv or "--test_after_fit" in argv):
            continue
        try:
            code = main(argv)
        except SystemExit as stop:  # --print_config exits through argparse
            code = stop.code if isinstance(stop.code, int) else 0
        out = capsys.readouterr()
        assert code == 0, f"{PAGE.name}: {command} failed ({code})\n{out.out[-3000:]}\n{out.err[-3000:]}"
        ran.append(command)
    return ran


def _metric(run: Path, key: str) -> list[float]:
    """Every value of metric ``key`` in the run's ``metrics.jsonl``, in order."""
    lines = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    return [line["metrics"][key] for line in lines if key in line.get("metrics", {})]


def test_page_shows_the_steps() -> None:
    """The page rewrites no config file and shows fit, resume, test, test after fit and the sweep."""
    assert not page_files()
    commands = " ; ".join(page_commands())
    for needed in ("--ckpt_path last", "train test", "--test_after_fit", "--sweep_sampler tpe", "uniform(0.0001,0.1)"):
        assert needed in commands, needed


@UNVALIDATED
def test_migrated_project_fits_resumes_and_tests(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The page's fit, resume and test on the migrated project: 2 epochs, then the same run resumed to 3
    (one more epoch, not three), its best checkpoint tested; the module is the template's as it is (its
    Hydra partials called in configure_optimizers), and its checkpoints read with torch's safe loader."""
    project = migrate(tmp_path)
    for path in [*(LHT / "src").rglob("*.py"), *(LHT / "configs").rglob("*.yaml")]:
        assert (project / path.relative_to(LHT)).read_bytes() == path.read_bytes(), path
    ran = run_page(project, monkeypatch, capsys, CHEAP)
    assert len(ran) >= 5, ran
    run = project / "runs" / "train" / "version_0"  # the template's task_name
    validations = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [v["epoch"] for v in validations if v["stage"] == "validation"] == [0, 1, 2]  # resumed: 1 more, not 3
    starts = [json.loads(line) for line in (run / "history.jsonl").read_text().splitlines()]
    assert [s["verb"] for s in starts] == ["fit", "fit", "test"]  # the fit, its resume, the test
    checkpoint = torch.load(run / "checkpoints" / "last.ckpt", weights_only=True, map_location="cpu")
    assert checkpoint["epoch"] == 2 and checkpoint["hyper_parameters"]["optimizer"]["init_args"]["lr"] == 0.002
    assert _metric(run, "val/acc")[-1] >= 0.5  # it learned (digits, scaled to MNIST's size)


@pytest.mark.long
@UNVALIDATED
def test_migrated_project_every_command(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Every command of the page: also the fit with --test_after_fit (a test of its best checkpoint)
    and the template's Optuna search as --sweep flags (2 TPE trials, both complete). The page's fit of 2
    epochs resumed to 3 ends with the weights of a fit of 3 left alone (``torch.equal``)."""
    from trainer_cli.__main__ import main

    project = migrate(tmp_path)
    ran = run_page(project, monkeypatch, capsys, None)
    straight_run = ["--name", "straight", "--trainer.max_epochs", "3"]
    assert main(["fit", "--config_root", "configs", "--config", "experiment/example", *straight_run]) == 0
    resumed, straight = (
        torch.load(project / "runs" / name / "checkpoints" / "last.ckpt", weights_only=True, map_location="cpu")
        for name in ("train/version_0", "straight/version_0")
    )
    assert resumed["global_step"] == straight["global_step"] > 0
    assert all(torch.equal(resumed["state_dict"][k], v) for k, v in straight["state_dict"].items())
    assert any("--test_after_fit" in c for c in ran) and any("--sweep" in c for c in ran)
    tested = project / "runs" / "train" / "version_1"
    starts = [json.loads(line) for line in (tested / "history.jsonl").read_text().splitlines()]
    assert [s["verb"] for s in starts] == ["fit", "test"], starts  # the fit, then the test of its best checkpoint
    assert Path(starts[1]["checkpoint"]).name.startswith("epoch_"), starts[1]  # ModelCheckpoint's best, not last.ckpt
    sweep = json.loads((project / "runs" / "train" / "sweep_0" / "sweep_results.json").read_text())
    assert sweep["monitor"] == "val/acc_best" and sweep["mode"] == "max", sweep
    assert [row["state"] for row in sweep["rows"]] == ["COMPLETED", "COMPLETED"], sweep["rows"]


TINY = ["--trainer.limit_train_batches", "2", "--trainer.limit_val_batches", "1"]


@UNVALIDATED
def test_template_configs_fit_and_resume_as_they_are(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The goal of issue 45 item 3: ``train fit --config_root configs --config experiment/example`` on the
    template's own ``configs/`` (``_target_``, ``_partial_``, named callbacks, ``override`` lines, ``seed``,
    ``task_name``, ``${paths.data_dir}`` from ``$PROJECT_ROOT``) for one tiny epoch, then ``--ckpt_path last``
    to a second: the resume continues the run; the one note line names the keys left out."""
    from trainer_cli.__main__ import main

    project = lht_project(tmp_path / "project")
    monkeypatch.chdir(project)
    monkeypatch.syspath_prepend(str(project))
    monkeypatch.delenv("PROJECT_ROOT", raising=False)
    base = ["fit", "--config_root", "configs", "--config", "experiment/example", *TINY]
    assert main([*base, "--trainer.max_epochs", "1"]) == 0
    err = capsys.readouterr().err
    notes = [line for line in err.splitlines() if line.startswith("note:") and "Hydra keys ignored" in line]
    assert len(notes) == 1 and "tags (" in notes[0] and "logger.wandb" in notes[0], err[-2000:]
    assert main([*base, "--trainer.max_epochs", "2", "--ckpt_path", "last"]) == 0
    run = project / "runs" / "train" / "version_0"  # task_name: train
    starts = [json.loads(line) for line in (run / "history.jsonl").read_text().splitlines()]
    assert [(s["kind"], s["global_step"]) for s in starts] == [("new", 0), ("extension", 2)], starts
    config = (run / "config.yaml").read_text()
    assert "seed_everything: 12345" in config and "_target_" not in config
    assert "class_path: lightning.pytorch.callbacks.EarlyStopping" in config
    assert f"data_dir: {project}/data/" in config  # ${paths.data_dir}: ${oc.env:PROJECT_ROOT} is the project
    names = {p.name for p in (run / "checkpoints").iterdir()}  # ModelCheckpoint's save_top_k: 1, save_last
    assert "last.ckpt" in names and len([n for n in names if n.startswith("epoch_")]) == 1, names
    checkpoint = torch.load(run / "checkpoints" / "last.ckpt", weights_only=True, map_location="cpu")
    assert checkpoint["epoch"] == 1 and checkpoint["hyper_parameters"]["net"]["init_args"]["lin1_size"] == 128


def test_group_files_layer_as_in_hydra(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--config trainer/cpu`` after the experiment keeps the experiment's ``max_epochs`` (its ``defaults:
    [default]`` comes under it, said in a note) and applies its own keys; the project's ``logger/csv.yaml``
    (``_target_`` style, ``save_dir: ${paths.output_dir}``) shadows the bundled one and parses."""
    from trainer_cli.__main__ import main

    project = lht_project(tmp_path / "project")
    monkeypatch.chdir(project)
    monkeypatch.syspath_prepend(str(project))
    argv = ["fit", "--config_root", "configs", "--config", "experiment/example", "--config", "trainer/cpu"]
    try:
        main([*argv, "--config", "logger/csv", "--print_config"])
    except SystemExit as stop:
        assert not stop.code
    out = capsys.readouterr()
    printed = yaml.safe_load(out.out)
    assert printed["trainer"]["max_epochs"] == 10 and printed["trainer"]["min_epochs"] == 10  # the experiment's
    assert printed["trainer"]["gradient_clip_val"] == 0.5 and printed["trainer"]["accelerator"] == "cpu"
    assert [lg["class_path"] for lg in printed["trainer"]["logger"]] == ["lightning.pytorch.loggers.csv_logs.CSVLogger"]
    assert "does not reset trainer.min_epochs, trainer.max_epochs" in out.err, out.err[-2000:]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "model:\n  _target_: src.models.mnist_module.MNISTLitModul\n",
            "bad.yaml line 2: model._target_: cannot import src.models.mnist_module.MNISTLitModul",
        ),
        (
            "model:\n  _target_: src.models.mnist_module.MNISTLitModule\n  net:\n    _target_: math.pi\n"
            "    _partial_: true\n",
            "bad.yaml line 5: model.net._partial_: true on math.pi, which is not callable",
        ),
        ("seed: 3\ntrain: false\n", "bad.yaml line 2: train: false (no training) cannot be honoured"),
        ("seed: oops\n", "bad.yaml line 1: seed_everything: expected bool or int, got 'oops'"),
        (
            "callbacks:\n  early_stopping:\n    patience: many\n",
            "bad.yaml line 3: trainer.callbacks.init_args.patience: expected int, got 'many'",
        ),
        (
            "trainer:\n  _target_: mypkg.MyTrainer\n",
            "bad.yaml line 2: trainer._target_: mypkg.MyTrainer: the launcher builds Lightning's Trainer",
        ),
    ],
    ids=["target-import", "partial-not-callable", "train-false", "seed", "callback-value", "trainer-subclass"],
)
def test_hydra_bad_input_is_one_line(
    text: str, expected: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A Hydra-style mistake layered on the template's experiment is one ``error:`` line naming the file, line
    and key (a value LightningCLI refuses too: its key found in the file as written), exit 2, before any run."""
    from trainer_cli.__main__ import main

    project = lht_project(tmp_path / "project")
    monkeypatch.chdir(project)
    monkeypatch.syspath_prepend(str(project))
    (project / "bad.yaml").write_text(text)
    assert main(["fit", "--config_root", "configs", "--config", "experiment/example", "--config", "bad.yaml"]) == 2
    err = capsys.readouterr().err
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and errors[0].startswith("error: in ") and expected in errors[0], err
    assert "Traceback" not in err
    assert not (project / "runs").exists()


def test_args_are_positional_parameters_by_name(tmp_path: Path) -> None:
    """``_args_`` fill the class's first parameters by name (``torch.nn.Linear``'s ``in_features``,
    ``out_features``), nested under ``init_args`` as LightningCLI takes them; a class that takes them only
    as ``*args`` is one line naming the file and key."""
    from trainer_cli.config.compose import config_text
    from trainer_cli.config.keys import Layers
    from trainer_cli.errors import UserError

    good = tmp_path / "good.yaml"
    good.write_text("model:\n  _target_: torch.nn.Sequential\n  _args_:\n    - _target_: torch.nn.Linear\n"
                    "      _args_: [4, 2]\n      bias: false\n")  # fmt: skip
    with pytest.raises(UserError, match=r"good.yaml line 3: model._args_: torch.nn.Sequential does not take 1"):
        config_text(str(good), Layers())
    good.write_text("model:\n  _target_: torch.nn.Linear\n  _args_: [4, 2]\n  bias: false\n")
    model = yaml.safe_load(config_text(str(good), Layers()))["model"]
    assert model == {"class_path": "torch.nn.Linear", "init_args": {"in_features": 4, "out_features": 2, "bias": False}}


class InjectedNet(LightningModule):
    """A module that keeps its injected optimizer and scheduler itself (not through ``hparams``), annotated
    with the classes (``torch.optim.Optimizer``, ``LRScheduler``), and one more under LightningCLI's type."""

    def __init__(
        self, optimizer: torch.optim.Optimizer, scheduler: LRScheduler, other: OptimizerCallable | None = None
    ) -> None:
        super().__init__()
        self.save_hyperparameters(logger=False)
        self.optimizer, self.scheduler, self.other = optimizer, scheduler, other
        self.layer = torch.nn.Linear(2, 2)


def test_class_annotated_partials_are_built_by_the_module() -> None:
    """An optimizer and scheduler argument annotated with the class are partials of their configured
    arguments, in the module and in its hparams (both callable as Hydra's are); the top-level --optimizer
    group and a callable-typed argument keep their meaning; the config holds no ``params``."""
    from trainer_cli.runtime.cli import verb_cli
    from trainer_cli.runtime.run import Run

    args = [
        "--model", f"{__name__}.InjectedNet",
        "--model.optimizer", "torch.optim.SGD", "--model.optimizer.lr", "0.5",
        "--model.scheduler", "torch.optim.lr_scheduler.StepLR", "--model.scheduler.step_size", "3",
        "--model.other", "torch.optim.Adam", "--data", "trainer_cli.data.DigitsDataModule",
    ]  # fmt: skip
    cli = verb_cli("fit")(args=args, run=False, run_directory=Run("fit"))
    model = cli.model
    assert isinstance(model, InjectedNet)
    for built in (model.optimizer(params=model.parameters()), model.hparams.optimizer(params=model.parameters())):
        assert isinstance(built, torch.optim.SGD) and built.defaults["lr"] == 0.5
    for make in (model.scheduler, model.hparams.scheduler):
        scheduler = make(optimizer=torch.optim.SGD(model.parameters(), lr=0.1))
        assert isinstance(scheduler, torch.optim.lr_scheduler.StepLR) and scheduler.step_size == 3
    assert isinstance(model.other(model.parameters()), torch.optim.Adam)
    assert "params" not in cli.config.model.init_args.optimizer.init_args


def test_a_layers_own_hydra_node_is_named_in_the_note(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A Hydra-style file that writes Hydra's own node (``hydra: {run: {dir: ...}}``, which Hydra's compose
    takes out of the config it returns) gets the note line saying the launcher ignores it and why, not silence."""
    from trainer_cli.__main__ import main

    project = lht_project(tmp_path / "project")
    monkeypatch.chdir(project)
    monkeypatch.syspath_prepend(str(project))
    (project / "runfolder.yaml").write_text("hydra:\n  run:\n    dir: outputs/here\ntask_name: mine\n")
    try:
        main(["fit", "--config_root", "configs", "--config", "experiment/example", "--config", "runfolder.yaml",
              "--print_config"])
    except SystemExit as stop:
        assert stop.code in (0, None)
    out, err = capsys.readouterr()
    notes = [line for line in err.splitlines() if "runfolder.yaml: Hydra keys ignored" in line]
    assert len(notes) == 1 and "hydra (no Hydra run: runs go to runs/<name>/version_N)" in notes[0], err[-2000:]
    assert "name: mine" in out and "outputs/here" not in out
