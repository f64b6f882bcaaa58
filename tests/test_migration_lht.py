"""docs/migration/lightning-hydra-template.md, run as written, on a project of the template's shape
(``tests/foreign_lht``: its module with the Hydra ``_partial_`` optimizer and scheduler arguments called as
``self.hparams.optimizer(params=...)``, its data module reading MNIST's raw files from a relative,
git-ignored ``data_dir``, its config groups, experiment and ``hparams_search`` file).

The page's steps alone migrate it: each ``yaml title="configs/..."`` block of the page is written over
the project's file of that name (``src/`` is left as it is: the classes move over unchanged), then the
page's ``bash`` commands run in page order in the project's root, in-process
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


MNIST_SPLIT = "train_val_test_split: [55_000, 5_000, 10_000]"
"""The page's split: the template's, MNIST's 70,000 images; this test's MNIST has 320 (lht_support.write_mnist)."""
TEST_SPLIT = "train_val_test_split: [240, 40, 40]"


def migrate(tmp_path: Path) -> Path:
    """The project copied and migrated by the page's files; its ``src/`` stays the template's. The page's
    data split (of MNIST's size) becomes this test's, of the 320 images it writes: the one value changed."""
    project = lht_project(tmp_path / "project")
    for name, text in page_files().items():
        assert name.startswith("configs/"), f"the page rewrites {name}: only configs/ should change"
        if name == "configs/data/mnist.yaml":
            assert MNIST_SPLIT in text, f"the page's {name} splits MNIST's 70,000 images"
            text = text.replace(MNIST_SPLIT, TEST_SPLIT)
        (project / name).write_text(text)
    return project


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
    """The page holds the migrated files of every group the template's experiment names, the one edit,
    and fit, resume, test, test after fit and the sweep."""
    assert {
        "configs/model/mnist.yaml",
        "configs/data/mnist.yaml",
        "configs/trainer/default.yaml",
        "configs/callbacks/default.yaml",
        "configs/train.yaml",
        "configs/experiment/example.yaml",
    } <= set(page_files())
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
    for path in (LHT / "src").rglob("*.py"):
        assert (project / path.relative_to(LHT)).read_bytes() == path.read_bytes(), path
    ran = run_page(project, monkeypatch, capsys, CHEAP)
    assert len(ran) >= 5, ran
    run = project / "runs" / "example" / "version_0"
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
    assert main(["fit", "--config_root", "configs", "--config", "experiment/example", "--name", "straight"]) == 0
    resumed, straight = (
        torch.load(project / "runs" / name / "checkpoints" / "last.ckpt", weights_only=True, map_location="cpu")
        for name in ("example/version_0", "straight/version_0")
    )
    assert resumed["global_step"] == straight["global_step"] > 0
    assert all(torch.equal(resumed["state_dict"][k], v) for k, v in straight["state_dict"].items())
    assert any("--test_after_fit" in c for c in ran) and any("--sweep" in c for c in ran)
    tested = project / "runs" / "example" / "version_1"
    starts = [json.loads(line) for line in (tested / "history.jsonl").read_text().splitlines()]
    assert [s["verb"] for s in starts] == ["fit", "test"], starts  # the fit, then the test of its best checkpoint
    assert Path(starts[1]["checkpoint"]).name.startswith("epoch_"), starts[1]  # ModelCheckpoint's best, not last.ckpt
    sweep = json.loads((project / "runs" / "example" / "sweep_0" / "sweep_results.json").read_text())
    assert sweep["monitor"] == "val/acc_best" and sweep["mode"] == "max", sweep
    assert [row["state"] for row in sweep["rows"]] == ["COMPLETED", "COMPLETED"], sweep["rows"]


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
