"""Scale (issue 48): the wall time and peak memory of ``train runs`` (a folder of N runs, and ``--diff``) for N
in 100, 1,000 and 10,000, each a fresh ``python -m trainer_cli runs`` process.

The runs are copies of one real digits run (``train fit``, 2 epochs of 4 batches; checkpoints left out), its
files copied with their modification times (``shutil.copy2``), so their content is real. Cases per N:

- ``no summary``: the copies without ``summary.json`` (runs made before issue 48): every logger's file read
  (N <= 1,000: about 35 ms a run on this machine); the listing keeps each run's summary;
- ``fit's summary``: each copy with the summary its fit kept (the metrics part only): the first listing of
  runs made now, which decodes no event file;
- ``warm``: again, the rows kept by the listing before in each run's summary, page cache warm (this listing writes the
  runs index at the root, :mod:`trainer_cli.rundir.index`);
- ``index``: again, the rows read from the runs index (one file, each run's folder and files stated);
- ``cold``: the same after ``echo 3 > /proc/sys/vm/drop_caches`` (root only; ``cold_measured`` says whether): the
  whole page cache dropped, the interpreter's and the libraries' files too.

``sweep-results`` at N trials: a real sweep (``train fit --sweep``, 2 trials of 2 epochs) whose first trial's
files are copied N times (checkpoints hard-linked), its study holding N told trials (Optuna's ``add_trials``),
``sweep.json`` N entries; listed without summaries (N <= 1,000), then again (the rows kept in each trial's
``summary.json``), again (the rows from the sweep's trials index, the importances and plots kept), and cold.

The sweep worker's ask/tell at N told trials: a workers' sweep (``train submit --sweep ... --slurm.array_workers 1``
with a stand-in ``sbatch``: :func:`benchmarks.sweep_overhead.submit`), its journal grown to N told trials (and
``sweep.json`` to N entries); then ``python -m trainer_cli.schedulers.slurm.sweep_worker next SWEEP 0 0``, the batch script's
command between two trials (tell the trial just trained: the real trial's checkpoint copied in; ask the next,
type-check it, write ``trial_<n>``), three times, medians.

``train jobs`` with N registered jobs: a registry (``XDG_STATE_HOME``) of N lines, one in ten naming a job the
local cluster's accounting knows (its run directory a folder with ``job.json`` and a log with an epoch line), the
others ids no Slurm knows; ``train jobs`` (the newest 20) and ``train jobs --last N``, each with the number of
``scontrol``, ``sacct`` and ``squeue`` calls made (wrappers in front of the real commands). Skipped without the
local cluster (``scripts/local-slurm env``).

Peak memory: the listing process's maximum resident set (``/usr/bin/time``).
"""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from tests.support import DIGITS, REPO, quiet_args

SIZES = (100, 1_000, 10_000)
SLOW_UP_TO = 1_000  # the listing without summaries is measured up to this N (10,000: minutes)
TARGET_S = 2.0  # `train runs` over 10,000 runs


def _drop_caches() -> bool:
    try:
        os.sync()
        Path("/proc/sys/vm/drop_caches").write_text("3\n")
    except OSError:
        return False
    return True


def _listing(folder: Path, *extra: str, verb: str = "runs") -> dict[str, float]:
    """Wall seconds, CPU seconds and peak resident MB of ``python -m trainer_cli runs FOLDER`` (``/usr/bin/time``:
    started from a small process, so the peak is the listing's own, not this process's before ``exec``)."""
    return _timed([sys.executable, "-m", "trainer_cli", verb, str(folder), *extra])


def _timed(command: list[str], cwd: Path = REPO, env: dict[str, str] | None = None) -> dict[str, float]:
    """Wall seconds, CPU seconds and peak resident MB of ``command`` (``/usr/bin/time``)."""
    cmd = ["/usr/bin/time", "-f", "%e %U %S %M", *command]
    done = subprocess.run(cmd, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed: {done.stderr[-2000:]}")
    wall, user, system, peak_kb = done.stderr.strip().splitlines()[-1].split()
    return {
        "wall_s": float(wall),
        "cpu_s": round(float(user) + float(system), 2),
        "peak_mb": round(int(peak_kb) / 1024, 1),
    }


def _copies(made: Path, folder: Path, n: int, with_summary: bool) -> None:
    files = [
        f for f in made.rglob("*") if f.is_file() and "checkpoints" not in f.parts and not f.name.endswith(".lock")
    ]
    for i in range(n):
        target = folder / f"trial_{i}"
        for f in files:
            if f.name == "summary.json" and not with_summary:
                continue
            (target / f.relative_to(made)).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(f, target / f.relative_to(made))


def _runs(smoke: bool = False) -> dict[str, Any]:
    """``train runs`` at each N."""
    sizes = (3, 5) if smoke else SIZES
    out: dict[str, Any] = {"sizes": {}, "target_s": TARGET_S, "cold_measured": False}
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "made"
        _fit(root, "--trainer.limit_train_batches", "4", "--trainer.limit_val_batches", "2")
        made = next(root.glob("*/version_0"))
        for n in sizes:
            figures: dict[str, Any] = {}
            if n <= SLOW_UP_TO:
                old = Path(tmp) / f"old_{n}"
                _copies(made, old, n, with_summary=False)
                figures["no summary"] = _listing(old)
                shutil.rmtree(old)
            folder = Path(tmp) / f"runs_{n}"
            _copies(made, folder, n, with_summary=True)
            figures["fit's summary"] = _listing(folder)
            figures["warm"] = _listing(folder)  # rows from the summaries; the runs index written
            figures["index"] = _listing(folder)  # rows from the runs index
            figures["warm --diff"] = _listing(folder, "--diff")
            if _drop_caches():
                out["cold_measured"] = True
                figures["cold"] = _listing(folder)
            shutil.rmtree(folder)
            out["sizes"][str(n)] = figures
            print(f"   train runs, {n} runs: {figures}", flush=True)
    return out


SHORT = ["--trainer.limit_train_batches", "3", "--trainer.limit_val_batches", "2"]
AXIS = "optimizer.init_args.lr=loguniform(1e-3,1e-1)"


def _fit(root: Path, *extra: str) -> None:
    """``train fit`` of 2 digits epochs under ``root``, with ``extra`` flags."""
    cmd = [sys.executable, "-m", "trainer_cli", "fit", "--config", DIGITS, *quiet_args(root, epochs=2), *extra]
    subprocess.run(cmd, cwd=REPO, check=True, capture_output=True, text=True)


def _real_sweep(root: Path) -> Path:
    """A real local sweep: 2 trials of 2 digits epochs (``train fit --sweep``), listed once by the sweep itself."""
    _fit(root, *SHORT, "--sweep", AXIS, "--sweep_sampler", "random", "--sweep_trials", "2", "--sweep_seed", "0")
    return root / "digits" / "sweep_0"


def _copy_trial(made: Path, target: Path) -> None:
    """``made``'s files into ``target`` (modification times kept; checkpoints hard-linked; no summary, no locks)."""
    for f in made.rglob("*"):
        if not f.is_file() or f.name.startswith(".") or f.name == "summary.json":
            continue
        dest = target / f.relative_to(made)
        dest.parent.mkdir(parents=True, exist_ok=True)
        os.link(f, dest) if "checkpoints" in f.parts else shutil.copy2(f, dest)


def _told(n: int, axes: dict[str, Any], rng: random.Random) -> tuple[list[Any], list[dict[str, Any]]]:
    """N told trials (Optuna's ``create_trial``: COMPLETE, a made-up value) and their parameters."""
    import optuna

    params = [{key: 10 ** rng.uniform(-3, -1) for key in axes} for _ in range(n)]
    return [optuna.trial.create_trial(params=p, distributions=axes, value=rng.random()) for p in params], params


def _sweep_of(real: Path, out: Path, n: int) -> Path:
    """A sweep of N trials made from ``real``'s first trial (see the module docstring)."""
    from trainer_cli.config.request import Request
    from trainer_cli.sweeps import plan as sweep_plan
    from trainer_cli.sweeps import study as sweep_study
    from trainer_cli.sweeps.space import take_sweep_args

    record = json.loads((real / sweep_plan.SWEEP_FILE).read_text())
    space, _ = take_sweep_args(Request.of(["--sweep", AXIS]))
    assert space is not None
    frozen, params = _told(n, {a.key: a.distribution() for a in space.axes}, random.Random(n))
    trials = []
    for i, values in enumerate(params):
        run_dir = out / sweep_plan.trial_name(i)
        _copy_trial(Path(record["trials"][0]["run_dir"]), run_dir)
        trials.append(
            {
                "index": i,
                "run_dir": str(run_dir),
                "overrides": {k: repr(v) for k, v in values.items()},
                "values": values,
            }
        )
    study = record["study"] | {"storage": str(out / "study.journal")}
    sweep_study.create(study).add_trials(frozen)
    (out / sweep_plan.SWEEP_FILE).write_text(
        json.dumps(record | {"sweep_dir": str(out), "study": study, "trials": trials})
    )
    return out


def _sweep_results(tmp: Path, sizes: tuple[int, ...]) -> dict[str, Any]:
    """``sweep-results`` at each N: without summaries (N <= :data:`SLOW_UP_TO`), with the rows kept, cold."""
    real = _real_sweep(tmp / "real")
    out: dict[str, Any] = {}
    for n in sizes:
        folder = _sweep_of(real, tmp / f"sweep_{n}", n)
        figures = {}
        if n <= SLOW_UP_TO:
            figures["no summary"] = _listing(folder, verb="sweep-results")
        else:  # the first listing keeps the rows: not timed at 10,000 (about 40 ms of CPU a trial)
            subprocess.run(
                [sys.executable, "-m", "trainer_cli", "sweep-results", str(folder)],
                cwd=REPO,
                check=True,
                capture_output=True,
            )
        figures["warm"] = _listing(folder, verb="sweep-results")  # rows from the summaries; the trials index written
        figures["index"] = _listing(folder, verb="sweep-results")  # rows from the trials index
        if _drop_caches():
            figures["cold"] = _listing(folder, verb="sweep-results")
        shutil.rmtree(folder)
        out[str(n)] = figures
        print(f"   sweep-results, {n} trials: {figures}", flush=True)
    return out


def _ask_tell(tmp: Path, sizes: tuple[int, ...], real_trial: Path) -> dict[str, Any]:
    """``worker next SWEEP 0 0`` (tell, then ask) with N trials told, three times each, medians."""
    from benchmarks import sweep_overhead
    from trainer_cli.config.request import Request
    from trainer_cli.atomic import update_json
    from trainer_cli.job import jobstate
    from trainer_cli.sweeps import plan as sweep_plan
    from trainer_cli.sweeps import study as sweep_study
    from trainer_cli.schedulers.slurm import sweep_worker as worker
    from trainer_cli.sweeps.space import take_sweep_args

    (tmp / "bin").mkdir(parents=True)
    (tmp / "bin" / "sbatch").write_text("#!/bin/sh\necho 424242\n")  # queues nothing
    (tmp / "bin" / "sbatch").chmod(0o755)
    env = sweep_overhead._env(tmp / "bin")
    sweep_dir, _ = sweep_overhead.submit(tmp, env)
    record = sweep_plan.read_record(sweep_dir)
    space, _ = take_sweep_args(Request.of(record["sweep_args"]))
    assert space is not None
    loaded = sweep_study.load(record["study"])
    rng = random.Random(0)
    command = [sys.executable, "-m", "trainer_cli.schedulers.slurm.sweep_worker", "next", str(sweep_dir), "0", "0"]
    out: dict[str, Any] = {}
    for n in sizes:
        held = len(loaded.get_trials(deepcopy=False))
        frozen, params = _told(n - held, {a.key: a.distribution() for a in space.axes}, rng)
        loaded.add_trials(frozen)
        entries = [
            {"index": held + i, "run_dir": str(sweep_dir / sweep_plan.trial_name(held + i)), "values": p}
            for i, p in enumerate(params)
        ]
        update_json(
            sweep_dir / sweep_plan.SWEEP_FILE,
            lambda r, e=entries: (
                r | {"study": r["study"] | {"n_trials": 10 * max(sizes)}, "trials": [*r["trials"], *e]}
            ),
        )
        runs = []
        for _ in range(3):
            asked = worker.next_trial(sweep_dir, "0")  # in flight (asked by the last command), trained: the real
            assert asked is not None  # trial's files
            _copy_trial(real_trial, asked)
            jobstate.update(asked, state="COMPLETED", exit_code=0)
            runs.append(_timed(command, cwd=sweep_dir / "code", env=env))
        out[str(n)] = {k: sorted(r[k] for r in runs)[1] for k in runs[0]}
        print(f"   worker next (tell + ask), {n} trials told: {out[str(n)]}", flush=True)
    return out


def _cluster_env() -> dict[str, str] | None:
    """This environment with the local cluster's ``SLURM_CONF``; None when it is not running."""
    try:
        lines = subprocess.run(
            [str(REPO / "scripts" / "local-slurm"), "env"], capture_output=True, text=True, timeout=30
        ).stdout
        env = dict(
            os.environ,
            SLURM_CONF=next(line for line in lines.splitlines() if line.startswith("export SLURM_CONF=")).split("=", 1)[
                1
            ],
        )
        subprocess.run(["scontrol", "ping"], env=env, check=True, capture_output=True, timeout=30)
    except (OSError, StopIteration, subprocess.SubprocessError):
        return None
    return env


def _jobs(tmp: Path, sizes: tuple[int, ...]) -> dict[str, Any] | None:
    """``train jobs`` with N registered jobs (see the module docstring); None without the local cluster."""
    from benchmarks.goodput import _support
    from trainer_cli.schedulers import submissions

    env = _cluster_env()
    if env is None:
        return None
    listed = subprocess.run(
        ["sacct", "-X", "-n", "-P", "-o", "JobID", "-S", "now-7days"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    known = [j for j in listed.stdout.split() if j.isdigit()][-5:]
    tmp.mkdir(parents=True, exist_ok=True)
    counting, calls = _support().counting_slurm_path(tmp)
    env |= {"PATH": counting["PATH"], "XDG_STATE_HOME": str(tmp / "state")}
    cluster = subprocess.run(["scontrol", "show", "config"], env=env, capture_output=True, text=True).stdout
    name = next(
        (line.split("=", 1)[1].strip() for line in cluster.splitlines() if line.startswith("ClusterName")), None
    )
    out: dict[str, Any] = {}
    for n in sizes:
        registry = tmp / "state" / submissions.STATE_DIR / submissions.REGISTRY_NAME
        registry.parent.mkdir(parents=True, exist_ok=True)
        lines = []
        for i in range(n):
            job_id = known[i % len(known)] if known and i % 10 == 0 else str(90_000_000 + i)
            run_dir = tmp / "jobs" / f"run_{i}"
            run_dir.mkdir(parents=True, exist_ok=True)
            (run_dir / "job.json").write_text(json.dumps({"job_id": job_id, "state": "COMPLETED", "exit_code": 0}))
            (run_dir / f"slurm-{job_id}.log").write_text("epoch 2/2 val/loss 0.4000 val/acc 0.7500 12.0 steps/s\n")
            lines.append(
                json.dumps(
                    {
                        "cluster": name,
                        "job_id": job_id,
                        "job_name": f"job{i}",
                        "run_dir": str(run_dir),
                        "submitted": f"2026-01-01T00:00:{i / 1000:09.3f}",
                        "root": str(tmp / "jobs"),
                    }
                )
            )
        registry.write_text("\n".join(lines) + "\n")
        figures = {}
        for case, extra in (("newest 20", []), (f"--last {n}", ["--last", str(n)])):
            calls.write_text("")
            figures[case] = _timed([sys.executable, "-m", "trainer_cli", "jobs", *extra], env=env)
            made = calls.read_text().split()
            figures[case]["slurm_calls"] = {c: made.count(c) for c in ("scontrol", "sacct", "squeue")}
        out[str(n)] = figures
        print(f"   train jobs, {n} registered: {figures}", flush=True)
    return out


def run(smoke: bool = False) -> dict[str, Any]:
    """Every listing at each N (see the module docstring)."""
    sizes = (3, 5) if smoke else SIZES
    out: dict[str, Any] = {"load_avg_1min_at_start": os.getloadavg()[0], **_runs(smoke)}
    with tempfile.TemporaryDirectory() as tmp:
        out["sweep_results"] = _sweep_results(Path(tmp) / "results", sizes)
        real_trial = Path(tmp) / "results" / "real" / "digits" / "sweep_0" / "trial_000"
        out["ask_tell"] = _ask_tell(Path(tmp) / "ask_tell", (100, 1_000, 10_000) if not smoke else (3, 5), real_trial)
        out["jobs"] = _jobs(Path(tmp) / "jobs", (100, 1_000) if not smoke else (3,))
    out["load_avg_1min_at_end"] = os.getloadavg()[0]
    return out
