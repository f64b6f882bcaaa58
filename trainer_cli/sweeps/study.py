"""A sweep's Optuna study: created beside the sweep, asked for trials, told their results.

The study lives in the sweep directory as Optuna's journal file (``study.journal``: one file on the
shared filesystem, no server; Optuna's recommended storage for many processes), or in the database
``--sweep_storage URL`` names; its name is ``<name>/sweep_<N>``. ``sweep.json``'s ``study`` field
records where it is (:func:`describe`), so ``train sweep-results`` and the trials' pruning callback
open the same study.

Samplers: ``grid`` enqueues the trials of :meth:`trainer_cli.sweeps.space.Space.trials` in their
order (today's expansion and results, trial ``n`` is the ``n``-th of the expansion); ``random``
(``RandomSampler``), ``tpe`` (multivariate TPE with the constant liar: parallel workers do not
all try the same point), ``cmaes`` (``CmaEsSampler``, the ``cmaes`` package), each seeded with
``--sweep_seed``. A trial's value is the best value of the metric it reached (its checkpoint's
``ModelCheckpoint`` score when the metric is the checkpoint's monitor, else the best logged value);
a trial the pruning callback stopped is told PRUNED, one that failed or reached no value FAIL.
Optuna (and the pruning callback's module, which imports Lightning) are imported by the functions
that need them: ``train sweep-results --help`` imports no torch.
"""

from __future__ import annotations

import logging
import os
import warnings
from pathlib import Path
from typing import Any

from trainer_cli.errors import UserError
from trainer_cli.sweeps.space import Space

JOURNAL_FILE = "study.journal"
ENV_HEARTBEAT_S = "TRAINER_CLI_SWEEP_HEARTBEAT_S"
HEARTBEAT_S = 60
"""A database study's heartbeat (``--sweep_storage URL``): a worker's trial beats every minute and is
failed (and retried once with the same values) three minutes after its last beat; the journal file
has no heartbeat (a worker's task is requeued and resumes its trial instead)."""
MAX_RETRY = 1
PRUNING_CALLBACK = "trainer_cli.callbacks.optuna_pruning.OptunaPruning"
# Optuna's states as the tables show them
FINISHED = ("COMPLETE", "PRUNED", "FAIL")


def monitor_of(config: dict[str, Any]) -> tuple[str, str] | None:
    """``(monitor, mode)`` of the first ``ModelCheckpoint`` with a monitor in a parsed config.yaml: in
    ``trainer.callbacks``, else one a script added with ``parser.add_lightning_class_args(ModelCheckpoint,
    KEY)`` (a top-level ``KEY`` holding its arguments, ``monitor`` and ``save_top_k`` among them)."""
    callbacks = (config.get("trainer") or {}).get("callbacks") or []
    for callback in callbacks if isinstance(callbacks, list) else [callbacks]:
        if isinstance(callback, dict) and str(callback.get("class_path", "")).endswith("ModelCheckpoint"):
            init = callback.get("init_args") or {}
            if init.get("monitor"):
                return str(init["monitor"]), str(init.get("mode") or "min")
    for value in config.values():
        if isinstance(value, dict) and value.get("monitor") and "save_top_k" in value and "class_path" not in value:
            return str(value["monitor"]), str(value.get("mode") or "min")
    return None


def objective(space: Space, config: dict[str, Any]) -> tuple[str | None, str]:
    """``(metric, direction)`` of the study: ``--sweep_metric``/``--sweep_direction``, else the
    checkpoint's monitor and mode (``max`` -> maximize).

    Raises:
        UserError: for an Optuna-driven sampler or a pruner without a metric, or a ``--sweep_metric``
            other than the monitor without ``--sweep_direction``.
    """
    found = monitor_of(config)
    metric = space.metric or (found[0] if found else None)
    direction = space.direction
    if direction is None and found and metric == found[0]:
        direction = "maximize" if found[1] == "max" else "minimize"
    if metric is None and (not space.is_grid or space.pruner != "none"):
        raise UserError(
            "--sweep: no metric to optimize: the config has no ModelCheckpoint with a monitor; give --sweep_metric "
            "NAME --sweep_direction maximize|minimize"
        )
    if metric is not None and direction is None:
        raise UserError(
            f"--sweep_metric {metric}: not the checkpoint's monitor; give --sweep_direction maximize|minimize"
        )
    return metric, direction or "minimize"


def describe(space: Space, sweep_dir: Path, name: str, metric: str | None, direction: str) -> dict[str, Any]:
    """The ``study`` field of ``sweep.json``: where the study is and how it searches."""
    return {
        "name": f"{name}/{sweep_dir.name}",
        "storage": space.storage or str(sweep_dir / JOURNAL_FILE),
        "sampler": space.sampler,
        "pruner": space.pruner,
        "seed": space.seed,
        "metric": metric,
        "direction": direction,
        "n_trials": space.trials_per_point if not space.is_grid else None,
    }


def heartbeat_s() -> int:
    """The heartbeat interval (:data:`HEARTBEAT_S`, or the environment's ``TRAINER_CLI_SWEEP_HEARTBEAT_S``)."""
    return max(1, int(os.environ.get(ENV_HEARTBEAT_S) or HEARTBEAT_S))


def storage(spec: str) -> Any:
    """The Optuna storage of ``sweep.json``'s ``storage``: the journal file, or the database with a
    heartbeat (a stale trial failed and retried once, ``RetryFailedTrialCallback``)."""
    import inspect

    import optuna

    from trainer_cli.callbacks.optuna_study import open_storage

    if "://" not in spec:
        return open_storage(spec)
    interval = heartbeat_s()
    retrying = getattr(optuna.storages, "RetryHeartbeatStaleTrialCallback", None)  # Optuna 4.9's name
    retry = (retrying or optuna.storages.RetryFailedTrialCallback)(max_retry=MAX_RETRY)
    names = inspect.signature(optuna.storages.RDBStorage).parameters  # renamed in Optuna 5
    callback = (
        "heartbeat_stale_trial_callback" if "heartbeat_stale_trial_callback" in names else "failed_trial_callback"
    )
    kwargs: dict[str, Any] = {"heartbeat_interval": interval, "grace_period": 3 * interval, callback: retry}
    return optuna.storages.RDBStorage(spec, **kwargs)


def journal_stamp(spec: str) -> list[int] | None:
    """The size, modification time (ns) and inode of the journal file ``sweep.json``'s ``storage`` names: a journal
    is only appended to, so the same stamp is the same study. None for a database URL (``--sweep_storage``) or a
    journal that cannot be stated."""
    if "://" in spec:
        return None
    try:
        st = os.stat(spec)
    except OSError:
        return None
    return [st.st_size, st.st_mtime_ns, st.st_ino]


def _quiet_optuna() -> None:
    import optuna

    optuna.logging.set_verbosity(logging.WARNING)
    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
    # workers beat for their trials themselves (trainer_cli.schedulers.slurm.sweep_worker beat), asking and telling
    # outside optimize
    warnings.filterwarnings("ignore", message="Heartbeat of storage is supposed to be used with Study.optimize")


def _sampler(sampler: str, seed: int | None) -> Any:
    import optuna

    if sampler == "tpe":
        return optuna.samplers.TPESampler(seed=seed, multivariate=True, constant_liar=True)
    if sampler == "cmaes":
        return optuna.samplers.CmaEsSampler(seed=seed, warn_independent_sampling=False)  # categorical axes: random
    return optuna.samplers.RandomSampler(seed=seed)  # grid: every trial is enqueued


def sampler_for(study: dict[str, Any], asked: int) -> Any:
    """The sampler a Slurm worker asks with once the study holds ``asked`` trials: seeded with
    ``--sweep_seed + asked``.

    Every ask of a worker is a process of its own (``python -m trainer_cli.schedulers.slurm.sweep_worker next``):
    with the seed alone, each would start the same random stream and draw the same values (the
    sampler's random startup trials all alike). The offset gives each trial its own, reproducible
    stream; asks are made one at a time under the sweep's lock, so ``asked`` is the new trial's number."""
    seed = study["seed"]
    return _sampler(study["sampler"], None if seed is None else int(seed) + asked)


def create(study: dict[str, Any], space: Space | None = None) -> Any:
    """Create the study ``sweep.json`` describes (:func:`describe`); with ``space`` a grid's trials are enqueued.

    Raises:
        UserError: when the storage cannot be opened, or holds a study of that name already.
    """
    import optuna

    from trainer_cli.callbacks.optuna_study import make_pruner

    _quiet_optuna()
    try:
        created = optuna.create_study(
            storage=storage(study["storage"]),
            study_name=study["name"],
            sampler=_sampler(study["sampler"], study["seed"]),
            pruner=make_pruner(study["pruner"]),
            direction=study["direction"],
        )
    except optuna.exceptions.DuplicatedStudyError:
        raise UserError(f"{study['storage']}: holds a study named {study['name']} already") from None
    except ValueError as err:
        raise UserError(f"--sweep_pruner {study['pruner']}: {err}") from None
    except Exception as err:  # a database that cannot be reached, a driver missing
        raise UserError(f"--sweep_storage {study['storage']}: {type(err).__name__}: {err}".splitlines()[0]) from None
    if space is not None and space.is_grid:
        for overrides in space.trials():
            created.enqueue_trial(space.params(overrides), skip_if_exists=False)
    return created


def load(study: dict[str, Any]) -> Any:
    """The study ``sweep.json``'s ``study`` field names (sampler and pruner as it was created with).

    Raises:
        UserError: when it cannot be opened.
    """
    import optuna

    from trainer_cli.callbacks.optuna_study import make_pruner

    _quiet_optuna()
    try:
        return optuna.load_study(
            study_name=study["name"],
            storage=storage(study["storage"]),
            sampler=_sampler(study["sampler"], study["seed"]),
            pruner=make_pruner(study["pruner"]),
        )
    except Exception as err:
        raise UserError(
            f"study {study['name']} in {study['storage']}: {type(err).__name__}: {err}".splitlines()[0]
        ) from None


def suggest(space: Space, trial: Any) -> dict[str, str]:
    """Ask ``trial`` (an ``optuna.Trial``) for every axis; returns ``{key: value text}`` in flag order."""
    from optuna.distributions import CategoricalDistribution, IntDistribution

    out = {}
    for axis in space.axes:
        dist = axis.distribution()
        if isinstance(dist, CategoricalDistribution):
            value = trial.suggest_categorical(axis.key, dist.choices)
        elif isinstance(dist, IntDistribution):
            value = trial.suggest_int(axis.key, dist.low, dist.high, step=dist.step)
        else:
            value = trial.suggest_float(axis.key, dist.low, dist.high, log=dist.log)
        out[axis.key] = axis.text(value)
    return out


def pruning_callback(study: dict[str, Any], number: int) -> dict[str, Any] | None:
    """The callback a trial's config.yaml gets (``trainer.callbacks``): None without a pruner."""
    if study["pruner"].partition("(")[0].strip() == "none" or not study["metric"]:
        return None
    return {
        "class_path": PRUNING_CALLBACK,
        "init_args": {
            "storage": study["storage"],
            "study_name": study["name"],
            "trial_number": number,
            "monitor": study["metric"],
            "pruner": study["pruner"],
        },
    }


def fail(created: Any, number: int) -> None:
    """Tell the study that trial ``number`` failed (refused, or stopped by Ctrl-C)."""
    from optuna.trial import TrialState

    created.tell(number, state=TrialState.FAIL)


def tell(created: Any, trial: Any, value: float | None, exit_code: int) -> str:
    """Tell the study how ``trial`` ended; returns the state told (COMPLETE, PRUNED, FAIL).

    PRUNED when the pruning callback stopped it (its user attribute), COMPLETE with its value, FAIL
    when the run failed or reached no value of the metric.
    """
    import optuna
    from optuna.trial import TrialState

    from trainer_cli.callbacks.optuna_study import PRUNED_ATTR

    attrs = next(t.user_attrs for t in created.get_trials(deepcopy=False) if t.number == trial.number)
    if exit_code == 0 and PRUNED_ATTR in attrs:
        state = TrialState.PRUNED
    elif exit_code == 0 and value is not None:
        state = TrialState.COMPLETE
    else:
        state = TrialState.FAIL
    try:
        created.tell(trial.number, value if state == TrialState.COMPLETE else None, state=state)
    except optuna.exceptions.UpdateFinishedTrialError:
        pass  # told already (by another worker after a retry)
    return state.name
