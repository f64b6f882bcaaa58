"""MkDocs hook (mkdocs.yml ``hooks:``): the reference pages generated from the code at build time.

A page's ``<!-- generated: NAME -->`` line is replaced by:

- ``verbs``: the verb table of ``train`` (``trainer_cli/config/verbs.py``), each verb with its one-line help;
- ``help``: every verb's ``--help`` (the LightningCLI verbs' help depends on the config: their
  section says how to print it);
- ``configs``: every bundled config group (``configs/``) with each file's one-line description
  (what ``train ls configs`` prints).

Nothing is hand-kept: a new verb or config file shows up in the next build.
"""

from __future__ import annotations

import re
import subprocess
import sys
from typing import Any

from trainer_cli.config.listing import config_groups
from trainer_cli.config.verbs import VERBS

MARKER = re.compile(r"^<!-- generated: (\w+) -->$", re.MULTILINE)
# verbs whose --help is LightningCLI's: it lists the options of the classes a config chooses
LIGHTNING_VERBS = {"fit", "validate", "test", "predict"}


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def verbs() -> str:
    rows = [f"| [`{verb}`](#{verb}) | {_cell(help_)} |" for verb, (_, help_) in VERBS.items()]
    return "\n".join(["| verb | what it does |", "| --- | --- |", *rows])


def helps() -> str:
    parts = []
    for verb, (_, help_) in VERBS.items():
        parts.append(f"## `{verb}` {{#{verb}}}\n\n{help_}\n")
        if verb in LIGHTNING_VERBS:
            parts.append(
                f"A LightningCLI subcommand: `train {verb} --config experiment/digits --help` lists every option "
                "with the docstrings of the classes that config chooses (model, data, optimizer, scheduler).\n"
            )
            continue
        out = subprocess.run(
            [sys.executable, "-m", "trainer_cli", verb, "--help"], capture_output=True, text=True, timeout=120
        )
        if out.returncode != 0:
            raise RuntimeError(f"train {verb} --help failed ({out.returncode}):\n{out.stderr}")
        parts.append(f"```text\n{out.stdout.rstrip()}\n```\n")
    return "\n".join(parts)


def configs() -> str:
    parts = []
    for group, entries in config_groups().items():
        rows = [f"| `{group}/{stem}` | {_cell(description)} |" for stem, description in entries]
        parts.append("\n".join([f"## `{group}/`\n", "| config | what it sets |", "| --- | --- |", *rows, ""]))
    return "\n".join(parts)


GENERATORS = {"verbs": verbs, "help": helps, "configs": configs}


def on_page_markdown(markdown: str, **kwargs: Any) -> str:
    return MARKER.sub(lambda m: GENERATORS[m.group(1)](), markdown)
