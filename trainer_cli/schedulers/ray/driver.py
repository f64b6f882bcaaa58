"""The Ray job's entrypoint: start the run's worker group, restart it after a lost worker.

``python -m trainer_cli.schedulers.ray.driver --run_dir RUN --job_id ID --num_nodes N --devices D ...``
runs as the Ray job's driver, in the job's working directory (the run's code snapshot, shipped by Ray).
It places one bundle per Lightning node (``devices`` workers each: ``STRICT_SPREAD`` over machines for
GPUs, packed for CPUs), starts one :class:`Worker` actor per rank, and each runs the run's
``train fit --config <run>/config.yaml --run_dir <run>`` (or, for a user's script, ``python main.py fit ...``
as its Slurm job runs it: ``--entry``, ``--verb``, ``--chdir``) in a process of its own with torch's variables
(``MASTER_ADDR``/``MASTER_PORT`` of rank 0's node, ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``,
``NODE_RANK``), so Lightning's DDP joins them as it joins processes torchrun started. The worker group is
the unit of failure (as Ray Train's ``FailureConfig``): when one rank's process ends with an error or its
actor dies, every rank is stopped, and the group starts again (up to ``--max_failures`` times) with
``--ckpt_path last``: the run resumes from its ``last.ckpt`` at the step it stopped, its
``history.jsonl`` recording a ``requeue`` (:data:`trainer_cli.job.context.RAY_ATTEMPT_ENV` > 0).

``<run>/job.json`` keeps the job's state as the Slurm jobs' does (``RUNNING``, ``restarts``, then
``COMPLETED`` or ``FAILED`` with the exit code), read by ``train jobs``; each rank's output is appended
to ``<run>/ray-<job id>.log`` and printed (``ray job logs``).
"""

from __future__ import annotations

import argparse
import os
import shlex
import signal
import socket
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from trainer_cli.job import jobstate
from trainer_cli.job.context import RAY_ATTEMPT_ENV, RAY_ENV
from trainer_cli.job.workdir import WORKDIR_ENV

LOG_PATTERN = "ray-{job_id}.log"
"""A Ray job's log in its run directory: the output of every rank of every attempt."""
ATTEMPT_ENV = "TRAINER_CLI_ATTEMPT"  # trainer_cli.callbacks.attempt_clock.ENV_ATTEMPT: the ranks' shared id
STOP_GRACE_S = 5.0


def _die_with_parent() -> None:  # pragma: no cover - runs in the child between fork and exec
    """The worker's process ends when its actor does (Linux: ``PR_SET_PDEATHSIG``), in a session of its own."""
    os.setsid()
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except OSError:
        pass


class Worker:
    """One rank of the worker group: a Ray actor that runs the rank's ``train fit`` process."""

    def __init__(self) -> None:
        self.proc: subprocess.Popen[bytes] | None = None

    def where(self) -> tuple[str, list[str]]:
        """This actor's node address and the GPU ids Ray gave it."""
        import ray

        node = ray.get_runtime_context().get_node_id()  # the address the node was started with (127.0.0.1 here)
        ip = next((n["NodeManagerAddress"] for n in ray.nodes() if n["NodeID"] == node), None)
        return ip or ray.util.get_node_ip_address(), [str(g) for g in ray.get_gpu_ids()]

    def free_port(self) -> int:
        """A port free on this actor's node now (rank 0's: the group's ``MASTER_PORT``)."""
        with socket.socket() as s:
            s.bind(("", 0))
            return int(s.getsockname()[1])

    def run(
        self,
        command: list[str],
        env: dict[str, str],
        log: str,
        prefix: str,
        cwd: str | None = None,
        paths: tuple[str, ...] = (),
    ) -> int:
        """Run ``command`` with ``env`` added (in ``cwd``, else the actor's own folder), its output appended to
        ``log`` and printed; its exit code. ``paths``: folders relative to the actor's own folder (the working
        directory Ray shipped, the code snapshot) put first on the command's ``PYTHONPATH``."""
        env = dict(env)
        if paths:
            env["PYTHONPATH"] = os.pathsep.join(
                [*map(os.path.abspath, paths), *filter(None, [os.environ.get("PYTHONPATH")])]
            )
        proc = subprocess.Popen(
            command,
            cwd=cwd,
            env={**os.environ, **env},
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            preexec_fn=_die_with_parent,
        )
        self.proc = proc
        assert proc.stdout is not None
        with open(log, "ab", buffering=0) as out:
            for line in proc.stdout:
                out.write(line)
                sys.stdout.write(prefix + line.decode(errors="replace"))
                sys.stdout.flush()
        return proc.wait()

    def pid(self) -> int | None:
        """The rank's process id (None before it started)."""
        return self.proc.pid if self.proc is not None else None

    def stop(self) -> None:
        """Kill the rank's process group: the group restarts from its last checkpoint, so nothing is saved."""
        if self.proc is not None and self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def _placement(ray: Any, num_nodes: int, devices: int, gpu: bool, cpus: float) -> Any:
    from ray.util.placement_group import placement_group

    bundle = {"CPU": cpus * devices, **({"GPU": float(devices)} if gpu else {})}
    strategy = "STRICT_SPREAD" if gpu and num_nodes > 1 else "PACK"
    group = placement_group([dict(bundle) for _ in range(num_nodes)], strategy=strategy)
    ray.get(group.ready())
    return group


def start_group(args: argparse.Namespace, attempt: int) -> int:
    """Start the worker group once and wait for it; returns 0 when every rank's fit ended well."""
    import ray
    from ray.util.placement_group import remove_placement_group
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    gpu = args.accelerator == "gpu"
    group = _placement(ray, args.num_nodes, args.devices, gpu, args.cpus_per_worker)
    actor: Any = ray.remote(Worker)
    workers: list[Any] = []  # (Ray's actor handles)
    for node in range(args.num_nodes):
        for _ in range(args.devices):
            strategy = PlacementGroupSchedulingStrategy(placement_group=group, placement_group_bundle_index=node)
            workers.append(
                actor.options(  # max_concurrency: `stop` while `run` waits
                    num_cpus=args.cpus_per_worker,
                    num_gpus=1 if gpu else 0,
                    scheduling_strategy=strategy,
                    max_concurrency=4,
                ).remote()
            )
    try:
        places = ray.get([w.where.remote() for w in workers])
        port = ray.get(workers[0].free_port.remote())
        world = len(workers)
        run_dir = Path(args.run_dir)
        config = str(run_dir / args.config)
        verb = [args.verb] if args.verb else []
        command = [sys.executable, *shlex.split(args.entry), *verb, "--config", config, "--run_dir", str(run_dir)]
        if attempt > 0:
            command += ["--ckpt_path", "last"]
        print(
            f"[driver] attempt {attempt}: {world} worker(s) on {sorted({ip for ip, _ in places})}, MASTER_PORT {port}"
        )
        refs = {}
        for rank, worker in enumerate(workers):
            node, local = divmod(rank, args.devices)
            env = {
                "MASTER_ADDR": places[0][0],
                "MASTER_PORT": str(port),
                "RANK": str(rank),
                "WORLD_SIZE": str(world),
                "LOCAL_RANK": str(local),
                "LOCAL_WORLD_SIZE": str(args.devices),
                "NODE_RANK": str(node),
                "GROUP_RANK": str(node),
                RAY_ENV: args.job_id,
                RAY_ATTEMPT_ENV: str(attempt),
                ATTEMPT_ENV: f"{args.job_id}.{attempt}",
                "PYTHONUNBUFFERED": "1",
            }
            if gpu:  # every rank of a node sees the node's GPUs, and takes its LOCAL_RANK's (as Ray Train does)
                node_gpus = [g for i, (_, ids) in enumerate(places) if i // args.devices == node for g in ids]
                env["CUDA_VISIBLE_DEVICES"] = ",".join(node_gpus)
            if args.submit_dir and Path(args.submit_dir).is_dir():  # relative paths as at submit (shared disk)
                env[WORKDIR_ENV] = args.submit_dir
            log = str(run_dir / LOG_PATTERN.format(job_id=args.job_id))
            refs[
                worker.run.remote(command, env, log, f"[rank {rank}] ", args.chdir or None, tuple(args.import_path))
            ] = rank
        pending = list(refs)
        code = 0
        while pending:
            done, pending = ray.wait(pending, num_returns=1)
            try:
                code = int(ray.get(done[0]))
            except ray.exceptions.RayError as err:  # the actor died (its node or process lost)
                print(f"[driver] rank {refs[done[0]]}: its worker was lost ({type(err).__name__})")
                code = 1
            if code != 0:
                print(f"[driver] rank {refs[done[0]]} ended with exit code {code}: stopping the worker group")
                break
        return code
    finally:
        for worker in workers:
            try:
                ray.get(worker.stop.remote(), timeout=STOP_GRACE_S)
            except Exception:  # noqa: BLE001 - a lost actor has nothing left to stop
                pass
            ray.kill(worker)
        remove_placement_group(group)


def main(argv: list[str] | None = None) -> int:
    """The driver's command line (see the module's description); returns the job's exit code."""
    parser = argparse.ArgumentParser(prog="python -m trainer_cli.schedulers.ray.driver")
    parser.add_argument("--run_dir", required=True)
    parser.add_argument("--job_id", required=True)
    parser.add_argument("--num_nodes", type=int, default=1)
    parser.add_argument("--devices", type=int, default=1)
    parser.add_argument("--accelerator", default="cpu")
    parser.add_argument("--cpus_per_worker", type=float, default=1.0)
    parser.add_argument("--max_failures", type=int, default=3)
    parser.add_argument("--submit_dir", default="")
    parser.add_argument("--entry", default="-m trainer_cli", help="what each rank's python runs (shell words)")
    parser.add_argument("--verb", default="fit", help="the verb it takes (empty: none)")
    parser.add_argument("--chdir", default="", help="the folder each rank starts in (empty: the actor's)")
    parser.add_argument("--config", default="config.yaml", help="the file in the run folder each rank's fit reads")
    parser.add_argument(
        "--import_path",
        action="append",
        default=[],
        help="a folder, relative to the working directory, first on PYTHONPATH",
    )
    args = parser.parse_args(argv)
    import ray

    ray.init(log_to_driver=True)
    run_dir = Path(args.run_dir)
    code = 1
    try:
        for attempt in range(args.max_failures + 1):
            jobstate.update(run_dir, job_id=args.job_id, state="RUNNING", restarts=attempt, scheduler="ray")
            started = time.time()
            code = start_group(args, attempt)
            print(f"[driver] attempt {attempt} ended with exit code {code} after {time.time() - started:.0f} s")
            if code == 0:
                break
    finally:  # (an error of the driver itself, or the job stopped: FAILED)
        ended = datetime.now(timezone.utc).isoformat(timespec="seconds")
        state = "COMPLETED" if code == 0 else "FAILED"
        jobstate.update(run_dir, job_id=args.job_id, state=state, exit_code=code, ended=ended)
    return code


if __name__ == "__main__":
    sys.exit(main())
