"""Every shipped config composes and parses against the code (a drift test)."""

from __future__ import annotations

from pathlib import Path

import pytest
from support import CONFIGS

from trainer_cli.config.listing import config_description
from trainer_cli.config.request import Request
from trainer_cli.runtime.verbs import parse_config

# configs/slurm holds `train submit` site profiles, parsed by the submit tests
GROUP_FILES = sorted(p for p in CONFIGS.glob("*/*.yaml") if p.parent.name not in {"experiment", "slurm"})
EXPERIMENTS = sorted((CONFIGS / "experiment").glob("*.yaml"))


@pytest.mark.parametrize("path", EXPERIMENTS, ids=lambda p: p.stem)
def test_experiment_composes_and_parses(path: Path) -> None:
    parser, cfg = parse_config("fit", Request.of(["--config", str(path)]))
    assert cfg.name == path.stem
    assert "${" not in parser.dump(cfg)


# Each group file layered onto the default run (digits) is parsed, built and trained for two steps by
# tests/test_combinations.py (test_every_shipped_config_file_on_every_experiment names the file that fails);
# parsing the same pairs here again cost about 33 s of CPU a suite.


@pytest.mark.parametrize("path", GROUP_FILES + EXPERIMENTS, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_every_config_has_a_package_line_and_a_description(path: Path) -> None:
    assert path.read_text().startswith("# @package _global_\n")
    assert config_description(path)
