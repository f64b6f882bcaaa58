"""Secrets given to a job (issue 39): in the job's environment, through sbatch's, never in a file the
launcher writes nor in what it prints (trainer_cli/schedulers/slurm/secrets.py).

The default tier renders (dry runs, each container runtime's words), checks the refusals, and queues
one held job on the real local cluster: Slurm holds the values with the job (its state save, what a
requeue starts from) while the run directory, submit's output and the registry hold none. The long
tier runs a job and reads the environment of its training processes, at the first start and after
a requeue (SIGUSR1), then greps for the values everywhere the launcher writes.
"""

from __future__ import annotations

import json
import secrets as random_secrets
import subprocess
import sys
from pathlib import Path

import pytest
from slurm_support import (  # noqa: F401 - slurm_cluster is a fixture
    LOCAL_PROFILE,
    _job_processes,
    job_id_from,
    slurm_cluster,
    train_submit,
    usr1_at_start,
    wait_for_requeue,
    wait_for_state,
)
from support import DIGITS
from test_submit_render import _args, plan

from trainer_cli.errors import UserError
from trainer_cli.schedulers.slurm import secrets
from trainer_cli.schedulers.slurm.options import SlurmOptions
from trainer_cli.schedulers.submissions import registry_file

KEY, TOKEN, PASS = (f"{p}-{random_secrets.token_hex(12)}" for p in ("wk", "hf", "pw"))
ENV = ["--slurm.env", f"{{WANDB_API_KEY: {KEY}, HF_TOKEN: {TOKEN}, OMP_NUM_THREADS: '2'}}"]


def _found_by_grep(values: list[str], *places: Path) -> list[str]:
    """``grep -r -l -F VALUE PLACE`` for each value and place: the files that hold a value."""
    found = []
    for value in values:
        for place in places:
            done = subprocess.run(["grep", "-r", "-l", "-F", value, str(place)], capture_output=True, text=True, timeout=60)
            assert done.returncode in (0, 1), done.stderr
            found += done.stdout.split()
    return found


def test_names_that_look_like_credentials() -> None:
    """The one list (SECRET_PATTERNS), and the help of --slurm.env names every pattern of it."""
    for name in ("WANDB_API_KEY", "HF_TOKEN", "MLFLOW_TRACKING_PASSWORD", "AWS_SECRET_ACCESS_KEY", "GH_PAT_TOKEN",
                 "DB_PASS", "GOOGLE_APPLICATION_CREDENTIALS", "hf_token"):
        assert secrets.looks_secret(name), name
    for name in ("OMP_NUM_THREADS", "HF_HOME", "NCCL_DEBUG", "KEYBOARD", "PASSAGE"):
        assert not secrets.looks_secret(name), name
    from trainer_cli.schedulers.slurm.slurm_args import slurm_help

    help_text = " ".join(slurm_help().split())
    assert all(pattern in help_text for pattern in secrets.SECRET_PATTERNS), help_text


def test_dry_run_shows_each_secret_masked_and_sets_it_before_setup(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Values of --slurm.env (credential-like names) and a name of --slurm.secrets taken from this shell:
    the script and the sbatch command of the dry run show NAME=***, never a value; a plain variable is
    exported as before; the secrets are in the job's environment before the setup commands run."""
    monkeypatch.setenv("SITE_PASSPHRASE", PASS)
    code, out = train_submit(*_args([DIGITS, LOCAL_PROFILE], tmp_path), *ENV, "--slurm.secrets", "[SITE_PASSPHRASE]",
                             "--slurm.setup", '["echo set up"]', "--dry-run")  # fmt: skip
    assert code == 0, out
    assert not _found_in(out, KEY, TOKEN, PASS)
    for name in ("SITE_PASSPHRASE", "WANDB_API_KEY", "HF_TOKEN"):
        assert f"\n# {name}=***\nprintenv {name} >/dev/null || echo" in out, out
    assert "\nexport OMP_NUM_THREADS=2\n" in out and "export HF_TOKEN" not in out
    assert out.index("# WANDB_API_KEY=***") < out.index("\necho set up\n")
    assert f"\nSITE_PASSPHRASE=*** WANDB_API_KEY=*** HF_TOKEN=*** sbatch --parsable {tmp_path}/digits/version_0/submit.sbatch" in out
    assert not any(tmp_path.iterdir())


def _found_in(text: str, *values: str) -> list[str]:
    return [v for v in values if v in text]


@pytest.mark.parametrize(
    "runtime,image,passed",
    [
        ("podman", "registry/torch:2.4", ["--env=HF_TOKEN", "--env=WANDB_API_KEY", "--env=HF_HOME=/hf"]),
        ("pyxis", "nvcr.io#nvidia/pytorch:24.05-py3", ["--container-env=HF_TOKEN,HF_HOME", "export HF_HOME=/hf"]),
        ("apptainer", "/images/torch.sif", ["--env=HF_HOME=/hf"]),
        ("charliecloud", "/images/torch.sqfs", ["--set-env=HF_HOME=/hf"]),
    ],
)
def test_containers_get_secrets_by_name_from_the_job_environment(runtime: str, image: str, passed: list[str], tmp_path: Path) -> None:
    """A secret of --slurm.container.env or --slurm.env is not in the script: podman and pyxis name it
    (their value from the job's environment), apptainer and ch-run pass the host's environment in;
    sbatch gets its value."""
    job = plan(_args([DIGITS, LOCAL_PROFILE], tmp_path) + [
        "--slurm.container.runtime", runtime, "--slurm.container.image", image,
        "--slurm.container.env", f"{{HF_TOKEN: {TOKEN}, HF_HOME: /hf}}", "--slurm.env", f"{{WANDB_API_KEY: {KEY}}}",
    ], dry_run=True)  # fmt: skip
    assert not _found_in(job.script_text, KEY, TOKEN)
    assert all(word in job.script_text for word in passed), job.script_text
    environment = secrets.sbatch_environment(job.slurm)
    assert environment is not None and (environment["HF_TOKEN"], environment["WANDB_API_KEY"]) == (TOKEN, KEY)
    assert secrets.masked(job.slurm)["container"]["env"] == {"HF_TOKEN": "***", "HF_HOME": "/hf"}


def test_refusals_are_one_line() -> None:
    """A secret named but given nowhere, given two values, or an sbatch --export that would drop it."""
    with pytest.raises(UserError, match=r"^--slurm.secrets NOPE_TOKEN: not set in this shell .*`export NOPE_TOKEN=...`"):
        secrets.values(SlurmOptions(secrets=["NOPE_TOKEN"]), environ={})
    both = SlurmOptions(env={"HF_TOKEN": "a"}, container={"runtime": "pyxis", "image": "i", "env": {"HF_TOKEN": "b"}})
    with pytest.raises(UserError, match="give it different values"):
        secrets.values(both, environ={})
    for mode, where in (("NONE", "--slurm.extra_sbatch"), ("PATH,HOME", "--slurm.extra_sbatch")):
        with pytest.raises(UserError, match=f"sbatch --export={mode} \\({where}\\) does not pass HF_TOKEN"):
            secrets.values(SlurmOptions(env={"HF_TOKEN": "a"}, extra_sbatch=[f"--export={mode}"]), environ={})
    with pytest.raises(UserError, match="SBATCH_EXPORT in this shell"):
        secrets.values(SlurmOptions(env={"HF_TOKEN": "a"}), environ={"SBATCH_EXPORT": "NONE"})
    for mode in ("ALL", "ALL,PATH", "PATH,HF_TOKEN"):  # these pass it
        assert secrets.values(SlurmOptions(env={"HF_TOKEN": "a"}, extra_sbatch=[f"--export={mode}"]), environ={}) == {"HF_TOKEN": "a"}
    with pytest.raises(UserError, match="'1X' is not an environment variable name"):
        SlurmOptions(secrets=["1X"])
    message = ""
    try:
        secrets.values(SlurmOptions(secrets=["NOPE_TOKEN"]), environ={})
    except UserError as err:
        message = str(err)
    assert "\n" not in message


def _state_environment(job_id: str) -> bytes:
    """The environment Slurm saved with the job (StateSaveLocation/hash.N/job.ID/environment)."""
    config = subprocess.run(["scontrol", "show", "config"], capture_output=True, text=True, timeout=30).stdout
    state = next(line.split("=", 1)[1].strip() for line in config.splitlines() if line.startswith("StateSaveLocation"))
    return (Path(state) / f"hash.{int(job_id) % 10}" / f"job.{job_id}" / "environment").read_bytes()


def test_a_held_job_holds_its_secrets_in_slurm_and_in_no_file(slurm_cluster: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: F811
    """A real submission (held, then cancelled): Slurm saved both values with the job (a requeue starts
    from that environment); the run directory, submit's output, the registry hold neither; job.json
    shows them masked, its command too."""
    monkeypatch.setenv("HF_TOKEN", TOKEN)  # named in --slurm.secrets, taken from this shell
    args = ["--config", DIGITS, "--config", LOCAL_PROFILE, "--trainer.default_root_dir", str(tmp_path / "runs"), "--slurm.env", f"{{WANDB_API_KEY: {KEY}}}",
            "--slurm.secrets", "[HF_TOKEN]", "--slurm.extra_sbatch", '["--hold"]', "--slurm.snapshot", "false"]  # fmt: skip
    monkeypatch.setattr(sys, "argv", ["train", "submit", *args])  # the command job.json records
    code, out = train_submit(*args)
    assert code == 0, out
    job_id = job_id_from(out)
    run_dir = tmp_path / "runs" / "digits" / "version_0"
    try:
        saved = _state_environment(job_id)
        assert f"WANDB_API_KEY={KEY}".encode() in saved and f"HF_TOKEN={TOKEN}".encode() in saved
    finally:
        subprocess.run(["scancel", job_id], timeout=30)
    assert not _found_in(out, KEY, TOKEN)
    assert not _found_by_grep([KEY, TOKEN], run_dir, registry_file().parent)
    record = json.loads((run_dir / "job.json").read_text())
    assert record["slurm"]["env"] == {"WANDB_API_KEY": "***"} and record["slurm"]["secrets"] == ["HF_TOKEN"]
    assert "{WANDB_API_KEY: ***}" in record["command"], record["command"]


def _environments(job_id: str, tasks: int, restart: int, timeout_s: float = 180) -> list[dict[str, str]]:
    """The environments of the job's ``tasks`` training processes of start ``restart`` (/proc/PID/environ)."""
    import time

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = []
        for pid in _job_processes(job_id):
            try:
                raw = Path(f"/proc/{pid}/environ").read_bytes()
            except OSError:
                continue
            env = dict(item.split("=", 1) for item in raw.decode(errors="replace").split("\0") if "=" in item)
            if int(env.get("SLURM_RESTART_COUNT") or 0) == restart:
                found.append(env)
        if len(found) >= tasks:
            return found
        time.sleep(0.05)
    raise AssertionError(f"job {job_id}: {tasks} training processes of start {restart} did not appear in {timeout_s} s")


@pytest.mark.long  # a 2-task job started twice: about a minute each on 2 cores; the default tier: the held job above
@pytest.mark.parametrize("mode", ["requeue", "resubmit"])
def test_secrets_reach_every_start_of_the_training_and_no_file(slurm_cluster: None, tmp_path: Path, mode: str) -> None:  # noqa: F811
    """Issue 39's Done-when: `--slurm.env` with WANDB_API_KEY and HF_TOKEN values; both in every training
    process's environment at the first start and after SIGUSR1, requeued (scontrol requeue: Slurm's saved
    environment) or resubmitted by the job itself (sbatch from the job, with the job's environment);
    `grep -r` finds neither under the run directory, in submit's or the dry run's output, or in the
    launcher's state."""
    from support import every_epoch_last_checkpoint, quiet_args
    from test_slurm_cluster import SHORT

    root = tmp_path / "runs"
    args = ["--config", DIGITS, "--config", LOCAL_PROFILE, *every_epoch_last_checkpoint(root), *quiet_args(root, epochs=2), *SHORT,
            "--trainer.devices", "2", "--slurm.requeue_mode", mode, "--slurm.env", f"{{WANDB_API_KEY: {KEY}, HF_TOKEN: {TOKEN}}}"]  # fmt: skip
    dry_code, dry = train_submit(*args, "--dry-run")
    assert dry_code == 0, dry
    code, out = train_submit(*args)
    assert code == 0, out
    job_id = job_id_from(out)
    run_dir = root / "digits" / "version_0"
    first = _environments(job_id, tasks=2, restart=0)
    usr1_at_start(job_id, tasks=2)
    if mode == "requeue":
        wait_for_requeue(job_id)
        current, restart = job_id, 1
    else:  # the job queues its own script again as a new job, which records itself in job.json
        current, restart = _resubmitted_as(run_dir, job_id), 0
    second = _environments(current, tasks=2, restart=restart)
    assert wait_for_state(current, timeout_s=400) == "COMPLETED", (run_dir / f"slurm-{current}.log").read_text()[-3000:]
    for env in first + second:
        assert (env.get("WANDB_API_KEY"), env.get("HF_TOKEN")) == (KEY, TOKEN)
    logs = "".join(log.read_text() for log in run_dir.glob("slurm-*.log"))
    assert "restart 1 on" in logs and "is not in this job's environment" not in logs
    (tmp_path / "submit-output.txt").write_text(out + dry)
    assert not _found_by_grep([KEY, TOKEN], run_dir, tmp_path / "submit-output.txt", registry_file().parent)
    assert "\n# WANDB_API_KEY=***\n" in (run_dir / "submit.sbatch").read_text()


def _resubmitted_as(run_dir: Path, job_id: str, timeout_s: float = 180) -> str:
    """The job id ``job_id`` resubmitted itself as (job.json's ``job_id`` once it changes)."""
    import time

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        current = str(json.loads((run_dir / "job.json").read_text()).get("job_id"))
        if current != job_id:
            return current
        time.sleep(0.25)
    raise AssertionError(f"job {job_id} did not resubmit itself in {timeout_s} s")
