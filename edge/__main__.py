"""``python -m edge``: run the edge until SIGINT/SIGTERM (then it closes every session)."""

import asyncio
import asyncio.sslproto
import logging
import os
import signal
import sys

from chalicelib.core import store
from chalicelib.core.policy import ipintel
from edge import config, gc_tuning, open_files
from edge.server import Edge


# asyncio gives every TLS connection a 256 KiB read buffer (sslproto.SSLProtocol.max_size),
# allocated whole at accept: with thousands of agent sessions and HTTPS clients that is most of
# the edge's memory, and a connection that never authenticates would hold it too. A TLS record
# is at most 16 KiB of plaintext, so 32 KiB still takes whole records per read.
TLS_READ_BUFFER = 32 * 1024


async def main() -> int:
    asyncio.sslproto.SSLProtocol.max_size = TLS_READ_BUFFER
    ipintel.WARM_ON_COMPILE = True  # a policy naming conn.geo.* loads the database at once
    settings = config.load()
    files, _ = open_files.raise_limit()  # the caps outgrow a soft limit of 1,024 (open_files.py)
    open_files.quiet_accept_failures(asyncio.get_running_loop())
    store.configure()
    edge = Edge(settings)
    await edge.start()
    gc_tuning.tune()  # the collector's cost per request (edge/gc_tuning.py)
    print(
        f"edge {settings.instance_id}: agents connect to {settings.host}:{edge.agent_port} "
        f"(TLS; the SDK's server_addr), endpoints are served at "
        f"http://<name>.{settings.base_domain}:{edge.http_port} and "
        f"https://<name>.{settings.base_domain}:{edge.https_port}, TCP endpoints on "
        f"{settings.tcp_host}:{settings.tcp_ports[0]}-{settings.tcp_ports[1]}; "
        f"open files limit {files}",
        flush=True,
    )
    if edge.ssh is not None:
        print(
            f"edge SSH gateway: ssh -R 0:localhost:<port> -p {edge.ssh_port} "
            f"v2@{settings.host} http (host key {edge.ssh.fingerprint}; docs/SSH.md)",
            flush=True,
        )
    if edge.metrics_port is not None:
        print(f"edge metrics: http://{settings.host}:{edge.metrics_port}/metrics", flush=True)
    ca = edge.certs.ca_path or settings.tls_cert
    print(
        f"edge CA certificate: {os.path.abspath(ca)} (the SDK's root_cas, curl --cacert)",
        flush=True,
    )
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    await asyncio.wait_for(edge.stop(), 8 if edge.cluster is None else 20)  # 20: a drain
    return 0


if __name__ == "__main__":
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s"
    )
    sys.exit(asyncio.run(main()))
