"""The wheel carries configs/ and slurm/: an installed ``train`` finds them from any directory; the
floor venv's constraints pin exactly the floors pyproject.toml declares."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from support import REPO, build_and_install_wheel


def test_installed_wheel_finds_its_bundled_configs(tmp_path: Path) -> None:
    wheel, site = build_and_install_wheel(tmp_path)
    names = zipfile.ZipFile(wheel).namelist()
    assert "trainer_cli/configs/experiment/digits.yaml" in names
    assert any(n.startswith("trainer_cli/slurm/") for n in names)
    assert "trainer_cli/py.typed" in names  # PEP 561: a user's type checker reads the package's hints

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = {**os.environ, "PYTHONPATH": str(site)}
    env.pop("TRAINER_CLI_RUN_DIR", None)

    where = subprocess.run([sys.executable, "-c", "import trainer_cli.config.paths as p; print(p.configs_dir())"], cwd=elsewhere, env=env, capture_output=True, text=True)
    assert where.stdout.strip() == str(site / "trainer_cli" / "configs")
    listing = subprocess.run([sys.executable, "-m", "trainer_cli", "ls", "configs"], cwd=elsewhere, env=env, capture_output=True, text=True)
    assert listing.returncode == 0 and "configs/experiment/" in listing.stdout
    fit = subprocess.run(
        [sys.executable, "-m", "trainer_cli", "fit", "--config", "configs/experiment/digits.yaml",
         "--trainer.fast_dev_run", "true", "--trainer.enable_progress_bar", "false"],
        cwd=elsewhere, env=env, capture_output=True, text=True, timeout=600,
    )
    assert fit.returncode == 0, fit.stderr[-3000:]


def test_floor_constraints_match_the_declared_floors() -> None:
    """tests/constraints-min.txt (the floor venv, `make test-min`) pins every direct dependency at
    exactly the lower bound pyproject.toml declares: the range stated is the range tested."""
    tomllib = pytest.importorskip("tomllib")  # Python >= 3.11
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name
    from packaging.version import Version

    declared = {}
    for line in tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]:
        req = Requirement(line)
        floors = [Version(s.version) for s in req.specifier if s.operator == ">="]
        assert floors, f"{line}: no floor"
        declared[canonicalize_name(req.name)] = floors[0]
    pinned = {}
    for line in (REPO / "tests" / "constraints-min.txt").read_text().splitlines():
        req = line.split("#")[0].strip()
        if "==" in req:
            name, version = req.split("==")
            pinned[canonicalize_name(name)] = Version(version)
    assert {name: pinned.get(name) for name in declared} == declared
