"""The one reader of Slurm (trainer_cli.schedulers.slurm.commands runs, trainer_cli.schedulers.slurm.output reads):
its parsers on output captured from the local cluster (tests/slurm_outputs/22.05, Slurm 22.05.8), a
record missing a field and one with a field no version the launcher knows has; `train jobs` with an
sacct that hangs or fails (a fake `sacct` on PATH: the thing under test is the launcher's handling);
the guard that no module outside the reader runs a Slurm command; the reference page's table.
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from support import REPO

from trainer_cli.job import restarts
from trainer_cli.schedulers.slurm import in_job
from trainer_cli.schedulers.slurm.output import READS, job_state, key_values, parsable, reference_table
from trainer_cli.schedulers.slurm import accounting as sacct
from trainer_cli.schedulers.slurm.cluster import associations_of, parse_cluster, qos_of
from trainer_cli.schedulers.slurm.reservations import parse_reservations

CAPTURED = Path(__file__).parent / "slurm_outputs" / "22.05"
PACKAGE = REPO / "trainer_cli"
READER = {"trainer_cli/schedulers/slurm/commands.py"}
SLURM_COMMANDS = {"sbatch", "srun", "salloc", "squeue", "scontrol", "sacct", "sacctmgr", "scancel", "sinfo", "sstat",
                  "sprio", "sshare", "sattach", "sbcast", "strigger", "sreport", "sdiag"}


def _captured(name: str) -> str:
    return (CAPTURED / name).read_text()


def test_scontrol_show_job_keeps_every_key() -> None:
    done, running, failed = key_values(_captured("scontrol_show_job.txt"))
    assert (done["JobId"], done["ArrayJobId"], done["ArrayTaskId"], done["JobState"]) == ("416", "415", "0", "COMPLETED")
    assert done["Command"].endswith("submit.sbatch") and done["TRES"] == "cpu=1,node=1,billing=1"
    assert done["NtasksPerN:B:S:C"] and done["Power"] == "" and len(done) > 60  # every key, odd ones too
    assert (running["JobState"], running["RunTime"], running["PreemptTime"]) == ("RUNNING", "00:00:31", "None")
    assert (failed["JobState"], failed["Reason"], failed["ExitCode"], failed["NodeList"]) == ("FAILED", "NonZeroExitCode", "1:0", "node[1-2]")
    line = "JobId=7 JobState=PENDING Reason=ReqNodeNotAvail, UnavailableNodes:node[3-4] Dependency=(null) Restarts=0"
    [job] = key_values(line)
    assert (job["Reason"], job["UnavailableNodes"], job["Dependency"]) == ("ReqNodeNotAvail", "node[3-4]", "(null)")


def test_a_record_missing_a_field_and_one_with_an_unknown_field() -> None:
    """A field a version lacks is None (unknown), not a crash or another field's value; a field the
    launcher does not know is kept and changes nothing it reads."""
    [done] = key_values(_captured("scontrol_show_job.txt").splitlines()[0])
    lacking = " ".join(f"{k}={v}" for k, v in done.items() if k not in ("PreemptTime", "RunTime"))
    [job] = key_values(lacking)
    assert job.get("PreemptTime") is None and job.get("RunTime") is None and job["TimeLimit"] == "00:10:00"  # 416's
    assert in_job.classify(job, 60) == (restarts.PREEMPTED, None)  # no time left known: not taken for a time limit
    [extra] = key_values(_captured("scontrol_show_job.txt").splitlines()[0].replace(" Reason=", " SchedNodeList24=node9 Reason="))
    assert extra.pop("SchedNodeList24") == "node9" and extra == done
    # sacct: a Slurm without AllocTRES (asked for no more, slurm_commands._fields): the cost is unknown, not 0
    names = tuple(n for n in READS["sacct"].names if n != "AllocTRES")
    text = "\n".join("|".join(v for k, v in r.items() if k != "AllocTRES") for r in parsable(_captured("sacct.txt"), READS["sacct"].names))
    rows = sacct.parse_sacct(text, names)
    assert [r.state for r in rows][:4] == ["COMPLETED", "REQUEUED", "COMPLETED", "FAILED"] and all(r.tres == {} for r in rows)
    assert sacct.from_sacct(rows).cell() == "-" and sacct.from_sacct(rows).as_json()["cpu_hours"] is None
    # a row with a field more than asked for (a value holding |) is skipped, never read shifted
    assert parsable("a|b|c\nd|e\n", ("X", "Y")) == [{"X": "d", "Y": "e"}]


def test_a_preempted_job_that_requeued_and_completed_reads_completed_on_24_11() -> None:
    """Slurm 24.11 ends a job that was preempted, requeued itself and ran to its end as
    ``JobState=PREEMPTED ExitCode=0:0 Restarts=1`` (captured: tests/fixtures/slurm-24.11/NOTES.md); the
    launcher reads it as COMPLETED, in scontrol's record and in sacct's rows alike; a preemption that
    ended the job stays PREEMPTED."""
    fixtures = REPO / "tests" / "fixtures" / "slurm-24.11"
    text = (fixtures / "scontrol-show-job-preempted-requeued-completed.txt").read_text().split("\n", 1)[1]
    [job] = key_values(text)
    assert (job["JobState"], job["ExitCode"], job["Restarts"]) == ("PREEMPTED", "0:0", "1")
    assert job_state(job) == "COMPLETED"
    assert job_state(job | {"Restarts": "0"}) == "PREEMPTED"  # preempted in its first allocation, not requeued
    assert job_state(job | {"ExitCode": "0:15"}) == "PREEMPTED"  # killed by the preemption's signal
    assert job_state(job | {"JobState": "TIMEOUT"}) == "TIMEOUT" and job_state({}) == "UNKNOWN"
    rows = sacct.parse_sacct((fixtures / "sacct-preempted-requeued-completed.txt").read_text().split("\n", 1)[1])
    newest = sacct.newest_rows(rows)["10055"]
    requeued = sum(r.raw_id == "10055" and r.state == "REQUEUED" for r in rows)
    assert (newest.state, requeued) == ("PREEMPTED", 1)
    assert job_state({"JobState": newest.state, "ExitCode": newest.exit_code, "Restarts": str(requeued)}) == "COMPLETED"


def test_sacct_rows_by_name() -> None:
    rows = sacct.parse_sacct(_captured("sacct.txt"))
    assert [(r.job_id, r.raw_id, r.state, r.elapsed_s) for r in rows] == [
        ("365_0", "366", "COMPLETED", 35.0), ("365_1", "365", "REQUEUED", 18.0), ("365_1", "365", "COMPLETED", 23.0),
        ("414", "414", "FAILED", 2.0), ("415_0", "416", "COMPLETED", 38.0), ("422", "422", "RUNNING", 31.0),
    ]
    assert rows[3].tres == {"cpu": 2, "node": 2} and rows[3].exit_code == "1:0" and rows[3].nodes == "node[1-2]"
    assert rows[5].end is None and rows[5].start is not None
    assert sacct.from_sacct(rows[1:3]).cell() == "0.0114 CPU-h"  # (18 + 23) s of one CPU


def test_config_partitions_nodes_reservations_accounting() -> None:
    [config] = key_values(_captured("scontrol_show_config.txt"))
    assert (config["ClusterName"], config["MaxArraySize"], config["AuthInfo"]) == ("localci", "1001", "cred_expire=30")
    nodes = key_values(_captured("scontrol_show_node.txt"))
    assert nodes[0]["OS"].startswith("Linux ") and " " in nodes[0]["OS"]  # a value with spaces, whole
    partitions = parse_cluster(key_values(_captured("scontrol_show_partition.txt")), nodes)
    debug = next(p for p in partitions if p.default)
    assert (debug.name, debug.total_nodes, debug.max_time_s, len(debug.nodes)) == ("debug", 4, None, 4)
    assert debug.nodes[0].cpus == 8 and debug.nodes[0].gpus() == 8 and debug.nodes[0].state
    assert next(p for p in partitions if p.name == "short").max_time_s == 600
    assert parse_reservations(key_values(_captured("scontrol_show_reservation.txt"))) == []  # "No reservations in the system"
    assoc = associations_of(parsable(_captured("sacctmgr_show_assoc.txt"), READS["sacctmgr_assoc"].names))
    assert [(a.account, a.qos, a.default_qos) for a in assoc][:2] == [("tight", ("quick",), "quick"), ("trainer", ("normal", "quick"), "normal")]
    assert qos_of(parsable(_captured("sacctmgr_show_qos.txt"), READS["sacctmgr_qos"].names)) == {"normal": None, "quick": 600}
    assert parsable(_captured("sacctmgr_show_user.txt"), READS["sacctmgr_user"].names) == [{"DefaultAccount": "trainer"}]
    assert parsable(_captured("squeue_state.txt"), READS["squeue_state"].names) == [{"State": "PENDING"}]


FAKE_SCONTROL = """#!/bin/sh
case "$*" in
  "show config") echo "ClusterName             = fakecl" ;;
  *) ;;
esac
"""


def _fake_slurm(tmp_path: Path, sacct: str) -> dict[str, str]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, text in (("scontrol", FAKE_SCONTROL), ("sacct", "#!/bin/sh\n" + sacct)):
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    return {"PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", "XDG_STATE_HOME": str(tmp_path / "state"),
            "TRAINER_CLI_SLURM_TIMEOUT_S": "1"}


def _run_record(tmp_path: Path) -> tuple[Path, dict[Path, bytes]]:
    """A run Slurm has forgotten (its job.json says COMPLETED) in the user's registry."""
    run_dir = tmp_path / "runs" / "digits" / "version_0"
    run_dir.mkdir(parents=True)
    (run_dir / "submit.sbatch").write_text("#!/bin/bash\n")
    (run_dir / "job.json").write_text(json.dumps({"job_id": "4242", "state": "COMPLETED", "restarts": 1, "exit_code": 0}) + "\n")
    registry = tmp_path / "state" / "trainer-cli" / "submissions.jsonl"
    registry.parent.mkdir(parents=True)
    registry.write_text(json.dumps({"cluster": "fakecl", "job_id": "4242", "run_dir": str(run_dir), "job_name": "digits",
                                    "submitted": "2026-12-02T08:00:00+00:00", "root": str(tmp_path / "runs")}) + "\n")
    return run_dir, {p: p.read_bytes() for p in (registry, run_dir / "job.json", run_dir / "submit.sbatch")}


@pytest.mark.parametrize(("sacct", "said"), [
    ("exec sleep 10\n", "warning: sacct did not answer within 1 s (raise TRAINER_CLI_SLURM_TIMEOUT_S to wait longer); "),
    ("echo 'sacct: error: Problem talking to the database: Connection refused' >&2\nexit 1\n",
     "warning: sacct failed: sacct: error: Problem talking to the database: Connection refused; "),
])
def test_train_jobs_with_an_sacct_that_hangs_or_fails(tmp_path: Path, sacct: str, said: str) -> None:
    """One warning line, the table from the run's own record, exit 0, every record as it was."""
    run_dir, before = _run_record(tmp_path)
    env = os.environ | _fake_slurm(tmp_path, sacct)
    proc = subprocess.run([sys.executable, "-m", "trainer_cli", "jobs"], capture_output=True, text=True, env=env,
                          cwd=tmp_path, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.splitlines() == [said + READS["sacct"].unanswered]
    [row] = [line for line in proc.stdout.splitlines() if line.startswith("4242")]
    assert row.split()[:3] == ["4242", "COMPLETED", "1"]
    assert {p: p.read_bytes() for p in before} == before and sorted(p.name for p in run_dir.iterdir()) == ["job.json", "submit.sbatch"]


# --- the guard: no Slurm command runs outside the reader ------------------------------------------------

SPAWNERS = {
    "trainer_cli/rundir/freezing.py": "git: the run's commit",
    "trainer_cli/schedulers/snapshot.py": "git: the code snapshot",
    "trainer_cli/sweeps/local.py": "train fit: a local sweep's trials",
    "trainer_cli/schedulers/slurm/doctor.py": "python -m trainer_cli.schedulers.slurm.probe: train doctor --local's ranks",
    "trainer_cli/schedulers/slurm/watchdog.py": "py-spy on this node (on another: commands.srun_overlap)",
    "trainer_cli/schedulers/ray/driver.py": "train fit (a Ray job's ranks, each a process on its node)",
}
"""The modules outside the reader that start processes, each for a program that is not Slurm's."""
_SPAWN_MODULES = {"subprocess", "pty", "asyncio.subprocess"}
_OS_SPAWN = ("system", "popen", "exec", "spawn", "posix_spawn", "fork")


def _strings(tree: ast.AST) -> list[ast.Constant]:
    docstrings = {id(n.value) for n in ast.walk(tree) if isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant)}
    return [n for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in docstrings]


def slurm_offences(where: str, source: str) -> list[str]:
    """What in ``source`` (the module ``where``) runs a process, or reaches into the reader, outside
    the reader: an import of a process module (``import``, ``from``, ``importlib.import_module``,
    ``__import__``), an ``os`` call that starts a program (named, or through ``getattr``) in a module
    not in :data:`SPAWNERS`; a Slurm command's name as a string in a module that starts processes (a
    command built in a variable is still one); the reader's private functions."""
    tree = ast.parse(source, where)
    spawns = []
    reader = {"slurm_commands"}  # the names the reader's module is bound to here (an alias too)
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").endswith("slurm"):
            reader |= {a.asname or a.name for a in node.names if a.name == "commands"}
        elif isinstance(node, ast.Import):
            reader |= {a.asname or a.name for a in node.names if a.name.endswith("slurm.commands")}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            spawns += [f"import {a.name}" for a in node.names if a.name in _SPAWN_MODULES]
        elif isinstance(node, ast.ImportFrom) and (node.module or "") in _SPAWN_MODULES | {"asyncio"}:
            if node.module != "asyncio" or any(a.name == "subprocess" or "subprocess" in a.name for a in node.names):
                spawns.append(f"from {node.module} import")
        elif isinstance(node, ast.Call):
            func = ast.unparse(node.func)
            first = node.args[0] if node.args else None
            name = first.value if isinstance(first, ast.Constant) and isinstance(first.value, str) else ""
            if func.endswith(("import_module", "__import__")) and name in _SPAWN_MODULES:
                spawns.append(f"{func}({name!r})")
            if func.startswith("os.") and func[3:].startswith(_OS_SPAWN):
                spawns.append(func)
            if func == "getattr" and len(node.args) > 1 and ast.unparse(node.args[0]) == "os":
                attr = node.args[1]
                if isinstance(attr, ast.Constant) and str(attr.value).startswith(_OS_SPAWN):
                    spawns.append(f"getattr(os, {attr.value!r})")
        elif isinstance(node, ast.Attribute) and node.attr.startswith("_") and ast.unparse(node.value) in reader:
            spawns.append(f"{ast.unparse(node.value)}.{node.attr} (the reader's own)")
        elif isinstance(node, ast.ImportFrom) and (node.module or "").endswith(("slurm_commands", "slurm.commands")):
            spawns += [f"{node.module}.{a.name} (the reader's own)" for a in node.names if a.name.startswith("_")]
    offences = [f"{where}:{s}" for s in spawns if "reader's own" in s or where not in SPAWNERS]
    if spawns:
        offences += [f"{where}:{c.lineno}: {c.value!r}" for c in _strings(tree)
                     if (c.value.split() or [""])[0].strip("`'\"") in SLURM_COMMANDS]
    return offences


def test_no_module_but_the_reader_runs_a_slurm_command() -> None:
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        where = str(path.relative_to(REPO))
        if where not in READER:
            found += slurm_offences(where, path.read_text())
    assert found == []
    assert all((REPO / p).is_file() for p in SPAWNERS), "a module of SPAWNERS is gone: drop it from the list"


@pytest.mark.parametrize("source", [
    "import subprocess\nsubprocess.run(['sacct', '-X'])\n",
    "import subprocess\ncmd = ['srun', '--overlap']\nsubprocess.run(cmd)\n",
    "import importlib\nimportlib.import_module('subprocess').run(words)\n",
    "from subprocess import run as r\nr(words)\n",
    "import os\nos.system('scontrol show job')\n",
    "import os\ngetattr(os, 'popen')(line)\n",
    "from trainer_cli.schedulers.slurm import commands as slurm_commands\nslurm_commands._stdout(['scancel', '1'])\n",
    "from trainer_cli.schedulers.slurm import commands\ncommands._stdout(['scancel', '1'])\n",
    "from trainer_cli.schedulers.slurm.commands import _stdout\n_stdout(['scancel', '1'])\n",
])
def test_the_guard_sees_each_way_round_the_reader(source: str) -> None:
    assert slurm_offences("trainer_cli/tools/x.py", source)
    spawner = next(iter(SPAWNERS))  # a module allowed to start programs still may not start Slurm's
    if "_stdout" not in source and "os." not in source and "getattr" not in source:
        assert slurm_offences(spawner, source.replace("words", "['squeue']")), source


def test_the_reference_page_is_the_readers_table() -> None:
    """docs/reference/slurm-fields.md is generated from READS at build time (scripts/docs_hooks.py):
    the page has the marker, and the built page has every command and field of the reader."""
    page = (REPO / "docs" / "reference" / "slurm-fields.md").read_text()
    assert "<!-- generated: slurm_fields -->" in page
    assert "reference/slurm-fields.md" in (REPO / "mkdocs.yml").read_text()
    sys.path.insert(0, str(REPO / "scripts"))
    try:
        import docs_hooks
    finally:
        sys.path.remove(str(REPO / "scripts"))
    built = docs_hooks.on_page_markdown(page)
    assert reference_table().rstrip("\n") in built
    for read in READS.values():
        assert f"`{read.command.replace('|', chr(92) + '|')}`" in built
        assert all(f"`{name}`" in built for name in read.names)
    assert "| Slurm 22.05 | Slurm 24.11 |" in built and "| yes | core |" in built
