"""The job a process runs in (:mod:`trainer_cli.job.context`): what ``JobContext.from_env`` reads
from Slurm's and the Ray engine's variables, how ``current()`` keeps it, and the guard that no other
module reads those variables from the environment itself.

The guard reads the source with ``ast``: ``os.environ.get(X)``, ``os.environ[X]``, ``os.getenv(X)``,
``X in os.environ``, ``.pop``/``.setdefault``, and a call given both the environment and ``X``
(``env_count(os.environ, X)``), where the environment is ``os.environ``, ``environ`` or a name
bound to it, and ``X`` a string, a module constant holding one (of this module or imported from
another of the package), or a loop variable over strings (``for name in ("SLURM_PROCID", ...)``).
"""

from __future__ import annotations

import ast
import functools
import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest
from slurm_support import slurm_cluster  # noqa: F401 - a fixture
from support import REPO

from trainer_cli.job import context
from trainer_cli.job.context import RAY_ATTEMPT_ENV, RAY_ENV, JobContext

PACKAGE = REPO / "trainer_cli"
ALLOWED = {
    "trainer_cli/job/context.py": "the one reader",
}
"""Modules that may read the scheduler's variables, with the reason. The code that renders Slurm's
scripts writes ``$SLURM_*`` into shell text and reads none here; the one that submits a job from
inside one (``jobstate``'s resubmission, ``doctor``'s probe) drops ``SLURM_*`` from the child's
environment by prefix, which is not a read of a value (and not matched)."""


def scheduler_variable(name: str) -> bool:
    """Whether ``name`` is a variable of the scheduler's job environment: ``SLURM_*``/``SLURMD_*`` (but
    ``SLURM_CONF``, where the Slurm commands find their cluster, which is not the job's) or the Ray
    engine's (``TRAINER_CLI_RAY_*``)."""
    return (name.startswith("SLURM") and name != "SLURM_CONF") or name in (RAY_ENV, RAY_ATTEMPT_ENV)


def _constants(tree: ast.Module) -> dict[str, str]:
    found = {}
    for node in tree.body:
        targets = [node.target] if isinstance(node, ast.AnnAssign) else getattr(node, "targets", [])
        value = getattr(node, "value", None)
        if isinstance(value, ast.Constant) and isinstance(value.value, str):
            found.update({t.id: value.value for t in targets if isinstance(t, ast.Name)})
    return found


@functools.cache
def _package_constants(module: str) -> dict[str, str]:
    path = PACKAGE.parent / (module.replace(".", "/") + ".py")
    if not path.is_file():
        path = PACKAGE.parent / module.replace(".", "/") / "__init__.py"
    return _constants(ast.parse(path.read_text())) if path.is_file() else {}


def scheduler_reads(source: str) -> list[str]:
    """``line: code`` for each read of a scheduler's variable from the environment in ``source``."""
    tree = ast.parse(source)
    names: dict[str, set[str]] = {k: {v} for k, v in _constants(tree).items()}
    modules: dict[str, dict[str, str]] = {}
    environs = {"environ"}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("trainer_cli"):
            values = _package_constants(node.module)
            for alias in node.names:
                if alias.name in values:
                    names.setdefault(alias.asname or alias.name, set()).add(values[alias.name])
                else:
                    modules[alias.asname or alias.name] = _package_constants(f"{node.module}.{alias.name}")
        elif isinstance(node, (ast.For, ast.comprehension)) and isinstance(node.target, ast.Name):
            if isinstance(node.iter, (ast.Tuple, ast.List, ast.Set)):
                strings = {e.value for e in node.iter.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)}
                names.setdefault(node.target.id, set()).update(strings)
        elif isinstance(node, ast.Assign):  # env = os.environ (or os.environ if ... else ...)
            value = node.value
            branches = [value.body, value.orelse] if isinstance(value, ast.IfExp) else [value]
            if any(ast.unparse(b) in ("os.environ", "environ") for b in branches):
                environs.update(t.id for t in node.targets if isinstance(t, ast.Name))

    def values(expr: ast.expr) -> set[str]:
        if isinstance(expr, ast.Constant) and isinstance(expr.value, str):
            return {expr.value}
        if isinstance(expr, ast.Name):
            return names.get(expr.id, set())
        if isinstance(expr, ast.Attribute) and isinstance(expr.value, ast.Name):
            value = modules.get(expr.value.id, {}).get(expr.attr)
            return {value} if value else set()
        return set()

    def is_environ(expr: ast.expr) -> bool:
        return (isinstance(expr, ast.Attribute) and expr.attr == "environ") or (
            isinstance(expr, ast.Name) and expr.id in environs
        )

    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        keys: list[ast.expr] = []
        if isinstance(node, ast.Call):
            func = node.func
            if isinstance(func, ast.Attribute) and func.attr in ("get", "pop", "setdefault") and is_environ(func.value):
                keys = node.args[:1]
            elif (isinstance(func, ast.Attribute) and func.attr == "getenv") or (
                isinstance(func, ast.Name) and func.id == "getenv"
            ):
                keys = node.args[:1]
            elif any(is_environ(a) for a in [*node.args, *(k.value for k in node.keywords)]):
                keys = [*node.args, *(k.value for k in node.keywords)]
        elif isinstance(node, ast.Subscript) and is_environ(node.value):
            keys = [node.slice]
        elif isinstance(node, ast.Compare) and any(is_environ(c) for c in node.comparators):
            if any(isinstance(op, (ast.In, ast.NotIn)) for op in node.ops):
                keys = [node.left]
        if any(scheduler_variable(v) for key in keys for v in values(key)):
            found.append((node.lineno, ast.unparse(node)))
    return [f"{line}: {code}" for line, code in sorted(found)]


def test_the_guard_sees_every_form_of_a_read() -> None:
    seen = scheduler_reads(
        "import os\nfrom os import environ, getenv\nfrom trainer_cli.job.context import RAY_ENV\n"
        "from trainer_cli.job import context\n"
        "JOB = 'SLURM_JOB_ID'\n"
        "a = os.environ.get('SLURM_JOB_ID')\n"
        "b = os.environ['SLURM_PROCID']\n"
        "c = 'SLURM_NTASKS' in os.environ\n"
        "d = os.getenv('SLURMD_NODENAME')\n"
        "e = environ.get(JOB)\n"
        "f = getenv(RAY_ENV)\n"
        "g = os.environ.get(context.RAY_ATTEMPT_ENV)\n"
        "h = count(os.environ, 'SLURM_RESTART_COUNT')\n"
        "env = os.environ\n"
        "i = env.get('SLURM_ARRAY_JOB_ID')\n"
        "for name in ('RANK', 'SLURM_LOCALID'):\n    j = os.environ.get(name)\n"
        "k = 'SLURM_JOB_ID' not in os.environ\n"
    )
    assert [int(line.split(":")[0]) for line in seen] == [6, 7, 8, 9, 10, 11, 12, 13, 15, 17, 18], seen
    harmless = (
        "import os\nos.environ.get('SLURM_CONF')\nos.environ.get('RANK')\nx = {'SLURM_JOB_ID': 1}['SLURM_JOB_ID']\n"
        "env = {k: v for k, v in os.environ.items() if not k.startswith('SLURM_')}\n"
    )
    assert scheduler_reads(harmless) == []


def test_no_module_but_the_context_reads_the_schedulers_variables() -> None:
    """Everything else takes the job from ``context.current()`` or a ``JobContext`` passed down."""
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        where = str(path.relative_to(REPO))
        reads = scheduler_reads(path.read_text())
        if reads and where not in ALLOWED:
            found[where] = reads
    assert not found, f"read the job from trainer_cli.job.context instead: {json.dumps(found, indent=1)}"
    assert scheduler_reads((PACKAGE / "job" / "context.py").read_text()), "the guard sees the context's own reads"


# -- JobContext.from_env ----------------------------------------------------------------------


class Recording(dict[str, str]):
    """An environment that notes every name read from it."""

    def __init__(self, values: Mapping[str, str]) -> None:
        super().__init__(values)
        self.read: set[str] = set()

    def get(self, key: str, default: object = None) -> object:  # type: ignore[override]
        self.read.add(key)
        return super().get(key, default)

    def __getitem__(self, key: str) -> str:
        self.read.add(key)
        return super().__getitem__(key)

    def __contains__(self, key: object) -> bool:
        self.read.add(str(key))
        return super().__contains__(key)


SLURM_ARRAY_TASK = {
    "SLURM_JOB_ID": "107",
    "SLURM_ARRAY_JOB_ID": "105",
    "SLURM_ARRAY_TASK_ID": "2",
    "SLURM_JOB_NAME": "digits",
    "SLURM_PROCID": "3",
    "SLURM_NTASKS": "4",
    "SLURM_NPROCS": "4",
    "SLURM_LOCALID": "1",
    "SLURM_NODEID": "1",
    "SLURMD_NODENAME": "node2",
    "SLURM_JOB_NODELIST": "node[1-2]",
    "SLURM_NTASKS_PER_NODE": "2(x2)",
    "RANK": "9",  # not Slurm's: ignored under Slurm
}


def test_a_slurm_array_task() -> None:
    env = Recording(SLURM_ARRAY_TASK)
    job = JobContext.from_env(env)
    assert job == JobContext(
        scheduler="slurm",
        job_id="107",
        attempt=0,
        rank=3,
        world_size=4,
        local_rank=1,
        node_rank=1,
        array_job_id="105",
        array_task_id=2,
        requeue_signal=signal.SIGUSR1,
        job_name="digits",
        node_name="node2",
        node_list="node[1-2]",
        tasks_per_node=2,
        step_rank_given=True,
        world_size_given=True,
    )
    assert job.in_job and job.multi_task
    assert env.read <= set(context.NAMES), "current() keys its kept context on every name from_env reads"


def test_a_requeued_slurm_batch_script() -> None:
    """The batch script of a job requeued twice, submitted without --ntasks: no ranks, no task count."""
    job = JobContext.from_env({"SLURM_JOB_ID": "41", "SLURM_RESTART_COUNT": "2", "SLURM_PROCID": "0"})
    assert (job.scheduler, job.job_id, job.attempt, job.rank, job.world_size) == ("slurm", "41", 2, 0, 1)
    assert not job.world_size_given and not job.multi_task and job.array_job_id is job.array_task_id is None
    assert job.tasks_per_node is None and job.requeue_signal == signal.SIGUSR1


def test_a_ray_worker() -> None:
    env = Recording(
        {RAY_ENV: "raysubmit_X1", RAY_ATTEMPT_ENV: "1", "RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "0",
         "NODE_RANK": "1", "LOCAL_WORLD_SIZE": "1", "SLURM_ARRAY_JOB_ID": "5"}  # fmt: skip
    )
    job = JobContext.from_env(env)
    assert job == JobContext(
        scheduler="ray", job_id="raysubmit_X1", attempt=1, rank=1, world_size=2, local_rank=0, node_rank=1,
        tasks_per_node=1, step_rank_given=True, world_size_given=True,
    )  # fmt: skip
    assert job.multi_task and job.requeue_signal is None and job.array_job_id is None
    assert env.read <= set(context.NAMES)


def test_no_scheduler() -> None:
    """A local run (torchrun's or Lightning's own RANK is not a scheduler's job)."""
    job = JobContext.from_env({"RANK": "1", "WORLD_SIZE": "2", "SLURM_CONF": "/etc/slurm.conf"})
    assert job == JobContext() and not job.in_job and not job.multi_task and job.scheduler is None


# -- current() ------------------------------------------------------------------------------


@pytest.fixture
def no_job(monkeypatch: pytest.MonkeyPatch) -> Iterator[pytest.MonkeyPatch]:
    for name in context.NAMES:
        monkeypatch.delenv(name, raising=False)
    yield monkeypatch


def test_current_is_read_once_and_again_when_its_variables_change(no_job: pytest.MonkeyPatch) -> None:
    first = context.current()
    assert first == JobContext() and context.current() is first, "kept while nothing changed"
    no_job.setenv("PATH_UNRELATED_TO_JOBS", "x")
    assert context.current() is first, "another variable is not the job's"
    no_job.setenv("SLURM_JOB_ID", "12")
    no_job.setenv("SLURM_RESTART_COUNT", "1")
    assert (context.current().job_id, context.current().attempt) == ("12", 1), "a test's setenv is seen"
    no_job.delenv("SLURM_JOB_ID")
    assert context.current() == JobContext(), "and its undoing"


def test_a_forked_child_given_another_environment_sees_its_own_job(no_job: pytest.MonkeyPatch) -> None:
    """As the suite's fork server's children: the parent read its context before the fork."""
    assert not context.current().in_job
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        os.close(read)
        os.environ.update({RAY_ENV: "raysubmit_7", "RANK": "1", "WORLD_SIZE": "2"})
        os.write(write, json.dumps([context.current().scheduler, context.current().rank]).encode())
        os._exit(0)
    os.close(write)
    with os.fdopen(read) as answer:
        assert json.loads(answer.read()) == ["ray", 1]
    os.waitpid(pid, 0)
    assert not context.current().in_job


# -- on the real cluster --------------------------------------------------------------------

PRINT = (
    "import dataclasses, json; from trainer_cli.job.context import current; "
    "print(json.dumps(dataclasses.asdict(current()) | {\"multi_task\": current().multi_task}))"
)


def test_the_tasks_of_a_real_slurm_array_job(slurm_cluster: None, tmp_path: Path) -> None:  # noqa: F811
    """What Slurm gives the batch script and the two ``srun`` tasks (on two nodes) of each of two array tasks."""
    script = tmp_path / "job.sh"
    python = f"{sys.executable} -c '{PRINT}'"
    script.write_text(f"#!/bin/bash\n{python}\nsrun {python}\n")
    done = subprocess.run(
        ["sbatch", "-W", "--array=3-4", "-N2", "--ntasks-per-node=1", "-J", "ctx", "-o", str(tmp_path / "out_%a.txt"),
         "--chdir", str(REPO), "--time", "00:02:00", str(script)],
        capture_output=True, text=True, timeout=240, env={**os.environ, "PYTHONPATH": str(REPO)},
    )  # fmt: skip
    outputs = {task: (tmp_path / f"out_{task}.txt") for task in (3, 4)}
    logs = {task: out.read_text() if out.exists() else "" for task, out in outputs.items()}
    assert done.returncode == 0, done.stderr + json.dumps(logs)
    ids = set()
    for task, log in logs.items():
        batch, *tasks = [json.loads(line) for line in log.splitlines() if line.startswith("{")]
        assert batch["scheduler"] == "slurm" and batch["array_task_id"] == task and batch["job_name"] == "ctx"
        assert batch["rank"] == 0 and batch["world_size"] == 2 and batch["step_rank_given"], batch
        assert sorted(t["rank"] for t in tasks) == [0, 1] and {t["world_size"] for t in tasks} == {2}
        assert sorted(t["node_rank"] for t in tasks) == [0, 1] and {t["local_rank"] for t in tasks} == {0}
        assert {t["job_id"] for t in tasks} == {batch["job_id"]}
        assert {t["array_job_id"] for t in tasks} == {batch["array_job_id"]} and all(t["multi_task"] for t in tasks)
        assert len({t["node_name"] for t in tasks}) == 2 and {t["tasks_per_node"] for t in tasks} == {1}
        assert all(t["attempt"] == 0 and t["requeue_signal"] == signal.SIGUSR1 for t in tasks)
        ids.add((batch["array_job_id"], batch["job_id"]))
    assert len({array for array, _ in ids}) == 1 and len({job for _, job in ids}) == 2, "each task its own id"
