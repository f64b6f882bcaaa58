"""A job's rendezvous port (``MASTER_PORT``), chosen on the first node of its allocation by the batch script
(``python -m trainer_cli.schedulers.slurm.batch port``): the job's own port, or a free one drawn from its id.

Standard library only: the batch script runs it (:mod:`trainer_cli.job.jobstate`)."""

from __future__ import annotations

import sys
from typing import Any

from trainer_cli.job import context

MASTER_PORTS = range(10000, 30000)
"""Where the rendezvous port of a job is chosen: below Linux's ephemeral ports (32768-60999), so no
outgoing connection of the node holds it by chance."""


def _port_is_free(port: int) -> bool:
    """Whether a listener can bind ``port`` here as torch's TCPStore binds it (``SO_REUSEADDR``: a
    connection of an ended job still in TIME_WAIT does not hold the port, a listening socket does)."""
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("", port))
        except OSError:
            return False
    return True


def master_port(job_id: int, is_free: Any = _port_is_free, tries: int = 64) -> int:
    """The ``MASTER_PORT`` of job ``job_id``, chosen on the first node of its allocation (where the
    batch script runs and global rank 0 listens): ``10000 + job_id % 20000`` (jobs sharing a node
    do not collide); when that is taken, a port of :data:`MASTER_PORTS` drawn from the job id
    (not the next one: that is the next job's own port), the first of ``tries`` that is free."""
    import random

    ports = [MASTER_PORTS[job_id % len(MASTER_PORTS)], *random.Random(job_id).sample(MASTER_PORTS, tries)]
    return next((port for port in ports if is_free(port)), ports[0])


def print_master_port() -> int:
    """Print this job's ``MASTER_PORT`` (``SLURM_JOB_ID``'s, :func:`master_port`), saying so on stderr when its
    own port is taken on this node; returns 0."""
    job_id = context.current().job_id or "0"
    number = int(job_id) if job_id.isdigit() else 0
    port = master_port(number)
    if port != MASTER_PORTS[number % len(MASTER_PORTS)]:
        print(
            f"trainer-cli: MASTER_PORT {MASTER_PORTS[number % len(MASTER_PORTS)]} is taken on this node: using {port}",
            file=sys.stderr,
        )
    print(port)
    return 0
