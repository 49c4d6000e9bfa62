"""A gRPC service for the edge tests, served by ``grpcio`` (grpc.aio) behind an official SDK
endpoint bound with ``app_protocol="http2"`` (tests/edge/sdk_agent.py, ``"upstream": "grpc"``).

Messages are raw bytes (no protobuf: generic handlers, identity serializers), so client and
server need no generated code. Methods of ``test.Echo``:

- ``Unary``: the request back, prefixed ``echo:``; ``fail`` aborts with INVALID_ARGUMENT and a
  non-ASCII message; ``sleep:<s>`` answers after ``s`` seconds (deadlines); ``trailer`` sets
  trailing metadata ``x-trailer: yes``; ``peer`` answers the invocation metadata it got.
- ``ServerStream``: ``<n>`` -> n messages ``0``..``n-1``; ``hang`` sends one then waits forever
  (the client cancels).
- ``ClientStream``: the number of messages and their joined bytes.
- ``Bidi``: each message back as it comes.
- ``Cancelled``: how many calls ended cancelled so far (what a client's cancel reached).
"""

import asyncio

import grpc

STATE = {"cancelled": 0}


def _ident(data):
    return data


async def unary(request, context):
    if request == b"fail":
        await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "bad input: ünïcode, 100% sure")
    if request.startswith(b"sleep:"):
        try:
            await asyncio.sleep(float(request[6:]))
        except asyncio.CancelledError:
            STATE["cancelled"] += 1
            raise
    if request == b"trailer":
        context.set_trailing_metadata((("x-trailer", "yes"),))
    if request == b"peer":
        return repr(
            sorted((k, v) for k, v in context.invocation_metadata() if isinstance(v, str))
        ).encode()
    return b"echo:" + request


async def server_stream(request, context):
    if request == b"hang":
        yield b"first"
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            STATE["cancelled"] += 1
            raise
        return
    for i in range(int(request)):
        yield str(i).encode()


async def client_stream(request_iterator, context):
    parts = [m async for m in request_iterator]
    return b"%d:%s" % (len(parts), b",".join(parts))


async def bidi(request_iterator, context):
    async for message in request_iterator:
        yield b"bidi:" + message


async def cancelled(request, context):
    return str(STATE["cancelled"]).encode()


def handler():
    kw = {"request_deserializer": _ident, "response_serializer": _ident}
    return grpc.method_handlers_generic_handler(
        "test.Echo",
        {
            "Unary": grpc.unary_unary_rpc_method_handler(unary, **kw),
            "ServerStream": grpc.unary_stream_rpc_method_handler(server_stream, **kw),
            "ClientStream": grpc.stream_unary_rpc_method_handler(client_stream, **kw),
            "Bidi": grpc.stream_stream_rpc_method_handler(bidi, **kw),
            "Cancelled": grpc.unary_unary_rpc_method_handler(cancelled, **kw),
        },
    )


async def start() -> int:
    """Serve on 127.0.0.1 (insecure: h2c, what the SDK's http:// upstream carries); the port."""
    server = grpc.aio.server()
    server.add_generic_rpc_handlers((handler(),))
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    STATE["server"], STATE["port"] = server, port
    return port
