"""``train cancel RUN``: stop every job of a submitted run, each through its own engine (a verb).

The run is found in the user's registry as ``train jobs`` finds it (:func:`trainer_cli.launch.jobs.find_run`);
each engine's ``cancel`` leaves a job that already ended as it is.
"""

from __future__ import annotations

import argparse

from trainer_cli.errors import UserError
from trainer_cli.launch.jobs import JOB_KEYS, Engines, current_id, find_run, root_option
from trainer_cli.schedulers.submissions import scheduler_of


def cancel(args: list[str], engines: Engines) -> int:
    """``train cancel RUN [--root DIR]``: cancel every job of a run (fit, test, cv array and aggregate),
    each through its engine's ``cancel`` (a job that has ended is left as it is).

    Raises:
        UserError: for an unknown run, a run of an engine not in ``engines``, or when the engine
            refuses (scancel missing or refusing).
    """
    parser = argparse.ArgumentParser(
        prog="train cancel", description="Cancel the jobs of a run submitted with `train submit`."
    )
    parser.add_argument("run", help="the run directory or one of its job ids")
    parser.add_argument(
        "--root", help="only a run submitted under this trainer.default_root_dir (default: any you submitted)"
    )
    opts = parser.parse_args(args)
    rec = find_run(root_option(opts.root), opts.run)
    ids = [current_id(rec, k) for k, _ in JOB_KEYS if rec.get(k)]
    name = scheduler_of(rec)
    if name == "ray" and name not in engines:
        raise UserError(
            f"{rec['job_id']} is a Ray job: set RAY_ADDRESS={rec.get('cluster')} (pip install trainer-cli[ray]) and "
            f"run train cancel again, or stop it with `ray job stop --address {rec.get('cluster')} {rec['job_id']}`; "
            "nothing was cancelled"
        )
    if name not in engines:
        raise UserError(f"{opts.run}: a {name} job, and this installation has no {name} engine: install its extra")
    for job_id in ids:
        engines[name].cancel(job_id)
    print(f"cancelled job(s) {', '.join(ids)} of {rec['run_dir']}")
    return 0
