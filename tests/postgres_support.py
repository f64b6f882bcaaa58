"""A PostgreSQL server of the test's own (Debian's `postgresql` package: initdb and pg_ctl), for the
sweeps' database storage (`--sweep_storage URL`): tests/test_sweep_postgres.py and the long study test.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from glob import glob
from pathlib import Path

import pytest

PORT = 55000 + os.getpid() % 1000


def _binary(name: str) -> str | None:
    found = shutil.which(name) or sorted(glob(f"/usr/lib/postgresql/*/bin/{name}"))
    return found if isinstance(found, str) else (found[-1] if found else None)


@pytest.fixture
def postgres_url() -> Iterator[str]:
    """A PostgreSQL server of its own (unix socket only, trust auth) for the test; its URL for SQLAlchemy."""
    pytest.importorskip("psycopg")
    initdb, pg_ctl = _binary("initdb"), _binary("pg_ctl")
    if not (initdb and pg_ctl):
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail("no PostgreSQL server binaries (initdb, pg_ctl): .ci/run installs Debian's postgresql")
        pytest.skip("no PostgreSQL server binaries (initdb, pg_ctl): apt-get install postgresql")
    home = Path(tempfile.mkdtemp(prefix="trainer-cli-pg-"))  # /tmp: reachable by `nobody`, unlike pytest's tmp_path
    as_user: list[str] = []
    if os.geteuid() == 0:
        shutil.chown(home, "nobody")
        as_user = ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups"]
    data = home / "data"
    try:
        subprocess.run([*as_user, initdb, "-D", str(data), "-A", "trust", "-U", "postgres", "--no-sync"],
                       check=True, capture_output=True, timeout=120)
        subprocess.run([*as_user, pg_ctl, "-D", str(data), "-l", str(home / "log"), "-w", "-o",
                        f"-k {home} -p {PORT} -c listen_addresses='' -c fsync=off", "start"], check=True, capture_output=True, timeout=120)
        yield f"postgresql+psycopg://postgres@/postgres?host={home}&port={PORT}"
    finally:
        subprocess.run([*as_user, pg_ctl, "-D", str(data), "-m", "immediate", "stop"], capture_output=True, timeout=60)
        shutil.rmtree(home, ignore_errors=True)
