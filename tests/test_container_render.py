"""`--slurm.container.*`: the scripts each runtime renders (golden files, `bash -n`), the bad
combinations refused in one line, and the launcher's job steps run by a bare host `python3` from the
run's copy of them. The runtime itself runs for real in tests/test_container_cluster.py (Charliecloud).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from support import DIGITS, REPO
from test_submit_render import LOCAL_PROFILE, _args, _as_from_a_shell, _check_golden, _normalise, plan  # noqa: F401 - a fixture

from trainer_cli.errors import UserError
from trainer_cli.schedulers.slurm import JOB_STEPS
from trainer_cli.schedulers.slurm.container import install_helpers

GPU = ["--trainer.accelerator", "gpu", "--trainer.num_nodes", "2", "--trainer.devices", "4"]
ENV = ["--slurm.container.env", '{"HF_HOME": "/scratch/hf cache"}']
CASES = {
    "container_apptainer": ["--slurm.container.runtime", "apptainer", "--slurm.container.image", "/images/torch.sif",
                            "--slurm.container.mounts", "[/scratch/data:/data:ro]", *ENV],
    "container_pyxis": ["--slurm.container.runtime", "pyxis", "--slurm.container.image", "nvcr.io#nvidia/pytorch:24.05-py3",
                        "--slurm.container.mounts", "[/scratch/data:/data]", *ENV, "--slurm.test_after_fit", "true"],
    "container_podman": ["--slurm.container.runtime", "podman-hpc", "--slurm.container.image", "registry/torch:2.4",
                         "--slurm.container.workdir", "/workspace", *ENV],
}  # fmt: skip


@pytest.mark.parametrize("name", list(CASES))
def test_each_runtime_renders_a_script_bash_reads(name: str, tmp_path: Path) -> None:
    job = plan(_args([DIGITS, LOCAL_PROFILE, *GPU, *CASES[name]], tmp_path), dry_run=True)
    text = job.script_text + (job.test_script_text("afterok:1") if job.slurm.test_after_fit else "")
    _check_golden(name, _normalise(text, tmp_path))
    script = tmp_path / "script.sbatch"
    script.write_text(text)
    done = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    srun = [line for line in text.splitlines() if line.startswith("srun ")]
    assert srun and all(("--container-image=" if "pyxis" in name else " /opt/env/bin/python -m trainer_cli") in s for s in srun)
    helpers = [line for line in text.splitlines() if "-m trainer_cli.job." in line]
    assert helpers and all("python3 -m trainer_cli.job." in line and "/.launcher " in line for line in helpers), helpers


@pytest.mark.parametrize(
    "flags,message",
    [
        (["--slurm.container.image", "x.sif"], "--slurm.container.image without --slurm.container.runtime"),
        (["--slurm.container.runtime", "docker", "--slurm.container.image", "x"], "not a container runtime; choose"),
        (["--slurm.container.runtime", "apptainer"], "give the image too"),
        (["--slurm.container.runtime", "apptainer", "--slurm.container.image", "x.sif", "--slurm.container.mounts",
          "[data:/data]"], "SRC 'data' must be an absolute path"),
        (["--slurm.container.runtime", "charliecloud", "--slurm.container.image", "/img", "--slurm.container.mounts",
          "[/a:/b:ro]"], "ch-run takes no mount options"),
    ],
)  # fmt: skip
def test_bad_combinations_are_one_line(flags: list[str], message: str, tmp_path: Path) -> None:
    with pytest.raises(UserError, match=message) as err:
        plan(_args([DIGITS, LOCAL_PROFILE, *flags], tmp_path), dry_run=True)
    assert "\n" not in str(err.value)


def test_charliecloud_directory_image_needs_its_mount_points(tmp_path: Path) -> None:
    image = tmp_path / "image"
    image.mkdir(parents=True)
    flags = ["--slurm.container.runtime", "charliecloud", "--slurm.container.image", str(image)]
    with pytest.raises(UserError, match=rf"no /etc/hosts.*touch {image}/etc/hosts"):
        plan(_args([DIGITS, LOCAL_PROFILE, *flags], tmp_path / "runs"), dry_run=True)
    (image / "etc").mkdir()
    (image / "etc" / "hosts").touch()
    with pytest.raises(UserError, match=rf"mounts /data: the image has no directory /data.*mkdir -p {image}/data$"):
        plan(_args([DIGITS, LOCAL_PROFILE, *flags, "--slurm.container.mounts", "[/data]"], tmp_path / "runs"), dry_run=True)
    (image / "data").mkdir()
    flags += ["--slurm.container.mounts", "[/data]"]
    # the run directory or the work tree submitted from, whichever is looked at first (both under /tmp in a
    # clone made there)
    refused = rf"no directory to bind (?P<path>{REPO}|{tmp_path}/runs/digits/version_0) at.*mkdir -p {image}(?P=path)$"
    with pytest.raises(UserError, match=refused):
        plan(_args([DIGITS, LOCAL_PROFILE, *flags], tmp_path / "runs"), dry_run=True)
    top, run_top = "/" + REPO.parts[1], "/" + tmp_path.parts[1]  # /tmp/pytest-of-<user>/...: /tmp
    for where in (top, run_top):
        (image / where.lstrip("/")).mkdir(exist_ok=True)
    text = plan(_args([DIGITS, LOCAL_PROFILE, *flags], tmp_path / "runs"), dry_run=True).script_text
    # each bound at the deepest directory of it the image has: the work tree and the run under their tops
    assert f"--bind={top}:{top} " in text and f"--bind={run_top}:{run_top} " in text, text[-1500:]
    assert "--bind=/data:/data --cd=" in text and str(tmp_path / "runs") not in text.split("ch-run")[1].split("--cd")[0]
    assert f" {image} -- /opt/env/bin/python -m trainer_cli fit" in text


def test_job_steps_run_by_a_bare_host_python(tmp_path: Path) -> None:
    """The run's copy (<run>/.launcher) is all a host's python3 needs: no trainer-cli, no filelock."""
    bare = shutil.which("python3", path="/usr/bin:/bin")
    if bare is None:
        pytest.skip("no python3 in /usr/bin or /bin")
    copy = install_helpers(tmp_path)
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(copy), "SLURM_JOB_ID": "4242"}
    done = subprocess.run([bare, "-s", "-m", "trainer_cli.schedulers.slurm.batch", "port"], capture_output=True, text=True, env=env)
    assert done.returncode == 0 and done.stdout.strip().isdigit(), done.stderr
    run = tmp_path / "run"  # the batch script's start and end of a step that completed: job.json says so
    run.mkdir()
    for event in (["start"], ["end", "0"]):
        step = subprocess.run([bare, "-s", "-m", "trainer_cli.schedulers.slurm.batch", str(run), *event],
                              capture_output=True, text=True, env=env)  # fmt: skip
        assert step.returncode == 0 and "Traceback" not in step.stderr, step.stdout + step.stderr
    assert json.loads((run / "job.json").read_text())["state"] == "COMPLETED"
    lock = subprocess.run([bare, "-s", "-c", "import filelock, trainer_cli.atomic as a; print(filelock.__file__)"],
                          capture_output=True, text=True, env=env)  # fmt: skip
    assert lock.returncode == 0 and lock.stdout.startswith(str(copy)), lock.stderr
    assert not os.path.exists(copy / "trainer_cli" / "runtime"), "only the job steps are copied"
    # every in-job module of the copy imports there (what the steps import when Slurm is asked, the watchdog)
    names = [f"trainer_cli.schedulers.slurm.{name}" for name in JOB_STEPS]
    names += [f"trainer_cli.job.{p.stem}" for p in (copy / "trainer_cli" / "job").glob("*.py") if p.stem != "__init__"]
    imported = subprocess.run([bare, "-s", "-c", f"import importlib\nfor n in {names!r}: importlib.import_module(n)"],
                              capture_output=True, text=True, env=env)  # fmt: skip
    assert imported.returncode == 0, imported.stderr
    watchdog = subprocess.run([bare, "-s", "-m", "trainer_cli.schedulers.slurm.watchdog", str(run), "watch"],
                              capture_output=True, text=True, env=env)  # fmt: skip
    assert watchdog.returncode == 0 and not watchdog.stderr, watchdog.stderr  # no TRAINER_CLI_PROGRESS: no watch
