"""``train fit ... --sweep KEY=VALUES``: the trials of a sweep, one after another on this machine.

Every trial is composed and type-checked first (:mod:`trainer_cli.sweeps.plan`); then the sweep
directory is written and each trial runs as ``train fit --config <sweep>/trial_<i>/config.yaml`` in
a process of its own (a plain fit: DDP launches its ranks from it as from any fit). A failed trial
does not stop the others; the exit code is 1 when any failed. Each trial's state goes to its
``job.json`` (RUNNING, COMPLETED, FAILED), and the results table is printed and written at the end
(:mod:`trainer_cli.sweeps.results`). The syntax: ``train sweep-results --help``.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from trainer_cli.errors import UserError
from trainer_cli.job import jobstate
from trainer_cli.rundir.policy import CONFIG_FILE, ENV_RUN_DIR
from trainer_cli.sweeps import plan as sweep_plan
from trainer_cli.sweeps import results
from trainer_cli.sweeps.space import take_sweep_args

EXIT_INTERRUPTED = 130


def main(args: Sequence[str]) -> int:
    """``train fit FIT_ARGS --sweep KEY=VALUES ...``; returns 0 when every trial completed, 1 when
    one failed, 130 after Ctrl-C.

    Raises:
        UserError: for a bad sweep flag or any trial's bad value (nothing is written then).
    """
    from trainer_cli.config.compose import compose_args

    space, rest = take_sweep_args(list(args))
    if space is None:
        raise UserError("no --sweep flag: nothing to sweep")
    sweep = sweep_plan.plan(space, *compose_args(rest))
    sweep_plan.write(sweep)
    n = len(sweep.trials)
    print(f"Sweep directory: {sweep.sweep_dir} ({n} trial(s), one after another)", flush=True)
    env = {k: v for k, v in os.environ.items() if k != ENV_RUN_DIR}
    package_root = str(Path(__file__).resolve().parents[2])  # each trial imports this trainer_cli
    env["PYTHONPATH"] = os.pathsep.join(p for p in (package_root, env.get("PYTHONPATH")) if p)
    failed = []
    for trial in sweep.trials:
        run_dir = sweep.trial_dir(trial)
        print(f"\n=== {trial.label()} [{trial.index + 1}/{n}] -> {run_dir}", flush=True)
        jobstate.update(run_dir, state="RUNNING", exit_code=None)
        proc = subprocess.Popen(
            [sys.executable, "-m", "trainer_cli", "fit", "--config", str(run_dir / CONFIG_FILE)], env=env
        )
        try:
            code = proc.wait()
        except KeyboardInterrupt:  # the trial got Ctrl-C too: let it save and stop, then stop the sweep
            code = proc.wait()
            jobstate.update(run_dir, state="CANCELLED", exit_code=code)
            print(f"\nsweep stopped by Ctrl-C in trial {trial.index}; the table so far:", file=sys.stderr, flush=True)
            results.report(sweep.sweep_dir)
            return EXIT_INTERRUPTED
        jobstate.update(run_dir, state="COMPLETED" if code == 0 else "FAILED", exit_code=code)
        if code != 0:
            failed.append(trial.index)
            print(f"trial {trial.index} failed (exit {code}); going on with the next", file=sys.stderr, flush=True)
    print()
    results.report(sweep.sweep_dir)
    if failed:
        print(
            f"error: trial(s) {', '.join(map(str, failed))} failed; see their logs under {sweep.sweep_dir}",
            file=sys.stderr,
        )
        return 1
    return 0
