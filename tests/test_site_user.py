"""`train` on the local cluster as ordinary users (issue 46), not root: ``tcli-alice`` and ``tcli-bob``
of the group ``tcli-lab``, made by tests/user_support.py, each with its association and its own venv.

The default tier: alice's job in a group-shared project folder (setgid, ``umask 002``) is submitted,
requeued by ``SIGUSR1`` and completes; ``train jobs`` shows its cost from sacct; every file and folder
of the run is alice's, of the group, and group-writable (the umask, no fixed mode); her registry of
jobs is in her home; a secret she passed is in no file; bob, of the group, reads the run
(``train runs``) and changes its records under their locks. The long tier: alice in her home under
``umask 027``, the first-job path (``train init``, ``--check``, a submission, its resubmission by the
job itself) and a sweep of two trials by an array worker; nothing there is the group's to write or
anyone else's to read.
"""

from __future__ import annotations

import grp
import json
import secrets
import shutil
import stat
import subprocess
from pathlib import Path

import pytest
from slurm_support import (  # noqa: F401 - slurm_cluster is a fixture
    LOCAL_PROFILE,
    job_id_from,
    sacct_attempts,
    scontrol_job,
    slurm_cluster,
    usr1_at_start,
    wait_for_requeue,
    wait_for_state,
)
from support import DIGITS
from user_support import GROUP, SHARED, SiteUser, project, site_users  # noqa: F401 - site_users is a fixture

from trainer_cli.schedulers.submissions import registry_file

QUICK = "--trainer.enable_progress_bar false --trainer.enable_model_summary false --trainer.limit_train_batches 5 " \
        "--trainer.limit_val_batches 2 --trainer.num_nodes 1 --trainer.devices 1 --slurm.time 00:10:00"


def _line(out: str, label: str) -> str:
    return next(line.split(":", 1)[1].strip() for line in out.splitlines() if line.startswith(label))


def _modes(top: Path, user: SiteUser, gid: int, umask: int, setgid: bool) -> list[str]:
    """What under ``top`` is not ``user``'s, not of group ``gid``, or not as ``umask`` makes it (files
    ``0o666 & ~umask``, executables may add x, folders ``0o777 & ~umask``, setgid where ``setgid``)."""
    wrong = []
    for path in [top, *top.rglob("*")]:
        st = path.lstat()
        mode = stat.S_IMODE(st.st_mode)
        if stat.S_ISDIR(st.st_mode):
            expected = 0o777 & ~umask
            good = mode & 0o777 == expected and bool(mode & stat.S_ISGID) == setgid
        else:
            expected = 0o666 & ~umask
            good = mode & 0o666 == expected and not mode & 0o111 & ~(0o777 & ~umask)
        if st.st_uid != user.uid or st.st_gid != gid or not good:
            wrong.append(f"{path.relative_to(top)} {stat.filemode(st.st_mode)} uid {st.st_uid} gid {st.st_gid}")
    return wrong


def _tail(log: Path) -> str:
    return log.read_text()[-3000:] if log.is_file() else f"(no {log})"


def _grep(value: str, *places: Path) -> list[str]:
    done = subprocess.run(["grep", "-r", "-l", "-F", value, *map(str, places)], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode in (0, 1), done.stderr
    return done.stdout.split()


def test_a_users_job_in_a_group_folder_requeues_completes_and_the_group_shares_it(
        site_users: dict[str, SiteUser]) -> None:  # noqa: F811
    alice, bob = site_users["alice"], site_users["bob"]
    lab = grp.getgrnam(GROUP).gr_gid
    folder = project(alice, SHARED, "002")
    token = f"tok-{secrets.token_hex(8)}"
    out = alice.ok(f"train submit --config {DIGITS} --config {LOCAL_PROFILE} --trainer.default_root_dir runs "
                   f"--trainer.max_epochs 2 {QUICK} --slurm.secrets '[TCLI_TEST_TOKEN]'",
                   folder, "002", env={"TCLI_TEST_TOKEN": token})
    job_id, run_dir = job_id_from(out), Path(_line(out, "Run directory:"))
    log = run_dir / f"slurm-{job_id}.log"
    try:
        usr1_at_start(job_id, tasks=1)
        wait_for_requeue(job_id)
        assert wait_for_state(job_id, timeout_s=300) == "COMPLETED", _tail(log)
    finally:
        subprocess.run(["scancel", job_id], capture_output=True, timeout=30)  # a no-op once it ended
    job = scontrol_job(job_id)
    assert (job["UserId"].split("(")[0], job["Restarts"]) == (alice.name, "1"), job
    assert f"job {job_id} restart 1 on" in log.read_text()

    # its cost over both attempts, as alice's `train jobs` shows it (from sacct)
    sacct_attempts(job_id, 2)
    shown = alice.ok(f"train jobs {job_id}", folder, "002")
    assert f"{job_id}" in shown and "COMPLETED" in shown, shown
    assert "CPU-h" in _line(shown, "cost") and "over 2 attempt(s)" in shown and "(from sacct)" in shown, shown
    listed = alice.ok("train jobs", folder, "002")
    # (her registry may hold the other test's job: both run in one session under `-m ""`)
    assert [job_id, "COMPLETED", "1"] in [row.split()[:3] for row in listed.splitlines()[1:]], listed

    # the run is alice's and the group's, as umask 002 in a setgid folder makes it: no fixed modes
    wrong = _modes(folder, alice, lab, 0o002, setgid=True)
    assert not wrong, "\n".join(wrong)
    # her registry of jobs is in her home, not in root's (this session's XDG_STATE_HOME)
    registry = alice.home / ".local" / "state" / "trainer-cli" / "submissions.jsonl"
    assert registry.stat().st_uid == alice.uid
    assert job_id in {json.loads(r)["job_id"] for r in registry.read_text().splitlines()}
    assert not registry_file().is_file() or str(folder) not in registry_file().read_text()
    # the secret reached the job through sbatch's environment, never a file
    assert not _grep(token, folder, alice.home / ".local"), "a secret in a file"

    # bob, of the group: reads the run (its cost too) and changes its records under their locks
    runs = bob.ok("train runs runs", folder, "002")
    assert "COMPLETED" in runs and "CPU-h" in runs, runs
    change = ("from pathlib import Path; from trainer_cli.atomic import update_json, append_line; "
              f"run = Path({str(run_dir)!r}); update_json(run / 'job.json', lambda r: r | {{'seen_by': '$USER'}}); "
              "append_line(run / 'metrics.jsonl', '{\"note\": \"$USER\"}')")
    bob.ok(f'python -c "{change}"', folder, "002")
    alice.ok(f'python -c "{change}"', folder, "002")  # and alice after bob: his rename left the record the group's
    record = json.loads((run_dir / "job.json").read_text())
    assert (record["seen_by"], record["state"]) == (alice.name, "COMPLETED")
    assert (run_dir / "job.json").stat().st_gid == lab and stat.S_IMODE((run_dir / "job.json").stat().st_mode) == 0o664
    shutil.rmtree(folder)  # kept where the test failed, to look at


@pytest.mark.long  # three jobs and a sweep worker's two trials as alice: about 3 minutes on 2 cores
def test_a_users_first_job_path_resubmission_and_sweep_worker_in_her_home(
        site_users: dict[str, SiteUser]) -> None:  # noqa: F811
    """As alice, in her home under ``umask 027``: ``train init`` reads the cluster for her (her account,
    her venv), ``--check`` passes, a job resubmits itself on ``SIGUSR1`` (``requeue_mode resubmit``:
    her ``sbatch`` from inside her job) and the new job completes, its cost over both jobs; the finished
    run submitted again queues nothing; a sweep of two trials by one array worker completes. Everything
    is hers, of her own group, and nothing is the group's to write or anyone else's to read."""
    alice = site_users["alice"]
    folder = project(alice, alice.home, "027")
    umask = "027"
    out = alice.ok("train init --accelerator cpu", folder, umask)
    assert f"user {alice.name})" in out and "written: my_site.yaml" in out, out
    site = (folder / "my_site.yaml").read_text()
    assert "account: trainer" in site and f"source {alice.venv}/bin/activate" in site, site
    base = f"train submit --config experiment/digits --config my_site.yaml --slurm.cpus_per_task 2 {QUICK}"
    out = alice.ok(f"{base} --check", folder, umask)
    assert out.startswith("check passed:") and not (folder / "runs").exists(), out

    out = alice.ok(f"{base} --trainer.max_epochs 2 --slurm.requeue_mode resubmit", folder, umask)
    job_id, run_dir = job_id_from(out), Path(_line(out, "Run directory:"))
    new_id = ""
    try:
        usr1_at_start(job_id, tasks=1)
        assert wait_for_state(job_id, timeout_s=180) == "COMPLETED", _tail(run_dir / f"slurm-{job_id}.log")
        record = json.loads((run_dir / "job.json").read_text())
        new_id = str(record["job_id"])
        assert new_id != job_id and record["resubmitted_from"] == [job_id], record
        assert wait_for_state(new_id, timeout_s=300) == "COMPLETED", _tail(run_dir / f"slurm-{new_id}.log")
    finally:
        subprocess.run(["scancel", job_id, *([new_id] if new_id else [])], capture_output=True, timeout=30)
    assert scontrol_job(new_id)["UserId"].startswith(f"{alice.name}(")
    sacct_attempts(job_id, 1), sacct_attempts(new_id, 1)
    shown = alice.ok(f"train jobs {new_id}", folder, umask)
    assert "over 2 attempt(s)" in _line(shown, "cost") and "(from sacct)" in shown, shown
    listed = alice.ok("train jobs", folder, umask)
    assert [new_id, "COMPLETED"] in [row.split()[:2] for row in listed.splitlines()[1:]], listed
    again = alice.ok(f"train submit --config {run_dir / 'config.yaml'} --config my_site.yaml", folder, umask)
    assert "Nothing was queued." in again and "Job id:" not in again, again

    out = alice.ok(f"{base} --trainer.max_epochs 1 --sweep 'optimizer.init_args.lr=loguniform(1e-3,1e-1)' "
                   "--sweep_trials 2 --sweep_seed 0 --slurm.array_workers 1", folder, umask)
    sweep_id = job_id_from(out)
    sweep_dir = Path(_line(out, "Sweep directory:").split(" (")[0])
    try:
        state = wait_for_state(f"{sweep_id}_0", timeout_s=400)
        assert state == "COMPLETED", _tail(sweep_dir / "workers" / f"slurm-{sweep_id}_0.log")
    finally:
        subprocess.run(["scancel", sweep_id], capture_output=True, timeout=30)
    trials = json.loads((sweep_dir / "sweep.json").read_text())["trials"]
    assert sorted(t["index"] for t in trials) == [0, 1], trials
    results = alice.ok(f"train sweep-results {sweep_dir}", folder, umask)
    assert results.count("COMPLETED") >= 2, results

    wrong = _modes(folder, alice, alice.gid, 0o027, setgid=False)
    assert not wrong, "\n".join(wrong)
    shutil.rmtree(folder)
