"""``python main.py submit`` (a user's own script with TrainerCLI) on the real local Slurm cluster
(scripts/local-slurm): the job runs the submitted code from the run's code snapshot, in the
directory it was submitted from. Skipped with the reason where the cluster cannot start, failed
instead under CI=true."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from slurm_support import LOCAL_PROFILE, job_id_from, slurm_cluster, wait_for_state  # noqa: F401 - a fixture

from trainer_cli.schedulers.script_entry import script_entry

MAIN = '''"""A user's script: LightningCLI swapped for TrainerCLI, nothing else."""

from trainer_cli import TrainerCLI as LightningCLI

from rowsproj.data import RowsData
from rowsproj.model import RowsNet

if __name__ == "__main__":
    LightningCLI(RowsNet, RowsData)
'''

MODEL = """import os

import lightning.pytorch as pl
import torch
import torch.nn.functional as F

MARKER = "as-submitted"


class RowsNet(pl.LightningModule):
    def __init__(self, lr: float = 0.1) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.net = torch.nn.Linear(2, 2)

    def on_fit_start(self) -> None:
        print(f"MARKER={MARKER} MODULE={__file__} CWD={os.getcwd()}", flush=True)

    def training_step(self, batch, batch_idx):
        x, y = batch
        return F.cross_entropy(self.net(x), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=self.hparams.lr)
"""

DATA = '''import lightning.pytorch as pl
import torch
from torch.utils.data import DataLoader, TensorDataset


class RowsData(pl.LightningDataModule):
    """Rows of a CSV file named relative to the directory the user works in (git-ignored)."""

    def __init__(self, path: str = "data/rows.csv", batch_size: int = 8) -> None:
        super().__init__()
        self.path, self.batch_size = path, batch_size

    def train_dataloader(self) -> DataLoader:
        with open(self.path) as f:
            rows = [[float(v) for v in line.split(",")] for line in f.read().split()]
        t = torch.tensor(rows)
        return DataLoader(TensorDataset(t[:, :2], t[:, 2].long()), batch_size=self.batch_size)
'''


def _git_repo(repo: Path) -> list[str]:
    git = ["git", "-c", "user.email=t@example.com", "-c", "user.name=t", "-C", str(repo)]
    subprocess.run([*git, "init", "-q"], check=True, timeout=30)
    subprocess.run([*git, "add", "."], check=True, timeout=30)
    subprocess.run([*git, "commit", "-qm", "project"], check=True, timeout=30)
    return git


@pytest.mark.parametrize("case", ["inside", "below", "outside", "ignored", "snapshot_off", "no_work_tree"])
def test_which_script_the_job_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, case: str) -> None:
    """The job runs the script's copy in <run>/code when the snapshot holds it; otherwise the script where it
    is, with the reason the submission prints (no cluster needed)."""
    repo, run_dir = tmp_path / "proj", tmp_path / "runs" / "version_0"
    (repo / "sub").mkdir(parents=True)
    (repo / ".gitignore").write_text("private_main.py\n")
    for name in ("main.py", "sub/main.py", "private_main.py"):
        (repo / name).write_text(MAIN)
    (tmp_path / "elsewhere.py").write_text(MAIN)
    if case != "no_work_tree":
        _git_repo(repo)
    monkeypatch.chdir(repo / "sub" if case == "below" else repo)
    script = {"outside": tmp_path / "elsewhere.py", "ignored": repo / "private_main.py", "below": Path("main.py")}
    entry = script_entry(
        script.get(case, Path("main.py")), "--slurm.snapshot false" if case == "snapshot_off" else None, run_dir, Path.cwd()
    )
    copied = {"inside": run_dir / "code" / "main.py", "below": run_dir / "code" / "sub" / "main.py"}
    if case in copied:
        assert entry.path == copied[case] and entry.live is None
        return
    assert entry.path == entry.script and entry.path.is_absolute() and entry.path.is_file()
    reason = {"outside": "outside the work tree", "ignored": "git ignores it", "snapshot_off": "--slurm.snapshot false"}
    assert reason.get(case, "is in no git work tree") in (entry.live or "")


def test_the_work_trees_folders_on_sys_path_are_the_jobs_import_paths(tmp_path: Path) -> None:
    """What the job puts first on its PYTHONPATH, as snapshot copies: the folders of the work tree that were on
    sys.path at submit (a src layout's ``src``, the tree's top when submitted from below it), in sys.path's
    order; not the submitting folder (the job starts in its copy), not a git-ignored virtual environment in the
    tree, not a folder outside it (no cluster needed)."""
    from trainer_cli.schedulers import snapshot
    from trainer_cli.schedulers.slurm.sbatch import script_context

    repo = tmp_path / "proj"
    for folder in ("src/rowsproj", "sub", ".venv/lib/site-packages"):
        (repo / folder).mkdir(parents=True)
    (repo / ".gitignore").write_text(".venv/\n")
    (repo / "src" / "rowsproj" / "model.py").write_text(MODEL)
    (repo / "sub" / "main.py").write_text(MAIN)
    (repo / ".venv" / "lib" / "site-packages" / "x.py").write_text("")
    _git_repo(repo)
    on_path = [str(repo / "sub"), str(repo / ".venv" / "lib" / "site-packages"), str(repo / "src"), str(tmp_path), str(repo)]
    assert snapshot.import_paths(repo / "sub", on_path) == ["src", "."]
    assert snapshot.import_paths(repo, on_path) == ["sub", "src"]
    assert snapshot.import_paths(tmp_path, on_path) == []  # no work tree
    import sys

    sys.path.insert(0, str(repo / "src"))  # as an editable install's .pth puts it
    try:
        from trainer_cli.schedulers.slurm.options import SlurmOptions
        from trainer_cli.schedulers.resources import Resources

        run_dir = tmp_path / "runs" / "version_0"
        context = script_context(SlurmOptions(), Resources(1, 1, 0, "cpu"), run_dir, "x", repo, None)
    finally:
        sys.path.remove(str(repo / "src"))
    assert context["import_paths"] == [str(run_dir / "code" / "src")]


@pytest.mark.long  # make test's 12 minutes: tests/test_hw_submit.py's cluster test asserts the same (held, edited, released)
@pytest.mark.parametrize("layout", ["flat", "src"])
def test_users_script_job_runs_the_submitted_copy_where_it_was_submitted(slurm_cluster: None, tmp_path: Path, layout: str) -> None:  # noqa: F811
    """A foreign project in a git repository, its data git-ignored: ``python main.py submit``, held;
    the model's marker is edited in the live tree, then the job released. The job runs the script's
    copy in ``<run>/code`` (its modules import from there: the submitted marker), works in the
    submitting directory (it finds ``data/rows.csv``, absent from the snapshot) and completes. ``src``: the
    package in ``src/``, found through ``sys.path`` as a ``pip install -e .`` of a src layout finds it (its
    ``.pth`` names the live ``src``; here ``PYTHONPATH``, which the job inherits too): the job still imports
    the snapshot's copy (a new user's editable src-layout project ran the live code)."""
    repo = tmp_path / "rowsproj-repo"
    package = repo / ("src" if layout == "src" else "") / "rowsproj"
    package.mkdir(parents=True)
    (repo / "data").mkdir()
    (repo / ".gitignore").write_text("data/\n")
    (repo / "main.py").write_text(MAIN)
    (package / "__init__.py").write_text("")
    (package / "model.py").write_text(MODEL)
    (package / "data.py").write_text(DATA)
    (repo / "data" / "rows.csv").write_text("".join(f"{i % 3},{i % 5},{i % 2}\n" for i in range(32)))
    _git_repo(repo)
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    if layout == "src":
        env["PYTHONPATH"] = os.pathsep.join([str(repo / "src"), *filter(None, [os.environ.get("PYTHONPATH")])])
    env.pop("TRAINER_CLI_RUN_DIR", None)
    env.pop("TRAINER_CLI_WORKDIR", None)
    flags = ["--config", LOCAL_PROFILE, "--trainer.devices", "1", "--trainer.max_epochs", "1"]
    flags += ["--trainer.logger", "false"]
    flags += ["--trainer.enable_progress_bar", "false", "--trainer.enable_model_summary", "false"]
    flags += ["--trainer.default_root_dir", str(tmp_path / "runs"), "--slurm.extra_sbatch", '["--hold"]']
    proc = subprocess.run(
        [sys.executable, "main.py", "submit", *flags], cwd=repo, env=env, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    job_id = job_id_from(proc.stdout)
    lines = proc.stdout.splitlines()
    run_dir = Path(next(line.split(":", 1)[1].strip() for line in lines if line.startswith("Run directory:")))
    (package / "model.py").write_text(MODEL.replace('"as-submitted"', '"edited-after"'))  # right after submit
    subprocess.run(["scontrol", "release", job_id], check=True, timeout=30)

    code = run_dir / "code"
    assert f"the job runs {code / 'main.py'} and imports your code from there" in proc.stdout, proc.stdout
    assert f"{code / 'main.py'} fit --config" in (run_dir / "submit.sbatch").read_text()
    state = wait_for_state(job_id, timeout_s=240)
    log = (run_dir / f"slurm-{job_id}.log").read_text()
    assert state == "COMPLETED", log[-3000:]
    assert "MARKER=as-submitted" in log and "edited-after" not in log, log[-3000:]
    assert f"MODULE={code / package.relative_to(repo) / 'model.py'} " in log, log[-3000:]
    assert f"CWD={repo.resolve()}\n" in log or f"CWD={repo}\n" in log, log[-3000:]
    assert (code / "data").is_symlink() and (code / "data").resolve() == (repo / "data").resolve()  # git-ignored: linked
