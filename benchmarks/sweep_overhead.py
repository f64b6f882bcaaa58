"""A sweep's per-trial launcher cost, apart from training: what a Slurm array worker of an Optuna
sweep (``train submit --sweep ... --slurm.array_workers N``, ``trainer_cli.schedulers.slurm.sweep_worker``) runs
around each trial's ``train fit``, as it runs it.

Set-up, as a real submission: ``python -m trainer_cli submit --config configs/experiment/digits.yaml
--config configs/slurm/local.yaml --sweep optimizer.init_args.lr=loguniform(1e-3,1e-1)
--sweep_sampler tpe --sweep_trials 1000 --slurm.array_workers 1`` in a temporary directory, with a
stand-in ``sbatch`` first on PATH that only prints a job id (nothing is queued). The study is the
default journal file (``study.journal``). Then the batch script's loop is run by hand, each command a
fresh process from the sweep's code snapshot (the job's working directory) with the script's
environment (``TRAINER_CLI_WORKDIR``, ``PYTHONUNBUFFERED``):

- ``python -m trainer_cli.schedulers.slurm.sweep_worker next SWEEP_DIR 0 0``: interpreter, imports, study load
  (Optuna's ``JournalStorage`` replays the whole log); tell the last trial (read its best
  ``val/acc`` from its checkpoint, tell COMPLETE); ask (TPE), type-check with the sweep's
  LightningCLI parser, write ``trial_<n>``;
- ``python -m trainer_cli.schedulers.slurm.batch RUN_DIR start`` / ``end 0`` and ``worker beat`` (on a
  journal study it returns at once; it runs beside the training).

The first trial is trained for real (``train fit --config trial_000/config.yaml`` with fewer epochs):
its wall time is the comparison, and its ``checkpoints/`` are copied into every later trial so that
``tell`` reads a real checkpoint instead of training each trial. The study is grown between rounds
to each size of :data:`SIZES` told trials (asked, suggested and told in this process with a random
sampler: the journal holds the same operations a worker writes; ``sweep.json`` gets the same
``trials`` entries). ``split`` (at the smallest and the largest size) runs ``next`` and ``tell``'s
steps in a fresh process of their own, each timed with ``time.perf_counter`` (the imports first, so
the steps after them exclude them): where the time goes. Each command's wall time and CPU time
(user + system, from ``getrusage``) are kept. Rounds alternate the order of the processes; figures
are medians.
"""

from __future__ import annotations

import json
import os
import random
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.common import medians
from tests.support import DIGITS, REPO

LOCAL_PROFILE = str(REPO / "configs" / "slurm" / "local.yaml")
AXIS = "optimizer.init_args.lr=loguniform(1e-3,1e-1)"
SIZES = (10, 50, 200)  # trials told in the study before a round
REQUESTED = 1000  # --sweep_trials: the study never runs out of trials to ask for here
TRAIN_EPOCHS = 3
PY = sys.executable


def _env(path_first: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "TRAINER_CLI_RUN_DIR"}
    return env | {
        "PATH": f"{path_first}{os.pathsep}{env.get('PATH', '')}",
        "PYTHONUNBUFFERED": "1",
        "TRAINER_CLI_WORKDIR": str(REPO),
    }


def _children_cpu() -> float:
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    return used.ru_utime + used.ru_stime


def _timed(cmd: list[str], cwd: Path, env: dict[str, str]) -> tuple[float, str, float]:
    """Whole-process wall time of ``cmd``, its stdout and its CPU time (user + system, all its
    threads and children: steadier than wall time on a shared machine); raises on a non-zero exit."""
    t0, cpu0 = time.perf_counter(), _children_cpu()
    done = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True)
    wall, cpu = time.perf_counter() - t0, _children_cpu() - cpu0
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: exit {done.returncode}\n{done.stderr[-3000:]}")
    return wall, done.stdout, cpu


def submit(root: Path, env: dict[str, str]) -> tuple[Path, float]:
    """A workers' sweep queued by the stand-in sbatch; its directory and the submit's wall time."""
    cmd = [
        PY,
        "-m",
        "trainer_cli",
        "submit",
        "--config",
        DIGITS,
        "--config",
        LOCAL_PROFILE,
        "--trainer.default_root_dir",
        str(root / "runs"),
        "--trainer.enable_progress_bar",
        "false",
        "--sweep",
        AXIS,
        "--sweep_sampler",
        "tpe",
        "--sweep_trials",
        str(REQUESTED),
        "--slurm.array_workers",
        "1",
    ]
    wall, out, _ = _timed(cmd, REPO, env)
    assert "Job id:" in out, out
    return root / "runs" / "digits" / "sweep_0", wall


def grow(sweep_dir: Path, size: int, rng: random.Random) -> int:
    """Ask, suggest and tell (COMPLETE, a made-up val/acc) until the study holds ``size`` trials;
    each gets the ``sweep.json`` entry a worker appends. Returns the number of trials it holds."""
    import optuna

    from trainer_cli.config.request import Request
    from trainer_cli.sweeps import plan as sweep_plan
    from trainer_cli.sweeps import study as sweep_study
    from trainer_cli.schedulers.slurm import sweep_worker as worker
    from trainer_cli.sweeps.space import take_sweep_args

    record = sweep_plan.read_record(sweep_dir)
    space, _ = take_sweep_args(Request.of(record["sweep_args"]))
    assert space is not None
    sweep_study._quiet_optuna()
    loaded = optuna.load_study(
        study_name=record["study"]["name"],
        storage=sweep_study.storage(record["study"]["storage"]),
        sampler=optuna.samplers.RandomSampler(seed=rng.randrange(2**31)),
    )
    while len(loaded.trials) < size:
        asked = loaded.ask()
        overrides = sweep_study.suggest(space, asked)
        loaded.tell(asked, 0.9 + 0.09 * rng.random())
        run_dir = sweep_dir / sweep_plan.trial_name(asked.number)
        values = {k: float(v) for k, v in overrides.items()}
        worker._append_trial(
            sweep_dir, {"index": asked.number, "run_dir": str(run_dir), "overrides": overrides, "values": values}
        )
    return len(loaded.trials)


def split(sweep_dir: Path, task: str, checkpoints: Path, launched: float) -> dict[str, float]:
    """``next`` and ``tell``'s steps (:func:`trainer_cli.schedulers.slurm.sweep_worker.next_trial` and ``tell``, the
    same calls in the same order) in this process, each timed; the imports they make lazily first.
    ``launched``: the parent's ``time.time()`` when it started this process."""
    t: dict[str, float] = {"process start: interpreter, this module's imports (numpy)": time.time() - launched}
    clock = time.perf_counter()

    def lap(name: str) -> None:
        nonlocal clock
        now = time.perf_counter()
        t[name] = t.get(name, 0.0) + now - clock
        clock = now

    import optuna  # noqa: F401

    from trainer_cli.atomic import locked
    from trainer_cli.job import jobstate
    from trainer_cli.sweeps import plan as sweep_plan
    from trainer_cli.sweeps import study as sweep_study
    from trainer_cli.schedulers.slurm import sweep_worker as worker

    lap("import optuna + trainer_cli.sweeps")
    from trainer_cli.imports import heavy_import

    with heavy_import():
        import trainer_cli.callbacks.optuna_pruning  # noqa: F401 - the journal's opener lives beside the Lightning callback
        from trainer_cli.runtime.verbs import ConfigParser  # noqa: F401
    lap("import torch + Lightning + the CLI")
    from trainer_cli.sweeps.local import trial_value

    lap("import trainer_cli.sweeps.local (tell)")

    # next
    record = sweep_plan.read_record(sweep_dir)
    lap("next: read sweep.json")
    loaded = sweep_study.load(record["study"])
    lap("next: load study (journal replay)")
    flight = worker.in_flight_file(sweep_dir, task)
    with locked(sweep_dir / worker.WORKERS_DIR / "asks", timeout_s=600):
        worker._counts(loaded)
        lap("next: count trials")
        asked = loaded.ask()
        lap("next: ask (TPE)")
        run_dir = sweep_dir / sweep_plan.trial_name(asked.number)
        sweep = worker._sweep(sweep_dir, record)
        lap("next: build the fit parser")
        overrides = sweep_study.suggest(sweep.space, asked)
        lap("next: suggest")
        sys.stderr, stderr = open(os.devnull, "w"), sys.stderr  # add_trial prints what it checked
        try:
            trial = sweep_plan.add_trial(sweep, asked.number, overrides)
        finally:
            sys.stderr.close()
            sys.stderr = stderr
        lap("next: type-check the trial")
        sweep_plan.write_trial(sweep, trial)
        worker._append_trial(
            sweep_dir, {"index": trial.index, "run_dir": str(run_dir), "overrides": overrides, "values": trial.values}
        )
        flight.write_text(json.dumps({"trial": asked.number, "run_dir": str(run_dir)}) + "\n")
        lap("next: write trial_<n>, sweep.json, in-flight record")

    shutil.copytree(checkpoints, run_dir / "checkpoints")  # the trained trial's (not timed)
    jobstate.update(run_dir, state="COMPLETED", exit_code=0)
    clock = time.perf_counter()

    # tell
    in_flight = json.loads(flight.read_text())
    jobstate.read(run_dir)
    record = sweep_plan.read_record(sweep_dir)
    lap("tell: read job.json, sweep.json")
    loaded = sweep_study.load(record["study"])
    lap("tell: load study (journal replay)")
    told = next(t for t in loaded.get_trials(deepcopy=False) if t.number == in_flight["trial"])
    value = trial_value(run_dir, record["study"]["metric"], record["study"]["direction"])
    lap("tell: read the checkpoint's best value")
    state = sweep_study.tell(loaded, told, value, 0)
    flight.unlink()
    lap("tell: tell the study")
    assert state == "COMPLETE", state
    return t | {"_ended": time.time()}


class Worker:
    """The batch script's commands for task 0 of one sweep, each a fresh, timed process."""

    def __init__(self, sweep_dir: Path, env: dict[str, str], checkpoints: Path | None = None) -> None:
        self.sweep_dir, self.env, self.checkpoints = sweep_dir, env, checkpoints
        self.code = sweep_dir / "code"  # the job's working directory: python imports the snapshot

    def pending(self) -> bool:
        """Whether task 0 has a trial in flight (trained, not told yet)."""
        from trainer_cli.schedulers.slurm import sweep_worker as worker

        return worker.in_flight_file(self.sweep_dir, "0").exists()

    def prepare(self) -> None:
        """A trained trial in flight, as the loop has one when it asks again (not timed): asked in this
        process, the trained trial's checkpoints copied into it."""
        from trainer_cli.schedulers.slurm import sweep_worker as worker

        if not self.pending():
            assert self.checkpoints is not None
            run_dir = worker.next_trial(self.sweep_dir, "0")
            assert run_dir is not None
            shutil.copytree(self.checkpoints, run_dir / "checkpoints")

    def settle(self) -> None:
        """Tell the trial in flight, if any (not timed): before a round's study grows or ``split`` asks."""
        from trainer_cli.schedulers.slurm import sweep_worker as worker

        if self.pending():
            worker.tell(self.sweep_dir, "0", 0)

    def cycle(self, train_args: list[str] | None = None) -> dict[str, float]:
        """The loop's commands for one trial: ``next SWEEP 0 0`` (tells the last trial, then asks),
        jobstate start, beat, (training, or the trained trial's checkpoints copied), jobstate end;
        each command's wall time (``NAME``) and CPU time (``NAME cpu``). The first cycle (training)
        has no trial to tell."""
        t: dict[str, float] = {}

        def run(name: str, *args: str) -> str:
            t[name], out, t[f"{name} cpu"] = _timed([PY, "-m", *args], self.code, self.env)
            return out

        if train_args is None:
            self.prepare()
        told = ["0"] if self.pending() else []
        run_dir = Path(run("next", "trainer_cli.schedulers.slurm.sweep_worker", "next", str(self.sweep_dir), "0", *told).strip())
        assert run_dir.is_dir(), run_dir
        run("jobstate start", "trainer_cli.schedulers.slurm.batch", str(run_dir), "start")
        run("beat (journal: returns at once)", "trainer_cli.schedulers.slurm.sweep_worker", "beat", str(self.sweep_dir), "0")
        if train_args is not None:
            run("train fit", "trainer_cli", "fit", "--config", str(run_dir / "config.yaml"), *train_args)
            self.checkpoints = run_dir / "checkpoints"
        else:
            assert self.checkpoints is not None
            shutil.copytree(self.checkpoints, run_dir / "checkpoints")
        run("jobstate end", "trainer_cli.schedulers.slurm.batch", str(run_dir), "end", "0")
        commands = [k for k in t if not k.endswith(" cpu") and k != "train fit"]
        t["launcher total"] = sum(t[k] for k in commands)
        t["launcher total cpu"] = sum(t[f"{k} cpu"] for k in commands)
        return t

    def split(self) -> dict[str, float]:
        assert self.checkpoints is not None
        cmd = [
            PY,
            "-m",
            "benchmarks.sweep_overhead",
            "split",
            str(self.sweep_dir),
            "0",
            str(self.checkpoints),
            repr(time.time()),
        ]
        wall, out, cpu = _timed(cmd, REPO, self.env)
        steps = json.loads(out.strip().splitlines()[-1])
        steps["process exit"] = time.time() - steps.pop("_ended")
        return steps | {"process wall": wall, "process cpu": cpu}

    def interpreter(self) -> float:
        return _timed([PY, "-c", "pass"], self.code, self.env)[0]


def run(smoke: bool = False) -> dict[str, Any]:
    """Submit, train one trial, then time the worker's commands at each study size."""
    sizes, repeats, epochs = ((2,), 1, 1) if smoke else (SIZES, 3, TRAIN_EPOCHS)
    train_args = ["--trainer.max_epochs", str(epochs)]
    if smoke:
        train_args += ["--trainer.limit_train_batches", "2", "--trainer.limit_val_batches", "2"]
    rng = random.Random(0)
    with tempfile.TemporaryDirectory(prefix="sweep_overhead_") as tmp:
        root = Path(tmp)
        (root / "bin").mkdir()
        (root / "bin" / "sbatch").write_text("#!/bin/sh\necho 424242\n")  # queues nothing
        (root / "bin" / "sbatch").chmod(0o755)
        env = _env(root / "bin")
        sweep_dir, submit_s = submit(root, env)
        worker = Worker(sweep_dir, env)
        first = worker.cycle(train_args)  # trial_000, trained for real
        rounds: dict[str, Any] = {}
        for size in sizes:
            worker.settle()
            held = grow(sweep_dir, size, rng)
            cycles, splits, interpreter = [], [], []
            for r in range(repeats):
                # the steps at the smallest and the largest size (the journal's replay is in both)
                order = ["cycle", "split", "interpreter"] if size in (sizes[0], sizes[-1]) else ["cycle", "interpreter"]
                for what in order if r % 2 == 0 else reversed(order):
                    if what == "cycle":
                        cycles.append(worker.cycle())
                    elif what == "split":
                        worker.settle()
                        splits.append(worker.split())
                    else:
                        interpreter.append(worker.interpreter())
            rounds[str(size)] = {
                "trials_in_study_at_start": held,
                "commands_s": medians(cycles),
                "split_s": medians(splits) if splits else None,
                "python_c_pass_s": sorted(interpreter)[len(interpreter) // 2],
                "journal_bytes_at_end": (sweep_dir / "study.journal").stat().st_size,
                "runs": {"commands_s": cycles, "split_s": splits, "python_c_pass_s": interpreter},
            }
    first_size = rounds[str(sizes[0])]["commands_s"]["launcher total"]
    return {
        "config": {
            "sizes": list(sizes),
            "repeats": repeats,
            "train_args": train_args,
            "sampler": "tpe",
            "storage": "journal file",
            "workers": 1,
        },
        "submit_s": submit_s,
        "first_trial_s": first,
        "train_fit_s": first["train fit"],
        "train_epochs": epochs,
        "overhead_over_training": first_size / first["train fit"],
        "overhead_over_training_cpu": rounds[str(sizes[0])]["commands_s"]["launcher total cpu"]
        / first["train fit cpu"],
        "sizes": rounds,
    }


if __name__ == "__main__":
    if sys.argv[1:2] == ["split"]:
        print(json.dumps(split(Path(sys.argv[2]), sys.argv[3], Path(sys.argv[4]), float(sys.argv[5]))), flush=True)
    else:
        sys.exit("usage: python -m benchmarks sweep_overhead (the split subcommand is internal)")
