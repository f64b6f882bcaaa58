"""`train doctor`: the probe in every task (trainer_cli.launch.probe) and its tables (trainer_cli.launch.doctor).

`--local` runs two real processes here (gloo over 127.0.0.1): every check passes with a measured
all-reduce; a GLOO_SOCKET_IFNAME that names no interface fails naming it, within the timeout. On the
real local cluster: 2 nodes x 2 tasks pass, one table per node; with a node of the partition
drained, the doctor fails naming it before anything is queued.
"""

from __future__ import annotations

import re
import subprocess
import time
from pathlib import Path

import pytest

from slurm_support import LOCAL_PROFILE, resume_node, slurm_cluster  # noqa: F401 - a fixture
from support import DIGITS, run_train
from trainer_cli.launch.probe import ifname_problem


def test_ifname_rules_follow_nccl_and_gloo() -> None:
    have = ["lo", "eth0", "ib0"]
    assert ifname_problem("GLOO_SOCKET_IFNAME", "eth0", have) is None
    assert "no network interface eth" in ifname_problem("GLOO_SOCKET_IFNAME", "eth", have)  # gloo: exact names
    assert ifname_problem("NCCL_SOCKET_IFNAME", "eth", have) is None  # NCCL: prefixes
    assert "no network interface eth" in ifname_problem("NCCL_SOCKET_IFNAME", "=eth", have)  # "=": exact
    assert ifname_problem("NCCL_SOCKET_IFNAME", "^docker,lo", have) is None  # exclusions name nothing that must exist


def test_local_passes_with_a_measured_all_reduce(tmp_path: Path) -> None:
    done = run_train("doctor", "--local", "--timeout", "60", "--size_mb", "4", cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    for check in ("host", "devices", "network", "versions", "run root", "code", "rendezvous", "all-reduce"):
        assert re.search(rf"^{check} +ok ", done.stdout, re.M), done.stdout
    found = re.search(r"^all-reduce +ok +4 MB float32 x 2 ranks: [\d.]+ ms, bus bandwidth ([\d.]+) GB/s", done.stdout, re.M)
    assert found and float(found.group(1)) > 0, done.stdout
    assert "ranks 0, 1" in done.stdout and "every check passed (2 task(s) on 1 node(s))" in done.stdout
    assert (tmp_path / "runs").is_dir() and not list((tmp_path / "runs").iterdir()), "the run root is checked, nothing left in it"


def test_bad_gloo_interface_fails_naming_it_within_the_timeout(tmp_path: Path) -> None:
    start = time.monotonic()
    done = run_train("doctor", "--local", "--timeout", "20", cwd=tmp_path, env={"GLOO_SOCKET_IFNAME": "nosuch0"})
    assert done.returncode == 1, done.stdout + done.stderr[-3000:]
    assert "network: GLOO_SOCKET_IFNAME=nosuch0: no network interface nosuch0 on" in done.stderr, done.stderr
    assert re.search(r"^network +FAIL ", done.stdout, re.M) and "rendezvous" not in done.stdout, done.stdout
    assert time.monotonic() - start < 20 + 60  # --timeout, plus the processes' start-up


def test_two_nodes_by_two_tasks_pass_and_a_drained_node_is_named(slurm_cluster: None, tmp_path: Path) -> None:  # noqa: F811
    args = ["doctor", "--config", DIGITS, "--config", LOCAL_PROFILE, "--trainer.default_root_dir", str(tmp_path / "runs"),
            "--trainer.num_nodes", "2", "--trainer.devices", "2", "--slurm.snapshot", "false", "--timeout", "120", "--size_mb", "4"]
    done = run_train(*args)
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    tables = re.findall(r"^node (node\d) \(2 task\(s\)\)$", done.stdout, re.M)
    assert len(tables) == 2, done.stdout
    assert len(re.findall(r"^all-reduce +ok +4 MB float32 x 4 ranks: .* bus bandwidth [\d.]+ GB/s", done.stdout, re.M)) == 2, done.stdout
    assert "every check passed (4 task(s) on 2 node(s))" in done.stdout

    subprocess.run(["scontrol", "update", "NodeName=node2", "State=DRAIN", "Reason=doctor-test"], check=True, timeout=30)
    try:
        done = run_train(*args, "--slurm.partition", "short")  # node1 and node2
    finally:
        resume_node("node2")
    assert done.returncode == 1, done.stdout + done.stderr[-3000:]
    assert "node2 is IDLE+DRAIN" in done.stderr and "partition short has 1 healthy node(s), the job needs 2" in done.stderr, done.stderr
    assert "doctor job" not in done.stdout, "nothing queued"


def test_slurm_form_without_arguments_says_what_it_needs(capsys: pytest.CaptureFixture[str]) -> None:
    from trainer_cli.__main__ import main

    assert main(["doctor"]) == 2
    assert "give it what you would give `train submit`" in capsys.readouterr().err
