"""One run identity in every logger.

Each run directory holds ``run.json``, written once when the run starts in it:
``{"run_id": "<32 hex digits>", "name": "<name>/version_<N>", "created": ...}`` (``name``: the display
name loggers show; a user's script's own W&B ``name`` where it sets one). Every logger is
pointed at the run from it, so a resume (``--ckpt_path last``, a Slurm requeue, a resubmission into
the run) continues the same logger run:

- loggers with a ``version`` (TensorBoard, CSV): ``save_dir``/``name``/``version`` put their files
  straight into the run directory (``version`` = its name, as before);
- W&B (``WandbLogger``, it has ``id``): ``id`` = the run id (Lightning resumes it with
  ``resume="allow"``), display name ``<name>/version_<N>``, files under ``<run>/wandb/`` (the runtime
  names its subclass of Lightning's class before, whose W&B step is the global step);
- MLflow (``MLFlowLogger``, it has ``run_id``): MLflow makes its own run id on the first start;
  it is recorded in ``run.json`` (``"mlflow": {tracking_uri: mlflow run id}``) and passed back as
  ``run_id`` when the run resumes; run name ``<name>/version_<N>``. Without a ``tracking_uri``
  (and no ``MLFLOW_TRACKING_URI``) the store is the SQLite database ``<default_root_dir>/mlflow.db``
  (artifacts in ``<default_root_dir>/mlartifacts``), shared by the runs of that root: ``mlflow ui
  --backend-store-uri sqlite:///runs/mlflow.db`` and ``MlflowClient`` open it as they are (MLflow 3
  refuses its ``file:`` store unless ``MLFLOW_ALLOW_FILE_STORE=true``, which a user's shell does not
  have). Every rank opens the store once under a file lock, so the first run of a root creates its
  tables once. A run begun in the former default ``<default_root_dir>/mlruns`` (``file:``, recorded
  in its ``run.json``) continues there; a ``file:`` store named by the user is allowed on MLflow 3.

Checkpoints do not follow the logger: ``<run>/checkpoints/`` whatever the logger
(:func:`checkpoints_in_run_dir`).
"""

from __future__ import annotations

import csv
import inspect
import json
import os
import uuid
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from trainer_cli.atomic import locked, update_json
from trainer_cli.errors import UserError
from trainer_cli.imports import import_class
from trainer_cli.job import export
from trainer_cli.rundir import layout

RUN_FILE = layout.RUN_FILE
MLFLOW_KEY = "mlflow"  # in run.json: {tracking_uri: MLflow run id}
MLFLOW_DB = "mlflow.db"  # the default MLflow store: <default_root_dir>/mlflow.db (SQLite)
MLFLOW_ARTIFACTS = "mlartifacts"  # its artifacts (MLflow's default would follow the working directory)
MLFLOW_FILE_STORE = "mlruns"  # the default store before mlflow.db: runs begun there continue there


# -- run.json --------------------------------------------------------------------------------------
def read_identity(run_dir: Path) -> dict[str, Any]:
    """``run_dir/run.json``; empty when there is none or it cannot be read."""
    try:
        data = json.loads((Path(run_dir) / RUN_FILE).read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) and data.get("run_id") else {}


def new_identity(label: str) -> dict[str, Any]:
    """A run identity not yet written anywhere: a new run id, ``label`` and the time now (UTC)."""
    return {
        "run_id": uuid.uuid4().hex,
        "name": label,
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
    }


def run_identity(run_dir: Path, label: str) -> dict[str, Any]:
    """The run's identity from ``run_dir/run.json``, created (with ``run_dir``) when missing.

    Creation is atomic and under the record's lock (:func:`trainer_cli.atomic.update_json`): processes
    starting together in one directory (``srun`` tasks) all get the one that was written first.

    Args:
        run_dir: The run directory.
        label: The run's human name, ``<name>/version_<N>`` (kept from the first start).
    """
    found = read_identity(run_dir)
    if found:
        return found
    run_dir.mkdir(parents=True, exist_ok=True)
    created = new_identity(label)
    update_json(run_dir / RUN_FILE, lambda found: found if found.get("run_id") else created)
    return read_identity(run_dir) or created


def write_identity(run_dir: Path, identity: dict[str, Any]) -> None:
    """Write ``identity`` as ``run_dir/run.json`` unless the run has one (a run made before it starts:
    ``train submit`` of a user's script whose W&B folder is the run id)."""
    update_json(Path(run_dir) / RUN_FILE, lambda found: found if found.get("run_id") else identity)


def update_identity(run_dir: Path, **fields: Any) -> None:
    """Merge ``fields`` into ``run_dir/run.json`` (global rank 0 only; replaced atomically)."""
    update_json(Path(run_dir) / RUN_FILE, lambda found: found | fields)


# -- logger configs --------------------------------------------------------------------------------
def point_loggers_at(
    loggers: list[Any], run_dir: Path, root: Path, identity: dict[str, Any], in_place: bool = False
) -> list[str]:
    """Set the init args of the logger configs (``class_path``/``init_args`` namespaces) so each
    logs the run ``identity`` of ``run_dir`` (see the module's description).

    Args:
        in_place: ``run_dir`` is the folder the loggers make themselves (a user's script's run:
            ``<save_dir>/<name>/<version>``, a W&B run's ``<save_dir>/<project>/<run id>``): they keep
            their ``save_dir`` and ``name`` as the script configures them and get only the run's version,
            id and display name, so a resume logs and checkpoints where the first start did.

    Returns:
        The tracking URI of each MLflow logger, in order (for :func:`record_logger_runs`).
    """
    mlflow_uris = []
    for item in loggers:
        if not hasattr(item, "get") or "class_path" not in item:
            continue
        params = inspect.signature(import_class(item.class_path)).parameters
        args = item.init_args
        if "id" in params and in_place:
            identify_loggers([item], identity)
        elif "id" in params:  # W&B: the run id is the W&B run id
            _identify_wandb(item, params, identity)
            # name: the display name (a name left from another logger's config is no W&B name)
            _set(args, params, save_dir=str(run_dir), dir=None, name=identity["name"])
        elif "run_id" in params:  # MLflow: its own run id, recorded at the first start
            if not args.get("tracking_uri"):
                args.tracking_uri = default_mlflow_store(root, identity)
                if args.tracking_uri.startswith("sqlite:") and not args.get("artifact_location"):
                    _set(args, params, artifact_location=str(root.absolute() / MLFLOW_ARTIFACTS))
            uri = mlflow_tracking_uri(args)
            if uri.startswith("file:"):  # MLflow 3 refuses its file store unless told
                export.export("MLFLOW_ALLOW_FILE_STORE", "true", keep_given=True)
            elif uri.startswith("sqlite:///"):  # a file (sqlite:// alone is in memory)
                open_sqlite_store(uri)
            args.run_id = _live_mlflow_run(identity, uri)
            if not args.get("run_name"):
                args.run_name = identity["name"]
            mlflow_uris.append(mlflow_tracking_uri(args))
        elif in_place:  # TensorBoard, CSV, ...: the script's <save_dir>/<name>, the run's <version>
            _set(args, params, version=run_dir.name)
        else:  # TensorBoard, CSV, ...: <save_dir>/<name>/<version> is the run directory
            _set(args, params, save_dir=str(run_dir.parent), name="", version=run_dir.name)
    return mlflow_uris


def takes_run_id(item: Any) -> bool:
    """Whether the logger config ``item`` (``class_path``/``init_args``) names its run by an id it is
    given (W&B's ``id``): its folder is ``<save_dir>/<project>/<run id>``, not a numbered version."""
    if not hasattr(item, "get") or "class_path" not in item:
        return False
    return "id" in inspect.signature(import_class(item.class_path)).parameters


def identify_loggers(loggers: list[Any], identity: dict[str, Any]) -> list[str]:
    """Give the logger configs that take a run id (W&B) the run ``identity``, where they log is left
    as configured: a user's script's new run, whose directory Lightning chooses when the Trainer is
    built (its ``run.json`` is written then), so its first start and every resume are one logger run.
    The display name is the script's own ``name`` where it sets one (kept in ``identity["name"]``,
    which ``run.json`` records), else ``identity["name"]``: the same at every start of the run.

    Returns:
        The tracking URI of each MLflow logger, in order (for :func:`record_logger_runs`: the MLflow
        run it makes now is the one a resume continues).
    """
    mlflow_uris = []
    for item in loggers:
        if hasattr(item, "get") and "class_path" in item:
            params = inspect.signature(import_class(item.class_path)).parameters
            if "id" in params:
                _identify_wandb(item, params, identity)
                if item.init_args.get("name"):
                    identity["name"] = item.init_args.name
                else:
                    _set(item.init_args, params, name=identity["name"])
            elif "run_id" in params:
                mlflow_uris.append(mlflow_tracking_uri(item.init_args))
    return mlflow_uris


def _identify_wandb(item: Any, params: Any, identity: dict[str, Any]) -> None:
    _set(item.init_args, params, version=None, id=identity["run_id"])
    item.init_args.resume = "allow"  # a wandb.init argument: continue the run of that id (None would not)


def _set(args: Any, params: Any, **values: Any) -> None:
    for key, value in values.items():
        if key in params:
            args[key] = value


def default_mlflow_store(root: Path, identity: dict[str, Any]) -> str:
    """The MLflow tracking URI of a logger that names none: ``sqlite:///<root>/mlflow.db``, or the
    former default ``file:<root>/mlruns`` for a run whose ``run.json`` records an MLflow run there."""
    former = f"file:{root.absolute() / MLFLOW_FILE_STORE}"
    if former in identity.get(MLFLOW_KEY, {}):
        return former
    return f"sqlite:///{root.absolute() / MLFLOW_DB}"


def open_sqlite_store(uri: str) -> None:
    """Open the SQLite MLflow store ``uri`` once under a file lock beside it: the first opening
    creates its tables, and the ranks of a DDP run (each builds an ``MLFlowLogger``, which opens the
    store) must not all create them at once.

    Raises:
        UserError: when SQLAlchemy or Alembic (MLflow's SQL store needs both) is missing.
    """
    import importlib.util

    missing = [name for name in ("sqlalchemy", "alembic") if importlib.util.find_spec(name) is None]
    if missing:
        raise UserError(
            f"the MLflow store {uri} needs {' and '.join(missing)}, which mlflow-skinny does not bring: "
            "pip install 'trainer-cli[mlflow]' (the full mlflow), or set the logger's tracking_uri to another store"
        )
    from mlflow.tracking import MlflowClient

    db = Path(uri.removeprefix("sqlite:///").split("?")[0])  # the file, without SQLAlchemy's ?options
    db.parent.mkdir(parents=True, exist_ok=True)
    with locked(db):
        MlflowClient(uri)  # creates and migrates the tables when the file is new


def mlflow_tracking_uri(args: Any) -> str:
    """The tracking URI an ``MLFlowLogger`` built from ``args`` uses (Lightning's rule)."""
    return args.get("tracking_uri") or f"file:{args.get('save_dir') or './mlruns'}"


def _live_mlflow_run(identity: dict[str, Any], tracking_uri: str) -> str | None:
    """The MLflow run id recorded for ``tracking_uri``, when that store still has the run."""
    run_id = identity.get(MLFLOW_KEY, {}).get(tracking_uri)
    if run_id is None:
        return None
    from mlflow.tracking import MlflowClient

    try:
        MlflowClient(tracking_uri).get_run(run_id)
    except Exception as err:  # deleted, or the store moved: a new MLflow run
        print(
            f"MLflow run {run_id} of this run is gone from {tracking_uri} ({type(err).__name__}); starting a new one",
            flush=True,
        )
        return None
    return run_id


def record_logger_runs(loggers: list[Any], run_dir: Path, mlflow_uris: list[str]) -> None:
    """Record in ``run.json`` the MLflow run id each ``MLFlowLogger`` got (it makes the run now),
    so that a resume continues that MLflow run. Global rank 0 only.

    Args:
        loggers: The trainer's loggers.
        run_dir: The run directory.
        mlflow_uris: The tracking URI of each MLflow logger in ``loggers``, in order (what
            :func:`point_loggers_at` returned for their configs).
    """
    from lightning.pytorch.loggers import MLFlowLogger

    runs = dict(read_identity(run_dir).get(MLFLOW_KEY, {}))
    for logger, uri in zip([lg for lg in loggers if isinstance(lg, MLFlowLogger)], mlflow_uris):
        runs[uri] = logger.run_id
    if runs != read_identity(run_dir).get(MLFLOW_KEY, {}):
        update_identity(run_dir, **{MLFLOW_KEY: runs})


def checkpoints_in_run_dir(callbacks: list[Any], run_dir: Path) -> None:
    """Every ``ModelCheckpoint`` without a ``dirpath`` saves to ``<run>/checkpoints`` (Lightning's
    default follows the first logger: W&B's or MLflow's would be outside the run directory)."""
    from lightning.pytorch.callbacks import ModelCheckpoint

    for callback in callbacks:
        if isinstance(callback, ModelCheckpoint) and callback.dirpath is None:
            callback.dirpath = str(run_dir / "checkpoints")


def keep_csv_metrics(loggers: list[Any]) -> None:
    """Keep a resumed run's ``metrics.csv``: Lightning's ``CSVLogger`` deletes the file it finds when
    its writer starts (the writer then appends to the file). The file is set aside while the writer
    starts (``logger.experiment``) and put back, so the rows of the resumed run follow the earlier
    ones. Global rank 0 only, before anything is logged."""
    from lightning.pytorch.loggers import CSVLogger
    from lightning.pytorch.loggers.csv_logs import ExperimentWriter

    for logger in loggers:
        if not isinstance(logger, CSVLogger):
            continue
        metrics = Path(logger.log_dir) / ExperimentWriter.NAME_METRICS_FILE
        if not metrics.is_file():
            continue
        aside = metrics.with_name(f".{metrics.name}.resumed")
        os.replace(metrics, aside)
        try:
            writer = logger.experiment  # starts the writer (its clean-up finds nothing to delete)
        finally:
            os.replace(aside, metrics)
        with metrics.open(newline="") as f:
            header = next(csv.reader(f), [])
        writer.metrics_keys = [k for k in header if k]  # the columns so far: new ones widen the file
