"""The edge's open-file limit (edge/open_files.py, docs/SECURITY.md "Open files"): raised to the
hard limit at start, and an accept that fails past it is one counted warning line, after which
the listener accepts again."""

import os
import resource
import socket
import stat
import sys

from tests.edge.support import metric, open_files, wait

SOFT_AT_START = 256


def _low_limit_python(tmp_path):
    """An interpreter that starts with a soft limit of SOFT_AT_START open files."""
    path = tmp_path / "python-low-files"
    path.write_text(f'#!/bin/sh\nulimit -Sn {SOFT_AT_START}\nexec "{sys.executable}" "$@"\n')
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)


def _written_since(path, start):
    with open(path, errors="replace") as fh:
        fh.seek(start)
        return fh.read()


def _version_line(port, source, timeout=5.0):
    with socket.create_connection(("127.0.0.1", port), timeout, (source, 0)) as sock:
        sock.sendall(b"SSH-2.0-OpenSSH_9.2p1 probe\r\n")
        return sock.makefile("rb").readline()


def test_the_edge_raises_its_soft_limit_and_a_failed_accept_is_one_counted_line(
    another_edge, tmp_path
):
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    assert hard > SOFT_AT_START
    edge = another_edge(python=_low_limit_python(tmp_path))
    pid = edge.process.pid
    assert open_files(pid)[0] == hard  # raised from SOFT_AT_START at start
    assert f"open files limit {hard}" in edge.log()

    # the limit brought down to what the edge holds now, plus a few: the SSH gateway (an
    # asyncio listener) runs out of descriptors after a handful of connections
    start = os.path.getsize(edge.log_path)
    before = metric(edge.metrics(), "edge_accept_failures_total")
    resource.prlimit(pid, resource.RLIMIT_NOFILE, (open_files(pid)[1] + 4, hard))
    held = []
    try:
        for n in range(24):  # 3 addresses, each under the gateway's per-address cap of 16
            source = (f"127.0.7.{n % 3 + 1}", 0)
            held.append(socket.create_connection(("127.0.0.1", edge.ssh_port), 5, source))
        said = wait(lambda: "Too many open files" in _written_since(edge.log_path, start), 10)
    finally:
        resource.prlimit(pid, resource.RLIMIT_NOFILE, (hard, hard))
        for sock in held:
            sock.close()
    written = _written_since(edge.log_path, start)
    assert said, written
    assert "Traceback" not in written, written
    assert "failed: Too many open files (open files limit" in written, written
    assert metric(edge.metrics(), "edge_accept_failures_total") > before
    # the listener waits 1 s after a failed accept, then serves again
    assert wait(lambda: _version_line(edge.ssh_port, "127.0.7.9").startswith(b"SSH-2.0-"), 10)
