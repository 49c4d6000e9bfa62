"""The known HTTP/2 attacks against the edge as a process, each with a raw client written here
(hyperframe frames on a TLS socket with ALPN h2): rapid reset (CVE-2023-44487), CONTINUATION
flood (CVE-2024-27316 and kin), HPACK bomb, SETTINGS flood, zero-window stall. Each shows what
the edge answered (GOAWAY and its code, resets), what it cost (the edge's CPU seconds and
resident memory, from /proc), and that an official SDK endpoint (the canary) is still served
over HTTP/2 within a second. docs/HTTP2.md states the bounds and the measured numbers.

An edge of its own (EDGE_H2_STALL_TIMEOUT 3 s, so a stalled stream's reset comes within a
test's time) on the session's store."""

import json
import os
import socket
import ssl
import struct
import subprocess
import time

import pytest
from hyperframe.frame import (
    ContinuationFrame,
    GoAwayFrame,
    HeadersFrame,
    PingFrame,
    RstStreamFrame,
    SettingsFrame,
    WindowUpdateFrame,
)

from tests.edge import support
from stacks.agents import SdkAgent
from tests.edge.conftest import BASE_DOMAIN
from tests.edge.test_hostile_agents import _rss_kb

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
ENHANCE_YOUR_CALM, COMPRESSION_ERROR, PROTOCOL_ERROR = 0xB, 0x9, 0x1
RESULTS = os.environ.get("H2_ATTACK_RESULTS")  # where to write what was measured (docs)


def _credential(account):
    return support.credential(account, description="h2 attacks")["token"]


@pytest.fixture(scope="module")
def target(another_edge, api):
    edge = another_edge({"EDGE_H2_STALL_TIMEOUT": "3"})
    agent = SdkAgent(edge, _credential(api.new_account()), [{"proto": "http"}])
    events = agent.start()
    url = [e for e in events if e["event"] == "bound"][0]["url"]
    host = url.split("://", 1)[1].split(":", 1)[0]
    assert canary_serves(edge, host, 5)
    yield edge, host
    agent.stop()


@pytest.fixture(scope="module")
def measured():
    out = {}
    yield out
    if RESULTS:
        with open(RESULTS, "w") as fh:
            json.dump(out, fh, indent=1, sort_keys=True)


class Canary:
    """What the canary's request got: true when it was answered over HTTP/2 with 200 within
    its bound; its repr is what an assertion shows."""

    def __init__(self, answer: str, took: float, bound: float, error: str):
        self.answer, self.took, self.bound, self.error = answer, took, bound, error

    def __bool__(self) -> bool:
        return self.answer == "2 200" and self.took < self.bound

    def __repr__(self) -> str:
        return (
            f"Canary(answer={self.answer!r}, took={self.took:.3f}s, bound={self.bound}s, "
            f"error={self.error!r})"
        )


def canary_serves(edge, host, seconds=2.0):
    """curl --http2 on a new connection gets the agent's answer within ``seconds``, as curl
    times the request itself (%{time_total}: from its start to the last byte, handshake
    included); curl's own start-up is not counted, which a loaded machine stretches and which
    says nothing of the edge.

    The bound: a quiet machine answers in tens of milliseconds; 1 s was passed by 4 ms in a
    whole-suite run at a load of ~10 (two other test runs beside it). 2 s still tells a
    starved edge: each attack here holds what it holds until EDGE_H2_STALL_TIMEOUT (3 s) or
    for good, so an edge it starved answers after 3 s or never."""
    out = subprocess.run(
        [
            "curl",
            "-sS",
            "--http2",
            "--max-time",
            str(seconds + 4),
            "--cacert",
            edge.ca_path,
            "--resolve",
            f"{host}:{edge.https_port}:127.0.0.1",
            "-o",
            "/dev/null",
            "-w",
            "%{http_version} %{http_code} %{time_total}",
            f"https://{host}:{edge.https_port}/echo",
        ],
        capture_output=True,
        text=True,
        timeout=30,
    )
    answer, _, took = out.stdout.rpartition(" ")
    try:
        seconds_taken = float(took)
    except ValueError:
        seconds_taken = float("inf")
    return Canary(answer, seconds_taken, seconds, out.stderr.strip()[-300:])


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def connect(edge, host, settings=None):
    ctx = ssl.create_default_context(cafile=edge.ca_path)
    ctx.set_alpn_protocols(["h2"])
    raw = socket.create_connection(("127.0.0.1", edge.https_port), timeout=10)
    sock = ctx.wrap_socket(raw, server_hostname=host)
    assert sock.selected_alpn_protocol() == "h2"
    frame = SettingsFrame(0)
    frame.settings = settings or {}
    sock.sendall(PREFACE + frame.serialize())
    return sock


def read_frames(sock, seconds):
    """(type, flags, stream id, payload) of what the edge sends within ``seconds``, until it
    closes; the last item is "closed" when it did."""
    sock.settimeout(0.5)
    buf, out = b"", []
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            data = sock.recv(65536)
        except socket.timeout:
            continue
        except (ConnectionError, ssl.SSLError, OSError):
            out.append("closed")
            return out
        if not data:
            out.append("closed")
            return out
        buf += data
        while len(buf) >= 9:
            length = int.from_bytes(buf[:3], "big")
            if len(buf) < 9 + length:
                break
            kind, flags = buf[3], buf[4]
            sid = struct.unpack(">I", buf[5:9])[0] & 0x7FFFFFFF
            out.append((kind, flags, sid, buf[9 : 9 + length]))
            buf = buf[9 + length :]
    return out


def goaway_code(frames):
    for item in frames:
        if item != "closed" and item[0] == 0x7:
            return struct.unpack(">I", item[3][4:8])[0]
    return None


def send_quietly(sock, data):
    try:
        sock.sendall(data)
        return True
    except (ConnectionError, ssl.SSLError, OSError, socket.timeout):
        return False


def _hpack_literal(name, value):
    """A literal field without indexing, new name (RFC 7541 6.2.2), lengths < 127 bytes."""
    return b"\x00" + bytes([len(name)]) + name + bytes([len(value)]) + value


def request_block(host, path=b"/echo"):
    return (
        b"\x82"
        + b"\x87"
        + _hpack_literal(b":path", path)  # GET, https
        + _hpack_literal(b":authority", host.encode())
    )


def headers(sid, block, end_stream=True, end_headers=True):
    frame = HeadersFrame(sid)
    frame.data = block
    if end_stream:
        frame.flags.add("END_STREAM")
    if end_headers:
        frame.flags.add("END_HEADERS")
    return frame.serialize()


class Cost:
    def __init__(self, edge):
        self.pid = edge.process.pid
        self.cpu, self.rss = cpu_seconds(self.pid), _rss_kb(self.pid)

    def done(self):
        return {
            "edge_cpu_seconds": round(cpu_seconds(self.pid) - self.cpu, 3),
            "edge_rss_growth_kib": _rss_kb(self.pid) - self.rss,
        }


def test_rapid_reset_ends_the_connection_with_enhance_your_calm(target, measured):
    edge, host = target
    cost = Cost(edge)
    sock = connect(edge, host)
    block = request_block(host, b"/stream?n=50&size=1000")
    burst = b"".join(
        headers(2 * i + 1, block) + RstStreamFrame(2 * i + 1, error_code=8).serialize()
        for i in range(5000)
    )
    sent = send_quietly(sock, burst)
    frames = read_frames(sock, 10)
    sock.close()
    assert goaway_code(frames) == ENHANCE_YOUR_CALM, frames[-3:]
    assert canary_serves(edge, host)
    measured["rapid_reset"] = {"streams_opened_and_reset": 5000, "all_sent": sent, **cost.done()}


def test_continuation_flood_is_cut_at_the_header_block_bound(target, measured):
    edge, host = target
    cost = Cost(edge)
    sock = connect(edge, host)
    send_quietly(sock, headers(1, request_block(host), end_headers=False))
    sent = 0
    piece = ContinuationFrame(1)
    piece.data = b"\x00" * 16384  # never END_HEADERS
    frame = piece.serialize()
    for _ in range(400):  # 6.5 MB if the edge read it all
        if not send_quietly(sock, frame):
            break
        sent += len(frame)
    frames = read_frames(sock, 10)
    sock.close()
    assert goaway_code(frames) == ENHANCE_YOUR_CALM, frames[-3:]
    assert canary_serves(edge, host)
    spent = cost.done()
    measured["continuation_flood"] = {"bytes_the_kernel_took_before_the_close": sent, **spent}
    assert spent["edge_rss_growth_kib"] < 8 * 1024  # the header block held: 64 KiB at most


def test_hpack_bomb_is_refused_within_the_header_list_bound(target, measured):
    """A 4,000-byte field put in the dynamic table, then referenced by a one-byte index
    20,000 times: 24 KB on the wire, 80 MB decoded if nothing stopped it."""
    edge, host = target
    cost = Cost(edge)
    sock = connect(edge, host)
    value = b"v" * 4000
    insert = b"\x40" + bytes([6]) + b"x-bomb" + b"\x7f" + _varint(len(value) - 127) + value
    block = request_block(host) + insert + b"\xbe" * 20000
    first, rest = block[:16000], block[16000:]
    data = headers(1, first, end_headers=False)
    while rest:
        piece = ContinuationFrame(1)
        piece.data, rest = rest[:16000], rest[16000:]
        if not rest:
            piece.flags.add("END_HEADERS")
        data += piece.serialize()
    send_quietly(sock, data)
    frames = read_frames(sock, 10)
    sock.close()
    code = goaway_code(frames)
    assert code in (COMPRESSION_ERROR, PROTOCOL_ERROR, ENHANCE_YOUR_CALM), frames[-3:]
    assert not any(f != "closed" and f[0] == 0x1 and f[2] == 1 for f in frames)  # no answer
    assert canary_serves(edge, host)
    measured["hpack_bomb"] = {
        "goaway_code": code,
        "encoded_bytes": len(block),
        "decoded_bytes_if_unbounded": 20000 * (4000 + 6 + 32),
        **cost.done(),
    }


def _varint(n):
    out = b""
    while n >= 128:
        out += bytes([(n % 128) + 128])
        n //= 128
    return out + bytes([n])


@pytest.mark.parametrize("kind", ["settings", "ping"])
def test_control_frame_flood_ends_the_connection(target, measured, kind):
    """SETTINGS (each needs an ACK) or PING frames, 50,000 of them, the answers never read."""
    edge, host = target
    cost = Cost(edge)
    sock = connect(edge, host)
    if kind == "settings":
        frame = SettingsFrame(0)
        frame.settings = {SettingsFrame.MAX_CONCURRENT_STREAMS: 100}
    else:
        frame = PingFrame(0)
        frame.opaque_data = b"12345678"
    one = frame.serialize()
    sent = 0
    for _ in range(50):
        if not send_quietly(sock, one * 1000):
            break
        sent += 1000
    frames = read_frames(sock, 10)
    sock.close()
    assert goaway_code(frames) == ENHANCE_YOUR_CALM, frames[-3:]
    assert canary_serves(edge, host)
    measured[f"{kind}_flood"] = {"frames_sent": sent, **cost.done()}


def test_zero_window_stall_holds_bounded_memory_and_is_reset(target, measured):
    """INITIAL_WINDOW_SIZE 0 and no WINDOW_UPDATE: 100 streams each asking for 64 MiB. The
    edge holds at most its per-stream queue, the agents' flows stop (their windows), the
    canary is served meanwhile, and every stalled stream is reset after the stall timeout."""
    edge, host = target
    cost = Cost(edge)
    sock = connect(edge, host, {SettingsFrame.INITIAL_WINDOW_SIZE: 0})
    block = request_block(host, b"/flood?mb=64")
    sock.sendall(b"".join(headers(2 * i + 1, block) for i in range(100)))
    time.sleep(1.5)
    assert canary_serves(edge, host)
    held = _rss_kb(edge.process.pid) - cost.rss
    frames = read_frames(sock, 12)
    sock.close()
    resets = {f[2] for f in frames if f != "closed" and f[0] == 0x3}
    heads = {f[2] for f in frames if f != "closed" and f[0] == 0x1}
    assert resets == {2 * i + 1 for i in range(100)}, (len(resets), len(heads))
    assert held < 64 * 1024, held  # KiB: far below 100 x 64 MiB
    assert canary_serves(edge, host)
    measured["zero_window_stall"] = {
        "streams": 100,
        "edge_rss_growth_kib_while_stalled": held,
        **cost.done(),
    }


def test_window_update_overflow_and_bad_frames_are_connection_errors(target):
    edge, host = target
    sock = connect(edge, host)
    send_quietly(sock, WindowUpdateFrame(0, window_increment=2**31 - 1).serialize() * 2)
    frames = read_frames(sock, 5)
    sock.close()
    assert goaway_code(frames) is not None and "closed" in frames
    sock = connect(edge, host)
    send_quietly(sock, GoAwayFrame(0).serialize())
    sock.close()
    assert canary_serves(edge, host)


def test_shutdown_sends_goaway_to_open_h2_connections(another_edge):
    edge = another_edge()
    try:
        sock = connect(edge, f"anything.{BASE_DOMAIN}")
        assert any(f != "closed" and f[0] == 0x4 for f in read_frames(sock, 1))  # SETTINGS
        edge.process.terminate()
        frames = read_frames(sock, 10)
        sock.close()
        assert goaway_code(frames) == 0, frames  # NO_ERROR
    finally:
        edge.stop()


def test_a_request_the_request_path_cannot_carry_is_a_400_on_its_stream(target):
    """CONNECT: HTTP/2 allows it, the request path does not serve it; the stream gets the
    contract's 400 and the connection goes on serving. (No :authority and no Host at all is
    h2's own connection error.)"""
    edge, host = target
    sock = connect(edge, host)
    block = _hpack_literal(b":method", b"CONNECT") + _hpack_literal(b":authority", b"a:1")
    send_quietly(sock, headers(1, block) + headers(3, request_block(host)))
    frames = read_frames(sock, 3)
    sock.close()
    statuses = {f[2]: f[3] for f in frames if f != "closed" and f[0] == 0x1}
    bodies = b"".join(f[3] for f in frames if f != "closed" and f[0] == 0x0 and f[2] == 1)
    assert set(statuses) == {1, 3}, frames
    assert json.loads(bodies)["error_code"] == "ERR_NGROK_3002"
    assert goaway_code(frames) is None


def test_an_h2_client_that_stops_reading_stops_the_agents_upstream(target, measured):
    """Back-pressure to the agent over HTTP/2: a stream whose window the client never
    credits (default 64 KiB, no WINDOW_UPDATE) leaves the upstream of a 64 MiB answer at a few
    MiB (socket buffers and one muxado window on the path), as over HTTP/1.1; the other
    streams of the same connection are served meanwhile."""
    edge, host = target
    sock = connect(edge, host, {SettingsFrame.INITIAL_WINDOW_SIZE: 65535})
    sock.sendall(
        WindowUpdateFrame(0, window_increment=64 << 20).serialize()  # connection
        + headers(1, request_block(host, b"/flood?mb=64"))
    )
    written = []
    for i in range(3):
        time.sleep(1)
        sock.sendall(headers(3 + 2 * i, request_block(host, b"/flooded")))
        frames = read_frames(sock, 1)
        data = b"".join(f[3] for f in frames if f != "closed" and f[0] == 0 and f[2] == 3 + 2 * i)
        written.append(json.loads(data)["bytes"])
    sock.close()
    measured["stalled_stream_upstream_bytes"] = written[-1]
    assert written[-1] < 16 << 20, written
    assert written[-1] == written[-2], f"the upstream is still writing: {written}"


def test_an_h2_client_that_cancels_mid_response_stops_the_agents_upstream(target, measured):
    """A stream the client cancels (RST_STREAM CANCEL) after the first window of a 64 MiB
    answer ends the exchange at the edge's next piece of it: the upstream stops at a few MiB,
    as when an HTTP/1.1 client resets its connection (edge.h2front cancels the stream's
    exchange), and the connection serves on."""
    edge, host = target
    sock = connect(edge, host, {SettingsFrame.INITIAL_WINDOW_SIZE: 65535})
    sock.sendall(
        WindowUpdateFrame(0, window_increment=64 << 20).serialize()
        + headers(1, request_block(host, b"/flood?mb=64"))
    )
    frames = read_frames(sock, 1)
    assert any(f != "closed" and f[0] == 0x0 and f[2] == 1 for f in frames), frames
    sock.sendall(RstStreamFrame(1, error_code=0x8).serialize())  # CANCEL
    written = [-1]
    for i in range(30):  # until the upstream stops (or has written it all)
        time.sleep(0.5)
        sid = 3 + 2 * i
        sock.sendall(headers(sid, request_block(host, b"/flooded")))
        frames = read_frames(sock, 1)
        data = b"".join(f[3] for f in frames if f != "closed" and f[0] == 0 and f[2] == sid)
        written.append(json.loads(data)["bytes"])
        if written[-1] == written[-2]:
            break
    sock.close()
    measured["cancelled_stream_upstream_bytes"] = written[-1]
    assert written[-1] == written[-2], f"the upstream is still writing: {written}"
    assert written[-1] < 16 << 20, f"{written} bytes drawn from the agent for a cancelled stream"
