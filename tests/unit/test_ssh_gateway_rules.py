"""The SSH gateway's rules without a process (edge/ssh_gateway.py): the command, the endpoint
a forward and --url ask for, how refusals are printed, and the proxy channel's stream
interface (a refused channel; reading pauses the channel at its bound)."""

import asyncio
from types import SimpleNamespace

import pytest

from chalicelib.core import binding, edge_errors
from edge import ssh_gateway
from edge.session import StreamReset
from edge.ssh_gateway import ChannelCount, ChannelStream, Command, parse_command


def test_commands_and_flags():
    assert parse_command("http") == Command("http")
    assert parse_command("tcp --url=tcp://h.example.com:5") == Command(
        "tcp", "tcp://h.example.com:5"
    )
    assert parse_command("http --domain a.example.com") == Command("http", "a.example.com")
    got = parse_command("http --basic-auth 'a:password1' --basic-auth=b:password2")
    assert got.basic_auth == ["a:password1", "b:password2"]
    for text in ("--help", "http -h", "help"):
        with pytest.raises(ssh_gateway.Usage):
            parse_command(text)


@pytest.mark.parametrize(
    "text, code, words",
    [
        (None, edge_errors.INVALID_OPTION, "No command"),
        ("  ", edge_errors.INVALID_OPTION, "No command"),
        ("tls", edge_errors.INVALID_PROTOCOL, "'tls' is not an endpoint type"),
        ("http --oauth=google", edge_errors.INVALID_OPTION, "Unknown flag '--oauth'"),
        ("http --url", edge_errors.INVALID_OPTION, "needs a value"),
        ("http --url=a.x.com --domain=b.x.com", edge_errors.INVALID_OPTION, "once"),
        ("tcp --basic-auth a:b", edge_errors.INVALID_OPTION, "for http endpoints"),
        ("http --basic-auth nocolon", edge_errors.INVALID_OPTION, "'user:password'"),
        ("http 'unclosed", edge_errors.INVALID_OPTION, "cannot be read"),
        ("http --url=" + "x" * 4086, edge_errors.INVALID_OPTION, "over 4096 bytes"),
    ],
)
def test_refused_commands(text, code, words):
    with pytest.raises(binding.Refused) as refused:
        parse_command(text)
    assert refused.value.code == code and words in refused.value.message


def test_the_command_bound_is_4096_bytes():
    assert len(parse_command("http --url=" + "x" * 4085).url) == 4085


def _session(host, port):
    session = ssh_gateway.SshSession.__new__(ssh_gateway.SshSession)
    session.edge = SimpleNamespace(settings=SimpleNamespace(tcp_host="tcp.example.com"))
    session._forward = (host, port)
    return session


@pytest.mark.parametrize(
    "forward, command, expected",
    [
        (("localhost", 0), Command("http"), ("https", "")),
        (("", 443), Command("http"), ("https", "")),
        (("*", 80), Command("http"), ("http", "")),
        (("app.example.com", 443), Command("http"), ("https", "app.example.com")),
        (
            ("localhost", 0),
            Command("http", "http://App.example.com/"),
            ("http", "app.example.com"),
        ),
        (("localhost", 0), Command("http", "a.example.com"), ("https", "a.example.com")),
        (
            ("a.example.com", 443),
            Command("http", "https://a.example.com"),
            ("https", "a.example.com"),
        ),
        (("localhost", 0), Command("tcp"), ("tcp", "")),
        (("localhost", 20005), Command("tcp"), ("tcp", "tcp.example.com:20005")),
        (("h.example.com", 20005), Command("tcp"), ("tcp", "h.example.com:20005")),
        (("localhost", 0), Command("tcp", "tcp://h.example.com:7"), ("tcp", "h.example.com:7")),
    ],
)
def test_the_endpoint_a_forward_asks_for(forward, command, expected):
    assert _session(*forward)._endpoint_of(command) == expected


@pytest.mark.parametrize(
    "forward, command, words",
    [
        (("localhost", 8080), Command("http"), "not 8080"),
        (("a.example.com", 443), Command("http", "b.example.com"), "differ"),
        (("localhost", 443), Command("http", "http://a.example.com"), "differ"),
        (("localhost", 0), Command("http", "ftp://a.example.com"), "not ftp://"),
        (("h.example.com", 0), Command("tcp"), "host:port"),
        (("h.example.com", 5), Command("tcp", "tcp://h.example.com:6"), "differ"),
    ],
)
def test_forwards_and_urls_refused(forward, command, words):
    with pytest.raises(binding.Refused) as refused:
        _session(*forward)._endpoint_of(command)
    assert refused.value.code == edge_errors.INVALID_OPTION and words in refused.value.message


def test_a_refusal_prints_as_the_agent_cli_prints_one():
    text = ssh_gateway.error_text(binding.Refused(edge_errors.ACL_REFUSED, "no\nmore"))
    assert text == "ERROR:  no\nERROR:  more\nERROR:  \nERROR:  ERR_NGROK_399\n"
    assert ssh_gateway.error_text(binding.Refused("", "bye")) == "ERROR:  bye\n"


class _Chan:
    def __init__(self):
        self.paused = self.closed = False
        self.sent = []

    def set_write_buffer_limits(self, high):
        pass

    def pause_reading(self):
        self.paused = True

    def resume_reading(self):
        self.paused = False

    def write(self, data):
        self.sent.append(data)

    def write_eof(self):
        self.sent.append(b"<eof>")

    def close(self):
        self.closed = True


def test_a_refused_channel_takes_the_request_and_reads_as_reset():
    async def run():
        slots = asyncio.Semaphore(1)
        await slots.acquire()
        stream = ChannelStream(ChannelCount(), slots)
        stream.refused("connect failed")
        await stream.write(b"GET / HTTP/1.1\r\n\r\n")  # taken, as an SDK takes it
        await stream.close_write()
        with pytest.raises(StreamReset):
            await stream.read()
        assert not slots.locked()  # its slot given back

    asyncio.run(run())


def test_reading_pauses_the_channel_at_its_bound_and_resumes():
    async def run():
        count, chan = ChannelCount(), _Chan()
        stream = ChannelStream(count, asyncio.Semaphore(1))
        stream.connection_made(chan)
        assert count.local_open == 1
        stream.data_received(b"a" * (ssh_gateway.PAUSE_AT - 1), None)
        assert not chan.paused
        stream.data_received(b"b", None)
        assert chan.paused and stream.buffered == ssh_gateway.PAUSE_AT
        await stream.read(ssh_gateway.PAUSE_AT // 2)
        assert chan.paused  # half is still unread
        await stream.read(1)
        assert not chan.paused
        stream.eof_received()
        assert len(await stream.read()) == ssh_gateway.PAUSE_AT // 2 - 1
        assert await stream.read() == b""
        stream.finish()
        assert chan.closed
        stream.connection_lost(None)
        assert count.local_open == 0

    asyncio.run(run())


def test_a_session_that_ends_while_a_channel_waits_for_a_slot_is_a_reset_stream():
    """A public connection waiting for one of the session's channel slots when the ssh
    session ends reads as a reset stream (the TCP front's answer to an ended agent), its slot
    given back; it used to reach the ended connection (an AttributeError on None)."""

    async def run():
        session = _session("localhost", 0)
        session._ending, session.conn = False, object()
        session._slots = asyncio.Semaphore(0)  # every slot taken
        opening = asyncio.ensure_future(session.open_proxy(None, "192.0.2.1:5", "tcp"))
        await asyncio.sleep(0.01)
        session._ending, session.conn = True, None  # the session ends meanwhile
        session._slots.release()  # a channel closes: its slot comes back
        with pytest.raises(StreamReset):
            await opening
        return session._slots.locked()

    assert asyncio.run(run()) is False, "the slot is given back"
