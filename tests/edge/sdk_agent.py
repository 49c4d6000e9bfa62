"""An agent program built on the official Python SDK (``ngrok``), run as a process by the
edge tests with the device agent's virtualenv (where the SDK is installed).

Usage: ``python sdk_agent.py '<json config>'``; config: ``authtoken``, ``server_addr``,
``root_cas``, ``binds`` (list of {"proto": "http"|"tcp"|"tls"|"labeled", "domain"?,
"labels"?, "remote_addr"?, "options"? (SDK builder calls), "upstream"?: "dead" | "grpc" |
"trailers" | "tcp" (to the TCP echo), "upstream_addr"? (tls, labeled: where to forward)}),
``stop_handler`` / ``restart_handler`` ("exit" | "refuse" | "none"; default "exit" for stop,
"none" for restart: see ``handler``). It serves a
small upstream on 127.0.0.1 (echo, upload digest, streaming, WebSocket echo, a flood and how
much of it was written), forwards every bind to it, and prints one JSON line per event:
``bound`` (url, id) or ``error`` (stage, args: what the SDK raised), then ``ready``;
``forward_ended`` (id, url, error: what the SDK raised) when a listener's forwarding ends. Lines on
stdin: ``close`` closes the session, ``exit`` ends the program.
"""

import asyncio
import hashlib
import json
import os
import socket
import sys
import threading

import ngrok
from aiohttp import WSMsgType, web


def emit(event):
    print(json.dumps(event), flush=True)


def forward_ended(listener_id, url):
    """A listener's forwarding ended (the edge's StopTunnel closes that one listener): emit
    ``forward_ended`` with what the SDK raised or returned."""

    def done(task):
        if task.cancelled():
            return
        exc = task.exception()
        emit(
            {
                "event": "forward_ended",
                "id": listener_id,
                "url": url,
                "error": None if exc is None else [str(a) for a in exc.args] or [repr(exc)],
                "result": None if exc is not None else repr(task.result()),
            }
        )

    return done


async def echo(request):
    return web.json_response(
        {"method": request.method, "path": request.path_qs, "headers": dict(request.headers)}
    )


async def upload(request):
    digest, length = hashlib.sha256(), 0
    async for chunk in request.content.iter_chunked(65536):
        digest.update(chunk)
        length += len(chunk)
    return web.json_response({"length": length, "sha256": digest.hexdigest()})


async def stream(request):
    count, size = int(request.query.get("n", "5")), int(request.query.get("size", "1024"))
    resp = web.StreamResponse()
    await resp.prepare(request)
    for i in range(count):
        await resp.write(bytes([48 + i % 10]) * size)
        await asyncio.sleep(0.01)
    await resp.write_eof()
    return resp


async def reflect(request):
    """The request's body back, with its Content-Type, and in ``x-request-length`` the
    Content-Length the upstream was sent ("none": chunked); ``?chunks=N`` writes it back in N
    pieces (a chunked response), ``?size=N`` answers N bytes of "r" instead."""
    body = await request.read()
    if "size" in request.query:
        body = b"r" * int(request.query["size"])
    headers = {
        "x-request-length": request.headers.get("content-length", "none"),
        "content-type": request.headers.get("content-type", "application/octet-stream"),
    }
    chunks = int(request.query.get("chunks", "0"))
    if not chunks:
        return web.Response(body=body, headers=headers)
    resp = web.StreamResponse(headers=headers)
    await resp.prepare(request)
    step = max(1, -(-len(body) // chunks))
    for at in range(0, len(body), step):
        await resp.write(body[at : at + step])
        await asyncio.sleep(0.01)
    await resp.write_eof()
    return resp


FLOODED = {"bytes": 0}  # what /flood has written so far (read back by /flooded)


async def flood(request):
    """``mb`` MiB as fast as the path takes them: a test of backpressure reads /flooded."""
    total, chunk = int(request.query.get("mb", "64")) << 20, b"f" * 65536
    FLOODED["bytes"] = 0
    resp = web.StreamResponse()
    resp.content_length = total
    await resp.prepare(request)
    while FLOODED["bytes"] < total:
        await resp.write(chunk)  # waits while the transport's buffer is full
        FLOODED["bytes"] += len(chunk)
    await resp.write_eof()
    return resp


async def flooded(request):
    return web.json_response(FLOODED)


async def status(request):
    """An empty response with the status asked for (204, 304, ...)."""
    return web.Response(status=int(request.match_info["code"]))


async def events(request):
    """text/event-stream: ``retry: 10``, then ``?n=N`` messages (``id``, two ``data`` lines
    with a card number), each written in two pieces 50 ms apart; ``?size=N``: one message of
    N bytes (its blank line counted); ``?hold=S``: the stream stays open S seconds more."""
    resp = web.StreamResponse(headers={"content-type": "text/event-stream"})
    await resp.prepare(request)
    if "size" in request.query:
        await resp.write(b"data: " + b"s" * (int(request.query["size"]) - 8) + b"\n\n")
    else:
        await resp.write(b"retry: 10\n\n")
        for i in range(int(request.query.get("n", "3"))):
            message = f"id: {i}\ndata: card 1234-5678 #{i}\ndata: second line\n\n".encode()
            await resp.write(message[:20])
            await asyncio.sleep(0.05)
            await resp.write(message[20:])
    await asyncio.sleep(float(request.query.get("hold", "0")))
    await resp.write_eof()
    return resp


async def slow(request):
    """``?s=N``: the response after N seconds (an upstream slower than a caller's timeout)."""
    await asyncio.sleep(float(request.query.get("s", "1")))
    return web.Response(text="slow")


async def cut(request):
    """Half a response, then the upstream closes its connection (an upstream that dies)."""
    resp = web.StreamResponse()
    resp.content_length = 1 << 20
    await resp.prepare(request)
    await resp.write(b"c" * 1000)
    request.transport.close()
    return resp


async def websocket(request):
    ws = web.WebSocketResponse()
    await ws.prepare(request)
    async for msg in ws:
        if msg.type == WSMsgType.TEXT:
            await ws.send_str("echo:" + msg.data)
        elif msg.type == WSMsgType.BINARY:
            await ws.send_bytes(msg.data)
    return ws


async def tcp_echo(reader, writer):
    while data := await reader.read(65536):
        writer.write(data)
        await writer.drain()
    writer.close()


KEEP = []  # servers started for binds (referenced for the program's life)


async def trailers_upstream(reader, writer):
    """A raw HTTP/1.1 upstream answering every request with a chunked body and trailers
    (aiohttp cannot send trailers)."""
    try:
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            length = 0
            for line in head.split(b"\r\n"):
                if line.lower().startswith(b"content-length:"):
                    length = int(line.split(b":", 1)[1])
            await reader.readexactly(length)
            writer.write(
                b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n"
                b"Transfer-Encoding: chunked\r\nTrailer: X-Checksum\r\n\r\n"
                b"5\r\nhello\r\n0\r\nX-Checksum: abc123\r\n\r\n"
            )
            await writer.drain()
    except (asyncio.IncompleteReadError, ConnectionError):
        writer.close()


async def main(cfg):
    app = web.Application(client_max_size=64 * 1024 * 1024)
    app.add_routes(
        [
            web.get("/echo", echo),
            web.post("/upload", upload),
            web.route("*", "/reflect", reflect),
            web.get("/stream", stream),
            web.get("/ws", websocket),
            web.get("/flood", flood),
            web.get("/flooded", flooded),
            web.route("*", "/status/{code}", status),
            web.get("/cut", cut),
            web.get("/slow", slow),
            web.get("/events", events),
            web.route("*", "/{tail:.*}", echo),
        ]
    )
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, backlog=1024)  # bursts of 1,000 (tests)
    await site.start()
    http_port = site._server.sockets[0].getsockname()[1]
    tcp_server = await asyncio.start_server(tcp_echo, "127.0.0.1", 0)
    tcp_port = tcp_server.sockets[0].getsockname()[1]
    with socket.socket() as probe:  # a port nothing listens on (after this block)
        probe.bind(("127.0.0.1", 0))
        dead_port = probe.getsockname()[1]

    builder = (
        ngrok.SessionBuilder()
        .authtoken(cfg["authtoken"])
        .server_addr(cfg["server_addr"])
        .root_cas(cfg["root_cas"])
    )
    exiting = threading.Event()  # a command was accepted: the program exits

    def on_disconnection(addr, err):
        emit({"event": "disconnected", "error": str(err)})
        if exiting.is_set():  # the edge ended the session it stopped: exit before the
            os._exit(0)  # SDK reconnects (it would, to a session of the same id)

    builder.handle_disconnection(on_disconnection)

    def handler(name, what):
        """A handler of the Stop or Restart command: ``exit`` (accept, then exit: what the
        command means to a program without a supervisor; once the edge ends the session, or
        2 s later, never inside the handler: the SDK sends the acceptance after it returns,
        as its docs say) or ``refuse`` (raise: the SDK answers with the error)."""

        def handle():
            emit({"event": f"{name}_command"})
            if what == "refuse":
                raise RuntimeError(f"{name} refused by the test agent")
            exiting.set()
            threading.Timer(2.0, os._exit, (0,)).start()

        return handle

    # "none": no handler, the SDK's own answer (an error: the operation is not supported)
    for name, setter in (
        ("stop", builder.handle_stop_command),
        ("restart", builder.handle_restart_command),
    ):
        what = cfg.get(f"{name}_handler", "exit" if name == "stop" else "none")
        if what != "none":
            setter(handler(name, what))
    try:
        session = await builder.connect()
    except Exception as exc:  # what the SDK raises is what the test checks
        emit({"event": "error", "stage": "connect", "args": [str(a) for a in exc.args]})
        return
    tasks = []
    for bind in cfg.get("binds", []):
        try:
            if bind["proto"] == "http":
                lb = session.http_endpoint()
                if bind.get("domain"):
                    lb = lb.domain(bind["domain"])
                for option, value in bind.get("options", {}).items():
                    if option == "mutual_tlsca":  # bytes: sent as text in the JSON config
                        value = [bytearray(v.encode()) for v in value]
                    lb = getattr(lb, option)(*value)
                upstream = bind.get("upstream_addr") or (  # the test's own upstream
                    f"127.0.0.1:{tcp_port if bind.get('upstream') == 'tcp' else http_port}"
                )
            elif bind["proto"] == "tcp":
                lb = session.tcp_endpoint()
                if bind.get("remote_addr"):
                    lb = lb.remote_addr(bind["remote_addr"])
                for option, value in bind.get("options", {}).items():
                    lb = getattr(lb, option)(*value)
                upstream = f"127.0.0.1:{tcp_port}"
            elif bind["proto"] == "tls":  # forwards to the test's own TLS server
                lb = session.tls_endpoint()
                if bind.get("domain"):
                    lb = lb.domain(bind["domain"])
                for option, value in bind.get("options", {}).items():
                    if option in ("termination", "mutual_tlsca"):  # PEM bytes, as text
                        value = [bytearray(v.encode()) for v in value]
                    lb = getattr(lb, option)(*value)
                upstream = (
                    f"127.0.0.1:{tcp_port}"
                    if bind.get("upstream") == "tcp"
                    else bind["upstream_addr"]
                )
            else:
                lb = session.labeled_listener()
                for key, value in bind["labels"].items():
                    lb = lb.label(key, value)
                upstream = bind.get("upstream_addr") or (  # a TLS edge's: the test's TLS server
                    f"127.0.0.1:{tcp_port if bind.get('upstream') == 'tcp' else http_port}"
                )
            if bind.get("upstream") == "dead":  # nothing listens there: the SDK's 502
                upstream = f"127.0.0.1:{dead_port}"
            if bind.get("upstream") == "trailers":  # chunked answers with trailers
                server = await asyncio.start_server(trailers_upstream, "127.0.0.1", 0)
                KEEP.append(server)
                upstream = f"127.0.0.1:{server.sockets[0].getsockname()[1]}"
            if bind.get("upstream") == "grpc":  # grpcio (tests/edge/grpc_service.py), h2c
                import grpc_service

                grpc_port = grpc_service.STATE.get("port") or await grpc_service.start()
                upstream = f"http://127.0.0.1:{grpc_port}"
            listener = await lb.listen()
            task = asyncio.ensure_future(listener.forward(upstream))
            task.add_done_callback(forward_ended(listener.id(), listener.url()))
            tasks.append(task)
            emit({"event": "bound", "url": listener.url(), "id": listener.id()})
        except Exception as exc:
            emit({"event": "error", "stage": "bind", "args": [str(a) for a in exc.args]})
    emit(
        {
            "event": "ready",
            "http_port": http_port,
            "tcp_port": tcp_port,
            "grpc_port": sys.modules["grpc_service"].STATE["port"]
            if "grpc_service" in sys.modules
            else None,
        }
    )
    loop = asyncio.get_running_loop()
    while True:
        line = await loop.run_in_executor(None, sys.stdin.readline)
        command = line.strip()
        if command == "close":
            await session.close()
            emit({"event": "closed"})
        elif command in ("exit", ""):
            break


if __name__ == "__main__":
    asyncio.run(main(json.loads(sys.argv[1])))
