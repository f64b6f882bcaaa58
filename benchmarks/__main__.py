"""``python -m benchmarks [NAME ...] [--smoke]``: run the benchmarks, write JSON and the README table.

Names: overhead, startup, datapath, gpu, sweep_overhead, listing, scale, goodput (default: all). ``--smoke`` runs each in a
tiny mode into ``--out`` (a check that they work; its figures mean nothing) and leaves the README
alone; without names it leaves out :data:`NOT_IN_SMOKE` (too slow for a smoke run: name them).
"""

from __future__ import annotations

import argparse
import importlib
import sys
import time
from pathlib import Path

from benchmarks.common import RESULTS, machine, write_result
from tests.support import REPO

NAMES = ("overhead", "startup", "datapath", "gpu", "sweep_overhead", "listing", "scale", "goodput")
NOT_IN_SMOKE = ("sweep_overhead", "goodput")  # a dozen fresh processes of ~5 s each even in its tiny mode; Slurm jobs


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__.split("\n")[0])
    parser.add_argument("names", nargs="*", help=f"benchmarks to run: {', '.join(NAMES)} (default: all)")
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, one repeat: checks that they run")
    parser.add_argument("--out", type=Path, default=None, help="results folder (default benchmarks/results; smoke: required)")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads (1: steadier figures on a shared machine)")
    args = parser.parse_args(argv)
    if args.smoke and args.out is None:
        parser.error("--smoke needs --out DIR (smoke figures must not replace the real results)")
    unknown = [n for n in args.names if n not in NAMES]
    if unknown:
        parser.error(f"unknown benchmark {', '.join(unknown)}: choose from {', '.join(NAMES)}")
    out = args.out or RESULTS

    import torch

    torch.set_num_threads(args.threads)
    default = [n for n in NAMES if not (args.smoke and n in NOT_IN_SMOKE)]
    for name in args.names or default:
        t0, before = time.perf_counter(), machine()
        print(f"== {name} ...", flush=True)
        result = importlib.import_module(f"benchmarks.{name}").run(smoke=args.smoke)
        path = write_result(out, name, {"machine": before, "smoke": args.smoke, "seconds": time.perf_counter() - t0, "result": result})
        print(f"   {time.perf_counter() - t0:.0f} s -> {path}", flush=True)
    if not args.smoke:
        from benchmarks.report import rows, update_readme

        update_readme(REPO / "benchmarks" / "README.md", out)
        print("\n".join(rows(out)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
