"""`train init`: a site profile read from the cluster (trainer_cli.schedulers.slurm.site_profile), or a bundled
config copied out by name (trainer_cli.schedulers.slurm.init).

The profile of a GPU site is built from captured command output (scontrol, sacctmgr, in Slurm's own
layouts) and read back as YAML and as SlurmOptions; on the local cluster, `train init` asks the real
scontrol/sacctmgr and the profile it writes passes `train submit --check` (its job runs to the end in
tests/test_first_job.py, the walk-through of docs/guides/first-job.md).
"""

from __future__ import annotations

import contextlib
import io
import os
import pwd
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from slurm_support import cluster_name, slurm_cluster, slurm_queries, train_submit  # noqa: F401 - fixtures
from support import DIGITS, quiet_args, run_train

from trainer_cli.__main__ import main
from trainer_cli.config.paths import configs_dir
from trainer_cli.schedulers.slurm.output import READS, key_values, parsable, time_limit_s
from trainer_cli.schedulers.slurm import site_profile
from trainer_cli.schedulers.slurm.cluster import accounting_problems, associations_of, mem_mb, missing_setup_files, parse_cluster, problems_with, qos_of
from trainer_cli.schedulers.slurm.options import SlurmOptions
from trainer_cli.schedulers.resources import Resources

# `scontrol show partition -o` and `scontrol show node -o` of a GPU site (Slurm 22.05's layout, as the
# local cluster prints it, with a site's values): a default gpu partition with a two-day MaxTime,
# requeued on preemption, and a CPU partition.
PARTITIONS = """\
PartitionName=gpu AllowGroups=ALL AllowAccounts=ALL AllowQos=ALL AllocNodes=ALL Default=YES QoS=N/A DefaultTime=04:00:00 DisableRootJobs=NO ExclusiveUser=NO GraceTime=120 Hidden=NO MaxNodes=UNLIMITED MaxTime=2-00:00:00 MinNodes=0 LLN=NO MaxCPUsPerNode=UNLIMITED Nodes=g[01-02] PriorityJobFactor=1 PriorityTier=1 RootOnly=NO ReqResv=NO OverSubscribe=NO OverTimeLimit=NONE PreemptMode=REQUEUE State=UP TotalCPUs=128 TotalNodes=2 SelectTypeParameters=NONE JobDefaults=(null) DefMemPerNode=UNLIMITED MaxMemPerNode=UNLIMITED TRES=cpu=128,mem=1030000M,node=2,billing=128,gres/gpu=16
PartitionName=cpu AllowGroups=ALL AllowAccounts=ALL AllowQos=ALL AllocNodes=ALL Default=NO QoS=N/A DefaultTime=NONE DisableRootJobs=NO ExclusiveUser=NO GraceTime=0 Hidden=NO MaxNodes=UNLIMITED MaxTime=7-00:00:00 MinNodes=0 LLN=NO MaxCPUsPerNode=UNLIMITED Nodes=c01 PriorityJobFactor=1 PriorityTier=1 RootOnly=NO ReqResv=NO OverSubscribe=NO OverTimeLimit=NONE PreemptMode=OFF State=UP TotalCPUs=128 TotalNodes=1 SelectTypeParameters=NONE JobDefaults=(null) DefMemPerNode=UNLIMITED MaxMemPerCPU=1500 TRES=cpu=128,mem=256000M,node=1,billing=128
"""
NODES = """\
NodeName=g01 Arch=x86_64 CoresPerSocket=32  CPUAlloc=0 CPUEfctv=64 CPUTot=64 CPULoad=0.10 AvailableFeatures=a100 ActiveFeatures=a100 Gres=gpu:a100:8(S:0-1) NodeAddr=g01 NodeHostName=g01 RealMemory=515000 AllocMem=0 FreeMem=500000 Sockets=2 Boards=1 State=IDLE ThreadsPerCore=1 TmpDisk=0 Weight=1 Owner=N/A MCS_label=N/A Partitions=gpu
NodeName=g02 Arch=x86_64 CoresPerSocket=32  CPUAlloc=0 CPUEfctv=64 CPUTot=64 CPULoad=0.10 AvailableFeatures=a100 ActiveFeatures=a100 Gres=gpu:a100:8(S:0-1) NodeAddr=g02 NodeHostName=g02 RealMemory=515000 AllocMem=0 FreeMem=500000 Sockets=2 Boards=1 State=IDLE ThreadsPerCore=1 TmpDisk=0 Weight=1 Owner=N/A MCS_label=N/A Partitions=gpu
NodeName=c01 Arch=x86_64 CoresPerSocket=64  CPUAlloc=0 CPUEfctv=128 CPUTot=128 CPULoad=0.10 AvailableFeatures=(null) ActiveFeatures=(null) Gres=(null) NodeAddr=c01 NodeHostName=c01 RealMemory=256000 AllocMem=0 FreeMem=250000 Sockets=2 Boards=1 State=IDLE ThreadsPerCore=1 TmpDisk=0 Weight=1 Owner=N/A MCS_label=N/A Partitions=cpu
"""
# `scontrol show config` (the lines train init reads, among the others it ignores)
CONFIG = """\
Configuration data as of 2026-11-27T17:30:00
AccountingStorageType   = accounting_storage/slurmdbd
AuthInfo                = (null)
ClusterName             = bigsite
JobRequeue              = 1
PreemptMode             = REQUEUE
PreemptType             = preempt/qos
SlurmctldParameters     = (null)
"""
# `sacctmgr -P -n show assoc where user=ana format=Account,Partition,QOS`, `... format=Account,Partition,DefaultQOS`,
# `sacctmgr -P -n show qos format=Name,MaxWall`, `sacctmgr -P -n show user ana format=DefaultAccount`
ASSOC = "proj-a||long,normal|normal\nproj-b||normal|\n"  # Account,Partition,QOS,DefaultQOS
QOS = "normal|12:00:00\nlong|2-00:00:00\n"
DEFAULT_ACCOUNT = "proj-a"


def parse_associations(text: str) -> list:
    return associations_of(parsable(text, READS["sacctmgr_assoc"].names))


def parse_qos(text: str) -> dict:
    return qos_of(parsable(text, READS["sacctmgr_qos"].names))


def _facts(accounting: bool = True, env: site_profile.Environment | None = None) -> site_profile.Facts:
    partitions = parse_cluster(
        key_values(PARTITIONS), key_values(NODES)
    )
    account = site_profile.Accounting(
        parse_associations(ASSOC), parse_qos(QOS), DEFAULT_ACCOUNT, site_profile.default_qos(parse_associations(ASSOC))
    )
    env = env or site_profile.Environment(python="/usr/bin/python3", venv="/home/ana/venvs/train", modules=["cuda/12.4", "gcc/12"])
    return site_profile.Facts("ana", partitions, key_values(CONFIG)[-1], account if accounting else None, env)


def _profile(facts: site_profile.Facts, partition: str | None = None, accelerator: str = "gpu") -> tuple[str, dict]:
    text = site_profile.render(facts, site_profile.choose_partition(facts.partitions, partition), accelerator, "2026-11-27")
    return text, yaml.safe_load(text)


def test_a_gpu_sites_profile_takes_its_default_partition_limits_and_accounts() -> None:
    text, profile = _profile(_facts())
    assert profile["slurm"] == {
        "partition": "gpu",
        "time": "12:00:00",  # the MaxWall of the default QOS normal, under the partition's two days
        "cpus_per_task": 8,  # 64 CPUs / 8 GPUs, one task each
        "mem_per_cpu": "8046M",  # 515000 MB / 64 CPUs
        "gpu_type": "a100",
        "account": "proj-a",
        "qos": "normal",
        "setup": ["module load cuda/12.4 gcc/12", "source /home/ana/venvs/train/bin/activate"],
    }
    assert profile["trainer"] == {"accelerator": "gpu", "strategy": "auto"}
    options = SlurmOptions(**profile["slurm"])  # every key an option of train submit's slurm: section, every value valid
    facts = _facts()  # and the job a node's GPUs make passes train submit's own checks against this cluster
    assert problems_with(facts.partitions, options, Resources(nodes=2, ntasks_per_node=8, gpus_per_node=8, accelerator="gpu")) == []
    assert accounting_problems(parse_associations(ASSOC), parse_qos(QOS), options, "ana") == []
    assert text.startswith("# @package _global_\n")
    for comment in (
        "# the default partition; the others: cpu",
        "yours too: proj-b",
        "allowed too: long",
        "preemption: preempt/qos, PreemptMode=REQUEUE; GraceTime=120 s",
        "a preempted job gets SIGTERM, not SIGUSR1",
        "# mem: 515000M",
        "#   cpu: 1 node(s), MaxTime 7-00:00:00, CPUs 128, memory 256000, GPUs none",
    ):
        assert comment in text, text
    assert "Could not read" not in text
    assert max(len(line) for line in text.splitlines()) <= site_profile.WIDTH + 4


def test_a_cpu_partition_without_accounting_says_what_it_could_not_read() -> None:
    env = site_profile.Environment(python="/opt/py/bin/python3")
    facts = _facts(accounting=False, env=env)
    facts.unread.append("accounts and QOS (sacctmgr: You are not running a supported accounting_storage plugin)")
    text, profile = _profile(facts, "cpu", "cpu")
    assert profile["slurm"] == {
        "partition": "cpu",
        "time": "1-00:00:00",  # a day, under the partition's seven
        "cpus_per_task": 128,
        "mem_per_cpu": "1500M",  # the partition's MaxMemPerCPU, under 256000 MB / 128 CPUs
        "python": "/opt/py/bin/python3",  # no venv or conda env: the interpreter itself
    }
    assert profile["trainer"]["accelerator"] == "cpu"
    assert "# Could not read:\n#   - accounts and QOS (sacctmgr: You are not running a supported" in text
    assert "preemption: off for cpu" in text and "allows 7-00:00:00" in text
    SlurmOptions(**profile["slurm"])


def test_a_one_cpu_job_of_the_profile_trains_on_one_process_without_ddp_warnings(tmp_path: Path) -> None:
    """The profile's trainer section (``strategy: auto``) on one CPU: no DDP of one process and its
    three ``sync_dist`` warnings (issue 45)."""
    _, profile = _profile(_facts(accounting=False), "cpu", "cpu")
    assert profile["trainer"] == {"accelerator": "cpu", "strategy": "auto"}
    (tmp_path / "trainer.yaml").write_text(yaml.safe_dump({"trainer": profile["trainer"]}))  # what the job's fit gets
    profile_args = ["--config", str(tmp_path / "trainer.yaml"), "--trainer.devices", "1"]
    done = run_train("fit", "--config", DIGITS, *profile_args, *quiet_args(tmp_path / "runs"), "--trainer.limit_train_batches", "2", "--trainer.limit_val_batches", "1")
    assert done.returncode == 0, done.stderr[-3000:]
    assert "sync_dist" not in done.stdout + done.stderr, (done.stdout + done.stderr)[-3000:]


def test_a_conda_environment_is_activated_by_its_own_shell() -> None:
    env = site_profile.Environment(python="/home/ana/miniforge3/envs/t/bin/python", conda=("/home/ana/miniforge3/envs/t", "/home/ana/miniforge3/bin/conda"))
    _, profile = _profile(_facts(env=env))
    assert profile["slurm"]["setup_raw"] == 'eval "$(/home/ana/miniforge3/bin/conda shell.bash hook)"\nconda activate /home/ana/miniforge3/envs/t\n'
    assert "setup" not in profile["slurm"] and "python" not in profile["slurm"]


def test_an_unknown_partition_names_the_partitions() -> None:
    with pytest.raises(site_profile.UserError, match=r"^train init --partition gpux: this cluster has no such partition; it has gpu, cpu$"):
        site_profile.choose_partition(_facts().partitions, "gpux")


def _train(*args: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(args))
    return code, out.getvalue(), err.getvalue()


def test_a_bundled_config_is_copied_out_by_name_never_over_a_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert _train("init", "slurm/example_gpu")[:2] == (0, "written: example_gpu.yaml (a copy of the bundled slurm/example_gpu: edit it)\n")
    assert (tmp_path / "example_gpu.yaml").read_text() == (configs_dir() / "slurm" / "example_gpu.yaml").read_text()
    (tmp_path / "mine.yaml").write_text("mine\n")
    code, out, err = _train("init", "configs/experiment/digits.yaml", "--output", "mine.yaml")
    assert (code, out, err) == (2, "", "error: train init: mine.yaml exists; not overwritten (name another file with --output)\n")
    assert (tmp_path / "mine.yaml").read_text() == "mine\n"
    assert _train("init", "slurm/local", "--partition", "gpu")[1:] == ("", "error: train init slurm/local copies a bundled config; --partition only applies to a profile read from the cluster (train init without a name): drop it\n")
    code, out, err = _train("init", "slurm/gpu")
    assert code == 2 and len(err.splitlines()) == 1, err
    assert err.startswith("error: train init slurm/gpu: no bundled config of that name; did you mean slurm/example_gpu, slurm/local? bundled: ") and "slurm/example_gpu, slurm/local" in err


def test_without_slurm_it_says_to_name_a_bundled_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PATH", str(tmp_path))  # no sinfo
    code, _, err = _train("init")
    assert (code, err) == (2, "error: train init: no Slurm here (sinfo not found); run it on a login node of your cluster, or copy a bundled profile to edit: train init slurm/example_gpu\n")
    assert list(tmp_path.iterdir()) == []


def _scontrol(*args: str) -> list[dict[str, str]]:
    out = subprocess.run(["scontrol", "show", *args, "-o"], capture_output=True, text=True, timeout=30, check=True).stdout
    return key_values(out)


def _sacctmgr(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["sacctmgr", "-P", "-n", "show", *args], capture_output=True, text=True, timeout=30)


def test_the_local_clusters_profile_matches_scontrol_and_sacctmgr_and_passes_the_check(slurm_queries: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: F811
    """`train init` on the local cluster (with accounting): the default partition, a time limit within
    its MaxTime, a node's CPUs, the memory (or the RealMemory it could not use), the user's default
    account and its default QOS as sacctmgr gives them; then `train submit --check` with only it and
    an experiment, the account and QOS checked against sacctmgr."""
    monkeypatch.chdir(tmp_path)
    code, out, err = _train("init", "--accelerator", "cpu")  # the local nodes' GPUs are count-only (Gres=gpu:8, no device)
    assert code == 0, err
    assert out.startswith(f"written: my_site.yaml (Slurm cluster {cluster_name()}, partition debug, user ")
    text = (tmp_path / "my_site.yaml").read_text()
    slurm = yaml.safe_load(text)["slurm"]
    default = next(p for p in _scontrol("partition") if p.get("Default") == "YES")
    nodes = [n for n in _scontrol("node") if default["PartitionName"] in n["Partitions"].split(",")]
    assert slurm["partition"] == default["PartitionName"]
    max_time_s = time_limit_s(default["MaxTime"])
    assert time_limit_s(slurm["time"]) == (min(max_time_s, site_profile.LONGEST_TIME_S) if max_time_s else site_profile.MODEST_TIME_S)
    assert slurm["cpus_per_task"] == min(int(n["CPUTot"]) for n in nodes)
    real_mb = min(int(n["RealMemory"]) for n in nodes)
    if real_mb > site_profile.UNCONFIGURED_MEM_MB:
        assert mem_mb(slurm["mem_per_cpu"]) == real_mb // slurm["cpus_per_task"]
    else:
        assert "mem_per_cpu" not in slurm and f"they report RealMemory={real_mb}" in out
    user = pwd.getpwuid(os.getuid()).pw_name
    assoc = _sacctmgr("assoc", "where", f"user={user}", "format=Account,Partition,QOS,DefaultQOS")
    assert assoc.returncode == 0 and assoc.stdout.strip(), (
        f"sacctmgr: {assoc.stderr.strip()}: the local cluster runs without accounting; restart it (scripts/local-slurm stop; start)"
    )
    default_account = _sacctmgr("user", user, "format=DefaultAccount").stdout.strip()
    row = next(line.split("|") for line in assoc.stdout.splitlines() if line.split("|")[0] == default_account)
    assert (slurm["account"], slurm["qos"]) == (default_account, row[3]), assoc.stdout  # its DefaultQOS
    others = sorted({line.split("|")[0] for line in assoc.stdout.splitlines()} - {default_account})
    assert f"# your default account; yours too: {', '.join(others)}" in text
    if sys.prefix != sys.base_prefix:  # the venv the tests run from: the job activates it
        assert slurm["setup"] == [f"source {sys.prefix}/bin/activate"] and "python" not in slurm
    err = io.StringIO()
    with contextlib.redirect_stderr(err):  # the account and QOS asked of sacctmgr for real: no warning that they were not
        code, stdout = train_submit("--config", DIGITS, "--config", str(tmp_path / "my_site.yaml"), "--trainer.default_root_dir", str(tmp_path / "runs"), "--check")
    assert "warning" not in err.getvalue(), err.getvalue()
    assert code == 0 and stdout.startswith(f"check passed: 1 node(s) x 1 task(s), 0 GPU(s) and {slurm['cpus_per_task']} CPU(s) per node, partition {slurm['partition']}"), stdout
    code, _, err = _train("init")
    assert (code, err) == (2, "error: train init: my_site.yaml exists; not overwritten (name another file with --output)\n")


def test_a_setup_line_that_sources_a_missing_venv_is_named(tmp_path: Path) -> None:
    """--check and submit warn about the file a setup line sources when it is missing (a deleted venv
    made a new user's job fail at its first line); one that exists, or a line sourcing nothing, is quiet."""
    (tmp_path / "venv" / "bin").mkdir(parents=True)
    (tmp_path / "venv" / "bin" / "activate").write_text("")
    lines = ["module load cuda", "source venv/bin/activate", f". {tmp_path}/gone/bin/activate"]
    found = missing_setup_files(SlurmOptions(setup=lines, python="/nonexistent/bin/python"), cwd=str(tmp_path))
    assert len(found) == 2, found
    assert found[0].startswith(f"--slurm.setup '. {tmp_path}/gone/bin/activate': {tmp_path}/gone/bin/activate does not exist here")
    assert found[1] == "--slurm.python /nonexistent/bin/python: does not exist here; give the python of the job's environment"
    assert missing_setup_files(SlurmOptions(setup=lines[:2]), cwd=str(tmp_path)) == []
