"""`--slurm.account` / `--slurm.qos` checked against Slurm's accounting (trainer_cli.launch.cluster):
the parsers of `sacctmgr -P -n` output and the refusals they lead to, on sample output; and on the
local cluster, which has no accounting, the one warning and a check that goes on.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from slurm_support import LOCAL_PROFILE, slurm_cluster, slurm_queries  # noqa: F401 - fixtures
from support import DIGITS, run_train

from trainer_cli.launch.cluster import Association, accounting_problems, parse_associations, parse_qos
from trainer_cli.launch.options import SlurmOptions

# `sacctmgr -P -n show assoc where user=ana format=Account,Partition,QOS`, in Slurm's parsable2
# layout (fields joined by "|", no header, no trailing "|"; a QOS list joined by ","): an
# association for every partition, one for the gpu partition only. The local cluster has no
# accounting to capture this from (sacctmgr: "You are not running a supported accounting_storage plugin").
ASSOC = "proj-a||long,normal\nproj-b|gpu|normal\n"
# `sacctmgr -P -n show qos format=Name,MaxWall`: MaxWall empty where the QOS has none
QOS = "normal|\nlong|2-00:00:00\nshort|04:00:00\n"


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


def test_no_accounting_warns_once_and_goes_on(slurm_queries: None, tmp_path: Path) -> None:  # noqa: F811
    """The local cluster runs without accounting (sacctmgr refuses): `--slurm.account x --slurm.qos y`
    gives one warning naming them, and the check passes on the partitions and nodes; nothing written."""
    root = tmp_path / "runs"
    done = run_train(
        "submit", "--config", DIGITS, "--config", LOCAL_PROFILE, "--trainer.default_root_dir", str(root),
        "--slurm.account", "x", "--slurm.qos", "y", "--check",
    )
    assert done.returncode == 0, done.stderr[-3000:]
    warnings = [line for line in done.stderr.splitlines() if line.startswith("warning:")]
    assert warnings == [
        "warning: could not ask Slurm's accounting (You are not running a supported accounting_storage plugin): "
        "--slurm.account x and --slurm.qos y not checked"
    ], done.stderr[-3000:]
    assert "check passed: 1 node(s)" in done.stdout and "Traceback" not in done.stderr
    assert not root.exists()
