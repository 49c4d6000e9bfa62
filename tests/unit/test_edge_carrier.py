"""The seam to the compiled core (edge/carrier.py over edge_core), in one event loop with a real
TLS client speaking muxado: what a handler is handed (the session, its streams and the
connection's facts), what the core refuses, and that a closed listener hands nothing more
over. The core's own bounds (handshake
timeout, handshakes at once) are pinned by its cargo tests (edge_core/tests/carrier.rs); the
agent listener built on it by tests/edge (every SDK and the CLI connect through it)."""

import asyncio
import socket
import ssl

import pytest

from edge import carrier
from stacks import muxado
from stacks.certs import SmallCA, key_pem, pem


@pytest.fixture(scope="module")
def tls_pair():
    ca = SmallCA()
    cert, key = ca.leaf(["localhost", "127.0.0.1"])
    client = ssl.create_default_context(cadata=ca.pem)
    return (pem(cert) + ca.pem).encode(), key_pem(key).encode(), client


def _run(coro):
    return asyncio.new_event_loop().run_until_complete(coro)


def test_a_handler_gets_the_plaintext_both_ways_and_the_facts(tls_pair):
    chain, key, client_ctx = tls_pair

    async def main():
        core = carrier.Carrier(threads=1)
        core.start(asyncio.get_running_loop())
        seen = []

        async def handler(mux, facts):
            seen.append(facts)

            async def on_stream(stream):
                line = await stream.readexactly(6)
                await stream.write(b"echo " + line)
                assert await stream.read() == b""  # the agent's FIN

            mux.on_stream = on_stream
            mux.authenticate()
            await mux.run()

        port = core.listen_agents(handler, chain, key, [b"h2", b"ntp/1"], host="127.0.0.1")
        client_ctx.set_alpn_protocols(["ntp/1"])
        reader, writer = await asyncio.open_connection(
            "127.0.0.1", port, ssl=client_ctx, server_hostname="localhost"
        )
        local_port = writer.get_extra_info("sockname")[1]
        writer.write(muxado.data(1, b"hello\n", syn=True, fin=True))
        parser, frames = muxado.FrameParser(), []
        while not any(f.fin for f in frames):
            frames += parser.feed(await asyncio.wait_for(reader.read(1 << 16), 10))
        answer = b"".join(f.payload for f in frames)
        writer.close()
        await writer.wait_closed()
        core.stop()
        return seen, answer, local_port

    seen, answer, local_port = _run(main())
    assert answer == b"echo hello\n"
    assert seen == [carrier.Handoff("127.0.0.1", local_port, "localhost", b"ntp/1")]


def test_a_closed_listener_hands_over_nothing_more(tls_pair):
    chain, key, _ = tls_pair

    async def main():
        core = carrier.Carrier(threads=1)
        core.start(asyncio.get_running_loop())

        async def handler(mux, facts):
            await mux.close()

        port = core.listen_agents(handler, chain, key, [], host="127.0.0.1")
        core.close(port)
        for _ in range(100):
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
            except OSError:
                return True
            await asyncio.sleep(0.02)
        return False

    assert _run(main()), "the port still accepts after close"


def test_a_pair_that_does_not_load_is_refused_with_its_reason(tls_pair):
    chain, key, _ = tls_pair
    core = carrier.Carrier(threads=1)
    with pytest.raises(ValueError, match="private key"):
        core.listen_agents(
            lambda *a: None, chain, b"-----BEGIN NOTHING-----", [], host="127.0.0.1"
        )
    with pytest.raises(ValueError, match="certificate chain"):
        core.listen_agents(lambda *a: None, b"", key, [], host="127.0.0.1")


def test_a_tcp_ports_listener_hands_each_connection_over_as_a_socket_with_its_addresses():
    """A TCP port's listener (``Carrier.listen_tcp``, edge/tcp_front.py): each connection is
    handed over at once, nothing read, as a connected socket with the client's and the
    listener's addresses; ``shared`` lets a second listener (a cluster's other instance on
    the host) take the same port, which a listener of its own does not; a closed one takes
    no more."""

    async def main():
        core = carrier.Carrier(threads=1)
        core.start(asyncio.get_running_loop())
        got: asyncio.Queue = asyncio.Queue()

        async def handler(sock, data, first, tls, peer, local):
            await got.put((sock, data, first, tls, peer, local))

        port = core.listen_tcp(handler, "127.0.0.1", 0)
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"early")
        await writer.drain()
        sock, data, first, tls, peer, local = await asyncio.wait_for(got.get(), 10)
        mine = writer.get_extra_info("sockname")
        facts = (data, first, tls, peer, local)
        sock.setblocking(True)
        sock.settimeout(10)
        read = sock.recv(16)  # the client's bytes are still in the socket: Python's to read
        sock.sendall(b"pong")
        pong = await asyncio.wait_for(reader.readexactly(4), 10)
        sock.close()
        writer.close()
        with pytest.raises(OSError):
            core.listen_tcp(handler, "127.0.0.1", port)  # taken, not shared
        shared = core.listen_tcp(handler, "127.0.0.1", 0, shared=True)
        assert core.listen_tcp(handler, "127.0.0.1", shared, shared=True) == shared
        core.close(port)
        await asyncio.sleep(0.1)
        try:
            refused = await asyncio.open_connection("127.0.0.1", port)
            refused[1].close()
            closed = False
        except OSError:
            closed = True
        core.stop()
        return facts, mine, read, pong, closed, port

    facts, mine, read, pong, closed, port = _run(main())
    assert facts == (b"", True, None, ("127.0.0.1", mine[1]), ("127.0.0.1", port))
    assert read == b"early" and pong == b"pong" and closed


def test_an_adopted_connection_with_an_impossible_port_is_refused_and_closed():
    """``Carrier.adopt`` with a client port no TCP address has (a relay line's, past its
    secret): not taken, the socket closed, no descriptor left behind."""

    async def main():
        core = carrier.Carrier(threads=1)
        core.start(asyncio.get_running_loop())
        adopter = core.listen_adopting(
            None,  # nothing is handed back here
            head_timeout=5,
            idle_timeout=5,
            body_timeout=5,
            fresh_stream_body=4096,
            max_total=4,
            max_per_address=4,
        )
        ours, theirs = socket.socketpair()
        fd = ours.fileno()
        taken = core.adopt(adopter, ours, ("10.1.2.3", 70000), b"")
        theirs.settimeout(5)
        closed = theirs.recv(1) == b""  # our end was closed
        core.stop()
        return taken, closed, ours.fileno(), fd

    taken, closed, left, fd = _run(main())
    assert not taken and closed and left == -1
