"""What the edge answers that ngrok-go v2 (golang.ngrok.com/ngrok/v2) asks, rule by rule:
SrvInfo (stream type 8, before Auth too: its Diagnose never authenticates), the Auth reply's
``AgentSessionID``, the Bind reply's ``Extra.TunnelID``, the Bind options it names an
endpoint by (``Opts.URL``, ``Extra.Bindings``, ``Extra.Description``: edge/bind_opts.py), and
PatchTunnelState (type 10: its ``EndpointForwarder.Update``) with its store write
(``online.tunnel_patched``, against moto). The agent is played over a real socket pair; the
edge around the session is a recorder (tests/edge/test_go_sdk.py has the SDK itself as a
process)."""

import asyncio
import json
import socket
import time
from types import SimpleNamespace

import pytest

from chalicelib.core import binding, edge_errors, online
from edge import agents, bind_opts, protocol, quotas
from stacks import muxado
from tests.unit.test_edge_session import attach

PORTS = {"http": 8080, "https": 8443}


# ---- Opts.URL ----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "proto, url, name",
    [
        ("https", "https://app.example.com", "app.example.com"),
        ("https", "  HTTPS://App.Example.COM/ ", "app.example.com"),
        ("http", "http://app.example.com", "app.example.com"),
        ("tls", "tls://app.example.com", "app.example.com"),
        ("https", "https://foo.internal", "foo.internal"),
        ("https", "https://*.example.com", "*.example.com"),
        # the scheme's own port and the edge's listener port for it
        ("http", "http://app.example.com:80", "app.example.com"),
        ("https", "https://app.example.com:443", "app.example.com"),
        ("http", "http://app.example.com:8080", "app.example.com"),
        ("https", "https://app.example.com:8443", "app.example.com"),
        ("tls", "tls://app.example.com:443", "app.example.com"),
        ("tls", "tls://app.example.com:8443", "app.example.com"),
        # no host: a generated name (or port)
        ("https", "https://", ""),
        ("http", "http://", ""),
        ("tcp", "tcp://", ""),
        ("tcp", "tcp://tunnels.localhost:20001", "tunnels.localhost:20001"),
        ("tcp", "tcp://db.internal:5432", "db.internal:5432"),
        # none asked
        ("https", None, ""),
        ("https", "", ""),
        ("tcp", "   ", ""),
    ],
)
def test_the_url_names_the_endpoint(proto, url, name):
    assert bind_opts.name_of_url(proto, url, PORTS) == name


@pytest.mark.parametrize(
    "proto, url, says",
    [
        ("https", "http://app.example.com", "has the scheme 'http' but the endpoint's protocol"),
        ("http", "https://app.example.com", "has the scheme 'https'"),
        ("tcp", "https://app.example.com", "has the scheme 'https'"),
        ("tls", "https://app.example.com", "has the scheme 'https'"),
        ("https", "app.example.com", "has the scheme ''"),
        ("https", "https://app.example.com/path", "must be scheme://host only"),
        ("https", "https://app.example.com?x=1", "must be scheme://host only"),
        ("https", "https://app.example.com?", "must be scheme://host only"),
        ("https", "https://app.example.com#f", "must be scheme://host only"),
        ("https", "https://user@app.example.com", "must be scheme://host only"),
        ("https", "https://user:pw@app.example.com", "must be scheme://host only"),
        ("https", "https://app.example.com:444", "names the port 444"),
        ("https", "https://app.example.com:8080", "names the port 8080"),  # http's, not https's
        ("http", "http://app.example.com:443", "names the port 443"),
        ("tls", "tls://app.example.com:8080", "names the port 8080"),
        ("https", "https://:443", "names a port without a host"),
        ("tcp", "tcp://:20001", "names a port without a host"),
        ("tcp", "tcp://tunnels.localhost", "must be tcp://host:port"),
        ("https", "https://app.example.com:99999", "is not a valid URL"),
        ("https", "https://[::1", "is not a valid URL"),
    ],
)
def test_a_url_the_edge_cannot_take_is_refused_naming_it(proto, url, says):
    with pytest.raises(binding.Refused) as refused:
        bind_opts.name_of_url(proto, url, PORTS)
    assert refused.value.code == "ERR_NGROK_1602"
    assert says in refused.value.message


def test_a_url_of_1024_characters_is_read_and_one_more_is_refused():
    url = "https://" + "a" * (1024 - len("https://.example.com")) + ".example.com"
    assert len(url) == 1024
    assert bind_opts.name_of_url("https", url, PORTS) == url[len("https://") :]
    with pytest.raises(binding.Refused) as refused:
        bind_opts.name_of_url("https", url + "m", PORTS)
    assert refused.value.message == "The endpoint URL is longer than 1024 characters."


def test_a_url_that_is_not_a_string_is_malformed():
    with pytest.raises(protocol.MalformedRequest):
        bind_opts.name_of_url("https", 7, PORTS)


@pytest.mark.parametrize(
    "from_url, from_options, name",
    [
        ("", "", ""),
        ("app.example.com", "", "app.example.com"),
        ("", "app.example.com", "app.example.com"),
        ("app.example.com", "App.Example.com", "app.example.com"),
        ("h:20001", "h:20001", "h:20001"),
    ],
)
def test_the_url_and_the_other_name_options_agree(from_url, from_options, name):
    assert bind_opts.one_name(from_url, from_options, "Domain") == name


def test_a_url_and_a_domain_naming_two_names_are_refused():
    with pytest.raises(binding.Refused) as refused:
        bind_opts.one_name("a.example.com", "b.example.com", "Domain")
    assert refused.value.code == "ERR_NGROK_1602"
    assert "'a.example.com'" in refused.value.message and "Domain" in refused.value.message


# ---- Extra.Bindings ----------------------------------------------------------------------------
@pytest.mark.parametrize(
    "bindings, name",
    [
        (None, "app.example.com"),
        ([], "app.example.com"),
        ([], "foo.internal"),
        (["public"], "app.example.com"),
        (["public"], ""),  # a generated name is public
        (["public"], "tunnels.localhost:20001"),
        (["internal"], "foo.internal"),
        (["internal"], "db.internal:5432"),
        (["internal"], "FOO.INTERNAL"),
    ],
)
def test_bindings_that_agree_with_the_name_pass(bindings, name):
    bind_opts.check_bindings(bindings, name)


@pytest.mark.parametrize(
    "bindings, name, says",
    [
        (["internal"], "app.example.com", "needs a name under .internal"),
        (["internal"], "", "a generated name"),
        (["public"], "foo.internal", "is bound 'internal'"),
        (["public"], "db.internal:5432", "is bound 'internal'"),
        (["kubernetes"], "app.example.com", "kubernetes bindings are not served"),
        (["public", "internal"], "app.example.com", "an endpoint has one binding"),
        (["public", "public"], "app.example.com", "an endpoint has one binding"),
        ([""], "app.example.com", "an endpoint has one binding"),
    ],
)
def test_bindings_the_edge_does_not_serve_are_refused(bindings, name, says):
    with pytest.raises(binding.Refused) as refused:
        bind_opts.check_bindings(bindings, name)
    assert refused.value.code == "ERR_NGROK_1602" and says in refused.value.message


@pytest.mark.parametrize("bindings", ["public", {"public": 1}, [1]])
def test_bindings_of_another_shape_are_malformed(bindings):
    with pytest.raises(protocol.MalformedRequest):
        bind_opts.check_bindings(bindings, "app.example.com")


# ---- the session: SrvInfo, Auth, Bind ----------------------------------------------------------
class RecordingEdge:
    """What AgentSession asks of the edge; binds record the name they were asked for."""

    def __init__(self):
        self.changed = []  # hostnames the registry was told changed (edge/fast_path.py's cue)
        self.registry = SimpleNamespace(
            sessions={},
            by_id={},
            tunnel_changed=lambda tunnel: self.changed.append(tunnel.hostname),
        )
        self.settings = SimpleNamespace(
            limits=quotas.Limits(),
            instance_id="edge_test",
            region="eu-test",
            base_domain="tunnels.localhost",
        )
        self.auth_throttle = quotas.AuthThrottle(20)
        self.cluster = None
        self.http_port, self.https_port = PORTS["http"], PORTS["https"]
        self.asked = []  # (proto, name, tunnel) of each bind
        self.patched = []  # the arguments of each online.tunnel_patched
        self.router = SimpleNamespace(ip_restrictions=_no_ip_restrictions)  # edge.ip_restrictions

    async def call(self, fn, *args, **kwargs):
        if fn is online.tunnel_patched:
            self.patched.append((args, kwargs))
            return None
        if fn is binding.authenticate:
            return binding.Grant("acct_1", "cr_1", "usr_1", "user")
        if fn is online.claim_tunnel_id:
            return True
        return 0

    def authenticated(self, session):
        pass

    @property
    def binds(self):
        return self

    async def bind_http(self, tunnel, name):
        self.asked.append((tunnel.proto, name, tunnel))
        tunnel.url = f"{tunnel.proto}://{name or 'generated.tunnels.localhost'}"

    async def bind_tcp(self, tunnel, name):
        self.asked.append(("tcp", name, tunnel))
        tunnel.url = f"tcp://{name or 'tunnels.localhost:20001'}"

    async def add_labeled(self, tunnel):
        pass

    async def drop_tunnel(self, tunnel, remember=False):
        pass


class Agent:
    """The agent's side of the socket pair: typed streams out, each stream's reply back."""

    def __init__(self, reader, writer):
        self.reader, self.writer = reader, writer
        self.parser = muxado.FrameParser()
        self.next_id = 1
        self.replies = {}
        self.goaway = None

    def open(self, typ, body):
        sid, self.next_id = self.next_id, self.next_id + 2
        self.writer.write(muxado.data(sid, protocol.U32.pack(typ) + body, syn=True))
        return sid

    async def reply(self, sid, seconds=5.0):
        """The JSON the edge answered on ``sid``, or None when the session ended first."""
        deadline = time.monotonic() + seconds
        while sid not in self.replies or not self.replies[sid][1]:
            if self.goaway is not None:
                return None
            chunk = await asyncio.wait_for(self.reader.read(65536), deadline - time.monotonic())
            if not chunk:
                return None
            for frame in self.parser.feed(chunk):
                if frame.type == muxado.GOAWAY:
                    self.goaway = frame.message.decode()
                elif frame.type == muxado.DATA:
                    data, _ = self.replies.get(frame.stream_id, (b"", False))
                    self.replies[frame.stream_id] = (data + frame.payload, frame.fin)
        return json.loads(self.replies[sid][0])

    async def auth(self):
        sid = self.open(protocol.AUTH, b'{"Version":["3","2"],"Extra":{"AuthToken":"tok"}}')
        return await self.reply(sid)


def _run(test):
    async def run():
        left, right = socket.socketpair()
        reader, writer = await asyncio.open_connection(sock=right)
        edge = RecordingEdge()
        session = agents.AgentSession(edge, attach(left), ("127.0.0.1", 50000))
        task = asyncio.ensure_future(session.run())
        try:
            await test(edge, session, Agent(reader, writer))
        finally:
            await session.end("test over")
            task.cancel()

    asyncio.run(run())


def test_srv_info_before_auth_names_the_region_and_the_session_lives_on():
    async def test(edge, session, agent):
        sid = agent.open(protocol.SRV_INFO, b"{}\n")
        assert await agent.reply(sid) == {"Region": "eu-test"}
        assert session.grant is None and not session.ended
        # the same connection may still authenticate, and ask again after
        assert (await agent.auth())["ClientId"] == session.id
        sid = agent.open(protocol.SRV_INFO, b"{}\n")
        assert await agent.reply(sid) == {"Region": "eu-test"}

    _run(test)


def test_a_bind_before_auth_still_ends_the_session():
    async def test(edge, session, agent):
        sid = agent.open(protocol.BIND, b'{"Proto":"https","Opts":{},"Extra":{}}')
        assert await agent.reply(sid) is None
        assert agent.goaway == "protocol error: Auth must come first"

    _run(test)


@pytest.mark.parametrize("typ", [11, 12])
def test_stream_types_the_edge_does_not_serve_end_the_session(typ):
    async def test(edge, session, agent):
        await agent.auth()
        sid = agent.open(typ, b"{}")
        assert await agent.reply(sid) is None
        assert agent.goaway == f"protocol error: an agent may not open a stream of type {typ}"

    _run(test)


def test_auth_names_the_session_as_agent_session_id_and_bind_the_tunnel_as_tunnel_id():
    async def test(edge, session, agent):
        answer = await agent.auth()
        assert answer["Extra"]["AgentSessionID"] == answer["ClientId"] == session.id
        assert session.id.startswith("ts_")
        sid = agent.open(
            protocol.BIND,
            json.dumps(
                {
                    "Id": "",
                    "Proto": "https",
                    "Opts": {"URL": "https://app.example.com", "Domain": ""},
                    "Extra": {"Description": "d" * 256, "Bindings": ["public"]},
                }
            ).encode(),
        )
        reply = await agent.reply(sid)
        assert reply["Id"].startswith("tn_") and reply["Extra"]["TunnelID"] == reply["Id"]
        assert reply["URL"] == "https://app.example.com"
        assert reply["Opts"]["URL"] == "https://app.example.com"  # echoed as sent
        ((proto, name, tunnel),) = edge.asked
        assert (proto, name) == ("https", "app.example.com")
        assert tunnel.description == "d" * 255  # the API's 255

    _run(test)


@pytest.mark.parametrize(
    "proto, opts, extra, asked",
    [
        ("tcp", {"URL": "tcp://tunnels.localhost:20003"}, {}, "tunnels.localhost:20003"),
        (
            "tcp",
            {"URL": "tcp://", "Addr": "tunnels.localhost:20004"},
            {},
            "tunnels.localhost:20004",
        ),
        ("tls", {"URL": "tls://t.example.com"}, {}, "t.example.com"),
        ("http", {"URL": "http://", "Subdomain": "sub"}, {}, "sub.tunnels.localhost"),
        ("https", {"URL": "https://x.internal"}, {"Bindings": ["internal"]}, "x.internal"),
        (
            "https",
            {"URL": "https://a.example.com", "Hostname": "a.example.com"},
            {},
            "a.example.com",
        ),
    ],
)
def test_each_protocol_binds_the_name_its_url_asks_for(proto, opts, extra, asked):
    async def test(edge, session, agent):
        await agent.auth()
        sid = agent.open(
            protocol.BIND, json.dumps({"Proto": proto, "Opts": opts, "Extra": extra}).encode()
        )
        reply = await agent.reply(sid)
        assert "Error" not in reply, reply
        assert [(p, n) for p, n, _ in edge.asked] == [(proto, asked)]

    _run(test)


@pytest.mark.parametrize(
    "proto, opts, extra, says",
    [
        ("https", {"URL": "https://a.example.com", "Domain": "b.example.com"}, {}, "name the"),
        ("tcp", {"URL": "tcp://h:1", "Addr": "h:2"}, {}, "and Addr for 'h:2'"),
        ("https", {"URL": "http://a.example.com"}, {}, "has the scheme 'http'"),
        ("https", {"URL": "https://a.example.com"}, {"Bindings": ["internal"]}, "'internal'"),
        ("tcp", {"URL": "tcp://"}, {"Bindings": ["kubernetes"]}, "kubernetes"),
    ],
)
def test_a_bind_whose_name_options_disagree_is_refused_and_nothing_bound(proto, opts, extra, says):
    async def test(edge, session, agent):
        await agent.auth()
        sid = agent.open(
            protocol.BIND, json.dumps({"Proto": proto, "Opts": opts, "Extra": extra}).encode()
        )
        reply = await agent.reply(sid)
        assert reply["Error"].endswith("\nERR_NGROK_1602") and says in reply["Error"], reply
        assert edge.asked == [] and session.tunnels == {} and not session.ended

    _run(test)


# ---- PatchTunnelState --------------------------------------------------------------------------
def test_a_patch_names_only_what_it_changes():
    assert bind_opts.patch_of({"TunnelId": "tn_x"}, False) == {}
    assert bind_opts.patch_of({"Metadata": None, "Name": None, "PoolingEnabled": None}, True) == {}
    assert bind_opts.patch_of(
        {"Metadata": "", "Description": "d", "TrafficPolicy": "", "Name": "n"}, False
    ) == {"Metadata": "", "Description": "d", "TrafficPolicy": "", "Name": "n"}


def test_a_patch_keeps_what_a_bind_keeps_of_metadata_and_description():
    kept = bind_opts.patch_of({"Metadata": "m" * 4096, "Description": "d" * 255}, False)
    assert kept == {"Metadata": "m" * 4096, "Description": "d" * 255}
    cut = bind_opts.patch_of({"Metadata": "m" * 4097, "Description": "d" * 256}, False)
    assert cut == {"Metadata": "m" * 4096, "Description": "d" * 255}


@pytest.mark.parametrize("pooled", [True, False])
def test_pooling_may_be_restated_but_not_changed(pooled):
    assert bind_opts.patch_of({"PoolingEnabled": pooled}, pooled) == {}
    with pytest.raises(binding.Refused) as refused:
        bind_opts.patch_of({"PoolingEnabled": not pooled}, pooled)
    assert refused.value.code == "ERR_NGROK_1602"
    assert f"PoolingEnabled cannot change on a bound endpoint (it is {str(pooled).lower()})" in (
        refused.value.message
    )


@pytest.mark.parametrize(
    "field, value",
    [
        ("Metadata", 1),
        ("Description", []),
        ("TrafficPolicy", {}),
        ("Name", 2),
        ("PoolingEnabled", "true"),
    ],
)
def test_a_patch_field_of_another_type_is_malformed(field, value):
    with pytest.raises(protocol.MalformedRequest):
        bind_opts.patch_of({field: value}, False)


POLICY = json.dumps(
    {
        "on_http_request": [
            {
                "expressions": ["req.url.path == '/p'"],
                "actions": [{"type": "custom-response", "config": {"status_code": 201}}],
            }
        ]
    }
)


async def _bound(agent, proto="https", extra=None):
    await agent.auth()
    sid = agent.open(
        protocol.BIND,
        json.dumps({"Proto": proto, "Opts": {}, "Extra": extra or {"Metadata": "m0"}}).encode(),
    )
    return (await agent.reply(sid))["Id"]


def _patch(agent, body):
    return agent.open(protocol.PATCH_TUNNEL_STATE, json.dumps(body).encode())


def test_a_patch_changes_the_endpoint_in_place_and_in_the_store():
    async def test(edge, session, agent):
        tunnel_id = await _bound(agent)
        tunnel = session.tunnels[tunnel_id]
        assert tunnel.enforcement.policy is None
        sid = _patch(
            agent,
            {
                "TunnelId": tunnel_id,
                "Metadata": "m1",
                "Description": "d1",
                "TrafficPolicy": POLICY,
                "Name": "ignored",
                "PoolingEnabled": False,
            },
        )
        assert await agent.reply(sid) == {}
        assert (tunnel.metadata, tunnel.description) == ("m1", "d1")
        assert tunnel.opts["TrafficPolicy"] == POLICY and tunnel.enforcement.policy is not None
        assert edge.changed == [tunnel.hostname]  # the core's plain route is re-decided
        assert edge.patched == [
            (
                ("acct_1", session.id, tunnel_id, tunnel.endpoint_id),
                {"metadata": "m1", "description": "d1", "traffic_policy": POLICY},
            )
        ]
        # a policy of "" takes it off again; the other fields stay as they were
        sid = _patch(agent, {"TunnelId": tunnel_id, "TrafficPolicy": ""})
        assert await agent.reply(sid) == {}
        assert tunnel.enforcement.policy is None and tunnel.metadata == "m1"
        assert edge.patched[-1][1] == {"traffic_policy": ""}
        # a name alone changes nothing stored
        sid = _patch(agent, {"TunnelId": tunnel_id, "Name": "n"})
        assert await agent.reply(sid) == {} and len(edge.patched) == 2

    _run(test)


def test_a_tcp_endpoints_policy_is_patched_too():
    async def test(edge, session, agent):
        tunnel_id = await _bound(agent, "tcp")
        deny = json.dumps({"on_tcp_connect": [{"actions": [{"type": "deny"}]}]})
        sid = _patch(agent, {"TunnelId": tunnel_id, "TrafficPolicy": deny})
        assert await agent.reply(sid) == {}
        assert session.tunnels[tunnel_id].enforcement.policy is not None

    _run(test)


@pytest.mark.parametrize(
    "body, code, says",
    [
        ({"TunnelId": "tn_nope", "Metadata": "x"}, "ERR_NGROK_1602", "No endpoint with that"),
        ({"TunnelId": "", "Metadata": "x"}, "ERR_NGROK_1602", "No endpoint with that"),
        (
            {"TrafficPolicy": '{"on_http_request": [{"actions": [{"type": "nope"}]}]}'},
            "ERR_NGROK_2201",
            "",
        ),
        ({"TrafficPolicy": "{", "Metadata": "x"}, "ERR_NGROK_2201", ""),
        ({"PoolingEnabled": True, "Metadata": "x"}, "ERR_NGROK_1602", "PoolingEnabled"),
    ],
)
def test_a_refused_patch_changes_nothing(body, code, says):
    async def test(edge, session, agent):
        tunnel_id = await _bound(agent)
        tunnel = session.tunnels[tunnel_id]
        before = (tunnel.metadata, dict(tunnel.opts), tunnel.enforcement)
        sid = _patch(agent, {"TunnelId": tunnel_id, **body})
        reply = await agent.reply(sid)
        assert reply["Error"].endswith(f"\n{code}") and says in reply["Error"], reply
        assert (tunnel.metadata, tunnel.opts, tunnel.enforcement) == before
        assert edge.patched == [] and not session.ended

    _run(test)


def test_a_labeled_tunnel_has_nothing_to_patch():
    async def test(edge, session, agent):
        await agent.auth()
        sid = agent.open(protocol.BIND_LABELED, b'{"Labels": {"edge": "edghts_1"}}')
        tunnel_id = (await agent.reply(sid))["Id"]
        reply = await agent.reply(_patch(agent, {"TunnelId": tunnel_id, "Metadata": "x"}))
        assert "No endpoint with that tunnel id" in reply["Error"] and edge.patched == []

    _run(test)


def test_a_patch_before_auth_ends_the_session():
    async def test(edge, session, agent):
        assert await agent.reply(_patch(agent, {"TunnelId": "tn_x"})) is None
        assert agent.goaway == "protocol error: Auth must come first"

    _run(test)


# ---- online.tunnel_patched (moto) --------------------------------------------------------------
def _started(session_id="ts_0000000000000000000000000001"):
    from chalicelib.core import store

    tid, eid = online.new_tunnel_id(), online.new_endpoint_id()
    online.tunnel_started(
        account_id="acct_1",
        session_id=session_id,
        tunnel_id=tid,
        instance_id="edge-a",
        proto="https",
        public_url="https://a.example.com",
        hostname="a.example.com",
        endpoint_id=eid,
        metadata="m0",
        description="d0",
    )

    def data(kind, sk):
        return store.get(store.collection_pk("acct_1", kind), sk).data

    return tid, eid, data


def test_the_store_keeps_what_a_patch_changed_and_leaves_the_rest(store_env):
    sid = online.new_session_id()
    online.session_started(
        account_id="acct_1",
        session_id=sid,
        credential_id="cr_x",
        instance_id="edge-a",
        agent_version="4",
        os="linux",
        ip="127.0.0.1",
        metadata="",
        region="local",
        owner_id="usr_x",
    )
    tid, eid, data = _started(sid)
    before = data(online.ENDPOINTS, eid)
    online.tunnel_patched("acct_1", sid, tid, eid, metadata="m1", traffic_policy="tp")
    after = data(online.ENDPOINTS, eid)
    assert (after["metadata"], after["traffic_policy"], after["description"]) == ("m1", "tp", "d0")
    assert {
        k: v for k, v in after.items() if k not in ("metadata", "traffic_policy", "updated_at")
    } == {k: v for k, v in before.items() if k not in ("metadata", "traffic_policy", "updated_at")}
    assert data(online.TUNNELS, tid)["metadata"] == "m1"
    online.tunnel_patched("acct_1", sid, tid, eid, description="d1")
    assert data(online.ENDPOINTS, eid)["description"] == "d1"
    assert data(online.TUNNELS, tid)["metadata"] == "m1"


def test_the_store_leaves_items_another_session_owns(store_env):
    sid = online.new_session_id()
    online.session_started(
        account_id="acct_1",
        session_id=sid,
        credential_id="cr_x",
        instance_id="edge-a",
        agent_version="4",
        os="linux",
        ip="127.0.0.1",
        metadata="",
        region="local",
        owner_id="usr_x",
    )
    tid, eid, data = _started(sid)
    online.tunnel_patched("acct_1", online.new_session_id(), tid, eid, metadata="theirs")
    assert data(online.ENDPOINTS, eid)["metadata"] == "m0"
    assert data(online.TUNNELS, tid)["metadata"] == "m0"
    with pytest.raises(ValueError):
        online.tunnel_patched("acct_1", sid, tid, eid, hostname="x")


async def _no_ip_restrictions(account_id):
    return []  # the account has no /ip_restrictions


# ---- the upstream protocol (ForwardsProto: app_protocol) ---------------------------------------
@pytest.mark.parametrize("value, kept", [(None, ""), ("", ""), ("http1", ""), ("http2", "http2")])
def test_the_upstream_protocols_the_edge_speaks_are_kept(value, kept):
    assert bind_opts.forwards_proto(value) == kept


@pytest.mark.parametrize("value", ["http3", "HTTP2", "h2c", "http2 ", "x" * 100])
def test_any_other_upstream_protocol_is_refused_with_the_hosted_code(value):
    with pytest.raises(binding.Refused) as caught:
        bind_opts.forwards_proto(value)
    assert caught.value.code == edge_errors.UPSTREAM_PROTOCOL_INVALID
    assert caught.value.message.startswith("Upstream protocol is invalid: ")
    assert len(caught.value.message) < 200  # the agent's value is cut, not echoed whole
