"""docs/guides/first-job.md ("Your first job on your cluster") is run here, on the local cluster, and
what each step printed is compared with the output the page shows.

The page's steps are its ``shell-session`` blocks marked ``<!-- first-job -->``: each ``$ COMMAND``
line is run in one fresh project folder, in page order (``train`` is ``python -m trainer_cli``, through a
shell, so ``| head`` and ``cat`` work as written), and its output (stdout and stderr, as a terminal
shows them) is compared with the lines under it after masking what differs from run to run: the
project folder and the Python environment are written as the page's (``/home/me/project``,
``/home/me/project/.venv``), every number reads ``0`` (job ids, times, steps, metrics) and runs of
blanks read as one (table widths follow the numbers). Between steps the test waits as a user would
(the job running an epoch in, requeued, done). The page's job ids (``4242``) stand for the real ones
in the commands it runs.

``FIRST_JOB_WRITE=1`` writes what the run printed into the page instead of comparing (after a change of
the output: review the diff). The blocks are ``shell-session``, not ``console``, so that
tests/test_readme_commands.py, which runs the ``console`` blocks' ``train`` lines without a cluster,
leaves them (and the output lines that start with ``train``) to this test.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from slurm_support import newest_step, sacct_attempts, slurm_cluster, wait_for_state  # noqa: F401 - fixture
from support import REPO

PAGE = REPO / "docs" / "guides" / "first-job.md"
MARK = "<!-- first-job -->"
PROJECT = "/home/me/project"
VENV = "/home/me/project/.venv"
DOC_JOB_IDS = {"doctor": "4241", "fit": "4242"}
WRITE = os.environ.get("FIRST_JOB_WRITE") == "1"


def page_blocks(text: str) -> list[tuple[int, int, list[tuple[str, list[str]]]]]:
    """The page's marked ``console`` blocks: (first line index, end line index, [(command, output lines)])."""
    lines = text.splitlines()
    blocks = []
    i = 0
    while i < len(lines):
        if lines[i].strip() == MARK:
            start = i + 1
            while not lines[start].startswith("```shell-session"):
                start += 1
            end = start + 1
            steps: list[tuple[str, list[str]]] = []
            while not lines[end].startswith("```"):
                if lines[end].startswith("$ "):
                    steps.append((lines[end][2:], []))
                else:
                    steps[-1][1].append(lines[end])
                end += 1
            blocks.append((start + 1, end, steps))
            i = end
        i += 1
    return blocks


def masked(lines: list[str]) -> list[str]:
    """Lines with every number as ``0``, a start estimate's wait (``(now)``, ``(in 1 min)``: how far
    Slurm's BeginTime is from the listing) as ``(wait)``, and runs of blanks as one, without blank
    lines at the end."""
    out = [
        re.sub(r"[ \t]+", " ", re.sub(r"\d+", "0", re.sub(r"\((now|in [\d.]+ (min|h))\)", "(wait)", line))).rstrip()
        for line in lines
    ]
    while out and not out[-1]:
        out.pop()
    return out


def aligned(lines: list[str]) -> list[str]:
    """A table's lines (cells apart by two blanks or more) realigned, its columns as wide as their
    widest cell (a job id of the page's is wider than the real one); the lines after it as they are."""
    rows = []
    for line in lines:
        cells = re.split(r"\s{2,}", line.strip())
        if rows and len(cells) != len(rows[0]):
            break
        rows.append(cells)
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))] if rows else []
    table = ["  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip() for row in rows]
    return table + lines[len(rows):]


class Session:
    """The project folder, the job ids seen, and the shell that runs the page's commands."""

    def __init__(self, project: Path, bin_dir: Path, state: Path) -> None:
        self.project = project
        self.ids: dict[str, str] = {}  # the page's job id -> the real one
        bin_dir.mkdir()
        (bin_dir / "train").write_text(f'#!/bin/sh\nexec "{sys.executable}" -m trainer_cli "$@"\n')
        (bin_dir / "train").chmod(0o755)
        self.env = {
            **os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "XDG_STATE_HOME": str(state), "COLUMNS": "200",
            "PYTHONPATH": os.pathsep.join([str(REPO), *filter(None, [os.environ.get("PYTHONPATH")])]),
        }
        self.env.pop("TRAINER_CLI_RUN_DIR", None)

    def run(self, command: str) -> list[str]:
        for doc_id, real in self.ids.items():
            command = re.sub(rf"\b{doc_id}\b", real, command)
        done = subprocess.run(["bash", "-c", command + " 2>&1"], cwd=self.project, env=self.env, capture_output=True, text=True, timeout=600)
        text = done.stdout
        if command.startswith("train doctor"):
            self.ids[DOC_JOB_IDS["doctor"]] = re.search(r"doctor job (\d+)", text).group(1)  # type: ignore[union-attr]
        elif command.startswith("train submit") and "Job id:" in text:
            self.ids[DOC_JOB_IDS["fit"]] = re.search(r"Job id:\s+(\d+)", text).group(1)  # type: ignore[union-attr]
        text = self.as_page(text)
        return aligned(text.splitlines()) if command.startswith(("train jobs", "train runs")) else text.splitlines()

    def as_page(self, text: str) -> str:
        """``text`` with the project folder, the environment (the package's folder as an installed
        one's) and the job ids the page's."""
        site_packages = f"{VENV}/lib/python{sys.version_info.major}.{sys.version_info.minor}/site-packages"
        text = text.replace(str(self.project), PROJECT).replace(sys.prefix, VENV).replace(str(REPO), site_packages)
        for doc_id, real in self.ids.items():
            for pattern in (rf"(?<=slurm-){real}(?=\.log)", rf"(?<=[Jj]ob ){real}\b", rf"(?<=JOB ){real}\b",
                            rf"(?<=JobId=){real}\b", rf"(?<=StepId=){real}\b", rf"(?m)^{real}(?=\s)", rf"(?<=Job id:)(\s+){real}\b"):
                text = re.sub(pattern, lambda m: (m.group(1) if m.groups() else "") + doc_id, text)
        return text

    @property
    def run_dir(self) -> Path:
        return self.project / "runs" / "digits" / "version_0"

    @property
    def job(self) -> str:
        return self.ids[DOC_JOB_IDS["fit"]]


def _epoch_in(session: Session) -> None:
    """The job is running and has finished an epoch (``train jobs`` shows its progress)."""
    deadline = time.monotonic() + 300
    while newest_step(session.run_dir) <= 0:
        assert time.monotonic() < deadline, f"job {session.job}: no epoch done in 300 s"
        time.sleep(0.2)


def _requeued(session: Session) -> None:
    """The job saved its checkpoint and is back in the queue, held (the page starts it at once)."""
    assert wait_for_state(session.job, {"PENDING", "COMPLETED", "FAILED", "CANCELLED"}, timeout_s=180) == "PENDING"
    time.sleep(2)  # slurmd refuses a start in the second the requeue revoked the job's credential


def _done(session: Session) -> None:
    assert wait_for_state(session.job, timeout_s=600) == "COMPLETED", (session.run_dir / f"slurm-{session.job}.log").read_text()[-3000:]
    sacct_attempts(session.job, 2)  # the page's `train runs` shows the cost sacct has: both attempts recorded


# what the test waits for after a command, before the page's next one
AFTER: list[tuple[str, Callable[[Session], None]]] = [
    ("train submit --config experiment/digits --config my_site.yaml --trainer", _epoch_in),
    ("scancel -s USR1", _requeued),
    ("scontrol update", _done),
]


def test_the_page_marks_its_steps_and_test_readme_commands_leaves_them() -> None:
    from test_readme_commands import PAGES

    blocks = page_blocks(PAGE.read_text())
    commands = [command for _, _, steps in blocks for command, _ in steps]
    assert [c.split()[:2] for c in commands if c.startswith("train")] == [
        ["train", "init"], ["train", "submit"], ["train", "submit"], ["train", "doctor"], ["train", "submit"],
        ["train", "jobs"], ["train", "jobs"], ["train", "jobs"], ["train", "runs"],
    ], commands
    assert any(c.startswith("scancel -s USR1 4242") for c in commands)
    assert "guides/first-job.md" not in PAGES  # run here, on the cluster


@pytest.mark.long
def test_the_first_job_page_is_what_the_cluster_prints(slurm_cluster: None, tmp_path: Path) -> None:  # noqa: F811
    """init -> check -> dry run -> doctor -> submit -> jobs -> a requeue -> the resumed job -> runs,
    run as the page shows them; each output as the page shows it (masked), or written into it."""
    project = tmp_path / "project"
    project.mkdir()
    session = Session(project, tmp_path / "bin", tmp_path / "state")
    text = PAGE.read_text()
    lines = text.splitlines()
    mismatches, rewritten = [], []
    try:
        for start, end, steps in page_blocks(text):
            written = []
            for command, shown in steps:
                printed = session.run(command)
                written += [f"$ {command}", *printed]
                if masked(printed) != masked(shown):
                    mismatches.append(f"$ {command}\n--- the page shows:\n" + "\n".join(shown) + "\n--- it printed:\n" + "\n".join(printed))
                for prefix, wait in AFTER:
                    if command.startswith(prefix):
                        wait(session)
            rewritten.append((start, end, written))
    finally:
        if session.ids.get(DOC_JOB_IDS["fit"]):
            subprocess.run(["scancel", session.job], capture_output=True, timeout=30)
    if WRITE:
        for start, end, written in reversed(rewritten):
            lines[start:end] = written
        PAGE.write_text("\n".join(lines) + "\n")
        return
    assert not mismatches, "docs/guides/first-job.md is not what the cluster prints (FIRST_JOB_WRITE=1 rewrites it):\n\n" + "\n\n".join(mismatches)
    assert session.ids[DOC_JOB_IDS["fit"]] and (session.run_dir / "checkpoints" / "last.ckpt").is_file()
