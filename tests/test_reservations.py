"""`train submit` refuses a `--slurm.time` that runs into an announced maintenance reservation on its
partition's nodes (trainer_cli.schedulers.slurm.reservations): on sample `scontrol show reservation -o` output,
and on the real local cluster with a MAINT reservation made for the test."""

from __future__ import annotations

import subprocess
from datetime import datetime
from pathlib import Path

from slurm_support import LOCAL_PROFILE, slurm_cluster  # noqa: F401 - a fixture
from support import DIGITS, run_train

from trainer_cli.schedulers.slurm.output import key_values
from trainer_cli.schedulers.slurm.reservations import expand_hostlist, maintenance_problems, parse_reservations

SAMPLE = (
    "ReservationName=maint StartTime=2026-11-25T10:00:00 EndTime=2026-11-25T12:00:00 Duration=02:00:00 Nodes=node[1-2,04] "
    "NodeCnt=3 Flags=MAINT,SPEC_NODES Users=root State=INACTIVE\n"
    "ReservationName=course StartTime=2026-11-25T09:00:00 EndTime=2026-11-25T18:00:00 Nodes=node3 Flags=SPEC_NODES Users=ana\n"
)


def test_parse_and_judge_reservations() -> None:
    assert expand_hostlist("node[1-2,04],gpu7") == ["node1", "node2", "node04", "gpu7"]
    maint, course = parse_reservations(key_values(SAMPLE))
    assert maint.maintenance and maint.nodes == {"node1", "node2", "node04"} and not course.maintenance
    now = datetime(2026, 11, 25, 9, 0)
    (problem,) = maintenance_problems([maint, course], {"node1", "node3"}, "debug", 4 * 3600, "04:00:00", now=now)
    assert "runs into maintenance maint on partition debug at 2026-11-25 10:00 (in 60 min)" in problem and "--slurm.time 60 (minutes) or less" in problem
    assert maintenance_problems([maint], {"node1"}, "debug", 3600, "01:00:00", now=now) == []  # ends as it starts
    assert maintenance_problems([maint], {"node3"}, "debug", 4 * 3600, "04:00:00", now=now) == []  # other nodes


def test_submit_refuses_a_time_limit_across_maintenance(slurm_cluster: None, tmp_path: Path) -> None:  # noqa: F811
    subprocess.run(["scontrol", "create", "reservation", "ReservationName=trainer_cli_maint", "StartTime=now+30minutes",
                    "Duration=60", "Nodes=node1,node2", "Users=root", "Flags=MAINT,IGNORE_JOBS"], check=True, capture_output=True, timeout=30)
    try:
        args = ["submit", "--config", DIGITS, "--config", LOCAL_PROFILE, "--trainer.default_root_dir", str(tmp_path), "--check"]
        refused = run_train(*args, "--slurm.time", "02:00:00")
        fits = run_train(*args, "--slurm.time", "00:10:00")
    finally:
        subprocess.run(["scontrol", "delete", "ReservationName=trainer_cli_maint"], capture_output=True, timeout=30)
    assert refused.returncode == 2, refused.stdout + refused.stderr[-2000:]
    assert "--slurm.time 02:00:00: runs into maintenance trainer_cli_maint on partition debug" in refused.stderr, refused.stderr
    assert "use --slurm.time 29 (minutes) or less" in refused.stderr or "use --slurm.time 30 (minutes) or less" in refused.stderr
    assert "Traceback" not in refused.stderr and fits.returncode == 0, fits.stderr[-2000:]
