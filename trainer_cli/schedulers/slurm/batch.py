"""What Slurm's batch script runs around its ``srun`` step: the job's start and the decision at its end.

``python -m trainer_cli.schedulers.slurm.batch RUN_DIR start|end [RC]`` (``slurm/fit_step.j2``,
``slurm/cv.sbatch.j2``) records them in ``<run>/job.json`` (:mod:`trainer_cli.job.jobstate`);
``python -m trainer_cli.schedulers.slurm.batch port`` prints the job's ``MASTER_PORT``. Standard library and
:mod:`filelock` only at import: it runs before anything of the training does.

``end`` is where the batch script decides, once ``srun`` returned (:func:`end_of_step`): the job
completed, failed by itself, or restarts (``scontrol requeue`` with a timeout, a resubmission, or
the end of the run at ``--slurm.max_restarts``: :class:`trainer_cli.job.restarts.RestartPolicy`,
which preemptions do not consume), from srun's exit code and what each task noted
(:func:`step_verdict`): a SIGUSR1 that saved its checkpoint (exit :data:`~trainer_cli.job.jobstate.EXIT_REQUEUE`)
or killed a task before its handler (srun's :data:`~trainer_cli.job.jobstate.EXIT_USR1`), a step that Slurm
killed, or one that srun could not start within ``--slurm.step_start_timeout_s``, is restarted; a step that
failed by itself is not, nor one that ended before any of its tasks started training (no task noted
:data:`trainer_cli.job.task_output.STARTED`): a container that cannot start,
a missing interpreter or image, an import error would fail the same way again, so the job ends
FAILED at once with the first failing task's error in one line (:mod:`trainer_cli.job.task_output`).

A job that resubmits itself (``--slurm.requeue_mode resubmit``, or a failed ``scontrol requeue``)
does so at its ``end``: ``sbatch`` of the run's own script (``<run>/submit.sbatch``), so the new job
runs in the same run directory and resumes from its newest checkpoint. The record then names the
new job (``job_id``) and the ones before it (``resubmitted_from``).
"""

from __future__ import annotations

import os
import signal
import sys
import time
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from trainer_cli.job import context, ports, task_output
from trainer_cli.job import restarts as restarts_log
from trainer_cli.job.jobstate import (
    EXIT_REQUEUE,
    EXIT_USR1,
    REQUEUED,
    RESUBMIT,
    policy,
    read,
    this_job_id,
    update,
)
from trainer_cli.job.jobstate import now as _now
from trainer_cli.job.restarts import ENV_PRIOR_RESTARTS
from trainer_cli.schedulers.slurm import commands as slurm_commands
from trainer_cli.schedulers.slurm.in_job import cause_of_signal, requeued_by_itself

ENV_REQUEUE_MODE = "TRAINER_CLI_REQUEUE_MODE"  # (--slurm.requeue_mode: requeue or resubmit)
SLURM_TIMEOUT_S = 60  # for scontrol requeue / show job: a slow controller must not hold the job
_JOB_ENV_PREFIXES = ("SLURM_", "SBATCH_", "SRUN_", "SALLOC_")  # this job's; not passed to the one it submits


def started(run_dir: Path) -> dict[str, Any]:
    """Record a start (or restart) of this job, and say it in the log."""
    count = policy().count
    print(
        f"trainer-cli: job {context.current().own_id} restart {count} on {context.current().node_list} at {_now()}",
        flush=True,
    )
    record, now = read(run_dir), _now()
    first = {} if "started" in record else {"restarts_before": count}
    return update(
        run_dir,
        job_id=this_job_id(),
        restarts=count,
        state="RUNNING",
        exit_code=None,
        error=None,
        started=now,
        starts=[*record.get("starts", []), now],  # each attempt's start, for its cost (trainer_cli.rundir.run_cost)
        node_list=context.current().node_list,
        **first,
    )


def requeued(run_dir: Path, checkpoint: str) -> dict[str, Any]:
    """Record that this job requeued itself after saving ``checkpoint``."""
    return update(
        run_dir, job_id=this_job_id(), restarts=policy().count, state=REQUEUED, checkpoint=checkpoint, ended=_now()
    )


def resubmit_requested(run_dir: Path, checkpoint: str) -> dict[str, Any]:
    """Record that this job is to be resubmitted, once its tasks have ended, after saving ``checkpoint``."""
    return update(
        run_dir, job_id=this_job_id(), restarts=policy().count, state=RESUBMIT, checkpoint=checkpoint, ended=_now()
    )


def ended(run_dir: Path, exit_code: int, error: str | None = None) -> dict[str, Any]:
    """Record the end of this job's script: COMPLETED (exit 0) or FAILED (with ``error``: why, in
    words, for ``train jobs``), unless it requeued itself or asked to be resubmitted (then it queues
    the run's script again: :func:`resubmit`)."""
    record = read(run_dir)
    ours = record.get("job_id") == this_job_id() and record.get("restarts") == policy().count
    if record.get("state") == REQUEUED and ours:
        return record  # the script ended because the job requeued itself: it runs again
    if record.get("state") == RESUBMIT and ours:
        return resubmit(run_dir, record)
    return update(
        run_dir,
        job_id=this_job_id(),
        state="COMPLETED" if exit_code == 0 else "FAILED",
        exit_code=exit_code,
        error=error if exit_code != 0 else None,
        ended=_now(),
    )


def task_records(folder: Path | None) -> list[tuple[float, str, str]]:
    """What the tasks of the step noted (:func:`trainer_cli.job.stop_signals.note`, a file per task
    named by its ``SLURM_PROCID``): ``(time, task, what)``, oldest first; none without the folder."""
    found = []
    for path in sorted(p for p in Path(folder).glob("*") if p.name.isdigit()) if folder else []:
        try:
            lines = path.read_text().splitlines()
        except OSError:
            continue
        for line in lines:
            at, _, what = line.partition(" ")
            try:
                found.append((float(at), path.name, what))
            except ValueError:
                continue
    return sorted(found)


def step_verdict(
    exit_code: int,
    records: list[tuple[float, str, str]],
    tasks: int = 0,
    start_timeout_s: int = 0,
    ran_s: float | None = None,
) -> str:
    """What ended the ``srun`` step of the job, from its exit code and the tasks' records.

    srun's exit code alone cannot tell: with ``--kill-on-bad-exit`` one task failing ends the
    others with SIGTERM and srun reports 143, as when Slurm kills the step. The tasks' records can:
    each notes a stop signal when it arrives and, when it ends, its exit code (an exception: error).

    Returns:
        ``completed`` (exit 0); ``requeue``: a task ended with :data:`EXIT_REQUEUE` (SIGUSR1, the
        checkpoint saved), or SIGUSR1 killed a task before its handler was there and no task
        noted an error (srun's :data:`EXIT_USR1`: Slurm's requeue signal, nothing saved);
        ``failed``: a task's own error came before any signal and every task noted something
        (the training failed: bad input, a bug); ``killed``: a signal came first, or a task noted
        nothing at all (killed before Python ran, or by SIGKILL; the others then fail in their
        collectives): Slurm stopped the step (a node failure, the cleanup of an earlier run's tasks);
        ``step_start``: srun exited 1 after running for the step start timeout and no task noted
        anything: srun gave up creating the step (``srun --immediate``: "Requested nodes are busy",
        a node still cleaning up after an earlier step), so no task ever ran.

    Args:
        exit_code: srun's exit code.
        records: The tasks' notes (:func:`task_records`).
        tasks: How many tasks the step had (``SLURM_NTASKS``; 0: unknown).
        start_timeout_s: srun's ``--immediate`` (``--slurm.step_start_timeout_s``); 0: none, srun
            waits for the step as long as Slurm wants.
        ran_s: Seconds from the start of the step (``batch start``) to its end; None: not known.
    """
    records = [r for r in records if r[2] != task_output.STARTED]  # what ended or stopped the tasks
    if exit_code == 0:
        return "completed"
    if exit_code == EXIT_REQUEUE or any(what == f"exit {EXIT_REQUEUE}" for _, _, what in records):
        return "requeue"
    stopped_by_signal = {f"exit {code}" for code in (0, 130, 143)}
    errors = [
        at for at, _, what in records if what == "error" or (what.startswith("exit ") and what not in stopped_by_signal)
    ]
    signals = [at for at, _, what in records if what.startswith("signal ")]
    silent = tasks > len({task for _, task, _ in records})
    waited = start_timeout_s > 0 and (ran_s is None or ran_s >= start_timeout_s)
    if exit_code == 1 and not records and tasks > 0 and waited:
        return "step_start"
    if exit_code == EXIT_USR1 and not errors:
        return "requeue"
    if errors and (not signals or min(errors) < min(signals)) and not silent:
        return "failed"
    return "killed"


def end_of_step(run_dir: Path, exit_code: int, records_dir: Path | None) -> int:
    """The batch script's decision once ``srun`` returned: record the end, and restart the job
    (``scontrol requeue`` with a timeout, or a resubmission with ``--slurm.requeue_mode resubmit``)
    when the step asked for it (SIGUSR1: :data:`EXIT_REQUEUE`), Slurm killed it or srun could not
    start it in time (:data:`trainer_cli.job.restarts.STEP_START`), within
    ``--slurm.max_restarts``; past the cap the run stops there, saying so. A step that failed or
    was killed before any task started training ends the job FAILED, not restarted, its cause in
    one line (:func:`_failed_before_training`), unless Slurm requeued the job itself. Returns the
    script's exit code: 0 after a restart or a stop at the cap that followed a SIGUSR1, else srun's.

    ``records_dir`` None (a site template without ``TRAINER_CLI_TASK_RECORDS``): only srun's exit
    code is known, so only 0 and :data:`EXIT_REQUEUE` are told apart from a failure."""
    job = context.current()
    tasks = job.world_size if job.world_size_given else 0
    start_timeout_s = restarts_log.env_count(os.environ, restarts_log.ENV_STEP_START_TIMEOUT_S)
    ran_s = _seconds_since(read(run_dir).get("started"))
    records = task_records(records_dir)
    verdict = step_verdict(exit_code, records, tasks, start_timeout_s, ran_s)
    if records_dir is None and verdict in ("killed", "step_start"):  # no tasks' records: srun's code alone
        verdict = "failed"
    stall = this_stall(run_dir) if exit_code != 0 else None
    if stall is not None:  # the watchdog (schedulers.slurm.watchdog) ended the step: whatever the tasks noted after
        verdict = "stall"
    started = records_dir is None or any(what == task_output.STARTED for _, _, what in records)  # None: unknown
    if verdict in ("killed", "failed") and not started:
        if verdict == "failed" or not requeued_by_itself(context.current()):
            return _failed_before_training(run_dir, exit_code, records_dir)
    if verdict in ("completed", "failed"):
        state = ended(run_dir, exit_code).get("state")
        return 0 if state in (REQUEUED, "PENDING", "RUNNING") else exit_code  # requeued or resubmitted: not a failure
    record = read(run_dir)
    request = record.get("requeue_request") or {}
    if record.get("requeue_request"):
        update(run_dir, requeue_request=None)
    job_id, restarts = this_job_id(), policy(run_dir)
    if verdict == "requeue" and request:
        cause, left_s = request.get("cause") or restarts_log.UNKNOWN, request.get("seconds_left")
        if cause == restarts_log.UNKNOWN:  # a task that could not ask scontrol (in a container image): ask here
            at = request.get("signalled_at")
            cause, left_s = cause_of_signal(context.current(), at if isinstance(at, float) else None)
        checkpoint = request.get("checkpoint")
        left = "" if left_s is None else f", {left_s} s left"
        said = f"SIGUSR1 at step {request.get('step', '?')} ({cause}{left}): saved {checkpoint}"
    elif verdict == "requeue":  # SIGUSR1 killed a task before its handler was installed: nothing trained, nothing saved
        cause, left_s = cause_of_signal(context.current(), None)
        checkpoint = None
        left = "" if left_s is None else f", {left_s} s left"
        said = f"SIGUSR1 as a task started, before it could act on it ({cause}{left}): nothing to save"
    elif verdict == "stall" and stall is not None:
        cause, left_s, checkpoint = restarts_log.STALL, None, None
        ranks = ", ".join(f"rank {r} on {n}" for r, n in zip(stall.get("ranks") or [], stall.get("nodes") or []))
        said = f"the step stalled ({ranks}: no step for {stall.get('idle_s')} s; stacks in {stall.get('stacks')})"
        if stall.get("exclude"):
            excluded = sorted({*record.get("excluded_nodes", []), *stall["exclude"]})
            update(run_dir, excluded_nodes=excluded)
    else:
        if requeued_by_itself(context.current()):
            print(f"trainer-cli: Slurm requeued job {job_id} itself: it resumes on its own", flush=True)
            return 0
        cause, left_s, checkpoint = restarts_log.STEP_KILLED, None, None
        said = (
            f"the step ended with exit code {exit_code}, stopped by Slurm "
            "(a signal or a kill, not an error of the training)"
        )
        if verdict == "step_start":
            cause = restarts_log.STEP_START
            said = (
                "srun started no task of the step within --slurm.step_start_timeout_s "
                f"({start_timeout_s} s): nodes busy or still cleaning up"
            )
    event = {
        "job_id": job_id,
        "cause": cause,
        "seconds_left": left_s,
        "step": request.get("step") if stall is None else stall.get("step"),
        "checkpoint": checkpoint,
    }
    if stall is not None:
        event.update(stalled=stall.get("ranks"), nodes=stall.get("nodes"), stacks=stall.get("stacks"))
        event["stall"] = {k: stall.get(k) for k in ("job_id", "restart", "step", "idle_s", "time")}  # each kept
    if not restarts.allows(cause):
        restarts_log.record(run_dir, restart=restarts.count, action="stop", **event)
        update(run_dir, ended_by=cause)
        print(
            f"trainer-cli: {said}; {restarts.refusal(cause)}. Resume with: train submit --config "
            f"{Path(run_dir) / 'config.yaml'}",
            flush=True,
        )
        code = 0 if verdict == "requeue" else exit_code
        ended(run_dir, code)
        return code
    if os.environ.get(ENV_REQUEUE_MODE) == "resubmit":
        return _resubmit(run_dir, said, restarts.count + 1, event)
    restarts_log.record(run_dir, restart=restarts.count + 1, action="requeue", **event)
    requeued(run_dir, checkpoint or "")
    print(
        f"trainer-cli: {said}; requeueing job {job_id} (restart {restarts.count + 1}), it resumes on its own",
        flush=True,
    )
    exclude = ",".join(read(run_dir).get("excluded_nodes") or []) if stall is not None else ""
    if exclude:  # the requeue ends this script (SIGTERM, SIGKILL after KillWait): the exclusion must follow it
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    own_id = str(context.current().own_id)  # an array task alone
    error = _slurm(slurm_commands.requeue, own_id, timeout=SLURM_TIMEOUT_S)
    if error:
        print(f"trainer-cli: `scontrol requeue {job_id}` failed: {error}; resubmitting instead", flush=True)
        return _resubmit(run_dir, None, restarts.count + 1, event)
    if exclude:  # Slurm changes the nodes a job excludes only while it is pending: now
        for _ in range(5):
            error = _slurm(slurm_commands.update_job, own_id, timeout=10, ExcNodeList=exclude)
            if not error:
                break
            time.sleep(0.5)
        print(f"trainer-cli: job {job_id} excludes {exclude}" + (f": not set: {error}" if error else ""), flush=True)
    return 0


def _failed_before_training(run_dir: Path, exit_code: int, records_dir: Path | None) -> int:
    """The step failed before any task started training (a container that cannot start, a missing
    interpreter or image, an import error): the job ends FAILED now, no restart (it would fail the
    same way), and says why in one line: the first failing task's error (:mod:`trainer_cli.job.task_output`)."""
    cause = task_output.read_first_error(records_dir) or "the tasks wrote nothing on stderr"
    ended(run_dir, exit_code, error=f"failed before training: {cause}")
    print(
        f"trainer-cli: the step ended with exit code {exit_code} before any task started training: {cause}; "
        f"not restarted (it would fail the same way). Fix that, then resume with: train submit --config "
        f"{Path(run_dir) / 'config.yaml'}",
        flush=True,
    )
    return exit_code


def _seconds_since(iso: Any) -> float | None:
    """Seconds from ``iso`` (a time :func:`_now` wrote) until now; None when it cannot be read."""
    try:
        return (datetime.now(timezone.utc) - datetime.fromisoformat(str(iso))).total_seconds()
    except (TypeError, ValueError):
        return None


def this_stall(run_dir: Path) -> dict[str, Any] | None:
    """The stall the watchdog recorded for this start of this job (:mod:`~trainer_cli.schedulers.slurm.watchdog`)."""
    stall = read(run_dir).get("stall")
    if not isinstance(stall, dict):
        return None
    ours = str(stall.get("job_id")) == str(this_job_id()) and stall.get("restart") == policy().count
    return stall if ours else None


def _resubmit(run_dir: Path, said: str | None, restart: int, event: dict[str, Any]) -> int:
    """Queue the run's script again (:func:`resubmit`), recorded as restart ``restart``; 0, or 1 when sbatch refused."""
    restarts_log.record(run_dir, restart=restart, action="resubmit", **event)
    record = resubmit_requested(run_dir, event.get("checkpoint") or "")
    start = f"{said}; the job" if said else "The job"
    print(
        f"trainer-cli: {start} resubmits itself into {run_dir} once its tasks have ended (restart {restart})",
        flush=True,
    )
    return 1 if resubmit(run_dir, record).get("state") == "FAILED" else 0


def _slurm(action: Callable[..., None], *args: str, **kwargs: Any) -> str:
    """Run a Slurm action of :mod:`trainer_cli.schedulers.slurm.commands`; its error ('' when it succeeded)."""
    try:
        action(*args, **kwargs)
    except slurm_commands.SlurmCommandError as err:
        return err.message
    return ""


def resubmit(run_dir: Path, record: dict[str, Any]) -> dict[str, Any]:
    """Queue the run's own script again (``sbatch <run>/submit.sbatch``) as the next restart of
    this job, with the environment of this job's script less its Slurm variables; record the new job.

    Returns:
        The new record: state PENDING (or what the new job recorded already), or FAILED with
        ``error`` when sbatch refused (one line in the log says how to resume by hand).
    """
    old_id, restarts = this_job_id(), policy().count + 1
    script = Path(record.get("script") or Path(run_dir) / "submit.sbatch")
    chain = [*map(str, record.get("resubmitted_from") or []), str(old_id)]
    env = {k: v for k, v in os.environ.items() if not k.startswith(_JOB_ENV_PREFIXES) or k == "SLURM_CONF"}
    env[ENV_PRIOR_RESTARTS] = str(restarts)
    if record.get("excluded_nodes"):  # nodes a rank stalled on (trainer_cli.schedulers.slurm.watchdog)
        env["SBATCH_EXCLUDE"] = ",".join(record["excluded_nodes"])
    update(run_dir, resubmitted_from=chain)  # before sbatch: the new job's own start record keeps it
    try:
        new_id = slurm_commands.sbatch(script, env=env)
    except slurm_commands.SlurmCommandError as err:
        print(
            f"trainer-cli: resubmitting {script} failed: {err.message}; resume with: train submit --config "
            f"{Path(run_dir) / 'config.yaml'}",
            flush=True,
        )
        return update(run_dir, job_id=old_id, state="FAILED", error=f"resubmission failed: {err.message}", ended=_now())
    print(f"trainer-cli: resubmitted {run_dir} as job {new_id} (restart {restarts}), it resumes on its own", flush=True)
    if record.get("test_job_id"):  # --slurm.test_after_fit: the test waits for the new job, not this one (ending now)
        test_id = str(record["test_job_id"])
        try:
            slurm_commands.update_job(test_id, env=env, timeout=SLURM_TIMEOUT_S, Dependency=f"afterok:{new_id}")
        except slurm_commands.SlurmCommandError as err:
            print(f"trainer-cli: test job {test_id} not moved after job {new_id}: {err.message}", flush=True)
    now = read(run_dir)
    if str(now.get("job_id")) == new_id:  # the new job has started and recorded itself already
        return now
    log = Path(run_dir) / f"slurm-{new_id}.log"
    return update(
        run_dir,
        job_id=new_id,
        state="PENDING",
        restarts=restarts,
        prior_restarts=restarts,
        log=str(log),
        exit_code=None,
    )


def main(argv: list[str]) -> int:
    """``python -m trainer_cli.schedulers.slurm.batch RUN_DIR start|end [EXIT_CODE]``: ``start`` returns 0
    (a record that cannot be written never fails the job); ``end`` returns the exit code for the
    batch script (:func:`end_of_step`; srun's exit code when the decision itself fails).
    ``python -m trainer_cli.schedulers.slurm.batch port``: prints this job's ``MASTER_PORT``
    (:func:`trainer_cli.job.ports.master_port`)."""
    if argv[:1] == ["port"]:
        return ports.print_master_port()
    exit_code = 0
    try:
        run_dir, event = Path(argv[0]), argv[1]
        if event == "start":
            started(run_dir)
        elif event == "end":
            exit_code = int(argv[2]) if len(argv) > 2 else 0
            records = os.environ.get(task_output.ENV_TASK_RECORDS)
            return end_of_step(run_dir, exit_code, Path(records) if records else None)
        else:
            raise ValueError(f"unknown event {event!r}")
    except (IndexError, ValueError, OSError) as err:
        print(f"trainer-cli: job.json not updated: {err}", file=sys.stderr)
    return exit_code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
