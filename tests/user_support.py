"""Ordinary users for the cluster tests (issue 46): every other cluster test runs as root.

The session fixture :func:`site_users` makes two users of one group (``useradd``, once: a later
session finds them), gives them associations in the local cluster's accounting (``sacctmgr``, as
``scripts/local-slurm`` gives root's) and a Python environment each can run: the interpreter this
session runs may live where others cannot read (pyenv's under ``/root``, mode 0700), so each user
gets a venv of the system's ``/usr/bin/python3`` (the same minor version) in its home, whose
``.pth`` file adds this session's ``site-packages`` (torch, Lightning, trainer-cli's editable
install). That folder and the checkout must be readable by others: where they are not, the
fixture fails and says so (it changes no permission of theirs).

:meth:`SiteUser.run` runs a shell command as the user (``runuser``) with a clean environment (its
own ``HOME``, so its own ``~/.local/state`` registry of jobs, not the session's) and the ``umask``
asked for. Without root (no ``useradd``) the tests skip with the reason.
"""

from __future__ import annotations

import grp
import hashlib
import os
import pwd
import shutil
import stat
import subprocess
import sys
import sysconfig
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from support import REPO

GROUP = "tcli-lab"
USERS = ("tcli-alice", "tcli-bob")
ACCOUNTS = "trainer,tight"  # scripts/local-slurm's accounts; trainer the default
SHARED = Path("/var/tmp/trainer-cli-tests-lab")
"""The group's project folders: ``root:tcli-lab``, mode ``2770`` (setgid: what is made in it is the group's)."""
SYSTEM_PYTHON = "/usr/bin/python3"


@dataclass(frozen=True)
class SiteUser:
    """A user made by :func:`site_users`: its name, ids, home and the venv it runs ``train`` from."""

    name: str
    uid: int
    gid: int
    home: Path
    venv: Path

    def run(self, command: str, cwd: Path, umask: str = "022", env: dict[str, str] | None = None,
            input: str | None = None, timeout: float = 600) -> subprocess.CompletedProcess[str]:
        """``bash -c COMMAND`` as the user in ``cwd`` under ``umask``, ``train`` its venv's; stdout and
        stderr together in ``.stdout``."""
        base = {
            "HOME": str(self.home), "USER": self.name, "LOGNAME": self.name, "SHELL": "/bin/bash", "LANG": "C.UTF-8",
            "PATH": f"{self.venv}/bin:/usr/local/bin:/usr/bin:/bin", "SLURM_CONF": os.environ.get("SLURM_CONF", ""),
            "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1"), "COLUMNS": "250",
        }
        script = f"umask {umask} && cd {str(cwd)!r} && {command}"
        return subprocess.run(
            ["runuser", "-u", self.name, "--", "env", "-i", *(f"{k}={v}" for k, v in {**base, **(env or {})}.items()),
             "bash", "-c", script],
            input=input, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=timeout,
        )

    def ok(self, command: str, cwd: Path, umask: str = "022", **kwargs: object) -> str:
        """:meth:`run`, failing the test unless the command exits 0; its output."""
        done = self.run(command, cwd, umask, **kwargs)  # type: ignore[arg-type]
        assert done.returncode == 0, (
            f"as {self.name} (umask {umask}) in {cwd}: {command}\nexit {done.returncode}:\n{done.stdout[-4000:]}")
        return done.stdout


def _unusable(reason: str) -> None:
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"{reason} (CI=true: the tests as an ordinary user must run)")
    pytest.skip(reason)


def _sh(*args: str) -> str:
    done = subprocess.run(list(args), capture_output=True, text=True, timeout=120)
    said = done.stderr.strip() or done.stdout.strip()
    assert done.returncode == 0, f"{' '.join(args)}: exit {done.returncode}: {said}"
    return done.stdout


def _ensure_user(name: str) -> SiteUser:
    try:
        grp.getgrnam(GROUP)
    except KeyError:
        _sh("groupadd", GROUP)
    try:
        entry = pwd.getpwnam(name)
    except KeyError:
        _sh("useradd", "--create-home", "--home-dir", f"/home/{name}", "--shell", "/bin/bash", "--groups", GROUP, name)
        entry = pwd.getpwnam(name)
    if name not in grp.getgrnam(GROUP).gr_mem:
        _sh("usermod", "--append", "--groups", GROUP, name)
    home = Path(entry.pw_dir)
    purelib = sysconfig.get_paths()["purelib"]
    # one venv per session environment (two checkouts' sessions do not rewrite each other's .pth)
    venv = home / ".venvs" / hashlib.sha256(purelib.encode()).hexdigest()[:10]
    user = SiteUser(name, entry.pw_uid, entry.pw_gid, home, venv)
    if not (venv / "bin" / "python").exists():
        user.ok(f"mkdir -p .venvs && {SYSTEM_PYTHON} -m venv --without-pip {str(venv)!r}", home)
    site = Path(user.ok("python -c 'import sysconfig; print(sysconfig.get_paths()[\"purelib\"])'", home).strip())
    pth = site / "trainer_cli_tests.pth"
    user.ok(f"cat > {str(pth)!r}", home, input=f"import site; site.addsitedir({purelib!r})\n")
    # the entry point as pip writes it (`train` of this session's environment runs its interpreter)
    entry = (Path(sys.prefix) / "bin" / "train").read_text().split("\n", 1)[1]
    user.ok(f"cat > {str(venv / 'bin' / 'train')!r} && chmod +x {str(venv / 'bin' / 'train')!r}", home,
            input=f"#!{venv / 'bin' / 'python'}\n{entry}")
    # a fresh registry of jobs each session: job ids restart with the cluster's state
    shutil.rmtree(home / ".local" / "state" / "trainer-cli", ignore_errors=True)
    return user


def _readable_by(user: SiteUser, *paths: str) -> None:
    """Skip the session's user tests, saying why and what to do, where ``paths`` cannot be read by ``user``
    (a folder on the way without ``x`` for others, a checkout or venv under /root): the fixture changes no
    permission of them, and a checkout's place is the machine's, not a defect of the launcher."""
    for path in paths:
        if user.run(f"test -r {path!r} && ls {path!r} >/dev/null", Path("/")).returncode != 0:
            def closed(p: Path) -> bool:
                mode = p.stat().st_mode
                return not (mode & stat.S_IROTH and (not p.is_dir() or mode & stat.S_IXOTH))

            blocked = next((p for p in [*reversed(Path(path).parents), Path(path)] if closed(p)), Path(path))
            pytest.skip(f"{path} cannot be read by the test user {user.name} ({blocked} is "
                        f"{stat.filemode(blocked.stat().st_mode)}): the tests as an ordinary user run this session's "
                        "packages and checkout; run them from a checkout and venv others can read (or `chmod o+rx` "
                        f"{blocked} yourself)")


def _ensure_association(name: str, timeout_s: float = 30) -> None:
    """The user's association with the accounts of ``scripts/local-slurm`` (default ``trainer``),
    known to slurmctld (it enforces associations) before the first submission."""
    def known() -> bool:
        out = subprocess.run(["sacctmgr", "-n", "-P", "show", "assoc", "where", f"user={name}", "format=Account"],
                             capture_output=True, text=True, timeout=60).stdout.split()
        return set(ACCOUNTS.split(",")) <= set(out)

    if not known():
        _sh("sacctmgr", "-i", "add", "user", name, f"Account={ACCOUNTS}", "DefaultAccount=trainer")
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        out = subprocess.run(["scontrol", "show", "assoc_mgr", f"users={name}", "flags=assoc"],
                             capture_output=True, text=True, timeout=60).stdout
        if f"UserName={name}(" in out:
            return
        time.sleep(0.5)
    raise AssertionError(f"slurmctld does not know {name}'s association {timeout_s} s after sacctmgr added it")


@pytest.fixture(scope="session")
def site_users(slurm_cluster: None) -> Iterator[dict[str, SiteUser]]:
    """``{"alice": ..., "bob": ...}``: two ordinary users of the group ``tcli-lab`` with associations
    and a venv each (see the module docstring); :data:`SHARED` the group's folder. Made once: a later
    session reuses the users (their registries emptied)."""
    if os.geteuid() != 0:
        _unusable("the tests as an ordinary user need root (useradd, runuser, sacctmgr)")
    missing = [tool for tool in ("useradd", "groupadd", "usermod", "runuser", "sacctmgr") if shutil.which(tool) is None]
    if missing or not Path(SYSTEM_PYTHON).is_file():
        _unusable(f"the tests as an ordinary user need {', '.join(missing) or SYSTEM_PYTHON}: not found")
    version = subprocess.run([SYSTEM_PYTHON, "-c", "import sys, venv; print(sys.version_info[:2])"],
                             capture_output=True, text=True, timeout=60).stdout
    if version.strip() != str(sys.version_info[:2]):
        _unusable(f"{SYSTEM_PYTHON} is not Python {sys.version_info.major}.{sys.version_info.minor} with venv "
                  "(the session's packages are for that version): no environment an ordinary user can run")
    users = {}
    for name in USERS:
        users[name.removeprefix("tcli-")] = user = _ensure_user(name)
        _readable_by(user, sysconfig.get_paths()["purelib"], str(REPO / "trainer_cli"), str(REPO / "configs"))
        _ensure_association(name)
    SHARED.mkdir(exist_ok=True)
    os.chown(SHARED, 0, grp.getgrnam(GROUP).gr_gid)
    SHARED.chmod(0o2770)
    yield users


def project(user: SiteUser, parent: Path, umask: str) -> Path:
    """A fresh project folder of ``user`` in ``parent``, made by the user under ``umask`` (``mkdir``:
    ``mktemp -d`` would make it 0700 whatever the umask)."""
    return Path(user.ok('d=$(mktemp -u -d "$PWD/project-XXXXXX") && mkdir "$d" && echo "$d"', parent, umask).strip())
