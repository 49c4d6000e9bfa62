"""gRPC through a tunnel: a ``grpcio`` server behind an official Python SDK endpoint bound with
``app_protocol="http2"`` (the edge speaks h2c on the proxy stream: the compiled core's
edge_core/src/h2up.rs once the route is pushed, edge/h2leg.py before), a ``grpcio`` client
through the HTTPS listener trusting only the edge's CA: every call shape, deadlines,
cancellation, status and message intact, trailing metadata relayed; the edge's own errors as
gRPC statuses."""

import json
import os
import subprocess
import tempfile
import time

import grpc
import pytest

from tests.edge import support
from tests.edge.conftest import BASE_DOMAIN


@pytest.fixture(autouse=True)
def no_edge_traceback(edge):
    """Nothing the test did made an exception escape in the edge (its log from here on)."""
    yield from support.no_traceback_after(edge)


def _credential(account):
    return support.credential(account, description="grpc test")["token"]


def channel(edge, host):
    with open(edge.ca_path, "rb") as f:
        creds = grpc.ssl_channel_credentials(root_certificates=f.read())
    return grpc.secure_channel(
        f"127.0.0.1:{edge.https_port}",
        creds,
        options=[
            ("grpc.ssl_target_name_override", host),
            ("grpc.default_authority", f"{host}:{edge.https_port}"),
        ],
    )


def _m(ch, kind, name):
    ident = {"request_serializer": None, "response_deserializer": None}
    return getattr(ch, kind)(f"/test.Echo/{name}", **ident)


@pytest.fixture
def grpc_host(edge, account, agents):
    agent = agents(
        edge,
        _credential(account),
        [{"proto": "http", "upstream": "grpc", "options": {"app_protocol": ["http2"]}}],
    )
    bound = [e for e in agent.start() if e["event"] == "bound"]
    assert bound, agent.seen
    return support.host(bound[0]["url"])


def _core_served(edge) -> float:
    return support.settled(lambda: support.metric(edge.metrics(), "edge_core_http_requests_total"))


def test_the_calls_are_carried_by_the_core_in_http2_to_the_agent(edge, grpc_host):
    """The endpoint's route is the core's (h2up.rs: each call one stream of an h2 client
    connection on the proxy stream): every call shape served there, none handed to Python."""
    handed = lambda: support.metric(edge.metrics(), "edge_core_http_handed_over_total")  # noqa: E731

    def served_one():
        before = _core_served(edge)
        with channel(edge, grpc_host) as ch:
            assert _m(ch, "unary_unary", "Unary")(b"one", timeout=10) == b"echo:one"
        return _core_served(edge) > before

    assert support.wait(served_one)
    served, before = _core_served(edge), handed()
    with channel(edge, grpc_host) as ch:
        assert _m(ch, "unary_unary", "Unary")(b"hello", timeout=10) == b"echo:hello"
        assert list(_m(ch, "unary_stream", "ServerStream")(b"3", timeout=10)) == [b"0", b"1", b"2"]
        assert _m(ch, "stream_unary", "ClientStream")(iter([b"a", b"b"]), timeout=10) == b"2:a,b"
        assert list(_m(ch, "stream_stream", "Bidi")(iter([b"x"]), timeout=10)) == [b"bidi:x"]
    assert (_core_served(edge) - served, handed() - before) == (4, 0)


def test_unary_server_client_and_bidi_streaming(edge, grpc_host):
    with channel(edge, grpc_host) as ch:
        assert _m(ch, "unary_unary", "Unary")(b"hello", timeout=10) == b"echo:hello"
        assert list(_m(ch, "unary_stream", "ServerStream")(b"5", timeout=10)) == [
            b"0",
            b"1",
            b"2",
            b"3",
            b"4",
        ]
        assert (
            _m(ch, "stream_unary", "ClientStream")(iter([b"a", b"b", b"c"]), timeout=10)
            == b"3:a,b,c"
        )
        got = list(_m(ch, "stream_stream", "Bidi")(iter([b"x", b"y"]), timeout=10))
        assert got == [b"bidi:x", b"bidi:y"]


def test_many_concurrent_calls_on_one_channel(edge, grpc_host):
    with channel(edge, grpc_host) as ch:
        unary = _m(ch, "unary_unary", "Unary")
        futures = [unary.future(str(i).encode(), timeout=30) for i in range(50)]
        assert [f.result() for f in futures] == [b"echo:%d" % i for i in range(50)]


def test_status_message_and_trailing_metadata_reach_the_client(edge, grpc_host):
    with channel(edge, grpc_host) as ch:
        unary = _m(ch, "unary_unary", "Unary")
        with pytest.raises(grpc.RpcError) as info:
            unary(b"fail", timeout=10)
        assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert info.value.details() == "bad input: ünïcode, 100% sure"
        reply, call = unary.with_call(b"trailer", timeout=10)
        assert reply == b"echo:trailer"
        assert ("x-trailer", "yes") in tuple(call.trailing_metadata())
        assert call.code() == grpc.StatusCode.OK


def test_deadline_exceeded_and_the_server_sees_the_call_end(edge, grpc_host):
    with channel(edge, grpc_host) as ch:
        unary = _m(ch, "unary_unary", "Unary")
        before = int(_m(ch, "unary_unary", "Cancelled")(b"", timeout=10))
        started = time.monotonic()
        with pytest.raises(grpc.RpcError) as info:
            unary(b"sleep:30", timeout=1.0)
        assert info.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
        assert time.monotonic() - started < 5
        deadline = time.monotonic() + 10  # the server's own deadline or the edge's reset
        while int(_m(ch, "unary_unary", "Cancelled")(b"", timeout=10)) <= before:
            assert time.monotonic() < deadline, "the server never saw the call end"
            time.sleep(0.2)


def test_client_cancel_reaches_the_server(edge, grpc_host):
    with channel(edge, grpc_host) as ch:
        before = int(_m(ch, "unary_unary", "Cancelled")(b"", timeout=10))
        call = _m(ch, "unary_stream", "ServerStream")(b"hang", timeout=60)
        assert next(call) == b"first"
        call.cancel()
        assert call.code() == grpc.StatusCode.CANCELLED
        deadline = time.monotonic() + 10
        while int(_m(ch, "unary_unary", "Cancelled")(b"", timeout=10)) <= before:
            assert time.monotonic() < deadline, "the cancel never reached the server"
            time.sleep(0.2)


def test_edge_errors_are_grpc_statuses(edge):
    host = f"grpc-offline.{BASE_DOMAIN}"
    with channel(edge, host) as ch:
        with pytest.raises(grpc.RpcError) as info:
            _m(ch, "unary_unary", "Unary")(b"x", timeout=10)
    assert info.value.code() == grpc.StatusCode.UNAVAILABLE
    assert info.value.details().startswith("ERR_NGROK_3200: ")
    assert "offline" in info.value.details()


def test_policy_deny_of_a_grpc_call_is_permission_denied(edge, account, agents):
    policy = {
        "on_http_request": [
            {"expressions": ["req.url.path.endsWith('/Unary')"], "actions": [{"type": "deny"}]}
        ]
    }
    agent = agents(
        edge,
        _credential(account),
        [
            {
                "proto": "http",
                "upstream": "grpc",
                "options": {"app_protocol": ["http2"], "traffic_policy": [json.dumps(policy)]},
            }
        ],
    )
    host = support.host([e for e in agent.start() if e["event"] == "bound"][0]["url"])
    with channel(edge, host) as ch:
        with pytest.raises(grpc.RpcError) as info:
            _m(ch, "unary_unary", "Unary")(b"x", timeout=10)
        assert info.value.code() == grpc.StatusCode.PERMISSION_DENIED
        assert list(_m(ch, "unary_stream", "ServerStream")(b"2", timeout=10)) == [b"0", b"1"]


def test_http11_client_to_an_http2_upstream_gets_the_answer_and_trailers(edge, grpc_host):
    """curl over HTTP/1.1 with a gRPC frame: the edge speaks h2c to the upstream and relays
    its trailers as chunked trailers."""
    frame = b"\x00" + len(b"hi").to_bytes(4, "big") + b"hi"
    out = subprocess.run(
        [
            "curl",
            "-sS",
            "--http1.1",
            "--max-time",
            "30",
            "--cacert",
            edge.ca_path,
            "--resolve",
            f"{grpc_host}:{edge.https_port}:127.0.0.1",
            "-i",
            "--raw",
            "-H",
            "content-type: application/grpc",
            "-H",
            "te: trailers",
            "--data-binary",
            "@-",
            f"https://{grpc_host}:{edge.https_port}/test.Echo/Unary",
        ],
        input=frame,
        capture_output=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    text = out.stdout
    assert text.startswith(b"HTTP/1.1 200"), text
    assert b"echo:hi" in text
    assert b"\r\n0\r\ngrpc-status: 0\r\n" in text, text


def test_large_messages_cross_both_flow_controls(edge, grpc_host):
    """1.5 MiB each way: more than every window on the path (64 KiB streams, 1 MiB
    connections, the 256 KiB proxy stream), so both sides wait for credit and get it."""
    big = os.urandom(1536 * 1024)
    with channel(edge, grpc_host) as ch:
        assert _m(ch, "unary_unary", "Unary")(big, timeout=30) == b"echo:" + big
        got = list(_m(ch, "stream_stream", "Bidi")(iter([big[:700000], big[700000:]]), timeout=30))
        assert got == [b"bidi:" + big[:700000], b"bidi:" + big[700000:]]


def test_http11_keep_alive_requests_to_an_http2_upstream(edge, grpc_host):
    """Three requests on one HTTP/1.1 connection (curl's num_connects 1, 0, 0), each an
    HTTP/2 stream on the proxy stream the first opened."""
    frame = b"\x00" + (2).to_bytes(4, "big") + b"hi"
    url = f"https://{grpc_host}:{edge.https_port}/test.Echo/Unary"
    with tempfile.NamedTemporaryFile() as body:
        body.write(frame)
        body.flush()
        out = subprocess.run(
            [
                "curl",
                "-sS",
                "--http1.1",
                "--max-time",
                "30",
                "--cacert",
                edge.ca_path,
                "--resolve",
                f"{grpc_host}:{edge.https_port}:127.0.0.1",
                "-H",
                "content-type: application/grpc",
                "-H",
                "te: trailers",
                "--data-binary",
                f"@{body.name}",
                "-w",
                "%{num_connects}\n",
                url,
                url,
                url,
            ],
            capture_output=True,
            timeout=60,
        )
    assert out.returncode == 0, out.stderr
    assert out.stdout.count(b"echo:hi") == 3, out.stdout
    assert out.stdout.endswith(
        b"hi1\n\x00\x00\x00\x00\x07echo:hi0\n\x00\x00\x00\x00\x07echo:hi0\n"
    )
