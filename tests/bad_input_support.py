"""Run many ``train`` command lines through the real entry point in ONE Python process.

Starting Python + torch + Lightning costs seconds per process; the bad-input suite has dozens of
cases, so ``python tests/bad_input_support.py CASES.json OUT.json`` runs each case's argument list
through :func:`trainer_cli.__main__.main` in turn (in its own working directory) and records what
a separate ``train`` process would have shown: the exit code, everything written to stdout and
stderr, and a traceback if an exception escaped. ``tests/test_bad_input.py`` also runs a few cases
as separate processes to check that both ways agree.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import sys
import time
import traceback


def run_case(argv: list[str], cwd: str) -> dict[str, object]:
    """Exit code and output of ``train ARGV`` run in ``cwd``, as a process would report them."""
    from trainer_cli.__main__ import main

    out, err = io.StringIO(), io.StringIO()
    before = os.getcwd()
    os.environ.pop("TRAINER_CLI_RUN_DIR", None)
    os.chdir(cwd)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = main(argv)
            except SystemExit as stop:
                code = stop.code if isinstance(stop.code, int) else (0 if stop.code is None else 1)
            except BaseException:  # what the interpreter would print for an escaped exception
                traceback.print_exc()
                code = 1
    finally:
        os.chdir(before)
    return {"code": code, "stdout": out.getvalue(), "stderr": err.getvalue()}


if __name__ == "__main__":
    cases = json.loads(open(sys.argv[1]).read())
    results = {}
    for name, case in cases.items():  # each case timed: what the module's fixture costs, case by case
        start = time.perf_counter()
        results[name] = {**run_case(case["argv"], case["cwd"]), "seconds": time.perf_counter() - start}
    with open(sys.argv[2], "w") as f:
        json.dump(results, f)
