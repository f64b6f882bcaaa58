"""Goodput as a share of the allocated time (trainer_cli.rundir.goodput.allocated): rank 0's attempt
records laid over the run's allocations (sacct's rows), the allocation outside the processes as
``launch_s``, an allocation no step was completed in as ``failed_s``; shown by `train jobs RUN` (a
block, --json) and drawn as ``<run>/timeline.svg``; and the one sacct reader's newest row per job
(trainer_cli.job.status). The records are written here in the format AttemptClock writes
(tests/test_attempts.py and the cluster tests check that format on real runs); the cluster case is
tests/test_goodput_cluster.py (long)."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path

import pytest

from trainer_cli.job import cost
from trainer_cli.schedulers.slurm import accounting as sacct
from trainer_cli.plots import plot_timeline
from trainer_cli.rundir import goodput

# job 106: preempted (32 s), requeued and failed before a step (10 s), requeued and completed (43 s);
# every field of the launcher's sacct -D -X -o FIELDS (trainer_cli.schedulers.slurm.output.READS['sacct'])
ROWS = """\
106|106|REQUEUED|2026-11-27T18:28:00|2026-11-27T18:28:01|2026-11-27T18:28:33|32|billing=2,cpu=2,node=1|00:00:32|0:0|node1
106|106|REQUEUED|2026-11-27T18:28:33|2026-11-27T18:28:37|2026-11-27T18:28:47|10|billing=2,cpu=2,node=1|00:00:10|1:0|node2
106|106|COMPLETED|2026-11-27T18:28:47|2026-11-27T18:28:50|2026-11-27T18:29:33|43|billing=2,cpu=2,node=1|00:00:43|0:0|node1
"""


def _t(hms: str) -> float:
    return datetime.fromisoformat(f"2026-11-27T{hms}").timestamp()  # sacct prints the local time


def _attempt(restart: int, started: str, ended: str, seconds: dict, steps: tuple[int, int], train_at: float,
             checkpoints: list) -> dict:
    return {"attempt": f"106.{restart}", "seq": 0, "rank": 0, "slurm": {"job_id": "106", "restart": restart},
            "started": _t(started), "marks": {}, "start_step": steps[0], "last_step": steps[1],
            "last_step_at": _t(ended) - 1, "train_at_step": train_at, "seconds": seconds, "stack": ["train"],
            "since": _t(ended), "checkpoints": checkpoints, "memory": {"rss_peak_bytes": 300 * 2**20},
            "written": _t(ended), "ended": _t(ended), "ended_by": "completed"}


def _run(tmp_path: Path) -> Path:
    run_dir = tmp_path / "run"
    (run_dir / "attempts").mkdir(parents=True)
    lines = [  # 25 s of process in the first allocation (from step 0 to 20, saved at 15), 37 s in the last (15 to 40)
        _attempt(0, "18:28:05", "18:28:30", {"startup": 8, "train": 14, "validation": 2, "checkpoint": 1}, (0, 20), 13, [[15, 10.0]]),
        _attempt(2, "18:28:53", "18:29:30", {"startup": 10, "train": 24, "validation": 2, "checkpoint": 1}, (15, 40), 23, []),
    ]
    (run_dir / "attempts" / "rank0.jsonl").write_text("".join(json.dumps(a) + "\n" for a in lines))
    return run_dir


def test_goodput_and_badput_add_up_to_the_allocated_time(tmp_path: Path) -> None:
    run_dir = _run(tmp_path)
    spent = sacct.from_sacct(sacct.parse_sacct(ROWS))
    figures = goodput.allocated(run_dir, spent)
    first, failed, last = figures["attempts"]
    assert (first["allocated_s"], first["launch_s"], first["launch_before_s"]) == (32, 7, 4)
    assert (first["redone_steps"], first["redone_s"], first["goodput_s"], first["tail_s"]) == (5, 3, 10, 1)
    assert (failed["failed_s"], failed["goodput_s"], failed["processes"]) == (10, 0, 0)
    assert (last["allocated_s"], last["launch_s"], last["goodput_s"]) == (43, 6, 23)
    total = figures["total"]
    assert total["allocated_s"] == 85 == sum(total[k] for k in ("goodput_s", *goodput.BADPUT))
    assert figures["percent"]["goodput"] == pytest.approx(100 * 33 / 85)
    assert sum(figures["percent"].values()) == pytest.approx(100)
    shown = goodput.as_json(figures)
    assert (shown["goodput_pct"], shown["redone_steps"], shown["badput"]["failed_s"]) == (38.8, 5, {"seconds": 10, "percent": 11.8})
    lines = goodput.block(figures)
    assert lines[0].startswith("goodput: 38.8% of 85.0 s allocated over 3 attempt(s)") and "from sacct" in lines[0]
    assert "  redone           3.0 s    3.5%  lost progress: 5 step(s) redone" in lines
    assert "  failed          10.0 s   11.8%" in lines and lines[-1] == "  peak memory: host RSS 300 MiB (the largest rank)"
    assert goodput.cell(figures) == "38.8%"
    # the timeline, read back: one row per attempt, the buckets drawn in its legend, text as text
    svg = plot_timeline(goodput.timeline_rows(figures), "run", tmp_path / "timeline.svg")
    assert svg is not None
    text = svg.read_text()
    assert "job 106 attempt 1 (REQUEUED)" in text and "job 106 attempt 2 (REQUEUED)" in text and "job 106 attempt 3 (COMPLETED)" in text
    assert all(words in text for words in ("failed attempt", "training kept (goodput)", "redone (lost progress)", "launch"))
    assert "stall" not in text and "minutes since the first attempt started" in text


def test_a_local_run_is_its_processes_and_a_job_s_newest_row_its_status(tmp_path: Path) -> None:
    figures = goodput.allocated(_run(tmp_path), cost.Cost())
    assert figures["source"] == "none" and figures["total"]["allocated_s"] == 25 + 37
    assert figures["total"]["launch_s"] == 0 and figures["percent"]["goodput"] == pytest.approx(100 * 33 / 62)
    newest = sacct.newest_rows(sacct.parse_sacct(ROWS))
    assert list(newest) == ["106"] and (newest["106"].state, newest["106"].elapsed, newest["106"].nodes) == ("COMPLETED", "00:00:43", "node1")
    assert sacct.parse_sacct(ROWS)[1].exit_code == "1:0"
