"""The cluster's core on Slurm 24.11 (issue 46): the same tests that run on the host's Slurm (22.05 on
Debian 12) in ``make test``, run again in ``make test-long`` on ``LOCAL_SLURM_VERSION=24.11
scripts/local-slurm``'s cluster (Debian 13's Slurm in a debootstrap root of its own, beside the host's).

One test: a pytest session of :data:`CORE` in a subprocess with ``LOCAL_SLURM_VERSION=24.11``, whose
``slurm_cluster`` fixture (tests/slurm_support.py) starts that cluster when it is not up and puts its
clients first on ``PATH``. What a cluster that cannot start (no root, no debootstrap, no mirror) makes of
it is the fixture's: a skip with the reason, a failure under ``CI=true``; a skip in the session is a
failure here under ``CI=true`` too.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from support import REPO

VERSION = "24.11"
CORE = (
    # submit: a 2-node DDP job completes with every rank, its test stage, `train jobs`
    "tests/test_slurm_cluster.py::test_ddp_job_completes_with_every_rank",
    "tests/test_slurm_cluster.py::test_test_job_runs_after_fit_on_best_checkpoint",
    "tests/test_slurm_cluster.py::test_train_jobs_lists_states",
    # requeue by USR1 and the run resumed; resubmission of a completed run
    "tests/test_slurm_cluster.py::test_usr1_checkpoints_requeues_and_resumes",
    "tests/test_slurm_cluster.py::test_completed_run_resubmitted_is_not_retrained",
    "tests/test_slurm_cluster.py::test_max_restarts_is_checked_before_requeueing",
    # an array job (cross-validation folds)
    "tests/test_slurm_cluster.py::test_cv_folds_run_as_a_job_array_then_aggregate",
    # the checks against the cluster (scontrol show partition/node, sacctmgr)
    "tests/test_slurm_cluster.py::test_cluster_refuses_what_it_cannot_run_before_anything_is_written",
    "tests/test_slurm_cluster.py::test_check_alone_exits_0_or_2_and_writes_nothing",
    # preemption by Slurm (partition urgent), time limit, resubmission (on 24.11 a job preempted, requeued
    # and then completed ends JobState=PREEMPTED ExitCode=0:0, read as COMPLETED: slurm_output.job_state;
    # both modes passed here in 88 s on a quiet machine, 2026-12-02)
    "tests/test_slurm_restarts.py::test_a_real_preemption_is_told_from_the_time_limit",
    "tests/test_slurm_restarts.py::test_preemption_then_time_limit_and_the_cap_names_the_cause",
    "tests/test_slurm_restarts.py::test_resubmit_mode_continues_the_run_as_a_new_job",
    # doctor on two nodes, a drained node named
    "tests/test_doctor.py::test_two_nodes_by_two_tasks_pass_and_a_drained_node_is_named",
    # array sweep workers, one preempted
    "tests/test_sweep_workers.py::test_workers_fill_the_study_and_a_preempted_worker_resumes_its_trial",
    # train init from scontrol and sacctmgr
    "tests/test_init.py::test_the_local_clusters_profile_matches_scontrol_and_sacctmgr_and_passes_the_check",
    # accounting: sacct, sacctmgr; cost and goodput from sacct
    "tests/test_cluster_accounting.py::test_accounts_and_qos_the_user_has_pass",
    "tests/test_cluster_accounting.py::test_sacct_answers_for_a_real_job",
    "tests/test_cost.py::test_cost_of_a_two_task_job_preempted_once",
    "tests/test_goodput_cluster.py",
    # a container job: Charliecloud's ch-run (charliecloud-runtime 0.38, in the 24.11 root: the batch script
    # and the tasks run there) with the Debian image cached under /var/tmp (bound at the same place). The
    # short one: a container that cannot start fails after one allocation (20 s); the long one: a 2-task DDP
    # job in the image, preempted by USR1, resumes bitwise equal to one left alone (205 s at a load of 10,
    # both passed here 2026-12-02)
    "tests/test_container_cluster.py::test_a_job_whose_container_cannot_start_fails_after_one_allocation",
    "tests/test_container_cluster.py::test_preempted_ddp_job_in_a_charliecloud_image_resumes_bitwise_equal",
)
"""The cluster's core: submit, requeue, preemption, time limit, resubmission, doctor, array sweep workers,
``train init``, cost and goodput from sacct, a container job (long ones included: they are the point here)."""


@pytest.mark.long  # 24.11's cluster: a debootstrap root on the first start, then the core's real jobs (tens of minutes)
def test_the_cluster_core_passes_on_slurm_24_11() -> None:
    """Every test of :data:`CORE` passes on Slurm 24.11's cluster (none skipped under ``CI=true``)."""
    if os.environ.get("LOCAL_SLURM_VERSION"):
        pytest.skip(f"this session runs on LOCAL_SLURM_VERSION={os.environ['LOCAL_SLURM_VERSION']} already")
    # A session of its own, not an xdist worker's: the outer worker's PYTEST_XDIST_* would make the
    # inner conftest take itself for a worker of a --dist loadgroup run.
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("PYTEST_XDIST")}, "LOCAL_SLURM_VERSION": VERSION}
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-m", "", "-rfEs", *CORE]
    proc = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=3 * 3600)
    tail = (proc.stdout + proc.stderr)[-6000:]
    ran = f"LOCAL_SLURM_VERSION={VERSION} {' '.join(command[2:])}"
    assert proc.returncode == 0, f"{ran} exited {proc.returncode}:\n{tail}"
    if os.environ.get("CI", "").lower() == "true":
        assert " skipped" not in proc.stdout.splitlines()[-1], f"CI=true: {ran} skipped tests:\n{tail}"
