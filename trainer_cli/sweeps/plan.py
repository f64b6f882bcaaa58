"""A sweep's trials composed and type-checked before any runs, and its directory.

Every trial is parsed exactly as ``train fit`` parses its command line
(:class:`trainer_cli.runtime.verbs.ConfigParser`: compose, then jsonargparse type-checks every key; one
parser, built once, for the base command and every trial), with the trial's values appended as ``--KEY VALUE``
overrides, so one bad value fails the whole sweep
before anything is written or queued, naming the trial. The layout::

    <trainer.default_root_dir>/<name>/sweep_<N>/
        sweep.json            the axes, the study (where, sampler, pruner, metric), each trial's values
                              (as given and as parsed) and run directory
        study.journal         the Optuna study (trainer_cli.sweeps.study), unless --sweep_storage names a database
        trial_000/            a normal run directory: frozen config.yaml (the job names its folder), checkpoints/, logs
        trial_001/ ...
        sweep_results.csv     written by `train sweep-results` (and at the end of `train fit --sweep`)
        sweep_results.json
"""

from __future__ import annotations

import contextlib
import io
import json
import shutil
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trainer_cli.config.keys import Layers
from trainer_cli.config.request import Request, command_line, option
from trainer_cli.errors import ConfigError, UserError
from trainer_cli.imports import heavy_import
from trainer_cli.rundir import discard, freezing
from trainer_cli.rundir import policy as rundir
from trainer_cli.sweeps.space import Space

if TYPE_CHECKING:
    from trainer_cli.runtime.verbs import ConfigParser

SWEEP_FILE = "sweep.json"
SWEEP_PREFIX = "sweep_"


def trial_name(index: int) -> str:
    """``trial_000``: the run directory of trial ``index`` inside the sweep directory (the sbatch
    template's ``printf 'trial_%03d'`` and the log's ``%3a`` pad the same way)."""
    return f"trial_{index:03d}"


def _lookup(config: Any, parts: list[str]) -> Any:
    """``config``'s value at the dotted key ``parts``; ``init_args`` may be left out, as on the
    command line (``optimizer.lr`` is ``optimizer.init_args.lr``). None when there is none."""
    node = config
    for part in parts:
        if not hasattr(node, "get"):
            return None
        if part not in node and "init_args" in node and hasattr(node["init_args"], "get"):
            node = node["init_args"]
        node = node.get(part) if part in node else None
    return node


def trial_label(index: int, overrides: dict[str, str]) -> str:
    """``trial 1 (trainer.max_epochs=abc)``: a trial as messages name it."""
    return f"trial {index} ({', '.join(f'{k}={v}' for k, v in overrides.items())})"


@dataclass
class Trial:
    """One trial: its values and its parsed, type-checked ``train fit`` config."""

    index: int
    overrides: dict[str, str]
    """``{key: value text}`` as the sweep gave it (``--KEY VALUE``)."""
    parser: Any = field(repr=False)
    config: Any = field(repr=False)
    """The parsed config (a jsonargparse Namespace)."""

    @property
    def values(self) -> dict[str, Any]:
        """``{key: value}`` as the parser typed them (``1e-3`` -> ``0.001``, ``'2'`` -> ``2``)."""
        out = {}
        for key in self.overrides:
            value = _lookup(self.config, key.split("."))
            out[key] = value.as_dict() if hasattr(value, "as_dict") else value
        return out

    def label(self) -> str:
        """``trial 1 (trainer.max_epochs=abc)``: how messages name the trial."""
        return trial_label(self.index, self.overrides)

    def frozen(self, callback: dict[str, Any] | None = None) -> str:
        """The resolved config: what ``train fit --config <trial>/config.yaml --run_dir <trial>`` runs (the
        trial's parsed config itself is left as parsed; ``run_dir`` unset, as a local run's: the job names
        it); ``callback`` (``class_path`` and ``init_args``: the sweep's pruning callback) is added to
        ``trainer.callbacks``."""
        from jsonargparse import Namespace

        config = self.config.clone()
        config.run_dir = None
        if callback is not None:
            extra = Namespace(class_path=callback["class_path"], init_args=Namespace(**callback["init_args"]))
            config.trainer.callbacks = [*(config.trainer.callbacks or []), extra]
        return self.parser.dump(config, skip_none=False, skip_link_targets=False)


@dataclass
class Sweep:
    """A sweep ready to write: its trials, where it goes, and its search space."""

    space: Space
    trials: list[Trial]
    root: Path
    """``trainer.default_root_dir``."""
    name: str
    """The experiment name (``--name``)."""
    sweep_dir: Path
    """``<root>/<name>/sweep_<N>`` (absolute); made by :func:`write` (or :func:`allocate`)."""
    created: bool = False
    made_from: Path | None = None
    """The highest folder :func:`write` created for ``sweep_dir`` (those left empty are removed with it)."""
    base: Any = field(default=None, repr=False)
    """The parsed config without any sweep value."""
    parser: Any = field(default=None, repr=False)
    """The one parser of the base command and every trial (:func:`add_trial`)."""
    fit_args: Request = field(default_factory=lambda: Request("fit"))
    """The base command's request, ``--config`` values expanded (written to ``sweep.json`` as ``base_args``)."""
    layers: Layers | None = None
    checked: list[Trial] = field(default_factory=list)
    """The trials type-checked before the sweep starts (a grid's every trial; else each axis's edges)."""
    study: dict[str, Any] | None = None
    """Where the sweep's Optuna study is and how it searches (:func:`trainer_cli.sweeps.study.describe`)."""

    def trial_dir(self, trial: Trial) -> Path:
        return self.sweep_dir / trial_name(trial.index)


class _TrialRefused(Exception):
    """A trial's config does not parse: the parser's message, on one line."""


def _parse_trial(
    parser: ConfigParser, index: int, overrides: dict[str, str], request: Request, layers: Layers
) -> tuple[Trial, str]:
    """Parse ``train fit ARGS`` for one trial; returns it with what the parse wrote to stderr (warnings).

    Raises:
        _TrialRefused: with the parser's message, for any bad value or key.
    """
    layers = Layers(layers)  # the trial's: the command line's, then its swept values
    for key in overrides:  # an error about a swept key names no config file: the value is the trial's
        layers.note_flag(f"--{key}")
    err = io.StringIO()  # warnings, said once for all trials
    try:
        with contextlib.redirect_stderr(err):
            verb_parser, config = parser.parse(request, layers)
    except ConfigError as refused:  # the key, its file and line, the message: on one line
        raise _TrialRefused(" ".join(refused.brief().split())) from None
    except UserError as failed:
        raise _TrialRefused(str(failed)) from None
    return Trial(index, overrides, verb_parser, config), err.getvalue()


def check_trials(
    space: Space, fit_args: Request, layers: Layers | None = None
) -> tuple[ConfigParser, Any, list[Trial]]:
    """Compose and type-check the base command and every trial of ``space`` (a grid's; else the
    trials that reach each axis's edges, :meth:`~trainer_cli.sweeps.space.Space.checked_trials`);
    nothing is written.

    Args:
        space: The search space (:func:`trainer_cli.sweeps.space.take_sweep_args`).
        fit_args: The ``train fit`` request without the sweep flags, ``--config`` values already
            expanded (:func:`trainer_cli.config.compose.compose_args`).
        layers: The layers of ``fit_args`` (for error messages naming a value's file and line).

    Returns:
        ``(parser, base config, trials)``: the parser, the config without any sweep value, and one
        :class:`Trial` per trial checked.

    Raises:
        UserError: for a bad base config, ``--run_dir`` or ``--ckpt_path last|best`` (a sweep makes
            its own run directories), or trials with bad values: one line naming every refused
            trial, those refused for the same reason together.
    """
    with heavy_import():
        from trainer_cli.runtime.verbs import ConfigParser

    layers = layers if layers is not None else Layers()
    parser = ConfigParser("fit")  # built once, for the base command and every trial
    _, base = parser.parse(fit_args, layers)  # errors of the command itself read as `train fit`'s
    if base.get("run_dir"):
        raise UserError(
            "--run_dir and --sweep: a sweep makes a run directory per trial (<root>/<name>/sweep_<N>/trial_<i>); drop "
            "--run_dir"
        )
    if base.get("ckpt_path") in ("last", "best"):
        raise UserError(
            f"--ckpt_path {base.get('ckpt_path')} and --sweep: every trial starts a new run; give a checkpoint file to "
            "start each from it"
        )
    trials: list[Trial] = []
    refused: dict[str, list[str]] = {}
    warned: set[str] = set()
    for index, overrides in enumerate(space.checked_trials()):
        try:
            trial, said = _parse_trial(parser, index, overrides, _trial_args(fit_args, overrides), layers)
        except _TrialRefused as why:  # every trial is checked: all refused ones are named at once
            refused.setdefault(str(why), []).append(trial_label(index, overrides))
            continue
        trials.append(trial)
        for line in said.splitlines(keepends=True):  # a warning once, not once per trial
            if line not in warned:
                warned.add(line)
                sys.stderr.write(line)
    if refused:
        raise UserError("sweep " + "; ".join(f"{', '.join(labels)}: {why}" for why, labels in refused.items()))
    return parser, base, trials


def _trial_args(fit_args: Request, overrides: dict[str, str]) -> Request:
    """The base request with the trial's values appended as ``--KEY VALUE`` overrides."""
    return fit_args.with_args([*fit_args, *(option(key, value) for key, value in overrides.items())])


def add_trial(sweep: Sweep, index: int, overrides: dict[str, str]) -> Trial:
    """Type-check one more trial (an Optuna-driven sweep's, as the study asks for it) with the sweep's
    parser; it joins ``sweep.trials``.

    Raises:
        UserError: naming the trial, when its config does not parse.
    """
    try:
        trial, said = _parse_trial(
            sweep.parser, index, overrides, _trial_args(sweep.fit_args, overrides), sweep.layers or Layers()
        )
    except _TrialRefused as why:
        raise UserError(f"sweep {trial_label(index, overrides)}: {why}") from None
    sys.stderr.write(said)
    sweep.trials.append(trial)
    return trial


def write_trial(sweep: Sweep, trial: Trial) -> Path:
    """Make ``trial``'s run directory with its frozen ``config.yaml`` (with the pruning callback when
    the sweep has a pruner) and ``git.txt``; returns it."""
    from trainer_cli.sweeps.study import pruning_callback

    run_dir = sweep.trial_dir(trial)
    run_dir.mkdir()
    callback = pruning_callback(sweep.study, trial.index) if sweep.study else None
    freezing.freeze(run_dir, trial.frozen(callback))
    return run_dir


def plan(space: Space, fit_args: Request, layers: Layers | None = None) -> Sweep:
    """Check every trial (:func:`check_trials`) and choose the sweep directory, creating nothing.

    Raises:
        UserError: as :func:`check_trials`.
    """
    from trainer_cli.runtime.lightning_folders import DEFAULT_ROOT_DIR

    parser, base, trials = check_trials(space, fit_args, layers)
    root = Path(base.trainer.default_root_dir or DEFAULT_ROOT_DIR)
    return Sweep(
        space,
        trials if space.is_grid else [],  # an Optuna-driven sweep's trials come as the study asks for them
        root,
        base.name,
        rundir.next_dir(root, base.name, SWEEP_PREFIX).absolute(),
        base=base,
        parser=parser,
        fit_args=fit_args,
        layers=layers,
        checked=trials,
    )


def write(
    sweep: Sweep, extra: dict[str, Any] | None = None, study_of: Callable[[Path], dict[str, Any]] | None = None
) -> None:
    """Create the sweep directory: every trial's run directory with its frozen ``config.yaml`` and
    ``git.txt`` (a grid's; an Optuna-driven sweep's come later, :func:`write_trial`), and
    ``sweep.json`` (with ``extra`` fields, e.g. the job id). ``study_of(sweep_dir)`` gives the
    sweep's study (:func:`trainer_cli.sweeps.study.describe`) once the directory is made.

    Raises:
        UserError: when the directory cannot be created (nothing is left of it).
    """
    sweep.made_from = rundir.first_missing(sweep.root / sweep.name)
    sweep.sweep_dir = rundir.allocate(sweep.root, sweep.name, SWEEP_PREFIX).absolute()
    sweep.created = True
    try:
        if study_of is not None:
            sweep.study = study_of(sweep.sweep_dir)
        for trial in sweep.trials:
            write_trial(sweep, trial)
        write_record(sweep, extra or {})
    except BaseException:
        remove(sweep)
        raise


def write_record(sweep: Sweep, extra: dict[str, Any]) -> None:
    """(Re)write ``sweep.json``: axes, seed, each trial's values and run directory, plus ``extra``."""
    record = {
        "sweep_dir": str(sweep.sweep_dir),
        "name": sweep.name,
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "command": command_line(),
        "axes": sweep.space.describe(),
        "trials_per_point": sweep.space.trials_per_point,
        "seed": sweep.space.seed,
        **({"study": sweep.study} if sweep.study else {}),
        "trials": [
            {"index": t.index, "run_dir": str(sweep.trial_dir(t)), "overrides": t.overrides, "values": t.values}
            for t in sweep.trials
        ],
        **extra,
    }
    (sweep.sweep_dir / SWEEP_FILE).write_text(json.dumps(record, indent=2, default=str) + "\n")


def remove(sweep: Sweep) -> None:
    """Remove a sweep directory this process created (a refused submission leaves nothing)."""
    if sweep.created:
        shutil.rmtree(sweep.sweep_dir, ignore_errors=True)
        sweep.created = False
        if sweep.made_from is not None:  # <root>/<name>, then <root>, when this made them and they are empty
            discard.remove_made_folders(sweep.sweep_dir, sweep.made_from)


def read_record(sweep_dir: Path) -> dict[str, Any]:
    """``sweep_dir/sweep.json``.

    Raises:
        UserError: when ``sweep_dir`` holds no readable ``sweep.json``.
    """
    path = Path(sweep_dir) / SWEEP_FILE
    try:
        record = json.loads(path.read_text())
    except (OSError, ValueError) as err:
        raise UserError(
            f"{sweep_dir}: not a sweep directory ({SWEEP_FILE}: {getattr(err, 'strerror', None) or err}); "
            "`train fit --sweep ...` or `train submit --sweep ...` makes one"
        ) from None
    if not isinstance(record, dict) or not isinstance(record.get("trials"), list):
        raise UserError(f"{path}: not a sweep record (no trials)")
    return record
