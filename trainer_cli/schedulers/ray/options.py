"""``train submit --scheduler ray``'s own options (``--ray.KEY VALUE``), and the checks of the cluster
they name before anything is written: Ray installed here in the supported range, the job server
answering.
"""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.request
from dataclasses import dataclass, fields
from typing import Any

from trainer_cli.config.request import Request
from trainer_cli.errors import UserError, did_you_mean

RAY = "ray"
"""This engine's name (:data:`trainer_cli.job.scheduler.SCHEDULER_NAMES`): its options are ``--ray.*``."""
RAY_VERSIONS = ("2.60", "3")
"""The Ray versions supported, ``>= first, < second``: the ``ray`` extra of pyproject.toml says the same."""
INSTALL_HINT = "pip install 'trainer-cli[ray]'"
ADDRESS_ENV = "RAY_ADDRESS"
CONNECT_TIMEOUT_S = 10.0


@dataclass
class RayOptions:
    """Where and how the Ray job runs (``--ray.KEY VALUE``)."""

    address: str | None = None
    """The cluster's job server, ``http://HOST:PORT`` (the dashboard's; ``RAY_ADDRESS`` when not given)."""
    max_failures: int = 3
    """Restarts of the worker group after a lost worker (or a failed rank) before the job fails."""
    cpus_per_worker: float = 1.0
    """Ray CPUs each worker (rank) holds."""

    @property
    def job_server(self) -> str:
        """The address as an http URL (``HOST:PORT`` given without a scheme is taken as ``http://``)."""
        address = self.address or ""
        return address if "://" in address else f"http://{address}"


def parse(request: Request) -> RayOptions:
    """The ``--ray.*`` flags of ``request``, typed; the address falls back to ``RAY_ADDRESS``.

    Raises:
        UserError: for an unknown key (with close matches), a value of the wrong type, or no address.
    """
    known = {f.name: f for f in fields(RayOptions)}
    values: dict[str, Any] = {}
    for arg in request:
        if not (arg.name or "").startswith(RAY + "."):
            continue
        key = (arg.name or "")[len(RAY) + 1 :]
        if key not in known:
            names = [f"{RAY}.{k}" for k in known]
            raise UserError(f"unknown Ray option {arg.flag!r}.{did_you_mean(f'{RAY}.{key}', names) or ''}")
        if arg.value is None:
            raise UserError(f"{arg.flag} needs a value")
        kind = known[key].type
        try:
            values[key] = int(arg.value) if kind == "int" else float(arg.value) if kind == "float" else arg.value
        except ValueError:
            raise UserError(
                f"{arg.flag} {arg.value}: expected {'an integer' if kind == 'int' else 'a number'}"
            ) from None
    options = RayOptions(**values)
    if options.max_failures < 0:
        raise UserError(f"--ray.max_failures {options.max_failures}: must be 0 or more")
    if options.cpus_per_worker <= 0:
        raise UserError(f"--ray.cpus_per_worker {options.cpus_per_worker}: must be more than 0")
    options.address = options.address or os.environ.get(ADDRESS_ENV) or None
    if not options.address:
        raise UserError(
            f"--scheduler ray: no cluster named: give --ray.address http://HOST:PORT (its job server) or set "
            f"{ADDRESS_ENV}"
        )
    return options


def _version_key(text: str) -> tuple[int, ...]:
    return tuple(int(p) for p in text.split("+")[0].split(".") if p.isdigit())


def in_range(version: str) -> bool:
    """Whether ``version`` is within :data:`RAY_VERSIONS`."""
    low, high = RAY_VERSIONS
    return _version_key(low) <= _version_key(version) < _version_key(high)


def installed_version() -> str:
    """The version of Ray installed here.

    Raises:
        UserError: when Ray is not installed, or its version is outside :data:`RAY_VERSIONS`.
    """
    from importlib.metadata import PackageNotFoundError, version

    try:
        found = version("ray")
    except PackageNotFoundError:
        raise UserError(f"--scheduler ray needs Ray, which is not installed here: {INSTALL_HINT}") from None
    if not in_range(found):
        raise UserError(
            f"Ray {found} is installed; trainer-cli supports Ray >={RAY_VERSIONS[0]},<{RAY_VERSIONS[1]}: {INSTALL_HINT}"
        )
    return found


def cluster_version(options: RayOptions) -> str:
    """The Ray version the job server at ``options.address`` runs (its ``/api/version``).

    Raises:
        UserError: when it does not answer (an unreachable address), or runs a Ray outside :data:`RAY_VERSIONS`.
    """
    url = options.job_server.rstrip("/") + "/api/version"
    try:
        with urllib.request.urlopen(url, timeout=CONNECT_TIMEOUT_S) as answer:  # noqa: S310 - the user's cluster
            found = str(json.loads(answer.read()).get("ray_version", ""))
    except (urllib.error.URLError, OSError, ValueError) as err:
        reason = getattr(err, "reason", err)
        raise UserError(
            f"the Ray cluster at {options.address} does not answer ({reason}): start it, or name its job server "
            f"with --ray.address http://HOST:PORT (or {ADDRESS_ENV}); nothing was submitted"
        ) from None
    if not in_range(found):
        raise UserError(
            f"the Ray cluster at {options.address} runs Ray {found}; trainer-cli supports Ray "
            f">={RAY_VERSIONS[0]},<{RAY_VERSIONS[1]}: nothing was submitted"
        )
    return found
