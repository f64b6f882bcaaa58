"""Issue 35's checkpoint defects, on the recogniser project (``tests/foreign_hw``): a ``ModelCheckpoint``
added with ``add_lightning_class_args`` keeps its best file, a user's own callbacks list still gets the run's
``last.ckpt``, a damaged ``last.ckpt`` is passed over for the newest complete checkpoint (and the resume
says how many steps it repeats), and a ``--ckpt_path`` that does not exist is one line before anything is
written. Assertions are relative to the run directory the launcher prints."""

from __future__ import annotations

import re
from pathlib import Path

import torch
from hw_support import DEFAULT, hw_project, run_main, run_train

STEPS_PER_EPOCH = 5  # 96 rows, batch 16: 80 training rows
RECOGNISER = ("--model", "hwr.model.Recognizer", "--model.input_dim", "12", "--model.num_classes", "5",
              "--model.hidden", "40", "--trainer.enable_progress_bar", "false")


def run_dir_of(proc) -> Path:
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    found = re.findall(r"^Run directory: (.+)$", proc.stdout, re.M)
    assert found, proc.stdout[-2000:]
    return Path(found[-1])


def load(path: Path) -> dict:
    return torch.load(path, map_location="cpu", weights_only=False)


def files(project: Path) -> set[Path]:
    return {p.relative_to(project) for p in project.rglob("*") if not {".git", "__pycache__"} & set(p.parts)}


def test_a_parser_added_checkpoint_keeps_its_best_and_a_damaged_last_is_passed_over(tmp_path: Path) -> None:
    """Defects 1 and 7: ``my_model_checkpoint`` (mode max on the training loss: its best is an early epoch)
    keeps its file, as under stock LightningCLI; the launcher adds no ``ModelCheckpoint`` writing the same
    ``epoch=N-step=M.ckpt`` names (its keep-the-latest deleted the user's best), only ``last.ckpt``. A
    truncated ``last.ckpt`` is then passed over for the user's complete checkpoint, and the resume says
    how many steps it trains again."""
    project = hw_project(tmp_path)
    run = run_dir_of(run_main(project, "fit", *DEFAULT))
    checkpoints = run / "checkpoints"
    last = load(checkpoints / "last.ckpt")
    assert last["global_step"] == 4 * STEPS_PER_EPOCH
    (user,) = [s for k, s in last["callbacks"].items() if k.startswith("ModelCheckpoint{'monitor': 'train_loss'")]
    best = Path(user["best_model_path"])
    assert best.is_file() and best.parent == checkpoints, (best, sorted(p.name for p in checkpoints.iterdir()))
    assert all(Path(f).is_file() for f in user["best_k_models"])
    best_step = load(best)["global_step"]
    assert f"step={best_step}.ckpt" in best.name and best_step < 4 * STEPS_PER_EPOCH
    assert sorted(p.name for p in checkpoints.iterdir()) == sorted([best.name, "last.ckpt"])

    data = (checkpoints / "last.ckpt").read_bytes()
    (checkpoints / "last.ckpt").write_bytes(data[: len(data) // 2])  # cut short, as a crash on a bad disk leaves it
    resumed = run_main(project, "fit", *DEFAULT, "--run_dir", str(run), "--ckpt_path", "last")
    assert run_dir_of(resumed) == run
    assert "last.ckpt is damaged (truncated or corrupt): passed over" in resumed.stdout
    assert f"from {best} (step {best_step}," in resumed.stdout
    assert f"it repeats {4 * STEPS_PER_EPOCH - best_step} steps" in resumed.stdout
    assert load(checkpoints / "last.ckpt")["global_step"] == 4 * STEPS_PER_EPOCH
    assert best.is_file()


def test_a_callbacks_list_of_the_users_own_gets_the_resume_checkpoint(tmp_path: Path) -> None:
    """Defect 8: a callbacks list keeping only the best by val_acc (lightning-hydra-template's) still gets
    the run's ``last.ckpt`` beside the user's file, and ``--ckpt_path last`` goes on from the step the run
    reached, not from the best of epoch 0."""
    project = hw_project(tmp_path)
    own = ("--config", "configs/own_callbacks.yaml")
    run = run_dir_of(run_train(project, "fit", *DEFAULT, *own, *RECOGNISER, "--trainer.max_epochs", "2"))
    checkpoints = run / "checkpoints"
    assert load(checkpoints / "last.ckpt")["global_step"] == 2 * STEPS_PER_EPOCH
    assert [p.name for p in checkpoints.glob("epoch_*.ckpt")], sorted(p.name for p in checkpoints.iterdir())

    resumed = run_train(project, "fit", *DEFAULT, *own, *RECOGNISER, "--trainer.max_epochs", "3",
                        "--run_dir", str(run), "--ckpt_path", "last")
    assert run_dir_of(resumed) == run
    assert f"from {checkpoints / 'last.ckpt'} (step {2 * STEPS_PER_EPOCH}," in resumed.stdout
    assert "repeats" not in resumed.stdout
    assert load(checkpoints / "last.ckpt")["global_step"] == 3 * STEPS_PER_EPOCH


def test_a_missing_ckpt_path_is_one_line_before_anything_is_written(tmp_path: Path) -> None:
    """Defect 6, both entries: one line naming the file, exit 2, no traceback, no file written (stock
    LightningCLI's 47-line traceback came after run.json, launcher.yaml and config.yaml were written)."""
    project = hw_project(tmp_path)
    before = files(project)
    for proc in (run_main(project, "fit", *DEFAULT, "--ckpt_path", "nope.ckpt"),
                 run_train(project, "fit", *DEFAULT, *RECOGNISER, "--ckpt_path", "nope.ckpt")):
        assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr[-3000:]
        errors = [line for line in proc.stderr.splitlines() if line.strip()]
        assert len(errors) == 1 and "--ckpt_path nope.ckpt: file not found" in errors[0], proc.stderr[-3000:]
        assert files(project) == before


def test_the_resume_checkpoint_stands_aside_for_a_save_last_one_the_model_adds(tmp_path: Path) -> None:
    """A ``ModelCheckpoint(save_last=True)`` from the model's ``configure_callbacks`` (attached by Lightning
    when ``fit`` starts, after the launcher chose its callbacks) into the run's folder keeps its ``last.ckpt``:
    the launcher's ``LastCheckpoint`` saves ``resume.ckpt`` beside it (both wrote ``last.ckpt``, and the
    user's callback, finding a file it did not write, went on in ``last-v1.ckpt``; issue 45: standing aside,
    the run had no current resume point)."""
    import lightning.pytorch as pl
    from lightning.pytorch.callbacks import ModelCheckpoint
    from lightning.pytorch.demos.boring_classes import BoringModel

    from trainer_cli.callbacks import LastCheckpoint

    folder = tmp_path / "checkpoints"

    class WithItsOwn(BoringModel):
        def configure_callbacks(self):
            return [ModelCheckpoint(dirpath=folder, save_last=True, save_top_k=0)]

    trainer = pl.Trainer(default_root_dir=tmp_path, max_epochs=2, limit_train_batches=2, limit_val_batches=1,
                         callbacks=[LastCheckpoint(dirpath=str(folder), min_interval_s=0)], logger=False,
                         enable_progress_bar=False, enable_model_summary=False)
    trainer.fit(WithItsOwn())
    assert sorted(p.name for p in folder.iterdir()) == ["last.ckpt", "resume.ckpt"]
    assert load(folder / "resume.ckpt")["global_step"] == 4
    (users,) = [c for c in trainer.checkpoint_callbacks if type(c) is ModelCheckpoint]
    assert Path(users.last_model_path) == folder / "last.ckpt" and load(folder / "last.ckpt")["global_step"] == 4
