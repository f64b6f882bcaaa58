"""`train doctor`: the probe in every task (trainer_cli.schedulers.slurm.probe) and its tables (trainer_cli.schedulers.slurm.doctor).

`--local` runs two real processes here (gloo over 127.0.0.1): every check passes with a measured
all-reduce; a GLOO_SOCKET_IFNAME that names no interface fails naming it, within the timeout; a
probe that hangs is named with the check it hangs in (its report file, read while it runs). On the
real local cluster: 2 nodes x 2 tasks pass, one table per node; with a node of the partition
drained, the doctor fails naming it before anything is queued; a rank that never starts (its Python
dies at start-up) is named with its node from Slurm's node list; a bad GLOO_SOCKET_IFNAME fails
naming the interface on each node, within the timeout.
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from slurm_support import LOCAL_PROFILE, resume_node, slurm_cluster  # noqa: F401 - a fixture
from support import DIGITS, run_train

from trainer_cli.schedulers.slurm.probe import ifname_problem
from trainer_cli.schedulers.slurm.doctor import STARTUP_S, print_node_tables, read_reports, verdict


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
    # IDLE+DRAIN, or MIXED+DRAIN while the first doctor job's steps still end on node2 (seen on CI)
    assert re.search(r"node2 is [A-Z+]*\+DRAIN\b", done.stderr) and "partition short has 1 healthy node(s), the job needs 2" in done.stderr, done.stderr
    assert "doctor job" not in done.stdout, "nothing queued"


def test_slurm_form_without_arguments_says_what_it_needs(capsys: pytest.CaptureFixture[str]) -> None:
    from trainer_cli.__main__ import main

    assert main(["doctor"]) == 2
    assert "give it what you would give `train submit`" in capsys.readouterr().err


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _running(report: Path) -> str | None:
    try:
        return str(json.loads(report.read_text())["running"])
    except (OSError, ValueError):
        return None


def test_a_hung_rank_is_named_with_the_check_it_is_in(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A real probe of a world of 2 whose other rank never comes: its report says it is in the
    rendezvous while it waits; killed there, the doctor names the rank, its node and that check."""
    out = tmp_path / "reports"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "SRUN_", "SBATCH_"))}
    env |= {"RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "0", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(_free_port())}
    probe = subprocess.Popen([sys.executable, "-m", "trainer_cli.schedulers.slurm.probe", "--out", str(out), "--run_root", str(tmp_path / "runs"),
                              "--timeout_s", "60"], env=env)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and _running(out / "rank_0.json") != "rendezvous":
            time.sleep(0.2)
    finally:
        probe.kill()
        probe.wait()
    (report,) = read_reports(out)
    assert report["running"] == "rendezvous" and not report["finished"], report
    assert [c["check"] for c in report["checks"]] == ["host", "devices", "network", "versions", "run root", "code"]
    failures = verdict([report], 2, ["here", "there"])
    assert failures[0] == "node there (rank 1): start: no report: the task never started there (the node down or unreachable, " \
                          "srun could not start it, or Python failed before the probe)"
    assert failures[1].startswith(f"node {report['node']} (rank 0): rendezvous: did not finish (the task hung or died in it; passed: host,")
    print_node_tables([report])
    assert re.search(r"^rendezvous +FAIL +did not finish \(rank 0\)$", capsys.readouterr().out, re.M)


def _dies_at_start(folder: Path, rank: int) -> dict[str, str]:
    """An environment whose Python exits at start-up in Slurm task ``rank`` (as on a node whose
    Python is broken): a ``sitecustomize`` first on ``PYTHONPATH``."""
    folder.mkdir()
    (folder / "sitecustomize.py").write_text(f"import os\nif os.environ.get('SLURM_PROCID') == '{rank}' and 'SLURM_STEP_ID' in os.environ:\n"
                                             "    os._exit(3)\n")
    return {"PYTHONPATH": os.pathsep.join([str(folder), os.environ.get("PYTHONPATH", "")])}


def _cluster_args(tmp_path: Path, timeout_s: int) -> list[str]:
    return ["doctor", "--config", DIGITS, "--config", LOCAL_PROFILE, "--trainer.default_root_dir", str(tmp_path / "runs"),
            "--trainer.num_nodes", "2", "--trainer.devices", "2", "--slurm.snapshot", "false", "--timeout", str(timeout_s), "--size_mb", "1"]


@pytest.mark.long  # make test's 12 minutes: the doctor on the cluster is test_two_nodes_by_two_tasks_pass_and_a_drained_node_is_named, a rank named with its check test_a_hung_rank_is_named_with_the_check_it_is_in
def test_a_rank_that_never_starts_is_named_with_its_node(slurm_cluster: None, tmp_path: Path) -> None:  # noqa: F811
    """Rank 3 (the second task on node2, srun's block layout) dies before its probe starts: no
    report. The doctor names node2 and the check (start) from Slurm's node list, first; the other
    ranks' rendezvous then times out (named too), and all of it within --timeout."""
    start = time.monotonic()
    done = run_train(*_cluster_args(tmp_path, 10), env=_dies_at_start(tmp_path / "site", 3))
    assert done.returncode == 1, done.stdout + done.stderr[-3000:]
    failed = done.stderr.split("train doctor: FAILED\n", 1)[1].splitlines()
    assert failed[0].strip().startswith("node node2 (rank 3): start: no report: the task never started there"), done.stderr
    assert "node node1 (rank 0): rendezvous: no rendezvous of 4 ranks" in done.stderr, done.stderr
    assert "node node2 (rank 2): rendezvous:" in done.stderr, done.stderr
    assert "did not finish within --timeout" not in done.stderr, "the probes ended by themselves, the job was not cancelled"
    assert time.monotonic() - start < 10 + STARTUP_S + 30, "--timeout, the probes' start-up, the doctor's own start and sbatch"


@pytest.mark.long  # make test's 12 minutes: the doctor on the cluster is test_two_nodes_by_two_tasks_pass_and_a_drained_node_is_named
def test_bad_gloo_interface_on_the_cluster_fails_naming_it_on_each_node(slurm_cluster: None, tmp_path: Path) -> None:  # noqa: F811
    start = time.monotonic()
    done = run_train(*_cluster_args(tmp_path, 20), env={"GLOO_SOCKET_IFNAME": "nosuch0"})
    assert done.returncode == 1, done.stdout + done.stderr[-3000:]
    for node, rank in (("node1", 0), ("node2", 2)):
        assert f"node {node} (rank {rank}): network: GLOO_SOCKET_IFNAME=nosuch0: no network interface nosuch0 on" in done.stderr, done.stderr
    assert len(re.findall(r"^network +FAIL +GLOO_SOCKET_IFNAME=nosuch0", done.stdout, re.M)) == 2, done.stdout  # one table per node
    assert "rendezvous" not in done.stdout, "no rendezvous over a missing interface"
    assert time.monotonic() - start < 20 + STARTUP_S + 30
