"""``train cv``: stratified k-fold cross-validation of the configured run.

The training and validation splits of the data module are pooled (the test split stays held out)
and cut into ``--folds`` stratified folds with scikit-learn's ``StratifiedKFold`` (shuffled,
seeded by ``--cv_seed``). Fold ``i`` trains on the other folds and validates on fold ``i`` with the
final weights; every fold is its own run directory, ``<cv dir>/fold_<i>`` (config, logs,
checkpoints, ``cv_fold.json`` with its validation metrics). The aggregate (each metric per fold,
its mean and sample standard deviation) is printed and written as ``cv_results.csv`` and
``cv_results.json`` in the cv directory, ``<trainer.default_root_dir>/<name>/cv/version_<N>``.

One fold runs alone with ``--fold I --cv_dir DIR`` and the aggregate alone with ``--aggregate``, so a
Slurm job array can run one fold per task and a dependent job aggregate. Folds that already have
their ``cv_fold.json`` are skipped, so re-running the same command resumes.
"""

from __future__ import annotations

import csv
import json
import math
import os
import statistics
from pathlib import Path
from typing import Any

from trainer_cli import tables
from trainer_cli.config.keys import Layers
from trainer_cli.config.request import Request, option
from trainer_cli.errors import UserError
from trainer_cli.imports import heavy_import
from trainer_cli.job import context as job_context
from trainer_cli.job import export
from trainer_cli.rundir import discard
from trainer_cli.rundir import policy as rundir
from trainer_cli.runtime.configured_run import build_run, composed_fit_args, verb_parser
from trainer_cli.runtime.run_entry import RunEntry

ENV_CV_DIR = "TRAINER_CLI_CV_DIR"  # shared with DDP processes Lightning launches from this one
SETTINGS_FILE = "cv.json"
FOLD_FILE = "cv_fold.json"
RESULTS_CSV = "cv_results.csv"
RESULTS_JSON = "cv_results.json"

EPILOG = """\
examples:
  train cv --folds 5 --config configs/experiment/digits.yaml --trainer.max_epochs 5
  # one fold alone (what a Slurm array task runs), then the aggregate:
  train cv --folds 5 --fold 2 --cv_dir runs/digits/cv/version_0 --config configs/experiment/digits.yaml
  train cv --folds 5 --aggregate --cv_dir runs/digits/cv/version_0
"""


def main(request: Request) -> int:
    """``train cv --folds K [--fold I] [--cv_dir DIR] [--cv_seed S] [--aggregate] FIT_ARGS``.

    Raises:
        UserError: for bad fold numbers, a cv directory made with other settings, too few samples
            of a class for K folds, or (``--aggregate``) folds without results.
    """
    parser = verb_parser("cv", "Stratified k-fold cross-validation: one run directory per fold, then a table.", EPILOG)
    parser.add_argument("--folds", type=int, required=True, help="Number of folds K (>= 2).")
    parser.add_argument(
        "--fold", type=int, default=None, help="Run only this fold (0..K-1); needs --cv_dir unless in a Slurm array."
    )
    parser.add_argument(
        "--cv_dir", default=None, help="Cross-validation directory (default: a new <root>/<name>/cv/version_<N>)."
    )
    parser.add_argument("--cv_seed", type=int, default=0, help="Seed of the fold split (default: %(default)s).")
    parser.add_argument("--aggregate", action="store_true", help="Only aggregate the folds' results found in --cv_dir.")
    opts, rest, layers = composed_fit_args(parser, request)  # composed once, for every fold
    if opts.folds < 2:
        raise UserError(f"--folds {opts.folds}: need at least 2 folds")
    if opts.fold is not None and not 0 <= opts.fold < opts.folds:
        raise UserError(f"--fold {opts.fold}: folds are numbered 0..{opts.folds - 1}")

    if opts.aggregate:
        if not opts.cv_dir:
            raise UserError("--aggregate needs --cv_dir: the cv directory holding fold_<i>/")
        print_table(aggregate(Path(opts.cv_dir), opts.folds))
        return 0
    given = opts.cv_dir or os.environ.get(ENV_CV_DIR) or ""
    existed = bool(given) and Path(given).exists()
    cv_dir = choose_cv_dir(opts.cv_dir, opts.fold, rest, layers)
    try:
        with export.scope():
            export.export(ENV_CV_DIR, str(cv_dir))  # the folds' DDP ranks use the same cv directory
            check_settings(cv_dir, opts.folds, opts.cv_seed)
            for fold in [opts.fold] if opts.fold is not None else range(opts.folds):
                run_fold(cv_dir, fold, opts.folds, opts.cv_seed, rest, layers)
    except UserError:
        if not existed and _is_rank_zero():
            remove_untrained(cv_dir)
        raise
    if opts.fold is None and _is_rank_zero():
        print_table(aggregate(cv_dir, opts.folds))
    return 0


def choose_cv_dir(cv_dir: str | None, fold: int | None, fit_args: Request, layers: Layers | None = None) -> Path:
    """``--cv_dir``; in a job array ``<root>/<name>/cv/job_<array job id>`` (all tasks agree);
    else a new ``<root>/<name>/cv/version_<N>``.

    Raises:
        UserError: for ``--fold`` without ``--cv_dir`` outside a job array.
    """
    if cv_dir or os.environ.get(ENV_CV_DIR):
        return Path(cv_dir or os.environ[ENV_CV_DIR]).absolute()
    with heavy_import():
        from trainer_cli.runtime.lightning_folders import DEFAULT_ROOT_DIR
        from trainer_cli.runtime.verbs import parse_config

    _, cfg = parse_config("fit", fit_args, expand=layers is None, layers=layers)
    base = Path(cfg.trainer.default_root_dir or DEFAULT_ROOT_DIR) / cfg.name / "cv"
    array_job = job_context.current().array_job_id
    if array_job:
        return (base / f"job_{array_job}").absolute()
    if fold is not None:
        raise UserError(
            "--fold needs --cv_dir (the folder shared by all folds), e.g. --cv_dir runs/<name>/cv/version_0"
        )
    return rundir.allocate(base.parent, base.name).absolute()


def check_settings(cv_dir: Path, folds: int, cv_seed: int) -> None:
    """Record ``folds`` and ``cv_seed`` in ``cv_dir/cv.json``, or check them against the record.

    Raises:
        UserError: when ``cv_dir`` was started with another number of folds or seed.
    """
    cv_dir.mkdir(parents=True, exist_ok=True)
    settings = {"folds": folds, "cv_seed": cv_seed}
    path = cv_dir / SETTINGS_FILE
    try:
        with path.open("x") as f:  # exclusive create: array tasks starting together agree
            json.dump(settings, f)
        return
    except FileExistsError:
        pass
    recorded = json.loads(path.read_text() or "{}")
    if recorded and recorded != settings:
        raise UserError(
            f"{cv_dir} was started with --folds {recorded['folds']} --cv_seed {recorded['cv_seed']}: "
            f"use those, or another --cv_dir"
        )


def run_fold(
    cv_dir: Path, fold: int, folds: int, cv_seed: int, fit_args: Request, layers: Layers | None = None
) -> dict[str, Any]:
    """Train fold ``fold`` in ``cv_dir/fold_<fold>`` and write its ``cv_fold.json``; returns that record.
    A fold whose record exists is not run again."""
    from trainer_cli.data.folds import use_fold
    from trainer_cli.rundir.layout import newest_checkpoint

    fold_dir = cv_dir / f"fold_{fold}"
    done = fold_dir / FOLD_FILE
    if done.is_file():
        print(f"fold {fold}/{folds}: done already ({done})", flush=True)
        return json.loads(done.read_text())
    print(f"\n=== fold {fold} of {folds} (0-based) -> {fold_dir}", flush=True)
    existed = fold_dir.exists()
    interrupted = existed and newest_checkpoint(fold_dir) is not None  # stopped before its record: resume it
    resume = [option("ckpt_path", "last")] if interrupted else []
    entry = RunEntry(resume_command="the same `train cv` command (finished folds are skipped, this one resumes)")
    cli = build_run(fit_args.with_args([*fit_args, option("run_dir", str(fold_dir)), *resume]), layers, entry)
    try:
        sizes = use_fold(cli.trainer, cli.datamodule, folds, fold, cv_seed)
    except UserError:
        if not existed and cli.trainer.is_global_zero:
            remove_untrained(fold_dir)
        raise
    with cli.run.stops_with_exit_code():
        cli.trainer.fit(cli.model, datamodule=cli.datamodule, ckpt_path=cli.run.ckpt_path, weights_only=True)
        results = cli.trainer.validate(cli.model, datamodule=cli.datamodule, verbose=False)
    cli.run.finish_loggers()  # the next fold in this process gets its own logger runs
    metrics = {k: float(v) for k, v in (results[0] if results else {}).items()}
    record = {"fold": fold, "folds": folds, "cv_seed": cv_seed, **sizes, "metrics": metrics}
    if cli.trainer.is_global_zero:
        done.write_text(json.dumps(record, indent=2) + "\n")
    return record


def remove_untrained(path: Path) -> None:
    """Remove ``path`` (a cv or fold directory this call made) unless it holds a checkpoint, and
    the parent folders that leaves empty (``<root>/<name>/cv``)."""
    discard.discard_if_untrained(path, empty_parents=2)


def aggregate(cv_dir: Path, folds: int) -> dict[str, Any]:
    """Every fold's validation metrics with their mean and sample standard deviation; written to
    ``cv_dir/cv_results.csv`` and ``cv_dir/cv_results.json``.

    Raises:
        UserError: naming the folds that have no ``cv_fold.json`` yet.
    """
    missing = [i for i in range(folds) if not (cv_dir / f"fold_{i}" / FOLD_FILE).is_file()]
    if missing:
        raise UserError(
            f"{cv_dir}: no results yet for fold(s) {', '.join(map(str, missing))} of {folds}: "
            f"run them (train cv --folds {folds} --fold I --cv_dir {cv_dir} ...) first"
        )
    records = [json.loads((cv_dir / f"fold_{i}" / FOLD_FILE).read_text()) for i in range(folds)]
    names = sorted({name for r in records for name in r["metrics"]})
    summary: dict[str, Any] = {"cv_dir": str(cv_dir), "folds": records, "mean": {}, "std": {}}
    for name in names:
        values = [r["metrics"].get(name, math.nan) for r in records]
        summary["mean"][name] = statistics.fmean(values)
        summary["std"][name] = statistics.stdev(values)
    (cv_dir / RESULTS_JSON).write_text(json.dumps(summary, indent=2) + "\n")
    with (cv_dir / RESULTS_CSV).open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["fold", *names])
        for r in records:
            writer.writerow([r["fold"], *(r["metrics"].get(n, "") for n in names)])
        writer.writerow(["mean", *(summary["mean"][n] for n in names)])
        writer.writerow(["std", *(summary["std"][n] for n in names)])
    return summary


def print_table(summary: dict[str, Any]) -> None:
    """Print the aggregate as a table: one row per fold, then mean and std."""
    names = list(summary["mean"])
    rows = [[str(r["fold"]), *(f"{r['metrics'].get(n, math.nan):.4f}" for n in names)] for r in summary["folds"]]
    rows += [
        ["mean", *(f"{summary['mean'][n]:.4f}" for n in names)],
        ["std", *(f"{summary['std'][n]:.4f}" for n in names)],
    ]
    print()
    tables.print_table(
        rows,
        ["fold", *names],
        align="r" * (len(names) + 1),
        indent=2,
        title="cross-validation (validation metrics of each fold's final weights):",
    )
    cv_dir = Path(summary["cv_dir"])
    from trainer_cli.plots import CV_PNG, plot_folds

    png = plot_folds(summary, cv_dir / CV_PNG)
    print(f"written: {cv_dir / RESULTS_CSV}, {cv_dir / RESULTS_JSON}" + (f", {png}" if png else ""), flush=True)


def _is_rank_zero() -> bool:
    """True in the process that writes shared files (global rank 0 of a DDP run, or the only one)."""
    from lightning.fabric.utilities.rank_zero import rank_zero_only

    return getattr(rank_zero_only, "rank", 0) == 0
