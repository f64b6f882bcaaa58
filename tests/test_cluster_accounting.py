"""`--slurm.account` / `--slurm.qos` checked against Slurm's accounting (trainer_cli.schedulers.slurm.cluster):
the parsers of `sacctmgr -P -n` output and the refusals they lead to, on sample output; and on the
local cluster, which keeps accounting (slurmdbd, scripts/local-slurm), the checks against its real
database and a job's record in `sacct`.
"""

from __future__ import annotations

import os
import pwd
import re
import subprocess
import time
from pathlib import Path

import pytest
from slurm_support import LOCAL_PROFILE, slurm_cluster, slurm_queries, wait_for_state  # noqa: F401 - fixtures
from support import DIGITS, run_train

from trainer_cli.schedulers.slurm.output import parsable
from trainer_cli.schedulers.slurm.cluster import Association, accounting_problems, associations_of, qos_of
from trainer_cli.schedulers.slurm.options import SlurmOptions

# `sacctmgr -P -n show assoc where user=ana format=Account,Partition,QOS`, in Slurm's parsable2
# layout (fields joined by "|", no header, no trailing "|"; a QOS list joined by ","): an
# association for every partition, one for the gpu partition only (the local cluster's associations
# have no partition, so this sample is written, in the layout the local cluster prints).
ASSOC = "proj-a||long,normal\nproj-b|gpu|normal\n"
# `sacctmgr -P -n show qos format=Name,MaxWall`: MaxWall empty where the QOS has none
QOS = "normal|\nlong|2-00:00:00\nshort|04:00:00\n"


def parse_associations(text: str) -> list[Association]:
    return associations_of(parsable(text, ("Account", "Partition", "QOS")))  # the fields of ASSOC: a Slurm without DefaultQOS


def parse_qos(text: str) -> dict[str, int | None]:
    return qos_of(parsable(text, ("Name", "MaxWall")))


def test_parse_sacctmgr_output() -> None:
    assert parse_associations(ASSOC) == [
        Association("proj-a", "", ("long", "normal")), Association("proj-b", "gpu", ("normal",)),
    ]
    assert parse_qos(QOS) == {"normal": None, "long": 2 * 24 * 3600, "short": 4 * 3600}
    assert parse_associations("") == [] and parse_qos("\n") == {}


REFUSALS = {
    "unknown_account": ({"account": "proj-x"}, "--slurm.account proj-x: not an account of user ana here; yours: proj-a, proj-b"),
    "account_of_another_partition": ({"account": "proj-b", "partition": "cpu"}, "--slurm.account proj-b: not an account of user ana here; yours: proj-a"),
    "unknown_qos": ({"qos": "urgent"}, "--slurm.qos urgent: this cluster has no such QOS; it has long, normal, short"),
    "qos_not_allowed": ({"account": "proj-b", "qos": "long"}, "--slurm.qos long: not allowed for account proj-b; allowed: normal"),
    "qos_not_allowed_for_user": ({"qos": "short"}, "--slurm.qos short: not allowed for user ana; allowed: long, normal"),
    "time_over_max_wall": ({"account": "proj-a", "qos": "long", "time": "3-00:00:00"}, "--slurm.time 3-00:00:00: over the MaxWall of QOS long (2880 min)"),
}


@pytest.mark.parametrize("name", list(REFUSALS))
def test_accounting_refusals_name_the_value_and_what_is_offered(name: str) -> None:
    options, message = REFUSALS[name]
    problems = accounting_problems(parse_associations(ASSOC), parse_qos(QOS), SlurmOptions(**options), "ana")
    assert len(problems) == 1 and problems[0].startswith(message), problems


@pytest.mark.parametrize("options", [{"account": "proj-a", "qos": "long", "time": "2-00:00:00"}, {"account": "proj-b", "partition": "gpu"}, {"qos": "normal"}])
def test_accounting_accepts_what_it_allows(options: dict[str, str]) -> None:
    assert accounting_problems(parse_associations(ASSOC), parse_qos(QOS), SlurmOptions(**options), "ana") == []


def test_a_time_over_the_default_qos_max_wall_is_refused_without_qos() -> None:
    """Without --slurm.qos the job runs in its account's DefaultQOS (4th field): its MaxWall counts too,
    or Slurm would leave the job pending for ever (QOSMaxWallDurationPerJobLimit)."""
    assoc = associations_of(parsable("proj-a||long,short|short\nproj-b|gpu|normal|normal\n", ("Account", "Partition", "QOS", "DefaultQOS")))
    assert assoc[0] == Association("proj-a", "", ("long", "short"), "short")
    [problem] = accounting_problems(assoc, parse_qos(QOS), SlurmOptions(time="05:00:00"), "ana", default_account="proj-a")
    assert problem == ("--slurm.time 05:00:00: over the MaxWall of QOS short, the default QOS of account proj-a, (240 min); "
                       "use a shorter time or another QOS")
    assert accounting_problems(assoc, parse_qos(QOS), SlurmOptions(time="03:00:00"), "ana", "proj-a") == []
    assert accounting_problems(assoc, parse_qos(QOS), SlurmOptions(time="05:00:00", qos="long"), "ana", "proj-a") == []
    assert accounting_problems(assoc, parse_qos(QOS), SlurmOptions(time="05:00:00", account="proj-b", partition="gpu"), "ana") == []


def _accounts_of(user: str) -> list[str]:
    """``user``'s accounts as the local cluster's accounting database lists them."""
    out = subprocess.run(
        ["sacctmgr", "-n", "-P", "show", "assoc", "where", f"user={user}", "format=Account"], capture_output=True, text=True, timeout=30
    )
    assert out.returncode == 0, out.stderr
    return sorted(set(out.stdout.split()))


def _submit_check(root: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return run_train(
        "submit", "--config", DIGITS, "--config", LOCAL_PROFILE, "--trainer.default_root_dir", str(root), *args, "--check", env=env
    )


def test_unknown_account_is_refused_before_queueing(slurm_queries: None, tmp_path: Path) -> None:  # noqa: F811
    """The local cluster keeps accounting (slurmdbd): an account the user does not have is refused by
    the check that asked ``sacctmgr``, naming the user's real accounts; nothing written or queued.
    (``--check`` stops before sbatch either way: the refusal is the same without it, see
    test_accounts_and_qos_the_user_has_pass for the message's other half.)"""
    root = tmp_path / "runs"
    user = pwd.getpwuid(os.getuid()).pw_name
    accounts = _accounts_of(user)
    assert {"trainer", "tight"} <= set(accounts), accounts  # scripts/local-slurm registered them
    done = run_train("submit", "--config", DIGITS, "--config", LOCAL_PROFILE, "--trainer.default_root_dir", str(root), "--slurm.account", "proj-x")
    assert done.returncode == 2, done.stderr[-3000:]
    assert f"--slurm.account proj-x: not an account of user {user} here; yours: {', '.join(accounts)}" in done.stderr
    assert "Traceback" not in done.stderr and not root.exists()
    queued = subprocess.run(["squeue", "-h", "-o", "%o"], capture_output=True, text=True, timeout=30).stdout
    assert str(tmp_path) not in queued


def test_accounts_and_qos_the_user_has_pass(slurm_queries: None, tmp_path: Path) -> None:  # noqa: F811
    """An account and a QOS the user's association allows pass ``train submit --check`` with no
    warning; a time over that QOS's MaxWall (quick: 10 minutes, scripts/local-slurm) is refused."""
    root = tmp_path / "runs"
    done = _submit_check(root, "--slurm.account", "tight", "--slurm.qos", "quick", "--slurm.time", "00:05:00")
    assert done.returncode == 0, done.stderr[-3000:]
    assert "check passed: 1 node(s)" in done.stdout and "warning:" not in done.stderr, done.stderr[-3000:]
    # without --slurm.qos: the account's DefaultQOS (quick) and its MaxWall, read from sacctmgr (an explicit
    # --slurm.qos over its MaxWall: REFUSALS["time_over_max_wall"])
    done = _submit_check(root, "--slurm.account", "tight", "--slurm.time", "00:20:00")
    expected = "--slurm.time 00:20:00: over the MaxWall of QOS quick, the default QOS of account tight, (10 min)"
    assert done.returncode == 2 and expected in done.stderr, done.stderr[-3000:]
    assert not root.exists()


def test_sacct_answers_for_a_real_job(slurm_cluster: None, tmp_path: Path) -> None:  # noqa: F811
    """A tiny job's record in the accounting database: its state, account, allocation and run time."""
    job_id = subprocess.run(
        ["sbatch", "--parsable", "--time=1", "-c", "2", "--gres=gpu:1", "-o", str(tmp_path / "out.log"), "--wrap", "true"],
        capture_output=True, text=True, timeout=30, check=True,
    ).stdout.strip()
    assert wait_for_state(job_id, timeout_s=30) == "COMPLETED"
    deadline, rows = time.monotonic() + 15, []
    # slurmctld sends the job's records to slurmdbd a moment after scontrol shows its end; for a
    # moment after that sacct shows it COMPLETED with QOS "Unknown" (seen on Slurm 22.05)
    while time.monotonic() < deadline:
        out = subprocess.run(
            ["sacct", "-X", "-n", "-P", "-j", job_id, "-o", "JobIDRaw,State,Account,QOS,AllocTRES,Elapsed"],
            capture_output=True, text=True, timeout=30,
        )
        rows = [line.split("|") for line in out.stdout.splitlines()]
        if rows and rows[0][1] == "COMPLETED" and rows[0][3] != "Unknown":
            break
        time.sleep(0.25)
    assert len(rows) == 1, rows
    raw, state, account, qos, tres, elapsed = rows[0]
    assert (raw, state, account, qos) == (job_id, "COMPLETED", "trainer", "normal"), rows
    assert {"cpu=2", "gres/gpu=1", "node=1"} <= set(tres.split(",")), tres
    assert re.fullmatch(r"\d\d:\d\d:\d\d", elapsed), elapsed
