"""The search space of ``--sweep``: its syntax, and its expansion into trials.

One ``--sweep KEY=VALUES`` flag per swept option (repeatable); ``KEY`` is any ``train fit`` option
in dotted form (``optimizer.init_args.lr``, ``trainer.max_epochs``). ``VALUES`` is one of:

- a list ``v1,v2,...`` (a grid axis): each value as you would write it after ``--KEY`` (a YAML
  scalar, or a ``[...]``/``{...}`` flow value; commas inside brackets or quotes do not split);
- ``range(start,stop[,step])`` (a grid axis): integers as Python's ``range`` (stop excluded);
- ``uniform(low,high)``, ``loguniform(low,high)`` (floats), ``randint(low,high)`` (integers,
  high excluded, as ``range``) or ``choice(v1,v2,...)``: a random axis, drawn per trial.

``--sweep_sampler grid`` (the default): grid axes are crossed (the first axis varies slowest). With
random axes every grid point gets ``--sweep_trials N`` trials (default 1), each drawing every random
axis from one ``random.Random(--sweep_seed)`` stream in trial order, so the same command gives the
same trials; they are enqueued into the Optuna study in that order (:mod:`trainer_cli.sweeps.study`).

``--sweep_sampler random|tpe|cmaes``: Optuna chooses ``--sweep_trials N`` trials (default 10) one
after another, each axis an Optuna distribution (:meth:`Axis.distribution`: a list or ``choice`` a
categorical one, ``range`` and ``randint`` integers, ``uniform`` and ``loguniform`` floats).
``--sweep_pruner none|median|hyperband|successive_halving`` (optionally with keyword arguments of
Optuna's pruner, ``median(n_startup_trials=2)``) stops hopeless trials; ``--sweep_metric`` and
``--sweep_direction`` default to the checkpoint's monitor and mode; ``--sweep_storage URL`` puts the
study in a database instead of the journal file in the sweep directory.

Values are text here; :mod:`trainer_cli.sweeps.plan` type-checks each trial with jsonargparse,
exactly as if every value had been given as ``--KEY VALUE``. Standard library only (Optuna is
imported by :meth:`Axis.distribution` alone).
"""

from __future__ import annotations

import itertools
import math
import random
import re
from dataclasses import dataclass
from typing import Any

from trainer_cli.config.request import SWEEP_OPTIONS, Request
from trainer_cli.errors import UserError

SWEEP_FLAG = "--sweep"
TRIALS_FLAG = "--sweep_trials"
SEED_FLAG = "--sweep_seed"
SAMPLER_FLAG = "--sweep_sampler"
PRUNER_FLAG = "--sweep_pruner"
STORAGE_FLAG = "--sweep_storage"
METRIC_FLAG = "--sweep_metric"
DIRECTION_FLAG = "--sweep_direction"
# every flag that takes_sweep_args takes out of a command line (each takes a value)
FLAGS = tuple(f"--{name}" for name in SWEEP_OPTIONS)  # SWEEP_FLAG, TRIALS_FLAG, ... in this order
SAMPLERS = ("grid", "random", "tpe", "cmaes")
PRUNERS = ("none", "median", "hyperband", "successive_halving")
DIRECTIONS = ("maximize", "minimize")
DEFAULT_TRIALS = 10  # --sweep_trials of an Optuna-driven sampler
RANDOM_KINDS = ("uniform", "loguniform", "randint", "choice")
GRID_KINDS = ("list", "range")
# options a trial may not vary: they say where the sweep itself lives
NOT_SWEPT = ("name", "run_dir", "trainer.default_root_dir", "config", "ckpt_path")
_CALL = re.compile(r"([a-z_]+)\((.*)\)", re.S)
_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*")


@dataclass(frozen=True)
class Axis:
    """One ``--sweep KEY=VALUES``: a grid axis (``values``) or a random one (``kind`` + ``args``)."""

    key: str
    """The dotted ``train fit`` option, e.g. ``optimizer.init_args.lr``."""
    kind: str
    """``list``, ``range`` (grid) or one of :data:`RANDOM_KINDS`."""
    values: tuple[str, ...]
    """Grid axes: every value, as text; random axes: the arguments (``choice``: the values)."""
    spec: str
    """The flag's value as given (``1e-3,3e-3``), for messages and ``sweep.json``."""

    @property
    def is_random(self) -> bool:
        return self.kind in RANDOM_KINDS

    def draw(self, rng: random.Random) -> str:
        """One value of a random axis, as text (floats with 6 significant digits)."""
        if self.kind == "choice":
            return self.values[rng.randrange(len(self.values))]
        low, high = (float(v) for v in self.values)
        if self.kind == "randint":
            return str(rng.randrange(int(low), int(high)))
        value = (
            math.exp(rng.uniform(math.log(low), math.log(high)))
            if self.kind == "loguniform"
            else rng.uniform(low, high)
        )
        return repr(float(f"{value:.6g}"))

    def distribution(self) -> Any:
        """The axis as an Optuna distribution (imports optuna): a list or ``choice`` categorical over the
        value texts, ``range`` and ``randint`` integers (``high`` included, as Optuna counts), ``uniform``
        and ``loguniform`` floats."""
        from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution

        if self.kind in ("list", "choice"):
            return CategoricalDistribution(list(self.values))
        if self.kind == "range":
            numbers = [int(v) for v in self.values]
            step = numbers[1] - numbers[0] if len(numbers) > 1 else 1
            return IntDistribution(numbers[0], numbers[-1], step=step)
        if self.kind == "randint":
            return IntDistribution(int(self.values[0]), int(self.values[1]) - 1)
        return FloatDistribution(float(self.values[0]), float(self.values[1]), log=self.kind == "loguniform")

    def param(self, text: str) -> Any:
        """A value text of this axis as its Optuna parameter (what :meth:`distribution` holds)."""
        if self.kind in ("range", "randint"):
            return int(text)
        if self.kind in ("uniform", "loguniform"):
            return float(text)
        return text

    def text(self, param: Any) -> str:
        """An Optuna parameter of this axis as the value text a trial's ``--KEY VALUE`` gets."""
        return repr(float(param)) if self.kind in ("uniform", "loguniform") else str(param)

    def corners(self) -> list[str]:
        """Values that between them reach every edge of the axis: each value of a list, range or
        choice, ``low`` and ``high`` of a distribution (``randint``: ``high - 1``). What a trial may
        be given is type-checked with these before an Optuna-driven sweep starts."""
        if self.kind in ("uniform", "loguniform"):
            return [repr(float(v)) for v in self.values]
        if self.kind == "randint":
            return [str(int(self.values[0])), str(int(self.values[1]) - 1)]
        return list(self.values)


@dataclass(frozen=True)
class Space:
    """Every ``--sweep`` flag of a command line, with the other ``--sweep_*`` flags."""

    axes: tuple[Axis, ...]
    trials_per_point: int = 1
    """Grid: the trials per grid point; another sampler: the trials of the study."""
    seed: int = 0
    sampler: str = "grid"
    pruner: str = "none"
    """A name of :data:`PRUNERS`, possibly with keyword arguments: ``median(n_startup_trials=2)``."""
    storage: str | None = None
    """``--sweep_storage URL``; None: Optuna's journal file in the sweep directory."""
    metric: str | None = None
    direction: str | None = None

    @property
    def is_grid(self) -> bool:
        return self.sampler == "grid"

    def checked_trials(self) -> list[dict[str, str]]:
        """The trials type-checked before the sweep starts: every trial of a grid, else trials that
        between them give every axis each of its :meth:`Axis.corners` (as many as the longest axis has)."""
        if self.is_grid:
            return self.trials()
        corners = [a.corners() for a in self.axes]
        return [
            {a.key: values[min(i, len(values) - 1)] for a, values in zip(self.axes, corners)}
            for i in range(max(len(c) for c in corners))
        ]

    def params(self, overrides: dict[str, str]) -> dict[str, Any]:
        """A trial's ``{key: value text}`` as Optuna parameters (``study.enqueue_trial``)."""
        return {a.key: a.param(overrides[a.key]) for a in self.axes}

    def trials(self) -> list[dict[str, str]]:
        """The trials in order: each ``{key: value text}`` over every axis.

        Returns:
            ``len(grid points) * trials_per_point`` dicts (grid points: the product of the grid axes' sizes).
        """
        grid = [a for a in self.axes if not a.is_random]
        drawn = [a for a in self.axes if a.is_random]
        rng = random.Random(self.seed)
        out = []
        for point in itertools.product(*(a.values for a in grid)):
            for _ in range(self.trials_per_point):
                values = dict(zip((a.key for a in grid), point))
                values |= {a.key: a.draw(rng) for a in drawn}
                out.append({a.key: values[a.key] for a in self.axes})  # in the order the flags were given
        return out

    def describe(self) -> list[dict[str, Any]]:
        """The axes for ``sweep.json``: key, kind and the values or arguments."""
        return [{"key": a.key, "kind": a.kind, "spec": a.spec, "values": list(a.values)} for a in self.axes]

    def as_args(self) -> list[str]:
        """The ``--sweep*`` flags that give this space again, as words for the sweep's record (``sweep.json``'s
        ``sweep_args``, read back by :func:`take_sweep_args`)."""
        args = [arg for a in self.axes for arg in (SWEEP_FLAG, f"{a.key}={a.spec}")]
        args += [TRIALS_FLAG, str(self.trials_per_point), SEED_FLAG, str(self.seed), SAMPLER_FLAG, self.sampler]
        args += [PRUNER_FLAG, self.pruner]
        for flag, value in ((STORAGE_FLAG, self.storage), (METRIC_FLAG, self.metric), (DIRECTION_FLAG, self.direction)):
            args += [flag, value] if value else []
        return args

    def settings(self) -> dict[str, Any]:
        """The search's settings for ``sweep.json`` (the sampler, pruner, storage, metric and direction)."""
        return {
            "sampler": self.sampler,
            "pruner": self.pruner,
            "storage": self.storage,
            "metric": self.metric,
            "direction": self.direction,
        }


def split_values(text: str) -> list[str]:
    """Split ``text`` at the commas outside brackets, braces, parentheses and quotes; items stripped.

    Raises:
        UserError: for unbalanced brackets or quotes.
    """
    items: list[str] = []
    current: list[str] = []
    depth, quote = 0, ""
    for char in text:
        if quote:
            quote = "" if char == quote else quote
        elif char in "'\"":
            quote = char
        elif char in "([{":
            depth += 1
        elif char in ")]}":
            depth -= 1
            if depth < 0:
                raise UserError(f"{text!r}: a closing {char!r} without its opening one")
        elif char == "," and depth == 0:
            items.append("".join(current).strip())
            current = []
            continue
        current.append(char)
    if quote or depth:
        raise UserError(f"{text!r}: unbalanced {'quotes' if quote else 'brackets'}")
    items.append("".join(current).strip())
    return items


def parse_axis(flag_value: str) -> Axis:
    """One ``--sweep KEY=VALUES`` value as an :class:`Axis`.

    Raises:
        UserError: naming the flag, for a missing ``=``, a key that is not a dotted option name or
            may not be swept, an empty value, or a bad range or distribution.
    """
    where = f"{SWEEP_FLAG} {flag_value}"
    key, sep, spec = flag_value.partition("=")
    key, spec = key.strip().removeprefix("--"), spec.strip()
    if not sep or not spec:
        raise UserError(
            f"{where}: write KEY=VALUES, e.g. {SWEEP_FLAG} optimizer.init_args.lr=1e-3,3e-3 (see `train sweep-results "
            "--help`)"
        )
    if not _KEY.fullmatch(key):
        raise UserError(f"{where}: {key!r} is not an option name (dotted, like trainer.max_epochs)")
    if key in NOT_SWEPT:
        raise UserError(f"{where}: {key} says where the sweep lives and cannot vary between trials")
    call = _CALL.fullmatch(spec)
    if call is None or call.group(1) not in (*RANDOM_KINDS, "range"):
        values = split_values(spec)
        if any(v == "" for v in values):
            raise UserError(f"{where}: an empty value in the list (two commas, or one at an end)")
        return Axis(key, "list", tuple(values), spec)
    kind, args = call.group(1), split_values(call.group(2))
    if kind == "choice":
        if not args or any(a == "" for a in args):
            raise UserError(f"{where}: choice(...) needs one or more values, e.g. choice(adam,sgd)")
        return Axis(key, kind, tuple(args), spec)
    if kind in ("range", "randint"):
        numbers = _numbers(where, args, int, "integers", (1, 3) if kind == "range" else (2, 2))
        if kind == "range":
            stepped = tuple(str(v) for v in range(*numbers))
            if not stepped:
                raise UserError(f"{where}: the range is empty; range(start,stop[,step]) excludes stop, like Python's")
            return Axis(key, kind, stepped, spec)
        if numbers[0] >= numbers[1]:
            raise UserError(f"{where}: randint(low,high) draws low..high-1: high must be above low")
        return Axis(key, kind, tuple(args), spec)
    low, high = _numbers(where, args, float, "numbers", (2, 2))
    if not low < high or (kind == "loguniform" and low <= 0):
        need = "0 < low < high" if kind == "loguniform" else "low < high"
        raise UserError(f"{where}: {kind}(low,high) needs {need}")
    return Axis(key, kind, tuple(args), spec)


def _numbers(where: str, args: list[str], kind: type, noun: str, count: tuple[int, int]) -> list[Any]:
    if not count[0] <= len(args) <= count[1]:
        wanted = str(count[0]) if count[0] == count[1] else f"{count[0]} to {count[1]}"
        raise UserError(f"{where}: takes {wanted} {noun}, got {len(args)}")
    try:
        return [kind(a) for a in args]
    except ValueError:
        raise UserError(f"{where}: the arguments must be {noun}, got {', '.join(args)}") from None


def take_sweep_args(request: Request) -> tuple[Space | None, Request]:
    """Take the ``--sweep*`` flags (:data:`FLAGS`; ``--flag value`` or ``--flag=value``) out of ``request``.

    Returns:
        ``(space, rest)``: the search space (None when no ``--sweep`` is given) and the request without them.

    Raises:
        UserError: for a flag without a value, a bad axis, a key swept twice, ``--sweep_trials``
            below 1 or above 1 for a grid without a random axis, an unknown sampler, pruner or
            direction, or another ``--sweep_*`` flag without ``--sweep``.
    """
    found: dict[str, list[str]] = {flag: [] for flag in FLAGS}
    for arg in request:
        if arg.name in SWEEP_OPTIONS:
            if arg.value is None:
                raise UserError(f"{arg.flag} needs a value")
            found[f"--{arg.name}"].append(arg.value)
    rest = request.without(*SWEEP_OPTIONS)
    if not found[SWEEP_FLAG]:
        extra = [f for f in FLAGS[1:] if found[f]]
        if extra:
            raise UserError(f"{' and '.join(extra)} without {SWEEP_FLAG}: nothing to sweep")
        return None, rest
    axes = tuple(parse_axis(v) for v in found[SWEEP_FLAG])
    keys = [a.key for a in axes]
    twice = sorted({k for k in keys if keys.count(k) > 1})
    if twice:
        raise UserError(f"{SWEEP_FLAG} {twice[0]} is given twice: put every value in one flag ({twice[0]}=v1,v2,...)")
    sampler = _one_of(SAMPLER_FLAG, found[SAMPLER_FLAG], SAMPLERS, "grid")
    default_trials = 1 if sampler == "grid" else DEFAULT_TRIALS
    trials, seed = (
        _one_int(flag, found[flag], default) for flag, default in ((TRIALS_FLAG, default_trials), (SEED_FLAG, 0))
    )
    if trials < 1:
        raise UserError(f"{TRIALS_FLAG} {trials}: must be 1 or more")
    if sampler == "grid" and trials > 1 and not any(a.is_random for a in axes):
        raise UserError(
            f"{TRIALS_FLAG} {trials}: needs a random axis (e.g. {SWEEP_FLAG} "
            "optimizer.init_args.lr=loguniform(1e-4,1e-1)) or a sampler (--sweep_sampler tpe); a grid runs each "
            "point once"
        )
    pruner = found[PRUNER_FLAG][-1].strip() if found[PRUNER_FLAG] else "none"
    if pruner.partition("(")[0].strip() not in PRUNERS:
        raise UserError(
            f"{PRUNER_FLAG} {pruner}: expected one of {', '.join(PRUNERS)} (optionally name(key=value,...))"
        )
    direction = _one_of(DIRECTION_FLAG, found[DIRECTION_FLAG], DIRECTIONS, None)
    storage = found[STORAGE_FLAG][-1] if found[STORAGE_FLAG] else None
    if storage is not None and "://" not in storage:
        raise UserError(f"{STORAGE_FLAG} {storage}: expected a database URL, e.g. postgresql://user@host/db")
    metric = found[METRIC_FLAG][-1] if found[METRIC_FLAG] else None
    return Space(axes, trials, seed, sampler, pruner, storage, metric, direction), rest


def _one_of(flag: str, values: list[str], choices: tuple[str, ...], default: str | None) -> Any:
    if not values:
        return default
    if values[-1] not in choices:
        raise UserError(f"{flag} {values[-1]}: expected one of {', '.join(choices)}")
    return values[-1]


def _one_int(flag: str, values: list[str], default: int) -> int:
    if not values:
        return default
    try:
        return int(values[-1])
    except ValueError:
        raise UserError(f"{flag} {values[-1]}: expected an integer") from None
