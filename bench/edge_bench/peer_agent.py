"""The official Python SDK (``ngrok``) forwarding endpoints to given upstreams, and nothing else
in its process (bench/edge_bench/bench_peers.py reads this process's CPU as "the SDK agent's").
Run with the device agent's virtualenv (.venv-agent, where the SDK is installed).

Usage: ``python peer_agent.py '<json config>'``; config: ``authtoken``, ``server_addr``,
``root_cas``, ``binds``: a list of {"proto": "http"|"tcp", "upstream": "http://127.0.0.1:P" or
"127.0.0.1:P", "policy"?: a traffic policy as JSON text, "mutual_tlsca"?: a CA's PEM}. Prints
one JSON line per bound endpoint ({"event": "bound", "url": ...}), then {"event": "ready"};
exits when stdin closes.
"""

import asyncio
import json
import sys

import ngrok


def emit(event):
    print(json.dumps(event), flush=True)


async def main(cfg):
    session = await (
        ngrok.SessionBuilder()
        .authtoken(cfg["authtoken"])
        .server_addr(cfg["server_addr"])
        .root_cas(cfg["root_cas"])
        .connect()
    )
    tasks = []
    for bind in cfg["binds"]:
        builder = session.http_endpoint() if bind["proto"] == "http" else session.tcp_endpoint()
        if bind.get("domain"):  # an internal endpoint's name (<name>.internal)
            builder = builder.domain(bind["domain"])
        if bind.get("policy"):
            builder = builder.traffic_policy(bind["policy"])
        if bind.get("mutual_tlsca"):  # a CA's PEM: the endpoint asks for client certificates
            builder = builder.mutual_tlsca(bytearray(bind["mutual_tlsca"].encode()))
        listener = await builder.listen()
        tasks.append(asyncio.ensure_future(listener.forward(bind["upstream"])))
        emit({"event": "bound", "url": listener.url()})
    emit({"event": "ready"})
    loop = asyncio.get_running_loop()
    await loop.run_in_executor(None, sys.stdin.read)


if __name__ == "__main__":
    asyncio.run(main(json.loads(sys.argv[1])))
