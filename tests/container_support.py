"""A Charliecloud directory image built from Debian's packages, for the container tests
(tests/test_container_cluster.py): ``debootstrap --variant=minbase --include=python3 bookworm DIR``
(about 75 s), cached between runs under :data:`CACHE`, keyed by its recipe, built once under a file
lock. The project's venv and its base interpreter are not installed in it: the job binds them in with
``ch-run -b`` (``--slurm.container.mounts``), at mount points the image holds.

Run as a script it builds (or finds) the image and prints its path: ``python tests/container_support.py``.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

CACHE = Path("/var/tmp/trainer-cli-images")
RECIPE = ["debootstrap", "--variant=minbase", "--include=python3", "bookworm"]
PACKAGES = ["charliecloud-runtime", "debootstrap"]
"""Debian's packages the tests need (.ci/run installs them on a fresh machine; the fixture too, as root)."""


def _missing_tools() -> list[str]:
    return [tool for tool in ("ch-run", "debootstrap") if shutil.which(tool) is None]


def ensure_tools() -> str | None:
    """Install :data:`PACKAGES` with apt-get when ``ch-run`` or ``debootstrap`` is missing (as root);
    None when they are there, else why not."""
    if not _missing_tools():
        return None
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        return f"missing {', '.join(_missing_tools())}: apt-get install {' '.join(PACKAGES)} (as root)"
    done = subprocess.run(
        ["apt-get", "install", "-y", "-qq", "--no-install-recommends", *PACKAGES], capture_output=True, text=True
    )
    if done.returncode != 0:
        subprocess.run(["apt-get", "update", "-qq"], capture_output=True)
        done = subprocess.run(
            ["apt-get", "install", "-y", "-qq", "--no-install-recommends", *PACKAGES], capture_output=True, text=True
        )
    return None if not _missing_tools() else f"apt-get install {' '.join(PACKAGES)} failed: {done.stderr[-300:]}"


def debian_image() -> Path:
    """The image directory (built now if not cached). Building needs root (debootstrap) and Debian's mirror."""
    key = hashlib.sha256(" ".join(RECIPE).encode()).hexdigest()[:12]
    image = CACHE / f"debian-bookworm-python3-{key}"
    CACHE.mkdir(parents=True, exist_ok=True)
    with open(CACHE / f"{image.name}.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (image / "usr" / "bin" / "python3").exists():
            building = image.with_name(image.name + ".building")
            shutil.rmtree(building, ignore_errors=True)
            done = subprocess.run([*RECIPE, str(building)], capture_output=True, text=True, timeout=900)
            if done.returncode != 0:
                raise RuntimeError(f"{' '.join(RECIPE)} {building} failed: {done.stdout[-500:]} {done.stderr[-500:]}")
            building.rename(image)
        (image / "etc" / "hosts").touch()  # minbase has none: ch-run binds the host's (node names) onto it
    return image


def mount_points(image: Path, *paths: Path | str) -> None:
    """Make ``paths`` exist in ``image`` as empty directories (ch-run binds only onto a directory the
    image has; the image is read-only when it runs)."""
    for path in paths:
        (image / str(path).lstrip("/")).mkdir(parents=True, exist_ok=True)


def charliecloud_or_skip() -> Path:
    """The image, or a skip (a failure under ``CI=true``) naming what is missing."""
    why = ensure_tools()
    if why is None and os.geteuid() != 0:
        why = "debootstrap needs root"
    if why:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(why)
        pytest.skip(why)
    return debian_image()


if __name__ == "__main__":
    print(ensure_tools() or debian_image())
    sys.exit(0)
