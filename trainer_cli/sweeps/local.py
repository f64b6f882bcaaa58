"""``train fit ... --sweep KEY=VALUES``: the trials of a sweep, one after another on this machine,
chosen by the sweep's Optuna study (:mod:`trainer_cli.sweeps.study`).

The base command is composed and type-checked first, and the trials with it (a grid's every trial;
an Optuna-driven sweep's values at each axis's edges) (:mod:`trainer_cli.sweeps.plan`); then the
sweep directory and its study are made. The loop: ask the study for a trial, type-check it (a grid's
is checked already), write its run directory ``trial_<n>`` and run ``train fit --config
<sweep>/trial_<n>/config.yaml`` in a process of its own (a plain fit: DDP launches its ranks from
it as from any fit), then tell the study its best value of the metric, or PRUNED (the pruning
callback stopped it) or FAIL. A failed trial does not stop the others; the exit code is 1 when any
failed. Each trial's run state goes to its ``job.json`` (RUNNING, COMPLETED, FAILED), and the
results table is printed and written at the end (:mod:`trainer_cli.sweeps.results`). The syntax:
``train sweep-results --help``.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from trainer_cli.config.request import Request
from trainer_cli.errors import UserError
from trainer_cli.job import jobstate
from trainer_cli.rundir import metrics
from trainer_cli.rundir.layout import CONFIG_FILE, ENV_RUN_DIR
from trainer_cli.sweeps import plan as sweep_plan
from trainer_cli.sweeps import results, study
from trainer_cli.sweeps.space import take_sweep_args

EXIT_INTERRUPTED = 130


def trial_value(run_dir: Path, metric: str | None, direction: str) -> float | None:
    """The best value of ``metric`` a trial reached (``direction`` ``maximize`` or ``minimize``): its
    checkpoint's ``ModelCheckpoint`` score when that monitors ``metric``, else the best value it
    logged, whatever the logger (:func:`trainer_cli.rundir.metrics.best_value`); None without one."""
    return metrics.best_value(run_dir, metric, "max" if direction == "maximize" else "min")


def failure(run_dir: Path, metric: str | None, exit_code: int) -> str:
    """Why a trial the study was told FAIL failed: its exit code, or, for a trial that ended well, why
    no value of ``metric`` was found (the files read and what they hold)."""
    if exit_code != 0 or metric is None:
        return f"exit {exit_code}"
    return f"exit 0, but {metrics.why_missing(run_dir, metric)}"


def _run_trial(run_dir: Path, env: dict[str, str]) -> int:
    """``train fit --config <run_dir>/config.yaml --run_dir <run_dir>`` in a process of its own; its exit code.

    Raises:
        KeyboardInterrupt: after the trial (which got Ctrl-C too) saved and stopped.
    """
    jobstate.update(run_dir, state="RUNNING", exit_code=None)
    proc = subprocess.Popen(
        [sys.executable, "-m", "trainer_cli", "fit", "--config", str(run_dir / CONFIG_FILE), "--run_dir", str(run_dir)],
        env=env,
    )
    try:
        code = proc.wait()
    except KeyboardInterrupt:  # the trial got Ctrl-C too: let it save and stop, then stop the sweep
        code = proc.wait()
        jobstate.update(run_dir, state="CANCELLED", exit_code=code)
        raise
    jobstate.update(run_dir, state="COMPLETED" if code == 0 else "FAILED", exit_code=code)
    return code


def main(request: Request) -> int:
    """``train fit FIT_ARGS --sweep KEY=VALUES ...``; returns 0 when every trial completed or was
    pruned, 1 when one failed, 130 after Ctrl-C.

    Raises:
        UserError: for a bad sweep flag or any checked trial's bad value (nothing is written then).
    """
    from trainer_cli.config.compose import composed

    expanded, layers = composed(request)  # by train's precheck: each --config file read and composed once
    space, rest = take_sweep_args(expanded)  # (composing passes the --sweep flags on as written)
    if space is None:
        raise UserError("no --sweep flag: nothing to sweep")
    sweep = sweep_plan.plan(space, rest, layers)
    metric, direction = study.objective(space, sweep.base.as_dict())
    n = len(sweep.trials) if space.is_grid else space.trials_per_point
    sweep_plan.write(sweep, study_of=lambda where: study.describe(space, where, sweep.name, metric, direction))
    assert sweep.study is not None
    try:
        created = study.create(sweep.study, space)
    except BaseException:
        sweep_plan.remove(sweep)
        raise
    how = "one after another" if space.is_grid else f"{space.sampler} sampler, pruner {space.pruner}"
    print(f"Sweep directory: {sweep.sweep_dir} ({n} trial(s), {how}; study {sweep.study['name']})", flush=True)
    env = {k: v for k, v in os.environ.items() if k != ENV_RUN_DIR}
    package_root = str(Path(__file__).resolve().parents[2])  # each trial imports this trainer_cli
    env["PYTHONPATH"] = os.pathsep.join(p for p in (package_root, env.get("PYTHONPATH")) if p)
    failed = []
    for _ in range(n):
        asked = created.ask()
        overrides = study.suggest(space, asked)
        try:
            if space.is_grid:
                trial = sweep.trials[asked.number]
            else:
                trial = sweep_plan.add_trial(sweep, asked.number, overrides)
                sweep_plan.write_trial(sweep, trial)
                sweep_plan.write_record(sweep, {})
        except UserError as refused:  # a value the edges did not show to be wrong: this trial fails, not the sweep
            study.fail(created, asked.number)
            failed.append(asked.number)
            print(f"error: {refused}", file=sys.stderr, flush=True)
            continue
        run_dir = sweep.trial_dir(trial)
        print(f"\n=== {trial.label()} [{asked.number + 1}/{n}] -> {run_dir}", flush=True)
        try:
            code = _run_trial(run_dir, env)
        except KeyboardInterrupt:
            study.fail(created, asked.number)
            print(f"\nsweep stopped by Ctrl-C in trial {trial.index}; the table so far:", file=sys.stderr, flush=True)
            results.report(sweep.sweep_dir)
            return EXIT_INTERRUPTED
        state = study.tell(created, asked, trial_value(run_dir, metric, direction), code)
        if state == "FAIL":
            failed.append(trial.index)
            why = failure(run_dir, metric, code)
            print(f"trial {trial.index} failed ({why}); going on with the next", file=sys.stderr, flush=True)
        elif state == "PRUNED":
            print(f"trial {trial.index} pruned; its run directory and checkpoint stay", flush=True)
    print()
    results.report(sweep.sweep_dir)
    if failed:
        print(
            f"error: trial(s) {', '.join(map(str, failed))} failed; see their logs under {sweep.sweep_dir}",
            file=sys.stderr,
        )
        return 1
    return 0
