"""Free ports on 127.0.0.1 for the processes started here.

Ports are taken below the kernel's ephemeral range, never twice by one process: a port from
that range (what bind(0) gives) can become the source port of any outgoing connection made
before its server binds it, and the server then fails with 'address already in use' (seen in
full runs: an edge's TCP listener, and make run's store on 127.0.0.1:33501).

Several processes may allocate at once (pytest-xdist workers, a benchmark beside a test run):
each pytest-xdist worker (PYTEST_XDIST_WORKER=gwN of PYTEST_XDIST_WORKER_COUNT) takes its ports
from its own slice of the range, so two workers never hand out the same one. A process a worker
starts inherits both variables and so allocates in the worker's slice.
"""

import os
import random
import socket
import time
from typing import Set, Tuple

LOWEST = 20000  # below: the edges' reserved TCP addresses and well-known services
_GIVEN: Set[int] = set()  # ports this process has handed out: never twice


def _ephemeral_low() -> int:
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as handle:
            return int(handle.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768  # Linux's default


def allowed_range() -> Tuple[int, int]:
    """[low, high): where this process takes ports (its pytest-xdist worker's slice)."""
    low, high = LOWEST, max(LOWEST + 1, _ephemeral_low())
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    count = os.environ.get("PYTEST_XDIST_WORKER_COUNT", "")
    if worker.startswith("gw") and worker[2:].isdigit() and count.isdigit() and int(count) > 1:
        index, workers = int(worker[2:]), int(count)
        span = (high - low) // workers
        low, high = low + index * span, low + (index + 1) * span
    return low, high


def free_port() -> int:
    """A free port (see the module's docstring)."""
    return free_range(1)


def free_range(size: int) -> int:
    """The first of ``size`` consecutive free ports (see the module's docstring)."""
    low, high = allowed_range()
    for _ in range(1000):
        first = random.randrange(low, max(low + 1, high - size))
        ports = range(first, first + size)
        if _GIVEN.intersection(ports):
            continue
        try:
            for port in ports:
                with socket.socket() as sock:
                    sock.bind(("127.0.0.1", port))
        except OSError:
            continue
        _GIVEN.update(ports)
        return first
    raise RuntimeError(f"no {size} free ports in {low}-{high - 1}")


def wait_port(port: int, timeout: float = 20.0) -> None:
    """Return once something accepts connections on 127.0.0.1:``port``."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"nothing listens on {port} after {timeout}s")
