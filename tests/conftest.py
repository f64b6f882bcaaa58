"""Fixtures and hooks every test gets. The shared helpers (paths, ``run_train``, fake datasets,
TensorBoard scalars) live in :mod:`support`.

``make test`` runs the suite on two pytest-xdist workers (``-n 2 --dist loadgroup``). Every test
that uses the real local Slurm cluster (the ``slurm_cluster`` fixture) is put in one xdist group,
``slurm_cluster``, so all of them run one after the other on a single worker: a test that sets a
node DOWN, requeues or preempts a job never runs beside another cluster test. The other worker
runs the rest meanwhile, and the cluster tests that only ask the cluster (the ``slurm_queries``
fixture: they queue nothing and change nothing) in a group of their own, ``slurm_queries``.

Each worker's ``train`` commands (``support.run_train``) and users' scripts start by fork from a
process that has imported torch and Lightning once (:mod:`forkserver`; 3 s less per command);
``TRAINER_CLI_TESTS_FORK=0`` starts every one of them as a new interpreter instead.
"""

from __future__ import annotations

import os

import pytest

CLUSTER_GROUP = "slurm_cluster"
QUERY_GROUP = "slurm_queries"
STATE_KEY = pytest.StashKey[str]()
# Modules whose module-scoped fixture is expensive (a training run, a process running many cases):
# under --dist loadgroup each test is scheduled alone, so every worker that gets one of the module's
# tests would run the fixture again. Their tests go to one worker (an xdist group per module); a
# cluster test among them stays in the cluster group.
ONE_WORKER_MODULES = (
    "test_bad_input", "test_export_predict", "test_foreign_stock", "test_foreign_user_code", "test_resume",
    "test_resume_choice", "test_submit_render", "test_completion",
    # its module-scoped fixture starts the local Ray cluster and stops it after the module: on two
    # workers the first to finish stopped it under the other's running job
    "test_ray_engine",
    # a module-scoped training each (test_history's finished run, test_resume_changes' trained run, test_no_flock's
    # run without flock): trained once, not once per worker
    "test_history", "test_resume_changes", "test_no_flock",
    # its module-scoped fixture runs three fresh interpreters (stock, script, train) that both parametrized
    # tests read: on two workers it ran twice (38 s + 32 s of setup in the 2026-12-02 15:20 make test)
    "test_yaml_crossings",
)

if os.environ.get("PYTEST_XDIST_WORKER"):
    # Two workers on a 2-core machine: each test's training processes (and the cluster's jobs,
    # which inherit this environment) get one intra-op thread, not one per core, so the workers do
    # not oversubscribe the cores. Set before anything in this worker imports torch.
    os.environ.setdefault("OMP_NUM_THREADS", "1")


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark the tests :mod:`tiers` moves to the long tier for make test's time ``long``; put every test that needs the real cluster in the one xdist group ``slurm_cluster``, and the
    tests of each of :data:`ONE_WORKER_MODULES` in a group of their own.

    ``tryfirst``: pytest-xdist reads the ``xdist_group`` marker in its own
    ``pytest_collection_modifyitems`` on each worker (it appends ``@<group>`` to the node id the
    scheduler groups by); a mark added after it would never reach the scheduler.
    """
    from pathlib import Path

    import tiers

    gone = tiers.unmatched(Path(__file__).parent.parent)
    if gone:
        raise pytest.UsageError(f"tests/tiers.py names tests that are gone (renamed?): {gone}")
    for item in items:
        if tiers.long_for_time(item.nodeid):
            item.add_marker(pytest.mark.long)
        if CLUSTER_GROUP in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.xdist_group(_cluster_group(item)))
            item.add_marker(pytest.mark.slurm_cluster)  # `-m "not slurm_cluster"`: the rest alone
        elif item.path.stem in ONE_WORKER_MODULES:
            item.add_marker(pytest.mark.xdist_group(item.path.stem))


def _cluster_group(item: pytest.Item) -> str:
    """The xdist group of a test that uses the cluster: :data:`QUERY_GROUP` for one that only asks it."""
    return QUERY_GROUP if QUERY_GROUP in getattr(item, "fixturenames", ()) else CLUSTER_GROUP


def pytest_configure(config: pytest.Config) -> None:
    """In every process (each xdist worker too): the user's state folder (``XDG_STATE_HOME``, where
    ``train submit`` keeps its registry of jobs) is a temporary one of its own, so that tests neither
    share nor pollute the real home; removed at :func:`pytest_unconfigure`.

    In the process that runs the session (not an xdist worker): name the file that says the
    tests started the local cluster (``slurm_support.slurm_cluster`` writes it; the workers inherit
    the environment), so that :func:`pytest_sessionfinish` stops it once every worker is done."""
    import tempfile

    config.stash[STATE_KEY] = os.environ["XDG_STATE_HOME"] = tempfile.mkdtemp(prefix="trainer-cli-tests-state-")
    if not hasattr(config, "workerinput"):
        mark = os.path.join(tempfile.gettempdir(), f"trainer-cli-tests-started-cluster-{os.getpid()}")
        os.environ["TRAINER_CLI_TESTS_CLUSTER_MARK"] = mark


def pytest_unconfigure(config: pytest.Config) -> None:
    """Remove this process's temporary state folder (:func:`pytest_configure`)."""
    import shutil

    if STATE_KEY in config.stash:
        shutil.rmtree(config.stash[STATE_KEY], ignore_errors=True)


def pytest_sessionfinish(session: pytest.Session) -> None:
    """The session's end (not a worker's): stop the local cluster if a test started it."""
    mark = os.environ.get("TRAINER_CLI_TESTS_CLUSTER_MARK")
    if not hasattr(session.config, "workerinput") and mark and os.path.isfile(mark):
        from slurm_support import stop_if_started

        stop_if_started(mark)


def pytest_collection_finish(session: pytest.Session) -> None:
    """On an xdist worker under ``--dist loadgroup``: fail the run unless every cluster test's node
    id carries the group (xdist schedules by it; pytest 9.2 with pytest-xdist 3.8 drops it
    silently, and the cluster tests would then run beside each other)."""
    if not (hasattr(session.config, "workerinput") and getattr(session.config.option, "dist", "no") == "loadgroup"):
        return
    lost = [item.nodeid for item in session.items if CLUSTER_GROUP in getattr(item, "fixturenames", ()) and not item.nodeid.endswith(f"@{_cluster_group(item)}")]
    if lost:
        raise pytest.UsageError(f"the xdist group {CLUSTER_GROUP!r} did not reach the scheduler (pytest {pytest.__version__}): {lost[:3]}")


@pytest.fixture(autouse=True)
def _restore_global_state(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test starts without a run directory inherited through the environment, and with
    Python's own Ctrl-C handling: Lightning ignores SIGINT for the rest of the process once it has
    handled a KeyboardInterrupt (``trainer/call.py``), which would swallow a later in-process test's Ctrl-C."""
    import signal
    import threading

    monkeypatch.delenv("TRAINER_CLI_RUN_DIR", raising=False)
    if threading.current_thread() is threading.main_thread() and signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
