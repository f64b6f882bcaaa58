"""The checks of ``train doctor`` that run inside every task:
``python -m trainer_cli.schedulers.slurm.probe --out DIR``.

Each task (a Slurm task under ``srun``, or a local process started by ``train doctor --local``)
writes ``DIR/rank_<k>.json``: its checks, each ``{"check", "ok", "value"}``, in this order; a check
that fails stops the ones after it that need it (no rendezvous over a missing interface). The file
is written as soon as the task starts and again before each check (``"running"``: the check under
way, ``"finished": false``), so a task that hangs or dies is named with the check it was in; a rank
without a file never started (its node down, ``srun`` could not start it there, Python failed).

- ``host``: hostname, global and local rank, node rank.
- ``devices``: CPUs this task may use; CUDA devices it sees (``CUDA_VISIBLE_DEVICES``), and whether
  there are as many GPUs on the node as tasks (fails with fewer GPUs than the tasks that need one).
- ``network``: ``NCCL_SOCKET_IFNAME`` / ``GLOO_SOCKET_IFNAME`` when set (fails naming an interface
  this node does not have, with those it has), else the interface whose address reaches the
  rendezvous host (``MASTER_ADDR``), which is what gloo and NCCL pick by default.
- ``versions``: Python, torch and Lightning (``train doctor`` fails when nodes differ).
- ``run root``: writable (a file written, read back and removed) and its free space.
- ``code``: ``trainer_cli`` and the config's ``class_path`` modules import, from where (the code snapshot).
- ``rendezvous``: seconds for ``torch.distributed.init_process_group`` (gloo, TCP store at
  ``MASTER_ADDR:MASTER_PORT``) to gather every rank, bounded by ``--timeout_s``.
- ``all-reduce``: a sum of ``--size_mb`` MB of float32 over every rank, timed after one warm-up
  over ``--iters`` repeats: algorithm bandwidth (bytes / time) and bus bandwidth (x 2(n-1)/n, the
  figure nccl-tests reports, comparable across world sizes), in GB/s.

Ranks and the rendezvous address come from Lightning's cluster environments: ``SLURMEnvironment``
under Slurm (the first host of the node list, ``MASTER_PORT`` from the job), else the variables
torchrun sets (``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``GROUP_RANK``, ``MASTER_ADDR``, ``MASTER_PORT``).
"""

from __future__ import annotations

import argparse
import fcntl
import importlib
import json
import os
import platform
import shutil
import socket
import struct
import sys
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

from trainer_cli.atomic import write_atomic
from trainer_cli.job import context

SIOCGIFADDR = 0x8915  # Linux ioctl: the IPv4 address of an interface
IFNAME_VARIABLES = ("NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME")


def interfaces() -> list[str]:
    """The network interfaces of this machine."""
    return [name for _, name in socket.if_nameindex()]


def ipv4_of(ifname: str) -> str | None:
    """The IPv4 address of ``ifname``; None when it has none."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            packed = fcntl.ioctl(s.fileno(), SIOCGIFADDR, struct.pack("256s", ifname[:15].encode()))
        except OSError:
            return None
    return socket.inet_ntoa(packed[20:24])


def ifname_problem(variable: str, value: str, have: list[str]) -> str | None:
    """What is wrong with ``variable=value`` on a machine with interfaces ``have`` (None: fine).

    NCCL's syntax: a comma-separated list of name prefixes, ``=`` before exact names, ``^`` before
    names to exclude (an exclusion names nothing that must exist); gloo takes exact names.
    """
    if value.startswith("^"):
        return None
    exact = value.startswith("=") or variable == "GLOO_SOCKET_IFNAME"
    missing = []
    for name in value.lstrip("=").split(","):
        name = name.strip()
        if name and not any(i == name if exact else i.startswith(name) for i in have):
            missing.append(name)
    if missing:
        host = socket.gethostname()
        return f"{variable}={value}: no network interface {', '.join(missing)} on {host} (it has {', '.join(have)})"
    return None


def route_interface(host: str) -> tuple[str, str]:
    """``(interface, local address)`` this machine reaches ``host`` from (a UDP connect sends nothing)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.connect((socket.gethostbyname(host), 9))
        local = s.getsockname()[0]
    name = next((i for i in interfaces() if ipv4_of(i) == local), "?")
    return name, local


def _check(name: str, ok: bool, value: str) -> dict[str, Any]:
    return {"check": name, "ok": ok, "value": value}


class VariablesEnvironment:
    """Ranks and the rendezvous address from ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``GROUP_RANK``,
    ``MASTER_ADDR`` and ``MASTER_PORT`` (as torchrun sets them, and ``train doctor --local``): the
    methods of Lightning's ``TorchElasticEnvironment``, without importing Lightning for them."""

    main_address = property(lambda self: os.environ.get("MASTER_ADDR", "127.0.0.1"))
    main_port = property(lambda self: int(os.environ.get("MASTER_PORT", "29500")))

    def global_rank(self) -> int:
        return int(os.environ.get("RANK", "0"))

    def world_size(self) -> int:
        return int(os.environ.get("WORLD_SIZE", "1"))

    def local_rank(self) -> int:
        return int(os.environ.get("LOCAL_RANK", "0"))

    def node_rank(self) -> int:
        return int(os.environ.get("GROUP_RANK", "0"))


def environment() -> Any:
    """The cluster environment of this task: Lightning's ``SLURMEnvironment`` in a Slurm task (the
    first host of the node list, ``MASTER_PORT``), else :class:`VariablesEnvironment`."""
    job = context.current()
    if job.scheduler != "slurm" or not job.step_rank_given:
        return VariablesEnvironment()
    from lightning.fabric.plugins.environments import SLURMEnvironment

    return SLURMEnvironment()


class Report:
    """This task's ``rank_<k>.json``, rewritten (atomically) at each step: the checks so far, the
    one under way, and whether the probe finished."""

    def __init__(self, out: Path, rank: str) -> None:
        self.path, self.rank = out / f"rank_{rank}.json", int(rank)
        self.node = context.current().node_name or socket.gethostname()
        self.checks: list[dict[str, Any]] = []
        self.current: str | None = None
        self.started = time.monotonic()
        out.mkdir(parents=True, exist_ok=True)

    def running(self, check: str | None) -> None:
        """Note that ``check`` starts now (None: the probe finished) and write the file."""
        self.current = check
        report = {
            "rank": self.rank,
            "host": socket.gethostname(),
            "node": self.node,
            "seconds": round(time.monotonic() - self.started, 2),
            "finished": check is None,
            "running": check,
            "checks": self.checks,
        }
        write_atomic(self.path, json.dumps(report, indent=1))

    def add(self, check: dict[str, Any]) -> None:
        self.checks.append(check)


def run_checks(
    report: Report, run_root: Path, class_paths: list[str], timeout_s: float, size_mb: float, iters: int
) -> None:
    """Every check of this task, in order (see the module docstring), into ``report``; stops after a
    failed network check (no rendezvous) or a failed rendezvous (no all-reduce)."""
    checks = report.checks
    env = environment()
    rank, world, local_rank, node_rank = env.global_rank(), env.world_size(), env.local_rank(), env.node_rank()
    host = socket.gethostname()
    report.add(_check("host", True, f"{host} rank {rank}/{world} local {local_rank} node {node_rank}"))
    report.running("devices")

    import torch

    cpus = len(os.sched_getaffinity(0))
    gpus = torch.cuda.device_count()
    tasks_here = context.current().tasks_per_node
    if tasks_here is None:  # torchrun's
        tasks_here = int(os.environ.get("LOCAL_WORLD_SIZE", "0") or 0)
    wants_gpu = os.environ.get("TRAINER_CLI_DOCTOR_GPUS", "0") not in ("", "0")
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    devices = f"{cpus} CPU(s), {gpus} GPU(s)" + (f" (CUDA_VISIBLE_DEVICES={visible})" if visible is not None else "")
    if wants_gpu and tasks_here and gpus < tasks_here:
        report.add(
            _check(
                "devices",
                False,
                f"{devices}: fewer GPUs than the {tasks_here} tasks per node; ask for --trainer.devices {gpus}",
            )
        )
    else:
        report.add(_check("devices", True, devices + (f", {tasks_here} task(s) per node" if tasks_here else "")))
    report.running("network")

    have = interfaces()
    problems = [p for v in IFNAME_VARIABLES if os.environ.get(v) for p in [ifname_problem(v, os.environ[v], have)] if p]
    try:
        name, local = route_interface(env.main_address)
        route = f"{name} ({local}) toward {env.main_address}"
    except OSError as err:
        route, problems = "?", problems + [f"cannot reach the rendezvous host {env.main_address}: {err}"]
    chosen = ", ".join(f"{v}={os.environ[v]}" for v in IFNAME_VARIABLES if os.environ.get(v))
    report.add(_check("network", not problems, "; ".join(problems) or (f"{chosen}; " if chosen else "") + route))

    from importlib.metadata import PackageNotFoundError, version

    try:
        lightning_version = version("lightning")
    except PackageNotFoundError:
        lightning_version = "not installed"
    report.add(
        _check(
            "versions",
            True,
            f"Python {platform.python_version()}, torch {torch.__version__}, Lightning {lightning_version}",
        )
    )
    report.running("run root")
    report.add(_root_check(run_root, rank))
    report.running("code")
    report.add(_code_check(class_paths))
    if not checks[2]["ok"]:
        return
    report.running("rendezvous")

    import torch.distributed as dist

    start = time.monotonic()
    try:
        dist.init_process_group(
            "gloo",
            init_method=f"tcp://{env.main_address}:{env.main_port}",
            rank=rank,
            world_size=world,
            timeout=timedelta(seconds=timeout_s),
        )
    except Exception as err:  # a timeout (DistStoreError, RuntimeError) or a refused connection: the point of the check
        report.add(
            _check(
                "rendezvous",
                False,
                f"no rendezvous of {world} ranks at {env.main_address}:{env.main_port} in {timeout_s:.0f} s: "
                f"{str(err).splitlines()[0][:200]}",
            )
        )
        return
    report.add(
        _check(
            "rendezvous",
            True,
            f"{time.monotonic() - start:.2f} s for {world} ranks at {env.main_address}:{env.main_port}",
        )
    )
    report.running("all-reduce")
    try:
        report.add(_all_reduce(dist, torch, world, size_mb, iters))
    finally:
        dist.destroy_process_group()


def _root_check(run_root: Path, rank: int) -> dict[str, Any]:
    try:
        run_root.mkdir(parents=True, exist_ok=True)
        probe = run_root / f".doctor-{socket.gethostname()}-{rank}-{os.getpid()}"
        probe.write_text("ok")
        written = probe.read_text() == "ok"
        probe.unlink()
        free_gb = shutil.disk_usage(run_root).free / 1e9
    except OSError as err:
        return _check("run root", False, f"{run_root}: not writable: {err.strerror or err}")
    return _check("run root", written, f"{run_root} writable, {free_gb:.1f} GB free")


def _origin(module: Any, name: str) -> str:
    """The folder ``module`` (called ``name``) was imported from: the one holding its top package."""
    file = getattr(module, "__file__", None)
    if not file:
        return "(no file)"
    path = Path(file).resolve()
    return str(path.parents[name.count(".") + (path.name == "__init__.py")])


def _code_check(class_paths: list[str]) -> dict[str, Any]:
    """Whether the config's class paths import here, and from where each one's package comes (a job in a code
    snapshot imports your code from ``<run>/code``; a live folder named here is not the code submitted)."""
    from trainer_cli import errors  # (this module runs as __main__ in the job: its own name says nothing)

    where = _origin(errors, errors.__name__)  # the folder holding trainer_cli/
    failed = []
    origins: dict[str, list[str]] = {}
    for path in class_paths:
        module = path.rpartition(".")[0]
        try:
            imported = importlib.import_module(module)
        except Exception as err:  # the user's module may fail in any way: the message is the point
            failed.append(f"{path}: {type(err).__name__}: {err}")
            continue
        origins.setdefault(_origin(imported, module), []).append(path)
    if failed:
        return _check("code", False, f"from {where}: " + "; ".join(failed))
    same = len(origins.get(where, []))
    found = "".join(f"; {', '.join(paths)} from {origin}" for origin, paths in origins.items() if origin != where)
    return _check("code", True, f"trainer_cli{f' and {same} class path(s)' if same else ''} import from {where}{found}")


def _all_reduce(dist: Any, torch: Any, world: int, size_mb: float, iters: int) -> dict[str, Any]:
    numel = max(int(size_mb * 1e6 / 4), 1)
    tensor = torch.ones(numel, dtype=torch.float32)
    dist.all_reduce(tensor)  # warm-up: connections made, buffers allocated
    dist.barrier()
    start = time.monotonic()
    for _ in range(iters):
        dist.all_reduce(tensor)
    seconds = (time.monotonic() - start) / iters
    expected = float(world ** (iters + 1))
    if float(tensor[0]) != expected:
        return _check("all-reduce", False, f"wrong sum: {float(tensor[0])} instead of {expected}")
    algbw = numel * 4 / seconds / 1e9
    busbw = algbw * 2 * (world - 1) / world
    return _check(
        "all-reduce",
        True,
        f"{numel * 4 / 1e6:.0f} MB float32 x {world} ranks: {seconds * 1000:.1f} ms, "
        f"bus bandwidth {busbw:.2f} GB/s (algorithm {algbw:.2f} GB/s)",
    )


def main(argv: list[str] | None = None) -> int:
    """Run this task's checks and write ``--out/rank_<k>.json``; exit 0 when all passed, else 1."""
    parser = argparse.ArgumentParser(
        prog="python -m trainer_cli.schedulers.slurm.probe", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--out", required=True, type=Path, help="folder of the reports")
    parser.add_argument("--run_root", required=True, type=Path, help="trainer.default_root_dir of the run to check")
    parser.add_argument("--class_path", action="append", default=[], help="a class the run imports (repeatable)")
    parser.add_argument("--timeout_s", type=float, default=120.0)
    parser.add_argument("--size_mb", type=float, default=16.0)
    parser.add_argument("--iters", type=int, default=5)
    opts = parser.parse_args(argv)
    job = context.current()
    report = Report(opts.out, str(job.rank) if job.step_rank_given else os.environ.get("RANK", "0"))
    report.running("host")
    try:
        run_checks(report, opts.run_root, opts.class_path, opts.timeout_s, opts.size_mb, opts.iters)
    except Exception as err:  # report rather than die silently: the doctor reads the file
        report.add(_check(report.current or "probe", False, f"{type(err).__name__}: {err}"))  # the check it was in
    report.running(None)
    return 0 if all(c["ok"] for c in report.checks) else 1


if __name__ == "__main__":
    sys.exit(main())
