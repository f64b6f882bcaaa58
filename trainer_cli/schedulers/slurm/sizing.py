"""A submission sized from measurements: how long it needs, and ``--slurm.time auto`` / ``--slurm.mem auto``.

At submit (``train submit``, its ``--dry-run`` and ``--check``) the launcher looks for earlier runs
of the same shape under the same root (``trainer.default_root_dir``: the run directories there and
those the registry of ``train jobs`` lists under it) that hold the ranks' measurements
(``<run>/attempts/rank0.jsonl``, :mod:`trainer_cli.rundir.attempts`). The shape (:func:`shape_of`):
the model's class and init arguments, the data module's class and batch size, the devices per node
and nodes (with the batch size and gradient accumulation: the global batch), the accelerator and the
precision; ``max_steps``/``max_epochs`` are the run's length, not its shape. From the newest such
runs (the median of up to :data:`RUNS_USED`) it takes the training time per step (validation and
checkpoint writes per step beside it), the start-up of an attempt (the batch script's start to the
end of the first step where the job recorded it, else the process start to it), the tail after the
last step, the steps per epoch, and the peak RSS of a rank; and prints a short block
(:func:`describe`): the compute the run needs, in GPU- or CPU-hours of what it asks for, how many
attempts the time limit implies, what each restart costs, and a memory suggestion.

``--slurm.time auto`` chooses the limit :func:`auto_limit_s`: the time needed x :data:`MARGIN` +
the signal delay (the job checkpoints and requeues itself ``--slurm.signal_delay_s`` before the
limit) + :data:`FIXED_S` (Slurm sends that signal up to a minute early, and the batch script's own
steps), rounded up to whole minutes (Slurm's granularity), capped by the partition's ``MaxTime``
and the ``MaxWall`` of ``--slurm.qos``; at the cap it says how many attempts (requeues at the
limit) that implies. ``--slurm.mem auto`` chooses the peak RSS per rank x tasks per node x
:data:`MEM_MARGIN`, in whole GB. Without an earlier run of the shape both refuse with one line that
suggests a short probe run, rather than guess.
"""

from __future__ import annotations

import json
import math
import os
import shlex
import statistics
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trainer_cli.config.request import Arg, Request, command_line
from trainer_cli.errors import UserError
from trainer_cli.job.progress import read_beats
from trainer_cli.rundir import attempts, layout, record
from trainer_cli.schedulers.resources import Resources
from trainer_cli.schedulers.slurm import cluster, secrets
from trainer_cli.schedulers.slurm.options import AUTO, SlurmOptions
from trainer_cli.schedulers.slurm.output import time_limit_s, time_text
from trainer_cli.schedulers.submissions import read_registry

MARGIN = 1.3
"""``--slurm.time auto``: the measured time a run needs is multiplied by this."""
FIXED_S = 120
"""``--slurm.time auto``: seconds added for Slurm's early signal (up to 60 s) and the batch script's steps."""
MEM_MARGIN = 1.25
"""``--slurm.mem auto``: the peak RSS of the ranks of a node is multiplied by this."""
RUNS_USED = 3
"""The newest runs of the same shape whose measurements are used (the median of each figure)."""
RUNS_LOOKED_AT = 50
"""At most this many run directories with measurements are read, newest first."""
PROBE_STEPS = 50
PROBE_TIME = "00:15:00"
SEARCH_DEPTH = 6
SKIPPED = {"checkpoints", "code", "attempts", "data", "wandb", "mlruns", "__pycache__"}


def _plain(value: Any) -> Any:
    """``value`` as plain JSON-like data (a jsonargparse Namespace as a dict, paths as text)."""
    as_dict = getattr(value, "as_dict", None)
    return json.loads(json.dumps(as_dict() if callable(as_dict) else value, default=str, sort_keys=True))


def shape_of(
    config: Any, links: frozenset[str] = frozenset(), fixed: Mapping[str, type] | None = None
) -> dict[str, Any]:
    """The shape of a fit config (a parsed Namespace or a ``config.yaml`` read as a dict): what makes
    two runs' steps take the same time. ``links``: the keys links fill when the classes are built (a
    parse holds their defaults, a run's record the linked values): left out. ``fixed``: the classes a
    user's script fixes (``LightningCLI(MyModel, MyData)``: their init args stand where class_path was)."""
    tree = _plain(config)
    trainer = tree.get("trainer") or {}
    (model, model_args), (data, data_args) = (
        _class_and_args(tree.get(k), (fixed or {}).get(k)) for k in ("model", "data")
    )
    return {
        "model": model,
        "model_args": {k: v for k, v in model_args.items() if not {f"model.init_args.{k}", f"model.{k}"} & links},
        "data": data,
        "batch_size": data_args.get("batch_size"),
        **{k: trainer.get(k) for k in ("accelerator", "devices", "num_nodes", "precision", "accumulate_grad_batches")},
    }


def _class_and_args(value: Any, cls: type | None) -> tuple[Any, dict[str, Any]]:
    if cls is not None:  # a script's own class: the value holds its init args
        return f"{cls.__module__}.{cls.__qualname__}", value if isinstance(value, dict) else {}
    return (value.get("class_path"), value.get("init_args") or {}) if isinstance(value, dict) else (value, {})


def same_shape(new: dict[str, Any], old: dict[str, Any]) -> bool:
    """Whether ``old`` (an earlier run's) has the shape ``new``; a model argument ``new`` leaves empty (a
    link the data module fills when it is built) is not compared."""
    for key, value in new.items():
        if key == "model_args":
            other = old.get(key) or {}
            if any(v is not None and other.get(k) != v for k, v in value.items()):
                return False
        elif str(value) != str(old.get(key)):
            return False
    return True


@dataclass
class Measured:
    """What the newest runs of a shape measured (medians over :data:`RUNS_USED` of them)."""

    runs: list[Path]
    step_s: float
    """Training seconds per step (mean over the steps after the first: epoch ends included)."""
    median_step_s: float | None
    """The ranks' median step time (their progress records, in a Slurm job), if known."""
    validation_per_step_s: float
    checkpoint_per_step_s: float
    startup_s: float
    """An attempt's start to the end of its first step (the batch script's start where known)."""
    startup_from_script: bool
    tail_s: float
    steps_per_epoch: float | None
    limit_train_batches: Any
    rss_peak_bytes: int | None
    checkpoint_every_steps: float | None


def _run_dirs(root: Path) -> list[Path]:
    """Run directories with measurements under ``root`` and in the registry under it, newest first."""
    found: set[Path] = set()
    root = root.absolute()
    if root.is_dir():
        for folder, dirs, _ in os.walk(root):
            depth = len(Path(folder).relative_to(root).parts)
            dirs[:] = [] if depth >= SEARCH_DEPTH else [d for d in dirs if d not in SKIPPED and not d.startswith(".")]
            if (Path(folder) / attempts.ATTEMPTS_DIR / "rank0.jsonl").is_file():
                found.add(Path(folder))
    for rec in read_registry(root):
        run = Path(rec.get("run_dir") or "")
        if rec.get("run_dir") and attempts.rank_file(run, 0).is_file():
            found.add(run)

    def newest(run: Path) -> float:
        try:
            return attempts.rank_file(run, 0).stat().st_mtime
        except OSError:
            return 0.0

    return sorted(found, key=newest, reverse=True)[:RUNS_LOOKED_AT]


def _measure(run: Path, old: dict[str, Any]) -> dict[str, Any] | None:
    """One run's figures (rank 0's attempts; peak RSS over every rank), None when it made no timed step."""
    everyone = attempts.read(run)
    mine = [a for a in everyone if a.get("rank") == 0 and a.get("last_step") is not None]
    timed = sum(max(int(a["last_step"]) - int(a.get("start_step") or 0) - 1, 0) for a in mine)
    if not mine or timed < 1:
        return None
    seconds = [a["seconds"] for a in mine]
    startups, from_script = [], True
    for a in mine:
        began, first = (a.get("slurm") or {}).get("script_started"), (a.get("marks") or {}).get("first_step")
        if isinstance(began, (int, float)) and isinstance(first, (int, float)):
            startups.append(first - began)
        else:
            startups.append(float(a["seconds"]["startup"]) + float(a.get("sanity_s") or 0.0))
            from_script = False
    trainer = old.get("trainer") or {}
    last, final = mine[-1], int(mine[-1]["last_step"])
    epochs, max_steps = trainer.get("max_epochs"), trainer.get("max_steps")
    accumulate = trainer.get("accumulate_grad_batches") or 1
    batches = [a["batches_per_epoch"] for a in mine if isinstance(a.get("batches_per_epoch"), int)]
    per_epoch = math.ceil(batches[-1] / accumulate) if batches else None  # the optimizer steps of an epoch
    if per_epoch is None and last.get("ended_by") == "completed" and isinstance(epochs, int) and epochs > 0:
        if not isinstance(max_steps, int) or max_steps < 0 or final < max_steps:  # it ended by its epochs
            per_epoch = final / epochs
    saves = sorted({int(c[0]) for a in mine for c in a.get("checkpoints") or []})
    steps = sum(int(a["last_step"]) - int(a.get("start_step") or 0) for a in mine)
    beats = [b["step_s"] for b in read_beats(run / ".progress") if isinstance(b.get("step_s"), (int, float))]
    rss = [
        a["memory"]["rss_peak_bytes"]
        for a in everyone
        if isinstance((a.get("memory") or {}).get("rss_peak_bytes"), int)
    ]
    return {
        "step_s": sum(float(s["train"]) for s in seconds) / timed,
        "median_step_s": max(beats) if beats else None,
        "validation_per_step_s": max(
            sum(float(s["validation"]) for s in seconds) - sum(float(a.get("sanity_s") or 0) for a in mine), 0.0
        )
        / max(steps, 1),
        "checkpoint_per_step_s": sum(float(s["checkpoint"]) for s in seconds) / max(steps, 1),
        "startup_s": statistics.median(startups),
        "startup_from_script": from_script,
        "tail_s": statistics.median(float(s["tail"]) for s in seconds),
        "steps_per_epoch": per_epoch,
        "limit_train_batches": trainer.get("limit_train_batches"),
        "rss_peak_bytes": max(rss) if rss else None,
        "checkpoint_every_steps": steps / len(saves) if saves else None,
    }


def find_measured(
    root: Path, shape: dict[str, Any], links: frozenset[str] = frozenset(), fixed: Mapping[str, type] | None = None
) -> Measured | None:
    """The measurements of the newest runs of ``shape`` under ``root`` (see the module's description), or None."""
    figures, runs = [], []
    for run in _run_dirs(root):
        old = record.read(run / layout.CONFIG_FILE, launcher=False)
        if not old or not same_shape(shape, shape_of(old, links, fixed)):
            continue
        measured = _measure(run, old)
        if measured is not None:
            figures.append(measured)
            runs.append(run)
        if len(figures) >= RUNS_USED:
            break
    if not figures:
        return None

    def median(key: str) -> Any:
        known = [f[key] for f in figures if f[key] is not None]
        return statistics.median(known) if known else None

    numbers = {k: median(k) for k in figures[0] if k not in ("startup_from_script", "limit_train_batches")}
    return Measured(
        runs=runs,
        startup_from_script=all(f["startup_from_script"] for f in figures),
        limit_train_batches=next((f["limit_train_batches"] for f in figures if f["steps_per_epoch"]), None),
        **numbers,
    )


def run_length(config: Any, measured: Measured) -> tuple[int | None, str]:
    """The training steps the run still has to make, and how they were counted (or why they cannot be)."""
    trainer = _plain(config).get("trainer") or {}
    max_steps, epochs, limit = trainer.get("max_steps"), trainer.get("max_epochs"), trainer.get("limit_train_batches")
    accumulate = trainer.get("accumulate_grad_batches") or 1
    per_epoch: float | None = None
    old = measured.limit_train_batches
    if isinstance(limit, int) and not isinstance(limit, bool) and limit > 0:
        per_epoch = math.ceil(limit / accumulate)
    elif measured.steps_per_epoch is not None and not isinstance(old, int):  # fractions of the same epoch
        per_epoch = (
            measured.steps_per_epoch * (1.0 if limit is None else float(limit)) / (1.0 if old is None else float(old))
        )
    counts: list[tuple[int, str]] = []
    if isinstance(max_steps, int) and max_steps > 0:
        counts.append((max_steps, f"max_steps {max_steps}"))
    if isinstance(epochs, int) and epochs >= 0 and per_epoch:
        counts.append((math.ceil(epochs * per_epoch), f"max_epochs {epochs} x {per_epoch:g} steps per epoch"))
    if not counts:
        if isinstance(epochs, int):
            return (
                None,
                f"the steps per epoch of max_epochs {epochs} are unknown (not measured by the earlier runs): "
                "give --trainer.max_steps",
            )
        return None, "the run has neither --trainer.max_steps nor --trainer.max_epochs"
    (total, text), later = min(counts), max(counts)
    done = _resumed_step(trainer, _plain(config))
    text += f", before {later[1]}" if later[0] > total else ""
    if done:
        text += f", less step {done} of the checkpoint it resumes"
    return max(total - done, 0), text


def _resumed_step(trainer: dict[str, Any], tree: dict[str, Any]) -> int:
    """The global step of the checkpoint the run resumes (``ckpt_path`` a file, or a named run's newest), else 0."""
    ckpt, run_dir = tree.get("ckpt_path"), tree.get("run_dir")
    found = None
    if ckpt and Path(str(ckpt)).is_file():
        found = layout.read_checkpoint_progress(Path(str(ckpt)))
    elif ckpt and run_dir and Path(str(run_dir)).is_dir():
        found = layout.newest_checkpoint(Path(str(run_dir)))
    return found.global_step if found is not None else 0


@dataclass
class Sizing:
    """The time a run needs, and what a time limit implies."""

    measured: Measured
    steps: int
    length: str
    needed_s: float
    """Start-up + the steps (with their validation and checkpoints) + the tail: one attempt's wall time."""
    per_attempt_s: float
    """Start-up + tail: what each attempt spends besides its steps."""


def size(measured: Measured, steps: int, length: str) -> Sizing:
    per_step = measured.step_s + measured.validation_per_step_s + measured.checkpoint_per_step_s
    fixed = measured.startup_s + measured.tail_s
    return Sizing(measured, steps, length, fixed + max(steps - 1, 0) * per_step, fixed)


def attempts_for(sizing: Sizing, limit_s: int, signal_delay_s: int) -> int | None:
    """Attempts a run of ``sizing`` takes under ``limit_s`` (each stops ``signal_delay_s`` + a minute
    before its limit, and spends its start-up again); None when no step fits in one."""
    usable = limit_s - signal_delay_s - 60 - sizing.per_attempt_s
    if sizing.needed_s <= limit_s - signal_delay_s - 60:
        return 1
    if usable <= 0:
        return None
    return math.ceil((sizing.needed_s - sizing.per_attempt_s) / usable)


def auto_limit_s(sizing: Sizing, signal_delay_s: int) -> int:
    """``--slurm.time auto``'s limit: needed x :data:`MARGIN` + ``signal_delay_s`` + :data:`FIXED_S`, whole minutes."""
    return math.ceil((sizing.needed_s * MARGIN + signal_delay_s + FIXED_S) / 60) * 60


def _duration(seconds: float) -> str:
    return (
        f"{seconds:.1f} s"
        if seconds < 120
        else f"{seconds / 60:.1f} min"
        if seconds < 7200
        else f"{seconds / 3600:.1f} h"
    )


def cap_s(slurm: SlurmOptions) -> tuple[int | None, str]:
    """The longest limit the partition (``MaxTime``) and the job's QOS (``MaxWall``) allow, and what sets
    it; None where Slurm sets none or cannot be asked (the text then says which)."""
    caps: list[tuple[int, str]] = []
    try:
        partitions = cluster.read_cluster()
    except (RuntimeError, OSError, ValueError) as err:
        return None, f"the partition's MaxTime unknown: {err}"
    chosen = next((p for p in partitions if p.name == slurm.partition or (not slurm.partition and p.default)), None)
    if chosen is not None and chosen.max_time_s is not None:
        caps.append((chosen.max_time_s, f"the MaxTime of partition {chosen.name}"))
    max_wall = cluster.qos_max_wall(slurm)  # --slurm.qos's, else the account's default QOS's
    if max_wall is not None:
        caps.append((max_wall[0], f"the MaxWall of {max_wall[1]}"))
    where = f"partition {chosen.name}" if chosen is not None else "the partition"
    return (
        min(caps)
        if caps
        else (None, f"{where} sets no MaxTime" + (f", QOS {slurm.qos} no MaxWall" if slurm.qos else ""))
    )


def mem_suggestion(measured: Measured, resources: Resources) -> str | None:
    """``--slurm.mem`` for the ranks of a node: peak RSS per rank x tasks per node x :data:`MEM_MARGIN`, whole GB."""
    if not measured.rss_peak_bytes:
        return None
    return f"{math.ceil(measured.rss_peak_bytes * resources.ntasks_per_node * MEM_MARGIN / 2**30)}G"


def probe_command(slurm: SlurmOptions, script: bool = False) -> str:
    """The probe run to submit first: this ``train submit`` (``python main.py submit``: ``script``) with a
    few steps and a fixed limit (its ``--slurm.time``, ``--slurm.mem auto``, ``--trainer.max_steps``,
    ``--dry-run`` and ``--check`` left out; a secret's value masked: :mod:`trainer_cli.schedulers.slurm.secrets`)."""
    argv, probe = command_line(), ["--trainer.max_steps", str(PROBE_STEPS), "--slurm.time", PROBE_TIME]
    entry = ["python", argv[0]] if script and argv else ["train"]
    if len(argv) < 2 or argv[1] != "submit":
        return f"the same `{shlex.join(entry)} submit` with {shlex.join(probe)}"
    kept: list[Arg] = []
    args = iter(Request.of(argv[2:]).without("slurm.time", "dry_run", "check"))
    for arg in args:
        if arg.name == "trainer.max_steps":
            if arg.value is None:
                next(args, None)  # its value, the next token
        elif not (arg.name == "slurm.mem" and arg.value == AUTO):
            kept.append(arg)
    words = secrets.masked_words(Request("submit").with_args(kept).tokens(), slurm)
    return shlex.join([*entry, "submit", *words, *probe])


def apply(
    slurm: SlurmOptions,
    resources: Resources,
    config: Any,
    root: Path,
    links: frozenset[str] = frozenset(),
    fixed: Mapping[str, type] | None = None,
) -> list[str]:
    """The sizing block of a submission from the measured runs of its shape under ``root`` (empty when
    there are none; ``links``, ``fixed``: as :func:`shape_of`, ``fixed`` given for a user's script),
    ``--slurm.time auto`` / ``--slurm.mem auto`` resolved in ``slurm`` on the way (see the module's description).

    Raises:
        UserError: for ``auto`` without an earlier run of the shape (suggesting a probe run), or
            without a known length of the run.
    """
    autos = [f"--slurm.{k} auto" for k in ("time", "mem") if getattr(slurm, k) == AUTO]
    shape = shape_of(config, links, fixed)
    measured = find_measured(root, shape, links, fixed)
    if measured is None:
        if not autos:
            return []
        world = f"{shape['num_nodes']} node(s) x {shape['devices']} device(s)"
        raise UserError(
            f"{' and '.join(autos)}: no earlier run of this shape ({shape['model']}, {shape['data']} batch "
            f"{shape['batch_size']}, {world}, precision {shape['precision']}) under {root} measured its steps; "
            f"submit a short probe run first: {probe_command(slurm, fixed is not None)}; then submit this again"
        )
    steps, length = run_length(config, measured)
    if steps is None and slurm.time == AUTO:
        raise UserError(f"--slurm.time auto: {length}")
    sizing = size(measured, steps, length) if steps is not None else None
    auto_time = None
    if sizing is not None and slurm.time == AUTO:
        wanted = auto_limit_s(sizing, slurm.signal_delay_s)
        cap, why = cap_s(slurm)
        slurm.time = time_text(min(wanted, cap) if cap is not None else wanted)
        capped = f", capped by {why} ({time_text(cap)})" if cap is not None and wanted > cap else ""
        uncapped = f"; {why}" if cap is None else ""
        auto_time = (
            f"auto: {_duration(sizing.needed_s)} x {MARGIN} + signal delay {slurm.signal_delay_s} s + {FIXED_S} s, "
            f"in whole minutes{capped}{uncapped}"
        )
    suggestion = mem_suggestion(measured, resources)
    if slurm.mem == AUTO:
        if suggestion is None:
            raise UserError(
                "--slurm.mem auto: the earlier runs of this shape recorded no peak memory; give --slurm.mem"
            )
        slurm.mem = suggestion
    return describe(measured, sizing, slurm, resources, auto_time, "mem" in " ".join(autos))


def describe(
    measured: Measured,
    sizing: Sizing | None,
    slurm: SlurmOptions,
    resources: Resources,
    auto_time: str | None = None,
    auto_mem: bool = False,
) -> list[str]:
    """The sizing block's lines (see :func:`apply`): ``auto_time``, how ``--slurm.time auto`` chose."""
    out = [f"sizing: from {len(measured.runs)} measured run(s) of this shape: {', '.join(map(str, measured.runs))}"]
    median = f"{measured.median_step_s:.3g} s median, " if measured.median_step_s else ""
    per, unit = (measured.steps_per_epoch, "an epoch") if measured.steps_per_epoch else (1.0, "a step")
    out.append(
        f"  step time     {median}{measured.step_s:.3g} s a step on average (epoch ends included); validation "
        f"{measured.validation_per_step_s * per:.2g} s and checkpoint writes "
        f"{measured.checkpoint_per_step_s * per:.2g} s {unit}"
    )
    where = "the batch script's start" if measured.startup_from_script else "the process start"
    out.append(
        f"  start-up      {_duration(measured.startup_s)} an attempt ({where} to the first step's end); "
        f"{_duration(measured.tail_s)} after the last step"
    )
    if sizing is not None:
        gpus = resources.gpus_per_node
        per_node = gpus or (slurm.cpus_per_task or 1) * resources.ntasks_per_node
        kind = "GPU" if gpus else "CPU"
        hours = sizing.needed_s * resources.nodes * per_node / 3600
        out.append(
            f"  this run      {sizing.steps} step(s) to go ({sizing.length}): {_duration(sizing.needed_s)}, "
            f"{hours:.3g} {kind}-h on {resources.nodes} node(s) x {per_node} {kind}(s)"
        )
        if auto_time:
            out.append(f"  time limit    {slurm.time} ({auto_time})")
        limit = time_limit_s(slurm.time)
        count = attempts_for(sizing, limit, slurm.signal_delay_s) if limit is not None else 0
        if count is None:
            out.append(f"  attempts      none: --slurm.time {slurm.time} leaves no time for a step after start-up")
        elif count == 1:
            out.append(f"  attempts      1 under --slurm.time {slurm.time}")
        elif count:
            raise_it = f"; more than --slurm.max_restarts {slurm.max_restarts}: raise it"
            over = raise_it if count > slurm.max_restarts + 1 else ""
            out.append(
                f"  attempts      {count} under --slurm.time {slurm.time} ({count - 1} requeue(s) at the limit{over})"
            )
        every = measured.checkpoint_every_steps
        redone = f"~{_duration(every * measured.step_s / 2)}" if every else ""
        lost = f"; after a failure also {redone} of steps redone (half the checkpoint interval)" if every else ""
        out.append(
            f"  restart cost  {_duration(measured.startup_s)} of start-up each "
            f"(a requeue at the limit saves first){lost}"
        )
    suggestion = mem_suggestion(measured, resources)
    if suggestion:
        peak = (measured.rss_peak_bytes or 0) / 2**30
        asked = slurm.mem or (
            f"--slurm.mem_per_cpu {slurm.mem_per_cpu}" if slurm.mem_per_cpu else "the partition's default"
        )
        out.append(
            f"  memory        peak RSS {peak:.2f} GB a rank -> --slurm.mem {suggestion} for "
            f"{resources.ntasks_per_node} task(s) a node (x{MEM_MARGIN}); asked: {asked}{' (auto)' if auto_mem else ''}"
        )
    return out
