"""The CPU each test of the suite costs, its processes and theirs included: where ``make test``'s time goes.

On 2 cores the suite is CPU-bound (4 xdist workers), so its wall time is about its CPU time over 2, and
``pytest --durations`` (each test's wall time, stretched by whatever else ran beside it) says little about
what to cut. This plugin puts each pytest process (each xdist worker) in a cgroup of its own; a test's
processes (the fork server's forks, the ``train`` commands, their DDP ranks and sweep trials) are born into
it, so the cgroup's CPU counter before and after a test is what that test cost, fixtures included (a
module's fixture is counted in the first test that uses it). Slurm jobs run under ``slurmd``, outside: their
CPU is in ``sacct`` (``TotalCPU``). Needs root (a cgroup is made under ``/sys/fs/cgroup``; cgroup v1's
``cpuacct`` or cgroup v2's ``cpu.stat``).

    .venv/bin/python -m pytest -n 4 --dist loadgroup -p benchmarks.suite_cpu   # writes TCLI_SUITE_CPU (default below)
    .venv/bin/python -m benchmarks.suite_cpu report [FILE] [--top N]            # by file, by test, by minute

Each line of the file: ``{"id": nodeid, "cpu": seconds, "wall": seconds, "t0": unix time}``.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

OUT = Path(os.environ.get("TCLI_SUITE_CPU", "/tmp/trainer-cli-suite-cpu.jsonl"))
_read_usage: Any = None


def _cgroup(name: str) -> Any:
    """Move this process into a new cgroup ``name``; the function that reads its CPU seconds so far."""
    v1 = Path("/sys/fs/cgroup/cpuacct")
    if (v1 / "cpuacct.usage").is_file():
        folder = v1 / name
        folder.mkdir(exist_ok=True)
        (folder / "cgroup.procs").write_text(str(os.getpid()))
        return lambda: int((folder / "cpuacct.usage").read_text()) / 1e9
    v2 = Path("/sys/fs/cgroup/unified") if Path("/sys/fs/cgroup/unified/cgroup.procs").is_file() else Path("/sys/fs/cgroup")
    folder = v2 / name
    folder.mkdir(exist_ok=True)
    (folder / "cgroup.procs").write_text(str(os.getpid()))

    def usage() -> float:
        stat = dict(line.split() for line in (folder / "cpu.stat").read_text().splitlines())
        return int(stat["usage_usec"]) / 1e6

    return usage


def pytest_configure(config: Any) -> None:
    global _read_usage
    worker = getattr(config, "workerinput", {}).get("workerid", "main")
    _read_usage = _cgroup(f"trainer-cli-suite-{os.getpid()}-{worker}")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: Any, nextitem: Any) -> Iterator[None]:
    cpu0, t0 = _read_usage(), time.time()
    yield
    cpu1, t1 = _read_usage(), time.time()
    with OUT.open("a") as f:
        f.write(json.dumps({"id": item.nodeid, "cpu": round(cpu1 - cpu0, 3), "wall": round(t1 - t0, 3), "t0": t0}) + "\n")


def report(path: Path, top: int = 40) -> str:
    """The CPU seconds of the tests in ``path`` (this plugin's lines): the total, by file (most first), the
    ``top`` tests, and the CPU the tests used per minute of the run (spread over each test's wall time)."""
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    if not rows:
        return f"{path}: no tests recorded"
    lines = [f"{len(rows)} tests, {sum(r['cpu'] for r in rows):.0f} CPU-s in their processes"]
    by_file: collections.Counter[str] = collections.Counter()
    for row in rows:
        by_file[row["id"].split("::")[0]] += row["cpu"]
    lines += ["", "CPU-s  file"] + [f"{cpu:6.1f} {name}" for name, cpu in by_file.most_common(top)]
    lines += ["", "CPU-s  wall-s  test"]
    lines += [f"{r['cpu']:6.1f} {r['wall']:6.1f}  {r['id']}" for r in sorted(rows, key=lambda r: -r["cpu"])[:top]]
    start = min(r["t0"] for r in rows)
    minutes: collections.Counter[int] = collections.Counter()
    for row in rows:
        begin, end = row["t0"] - start, row["t0"] - start + row["wall"]
        rate = row["cpu"] / max(row["wall"], 1e-6)
        at = begin
        while at < end:
            edge = min((int(at // 60) + 1) * 60, end)
            minutes[int(at // 60)] += rate * (edge - at)
            at = edge
    lines += ["", "cores busy with tests, per minute: " + " ".join(f"{minutes[m] / 60:.2f}" for m in range(max(minutes) + 1))]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.suite_cpu", description=__doc__.split("\n")[0])
    parser.add_argument("command", choices=["report"])
    parser.add_argument("file", nargs="?", type=Path, default=OUT)
    parser.add_argument("--top", type=int, default=40)
    args = parser.parse_args(argv)
    print(report(args.file, args.top))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
