"""``train doctor``: check an allocation before the real job waits in the queue for it.

With the same arguments as ``train submit`` (config files, ``--trainer.*``, ``--slurm.*``), the
doctor asks Slurm for the same resources a submission would (:func:`trainer_cli.schedulers.slurm.submit.plan`,
nothing of the run written) and queues a short job (``slurm/doctor.sbatch.j2``) that runs the probe
(:mod:`trainer_cli.schedulers.slurm.probe`) in every task of every node; it then prints one table per node
and exits 0 when every check passed, else 1 naming the node and the check. A rank that hung or died
is named with the check it was in (its report says which); a rank without any report with its
node from the job's node list (srun's block layout) and the check ``start``. Before queueing, nodes
of the partition that are down, drained or failing are named; with fewer healthy nodes than the job
needs, the doctor stops there. ``--timeout`` bounds the whole wait (queue included): a job still
pending then is cancelled and its reason said in words (:mod:`trainer_cli.schedulers.slurm.pending`).

``train doctor --local`` runs the same probe in ``--tasks`` processes on this machine (gloo over
``127.0.0.1``), no Slurm involved.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path
from typing import Any

from trainer_cli.config.request import Request
from trainer_cli.errors import UserError
from trainer_cli.tables import print_table

EXIT_FAILED = 1
BAD_NODE_STATES = ("DOWN", "DRAIN", "FAIL", "NOT_RESPONDING", "POWERED_DOWN", "MAINT")
FINAL = {
    "COMPLETED",
    "FAILED",
    "CANCELLED",
    "TIMEOUT",
    "NODE_FAIL",
    "OUT_OF_MEMORY",
    "BOOT_FAIL",
    "DEADLINE",
    "PREEMPTED",
}
ENDED_BY_SLURM = {"NODE_FAIL", "TIMEOUT", "OUT_OF_MEMORY", "BOOT_FAIL", "DEADLINE", "PREEMPTED"}  # not by the probes
STARTUP_S = 60  # beyond --timeout for a probe's imports (torch, Lightning) before its rendezvous starts

HELP_EPILOG = """\
examples:
  train doctor --local
  train doctor --config configs/experiment/digits.yaml --config configs/slurm/local.yaml \\
      --trainer.num_nodes 2 --trainer.devices 2
  GLOO_SOCKET_IFNAME=ib0 train doctor --local --timeout 30

Checks, per task (one table per node): host and ranks; devices (CPUs, GPUs seen, GPUs per node
against tasks per node); network (NCCL_SOCKET_IFNAME / GLOO_SOCKET_IFNAME exist, else the interface
toward the rendezvous host); versions (Python, torch, Lightning, equal on every node); run root
(writable, free space); code (trainer_cli and the config's class paths import); rendezvous (time
for every rank to meet); all-reduce (a timed sum over every rank: bus bandwidth in GB/s).
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def probe_args(out: Path, run_root: Path, class_paths: list[str], timeout_s: float, size_mb: float) -> list[str]:
    """The arguments of ``python -m trainer_cli.schedulers.slurm.probe``."""
    args = ["--out", str(out), "--run_root", str(run_root), "--timeout_s", str(timeout_s), "--size_mb", str(size_mb)]
    for path in class_paths:
        args += ["--class_path", path]
    return args


def class_paths_of(frozen_config: str) -> list[str]:
    """The ``class_path`` of the model and the data module in a resolved config (YAML text)."""
    import yaml

    config = yaml.safe_load(frozen_config) or {}
    paths = []
    for key in ("model", "data"):
        section = config.get(key)
        if isinstance(section, dict) and isinstance(section.get("class_path"), str):
            paths.append(section["class_path"])
    return paths


def read_reports(out: Path) -> list[dict[str, Any]]:
    """The probes' reports in ``out``, by rank."""
    reports = []
    for path in sorted(out.glob("rank_*.json")):
        try:
            reports.append(json.loads(path.read_text()))
        except (OSError, ValueError):
            continue
    return sorted(reports, key=lambda r: r.get("rank", 0))


def finished(reports: list[dict[str, Any]]) -> int:
    """How many of ``reports`` a probe wrote at its end (the others are still running, or hung or died)."""
    return sum(1 for r in reports if r.get("finished"))


def verdict(reports: list[dict[str, Any]], world_size: int, rank_nodes: list[str]) -> list[str]:
    """Every failure, one line each, naming the node and the check (empty: all is well). Ranks that
    stopped reporting come first: the others' failures (a rendezvous that timed out) follow from them.

    Args:
        reports: The probes' reports (:func:`read_reports`).
        world_size: How many ranks should have reported.
        rank_nodes: The node of each rank (where a rank without a report was to run).
    """
    failures = []
    ranks = {r.get("rank") for r in reports}
    for rank in range(world_size):
        if rank not in ranks:
            node = rank_nodes[rank] if rank < len(rank_nodes) else "?"
            failures.append(
                f"node {node} (rank {rank}): start: no report: the task never started there (the node down or "
                "unreachable, srun could not start it, or Python failed before the probe)"
            )
    for report in reports:
        if not report.get("finished", True):
            passed = [c["check"] for c in report["checks"] if c["ok"]]
            failures.append(
                f"node {report['node']} (rank {report['rank']}): {report.get('running')}: did not finish (the task "
                "hung "
                f"or died in it{'; passed: ' + ', '.join(passed) if passed else ''})"
            )
    for report in reports:
        for check in report["checks"]:
            if not check["ok"]:
                failures.append(f"node {report['node']} (rank {report['rank']}): {check['check']}: {check['value']}")
                break
    versions = {c["value"] for r in reports for c in r["checks"] if c["check"] == "versions"}
    if len(versions) > 1:
        failures.append("versions differ between nodes: " + " | ".join(sorted(versions)))
    return failures


def nodes_of_ranks(node_list: str, ntasks_per_node: int, world_size: int) -> list[str]:
    """The node of each rank of a step of ``ntasks_per_node`` tasks on each node of Slurm's
    ``node_list`` (``node[1-2]``): srun's default block distribution (ranks 0..n-1 on the first
    node). ``?`` for each rank when the list is empty (the job never ran)."""
    from trainer_cli.schedulers.slurm.commands import hostnames

    hosts = (hostnames(node_list) or []) if node_list not in ("", "(null)") else []
    return [hosts[k // ntasks_per_node] if k // ntasks_per_node < len(hosts) else "?" for k in range(world_size)]


def print_node_tables(reports: list[dict[str, Any]]) -> None:
    """One table per node: each check, ok or FAIL, and what it found (the lowest rank's value; a
    failing rank's value when one failed; the longest rendezvous); a check a rank never finished
    (it hung or died in it) is a FAIL row naming the rank."""
    nodes: dict[str, list[dict[str, Any]]] = {}
    for report in reports:
        nodes.setdefault(report["node"], []).append(report)
    for node, mine in nodes.items():
        names = list(dict.fromkeys(c["check"] for r in mine for c in r["checks"]))
        rows = []
        for name in names:
            found = [(r["rank"], c) for r in mine for c in r["checks"] if c["check"] == name]
            failed = [(rank, c) for rank, c in found if not c["ok"]]
            rank, check = (failed or found)[0]
            value = check["value"]
            if name == "host":
                value = f"{mine[0]['host']}, ranks {', '.join(str(r['rank']) for r in mine)}"
            elif len({c["value"] for _, c in found}) > 1:
                value += f" (rank {rank})"
            rows.append((name, "FAIL" if failed else "ok", value))
        for check in dict.fromkeys(r.get("running") for r in mine if not r.get("finished", True)):
            stuck = ", ".join(str(r["rank"]) for r in mine if not r.get("finished", True) and r.get("running") == check)
            rows.append((str(check), "FAIL", f"did not finish (rank {stuck})"))
        print()
        print_table(rows, header=("CHECK", "STATUS", "FOUND"), title=f"node {node} ({len(mine)} task(s))")


def run_local(
    tasks: int, run_root: Path, class_paths: list[str], timeout_s: float, size_mb: float
) -> tuple[list[dict[str, Any]], str | None]:
    """The probe in ``tasks`` processes on this machine; returns the reports, and a line when the
    processes did not end within ``timeout_s`` (+ their start-up)."""
    out = Path(tempfile.mkdtemp(prefix="train-doctor-"))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "SRUN_", "SBATCH_"))}  # not a Slurm task
    env |= {
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(_free_port()),
        "WORLD_SIZE": str(tasks),
        "LOCAL_WORLD_SIZE": str(tasks),
    }
    procs = []
    for rank in range(tasks):
        cmd = [
            sys.executable,
            "-m",
            "trainer_cli.schedulers.slurm.probe",
            *probe_args(out, run_root, class_paths, timeout_s, size_mb),
        ]
        procs.append(subprocess.Popen(cmd, env=env | {"RANK": str(rank), "LOCAL_RANK": str(rank), "GROUP_RANK": "0"}))
    deadline = time.monotonic() + timeout_s + STARTUP_S
    late = None
    for proc in procs:
        try:
            proc.wait(timeout=max(deadline - time.monotonic(), 0.1))
        except subprocess.TimeoutExpired:
            late = f"the probes did not finish within --timeout {timeout_s:.0f} s (+{STARTUP_S} s to start)"
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return read_reports(out), late


def unhealthy_nodes(partition: str | None) -> tuple[list[str], int]:
    """The partition's nodes (the default partition's when None) that are down, drained or failing,
    as ``node is STATE``, and how many nodes it has."""
    from trainer_cli.schedulers.slurm.cluster import read_cluster

    partitions = read_cluster()
    chosen = next((p for p in partitions if (p.name == partition if partition else p.default)), None)
    names = {n.name for n in chosen.nodes} if chosen else set()
    bad = []
    for n in chosen.nodes if chosen else []:
        state = n.state or "UNKNOWN"
        if any(word in state.upper() for word in BAD_NODE_STATES):
            bad.append(f"{n.name} is {state}")
    return bad, len(names)


def run_slurm(args: list[str], timeout_s: float, size_mb: float) -> tuple[list[dict[str, Any]], list[str], list[str]]:
    """Queue the doctor's job with ``train submit``'s resources for ``args``; wait for it (at most
    ``timeout_s`` in all) and gather its reports.

    Returns:
        ``(reports, failures found before or around the job, the node of each rank)``.

    Raises:
        UserError: for what ``train submit`` would refuse (config, resources, the cluster).
    """
    from trainer_cli.schedulers import snapshot
    from trainer_cli.schedulers.slurm.cluster import check_against_cluster
    from trainer_cli.schedulers.slurm.commands import SlurmCommandError, scancel, show_job
    from trainer_cli.schedulers.slurm.pending import why_pending
    from trainer_cli.schedulers.slurm.render import render
    from trainer_cli.schedulers.slurm.sbatch import prepare_run, run_sbatch, script_context
    from trainer_cli.schedulers.slurm.submit import plan

    started = time.monotonic()
    job = plan(Request.of(args, "submit"), dry_run=True)  # doctor's own argv, read once here
    warning = check_against_cluster(job.slurm, job.resources)
    if warning:
        print(f"warning: {warning}", file=sys.stderr)
    res = job.resources
    bad, total = unhealthy_nodes(job.slurm.partition)
    if bad:
        where = f"partition {job.slurm.partition}" if job.slurm.partition else "the default partition"
        if total - len(bad) < res.nodes:
            return (
                [],
                [f"{', '.join(bad)}: {where} has {total - len(bad)} healthy node(s), the job needs {res.nodes}"],
                ["?"] * res.world_size,
            )
        print(f"warning: {', '.join(bad)} (the job can run on the other nodes of {where})", file=sys.stderr)
    run_dir = (job.root / "doctor" / datetime.now().strftime("%Y%m%d-%H%M%S-%f")).absolute()
    run_dir.mkdir(parents=True)
    out = run_dir / "reports"
    job.slurm.time = str(max(int(timeout_s // 60) + 2, 2))  # minutes; the probe's own timeout comes first
    if job.slurm.snapshot:
        snapshot.take(Path.cwd(), run_dir, job.slurm.snapshot_limit(), [job.root])
    context = script_context(job.slurm, res, run_dir, f"{job.job_name}-doctor", Path.cwd(), None)
    context["probe"] = probe_args(out, job.root.absolute(), class_paths_of(job.frozen_config), timeout_s, size_mb)
    context["doctor_gpus"] = res.gpus_per_node
    script = run_dir / "doctor.sbatch"
    prepare_run(job.slurm, run_dir)
    script.write_text(render("doctor", context))
    job_id = run_sbatch(script, slurm=job.slurm)
    print(
        f"doctor job {job_id}: {res.nodes} node(s) x {res.ntasks_per_node} task(s), log {run_dir}/slurm-{job_id}.log",
        flush=True,
    )
    deadline = started + timeout_s + STARTUP_S
    fields: dict[str, str] = {}
    while time.monotonic() < deadline:
        fields = show_job(job_id)
        if fields.get("JobState") in FINAL or finished(read_reports(out)) >= res.world_size:
            break
        time.sleep(1)
    failures = []
    state = fields.get("JobState") or "UNKNOWN"
    if state not in FINAL and finished(read_reports(out)) < res.world_size:
        try:
            scancel(job_id, timeout=20)
        except SlurmCommandError:
            pass  # ended by itself meanwhile
        said = why_pending(fields) if state == "PENDING" else f"still {state}"
        failures.append(f"job {job_id} did not finish within --timeout {timeout_s:.0f} s (cancelled): {said}")
    elif state in ENDED_BY_SLURM:
        failures.append(
            f"job {job_id} ended {state} (reason {fields.get('Reason', 'None')}): Slurm stopped it, see "
            f"{run_dir}/slurm-{job_id}.log"
        )
    ranks = nodes_of_ranks(fields.get("NodeList") or "", res.ntasks_per_node, res.world_size)
    return read_reports(out), failures, ranks


def main(args: list[str]) -> int:
    """``train doctor [--local] [--timeout S] [submit arguments]``; returns 0 when every check passed, else 1.

    Raises:
        UserError: for arguments ``train submit`` would refuse.
    """
    parser = argparse.ArgumentParser(
        prog="train doctor",
        description=__doc__.split("\n")[0],
        epilog=HELP_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--local", action="store_true", help="run the checks on this machine, without Slurm")
    parser.add_argument(
        "--timeout", type=float, default=300.0, help="seconds for the whole check, queue included (default 300)"
    )
    parser.add_argument("--tasks", type=int, default=2, help="--local: processes to start (default 2)")
    parser.add_argument(
        "--size_mb", type=float, default=16.0, help="MB of float32 in the timed all-reduce (default 16)"
    )
    opts, rest = parser.parse_known_args(args)
    if opts.timeout <= 0 or opts.tasks < 1 or opts.size_mb <= 0:
        raise UserError("--timeout, --tasks and --size_mb must be above 0")
    if not opts.local and not rest:
        raise UserError(
            "train doctor checks the allocation of a run: give it what you would give `train submit` "
            "(--config FILE ... --trainer.num_nodes N --trainer.devices N), or --local to check this machine"
        )
    if opts.local:
        root, class_paths = Path("runs"), []
        if rest:
            from trainer_cli.schedulers.slurm.submit import plan

            job = plan(Request.of(rest, "submit"), dry_run=True)
            root, class_paths = job.root, class_paths_of(job.frozen_config)
        reports, late = run_local(opts.tasks, root.absolute(), class_paths, opts.timeout, opts.size_mb)
        failures, rank_nodes = ([late] if late else []), [socket.gethostname()] * opts.tasks
    else:
        reports, failures, rank_nodes = run_slurm(rest, opts.timeout, opts.size_mb)
    world = len(rank_nodes)
    print_node_tables(reports)
    failures = verdict(reports, world, rank_nodes) + failures if reports or not failures else failures
    if failures:
        print("\ntrain doctor: FAILED\n  " + "\n  ".join(failures), file=sys.stderr)
        return EXIT_FAILED
    print(f"\ntrain doctor: every check passed ({world} task(s) on {len({r['node'] for r in reports})} node(s))")
    return 0
