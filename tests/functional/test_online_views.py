"""/tunnel_sessions, /tunnels and /endpoints at both levels: the online items are seeded with
chalicelib.core.online's writers (the functions the edge calls), into the service's own store.
Stop and restart wait for the edge's answer: :meth:`Edge.answering` plays the edge's part with
the edge's own functions (take the commands, answer them), in a thread as the edge would from
its process; the agent's part, a real SDK accepting or refusing, is
tests/edge/test_remote_commands.py."""

import contextlib
import threading
import time

import ngrok
import pytest

from chalicelib.core import errors, ids, online

SESSION_FIELDS = {
    "id",
    "uri",
    "agent_version",
    "credential",
    "ip",
    "metadata",
    "os",
    "region",
    "started_at",
    "transport",
}
TUNNEL_FIELDS = {
    "id",
    "public_url",
    "started_at",
    "metadata",
    "proto",
    "region",
    "tunnel_session",
    "endpoint",
    "labels",
    "backends",
    "forwards_to",
}
ENDPOINT_FIELDS = {
    "id",
    "region",
    "created_at",
    "updated_at",
    "public_url",
    "proto",
    "scheme",
    "hostport",
    "host",
    "port",
    "type",
    "metadata",
    "description",
    "domain",
    "tcp_addr",
    "tunnel",
    "edge",
    "upstream_url",
    "upstream_protocol",
    "url",
    "principal",
    "traffic_policy",
    "bindings",
    "tunnel_session",
    "uri",
    "name",
    "pooling_enabled",
}


class Edge:
    """Writes online items as the edge does, into the service's store, with a clock that
    can be set in the past (the service reads the real clock: an old heartbeat is stale)."""

    def __init__(self, api, monkeypatch):
        self.api = api
        self.monkeypatch = monkeypatch

    def _at(self, ago):
        self.monkeypatch.setattr(online, "now", lambda: time.time() - ago)

    def session(self, account, credential_id, ago=0, instance_id="edge-1"):
        sid = online.new_session_id()
        self._at(ago)
        with self.api.service_store():
            online.session_started(
                account_id=account.id,
                session_id=sid,
                credential_id=credential_id,
                instance_id=instance_id,
                agent_version="1.4.0",
                os="linux",
                ip="192.0.2.7",
                metadata="meta",
                region="local",
            )
        return sid

    def tunnel(self, account, sid, hostname=None, proto="https", labels=None, ago=0, **kw):
        tid = online.new_tunnel_id()
        eid = None if labels else online.new_endpoint_id()
        self._at(ago)
        with self.api.service_store():
            online.tunnel_started(
                account_id=account.id,
                session_id=sid,
                tunnel_id=tid,
                instance_id="edge-1",
                proto=proto,
                public_url=(f"{proto}://{hostname}" if hostname else None),
                hostname=hostname,
                labels=labels,
                endpoint_id=eid,
                forwards_to="http://localhost:8000",
                metadata="tm",
                **kw,
            )
        return tid, eid

    def call(self, func, *args, **kwargs):
        self._at(0)
        with self.api.service_store():
            return func(*args, **kwargs)

    @contextlib.contextmanager
    def answering(self, outcome="accepted", error="", instance_id="edge-1"):
        """While inside, the edge ``instance_id`` takes the commands written for it (every
        50 ms) and answers each with ``outcome`` (online.take_commands, .answer_command);
        yields the list of the commands taken."""
        taken, done = [], threading.Event()
        self._at(0)

        def edge():
            while not done.is_set():
                for command in online.take_commands(instance_id):
                    taken.append(command)
                    online.answer_command(command, outcome, error)
                done.wait(0.05)

        with self.api.service_store():
            thread = threading.Thread(target=edge, daemon=True)
            thread.start()
            try:
                yield taken
            finally:
                done.set()
                thread.join(5)


@pytest.fixture
def edge(api, monkeypatch):
    return Edge(api, monkeypatch)


@pytest.fixture
def credential(account):
    return account.admin.post("/credentials", {"description": "agent"}).json["id"]


def _host():
    return f"{ids.new_id('x')[-10:].lower()}.example.test"


def test_live_session_is_listed_and_read_with_the_hosted_fields(api, account, edge, credential):
    sid = edge.session(account, credential)
    listed = account.member.get("/tunnel_sessions")
    assert listed.status == 200, listed
    body = listed.json
    assert body["next_page_uri"] is None and body["uri"].endswith("/tunnel_sessions")
    [session] = body["tunnel_sessions"]
    assert set(session) == SESSION_FIELDS
    assert session["id"] == sid and session["uri"].endswith(f"/tunnel_sessions/{sid}")
    assert session["credential"]["id"] == credential
    assert session["credential"]["uri"].endswith(f"/credentials/{credential}")
    assert (
        session["agent_version"],
        session["os"],
        session["ip"],
        session["metadata"],
        session["region"],
        session["transport"],
    ) == ("1.4.0", "linux", "192.0.2.7", "meta", "local", "ngrok/2")
    assert session["started_at"].endswith("Z")
    got = account.member.get(f"/tunnel_sessions/{sid}")
    assert got.status == 200 and got.json == session


def test_tunnels_and_endpoints_of_a_live_session(api, account, edge, credential):
    sid = edge.session(account, credential)
    host = _host()
    tid, eid = edge.tunnel(account, sid, hostname=host, traffic_policy="{}")
    lid, _ = edge.tunnel(account, sid, labels={"app": "web"}, proto="")
    tunnels = account.admin.get("/tunnels").json["tunnels"]
    assert [t["id"] for t in tunnels] == [lid, tid]
    labeled, plain = tunnels
    assert set(plain) == TUNNEL_FIELDS
    assert plain["public_url"] == f"https://{host}" and plain["proto"] == "https"
    assert plain["tunnel_session"]["id"] == sid and plain["endpoint"]["id"] == eid
    assert plain["endpoint"]["uri"].endswith(f"/endpoints/{eid}")
    assert plain["region"] == "local" and plain["forwards_to"] == "http://localhost:8000"
    assert plain["labels"] is None and plain["backends"] == [] and plain["metadata"] == "tm"
    assert labeled["labels"] == {"app": "web"} and labeled["endpoint"] is None
    assert account.admin.get(f"/tunnels/{tid}").json == plain

    endpoints = account.admin.get("/endpoints").json["endpoints"]
    [endpoint] = endpoints
    assert set(endpoint) == ENDPOINT_FIELDS
    assert endpoint["id"] == eid and endpoint["type"] == "agent"
    assert (
        endpoint["url"],
        endpoint["public_url"],
        endpoint["scheme"],
        endpoint["host"],
        endpoint["port"],
        endpoint["hostport"],
    ) == (f"https://{host}", f"https://{host}", "https", host, 443, f"{host}:443")
    assert endpoint["tunnel"]["id"] == tid and endpoint["tunnel_session"]["id"] == sid
    assert endpoint["principal"]["id"] == account.admin.id
    assert endpoint["upstream_url"] == "http://localhost:8000"
    assert endpoint["traffic_policy"] == "{}" and endpoint["bindings"] == ["public"]
    assert endpoint["uri"].endswith(f"/endpoints/{eid}") and endpoint["edge"] is None
    assert account.admin.get(f"/endpoints/{eid}").json == endpoint


def test_tcp_endpoint_shows_host_and_port(api, account, edge, credential):
    sid = edge.session(account, credential)
    _, eid = edge.tunnel(account, sid, hostname="1.tcp.example.test:20001", proto="tcp")
    endpoint = account.admin.get(f"/endpoints/{eid}").json
    assert (
        endpoint["proto"],
        endpoint["scheme"],
        endpoint["host"],
        endpoint["port"],
        endpoint["hostport"],
    ) == ("tcp", "tcp", "1.tcp.example.test", 20001, "1.tcp.example.test:20001")


def test_stale_sessions_and_their_tunnels_and_endpoints_are_invisible(
    api, account, edge, credential
):
    stale = edge.session(account, credential, ago=online.STALE_SECONDS + 5)
    tid, eid = edge.tunnel(account, stale, hostname=_host(), ago=online.STALE_SECONDS + 5)
    live = edge.session(account, credential)
    assert [s["id"] for s in account.admin.get("/tunnel_sessions").json["tunnel_sessions"]] == [
        live
    ]
    assert account.admin.get("/tunnels").json["tunnels"] == []
    assert account.admin.get("/endpoints").json["endpoints"] == []
    for path in (f"/tunnel_sessions/{stale}", f"/tunnels/{tid}", f"/endpoints/{eid}"):
        resp = account.admin.get(path)
        assert resp.status == 404 and resp.json["error_code"] == errors.NotFound.error_code
    assert account.admin.post(f"/tunnel_sessions/{stale}/stop").status == 404
    # the edge heartbeats again: everything is back
    edge.call(online.session_heartbeat, account.id, stale, "edge-1")
    assert account.admin.get(f"/tunnels/{tid}").status == 200
    assert account.admin.get(f"/endpoints/{eid}").status == 200


def test_ended_session_takes_its_tunnels_and_endpoints_along(api, account, edge, credential):
    sid = edge.session(account, credential)
    tid, eid = edge.tunnel(account, sid, hostname=_host())
    edge.call(online.session_ended, account.id, sid)
    assert account.admin.get("/tunnel_sessions").json["tunnel_sessions"] == []
    assert account.admin.get(f"/tunnels/{tid}").status == 404
    assert account.admin.get(f"/endpoints/{eid}").status == 404


def test_another_account_sees_nothing(api, account, other_account, edge, credential):
    sid = edge.session(account, credential)
    tid, eid = edge.tunnel(account, sid, hostname=_host())
    other = other_account.admin
    for path, key in (
        ("/tunnel_sessions", "tunnel_sessions"),
        ("/tunnels", "tunnels"),
        ("/endpoints", "endpoints"),
    ):
        assert other.get(path).json[key] == []
    for path in (f"/tunnel_sessions/{sid}", f"/tunnels/{tid}", f"/endpoints/{eid}"):
        assert other.get(path).status == 404
    for action in ("stop", "restart", "update"):
        assert other.post(f"/tunnel_sessions/{sid}/{action}").status == 404
    assert edge.call(online.session_heartbeat, account.id, sid, "edge-1") == {
        "stop_requested": False,
        "restart_requested": False,
    }


@pytest.mark.parametrize(
    "method, path",
    [
        ("GET", "/tunnel_sessions/ts_nope"),
        ("GET", "/tunnels/ts_" + "0" * 27),
        ("GET", "/endpoints/tn_" + "0" * 27),
        ("GET", "/tunnel_sessions/ep_" + "0" * 27),
        ("POST", "/tunnel_sessions/ts_nope/stop"),
        ("POST", "/tunnel_sessions/tn_" + "0" * 27 + "/restart"),
    ],
)
def test_malformed_or_foreign_prefix_ids_are_404(api, account, method, path):
    resp = account.admin.post(path) if method == "POST" else account.admin.get(path)
    assert resp.status == 404 and resp.json["error_code"] == errors.NotFound.error_code


def test_lists_refuse_bad_paging_and_unknown_query(api, account):
    for query in ("limit=0", "limit=101", "before_id=tn_" + "0" * 27, "filter=x"):
        resp = account.admin.get(f"/tunnel_sessions?{query}")
        assert resp.status == 400, (query, resp)
    assert account.admin.get("/tunnels?before_id=ts_" + "0" * 27).status == 400
    assert account.admin.get("/endpoints?limit=100").status == 200


def test_views_need_an_api_key(api, account):
    for path in ("/tunnel_sessions", "/tunnels", "/endpoints"):
        assert api.request("GET", path).status == 401
    assert (
        api.request(
            "POST", f"/tunnel_sessions/{online.new_session_id()}/stop", json_body={}
        ).status
        == 401
    )


def test_paging_skips_stale_items_without_an_empty_last_page(api, account, edge, credential):
    old = online.STALE_SECONDS + 5
    a = edge.session(account, credential)
    stale_1 = edge.session(account, credential, ago=old)
    b = edge.session(account, credential)
    stale_2 = edge.session(account, credential, ago=old)
    c = edge.session(account, credential)
    page = account.admin.get("/tunnel_sessions?limit=2").json
    assert [s["id"] for s in page["tunnel_sessions"]] == [c, b]
    assert f"before_id={b}" in page["next_page_uri"] and "limit=2" in page["next_page_uri"]
    rest = account.admin.get(page["next_page_uri"]).json
    assert [s["id"] for s in rest["tunnel_sessions"]] == [a] and rest["next_page_uri"] is None
    # the oldest items are stale: the page that ends with the last live one is the last page
    page = account.admin.get(f"/tunnel_sessions?limit=1&before_id={a}").json
    assert page == {"tunnel_sessions": [], "uri": page["uri"], "next_page_uri": None}
    page = account.admin.get("/tunnel_sessions?limit=3").json
    assert [s["id"] for s in page["tunnel_sessions"]] == [c, b, a]
    assert page["next_page_uri"] is None
    assert stale_1 and stale_2


def test_tunnel_and_endpoint_pages_follow_the_paging_rules(api, account, edge, credential):
    sid = edge.session(account, credential)
    made = [edge.tunnel(account, sid, hostname=_host()) for _ in range(3)]
    page = account.admin.get("/endpoints?limit=2").json
    assert [e["id"] for e in page["endpoints"]] == [made[2][1], made[1][1]]
    rest = account.admin.get(page["next_page_uri"]).json
    assert [e["id"] for e in rest["endpoints"]] == [made[0][1]] and rest["next_page_uri"] is None
    page = account.admin.get("/tunnels?limit=3").json
    assert [t["id"] for t in page["tunnels"]] == [t for t, _ in reversed(made)]
    assert page["next_page_uri"] is None


def test_stop_and_restart_answer_204_once_the_edge_says_the_agent_accepted(
    api, account, edge, credential
):
    sid = edge.session(account, credential)
    with edge.answering() as taken:
        stopped = account.admin.post(f"/tunnel_sessions/{sid}/stop", {})
        assert stopped.status == 204 and stopped.text == ""
        assert account.admin.request("POST", f"/tunnel_sessions/{sid}/restart").status == 204
    assert [(c.session_id, c.command) for c in taken] == [(sid, "stop"), (sid, "restart")]
    assert all(c.account_id == account.id and c.command_id for c in taken)
    # the first layout's flags are still set for a heartbeat that reads them
    assert edge.call(online.session_heartbeat, account.id, sid, "edge-1") == {
        "stop_requested": True,
        "restart_requested": True,
    }


@pytest.mark.parametrize(
    "action, refusal, words",
    [
        ("stop", errors.AgentStopRefused, "remote stopping"),
        ("restart", errors.AgentRestartRefused, "remote restarting"),
    ],
)
def test_an_agents_refusal_is_the_hosted_400_with_its_reason(
    api, account, edge, credential, action, refusal, words
):
    sid = edge.session(account, credential)
    reason = "the agent has not defined a callback for this operation"
    with edge.answering("refused", reason):
        resp = account.admin.post(f"/tunnel_sessions/{sid}/{action}")
    assert resp.status == 400 and resp.json["error_code"] == refusal.error_code
    assert resp.json["msg"] == f"This ngrok agent does not support {words}: {reason}."
    assert account.admin.get(f"/tunnel_sessions/{sid}").status == 200


def test_a_session_the_edge_no_longer_holds_is_a_404(api, account, edge, credential):
    sid = edge.session(account, credential)
    with edge.answering("gone"):
        resp = account.admin.post(f"/tunnel_sessions/{sid}/stop")
    assert resp.status == 404 and resp.json["error_code"] == errors.NOT_FOUND
    assert sid in resp.json["msg"]


def test_a_command_the_edge_took_too_late_is_a_409(api, account, edge, credential):
    sid = edge.session(account, credential)
    with edge.answering("expired"):
        resp = account.admin.post(f"/tunnel_sessions/{sid}/restart")
    assert resp.status == 409 and resp.json["error_code"] == errors.COMMAND_NOT_ANSWERED
    assert "too late" in resp.json["msg"] and "did not send it" in resp.json["msg"]


def test_no_answer_within_the_bound_is_a_409_and_the_command_is_withdrawn(
    inprocess_api, monkeypatch
):
    """No edge takes the command (its edge is down): 409 once COMMAND_WAIT_SECONDS have
    passed (1 s here; 20 s deployed: tests/unit/test_edge_commands.py pins the numbers), and
    the command is gone from the edge's partition."""
    edge = Edge(inprocess_api, monkeypatch)
    account = inprocess_api.new_account()
    credential = account.admin.post("/credentials", {}).json["id"]
    sid = edge.session(account, credential)
    monkeypatch.setattr(online, "COMMAND_WAIT_SECONDS", 1.0)
    started = time.monotonic()
    resp = account.admin.post(f"/tunnel_sessions/{sid}/stop")
    took = time.monotonic() - started
    assert resp.status == 409 and resp.json["error_code"] == errors.COMMAND_NOT_ANSWERED
    assert resp.json["msg"].startswith(f"No answer about tunnel session {sid} within 1 s")
    assert "withdrawn" in resp.json["msg"]
    assert 1.0 <= took < 2.0, took
    assert edge.call(online.take_commands, "edge-1") == []


def test_stop_accepts_the_documented_body_with_the_path_id(api, account, edge, credential):
    sid = edge.session(account, credential)
    other = online.new_session_id()
    with edge.answering() as taken:
        assert account.admin.post(f"/tunnel_sessions/{sid}/stop", {"id": sid}).status == 204
        assert account.admin.post(f"/tunnel_sessions/{sid}/restart", {"id": other}).status == 400
    assert [c.command for c in taken] == ["stop"]


def test_stop_accepts_the_bare_id_body_of_the_typescript_client(api, account, edge, credential):
    """@ngrok/ngrok-api posts the session id itself (``ts_…``, not JSON) as the body."""
    sid = edge.session(account, credential)
    other = online.new_session_id()
    with edge.answering() as taken:
        sent = account.admin.request(
            "POST",
            f"/tunnel_sessions/{sid}/stop",
            data=sid.encode(),
            headers={"Content-Type": "application/json"},
        )
        assert sent.status == 204, sent
        refused = account.admin.request(
            "POST",
            f"/tunnel_sessions/{sid}/restart",
            data=other.encode(),
            headers={"Content-Type": "application/json"},
        )
    assert refused.status == 400 and refused.json["error_code"] == errors.INVALID_JSON
    assert [c.command for c in taken] == ["stop"]


def test_stop_with_a_body_field_is_400_and_requests_nothing(api, account, edge, credential):
    sid = edge.session(account, credential)
    resp = account.admin.post(f"/tunnel_sessions/{sid}/stop", {"force": True})
    assert resp.status == 400 and resp.json["error_code"] == errors.UnknownField.error_code
    assert edge.call(online.take_commands, "edge-1") == []
    assert (
        edge.call(online.session_heartbeat, account.id, sid, "edge-1")["stop_requested"] is False
    )


def test_members_stop_only_sessions_of_their_own_credentials(api, account, edge, credential):
    admins = edge.session(account, credential)
    own_credential = account.member.post("/credentials", {}).json["id"]
    own = edge.session(account, own_credential)
    with edge.answering() as taken:
        refused = account.member.post(f"/tunnel_sessions/{admins}/stop")
        assert refused.status == 403 and refused.json["error_code"] == errors.FORBIDDEN
        assert account.member.post(f"/tunnel_sessions/{own}/stop").status == 204
        assert account.admin.post(f"/tunnel_sessions/{own}/restart").status == 204
    assert [(c.session_id, c.command) for c in taken] == [(own, "stop"), (own, "restart")]


def test_update_is_refused_with_400_in_the_contract_shape(api, account, edge, credential):
    sid = edge.session(account, credential)
    resp = account.admin.post(f"/tunnel_sessions/{sid}/update")
    assert resp.status == 400
    body = resp.json
    assert body["error_code"] == errors.UnsupportedOperation.error_code
    assert "restart" in body["msg"] and body["details"]["operation_id"].startswith("op_")
    assert account.admin.post(f"/tunnel_sessions/{online.new_session_id()}/update").status == 404


# ---- the reference client (ngrok-api), over HTTP -----------------------------------------
@pytest.fixture
def client_account(http_api):
    return http_api.new_account()


def test_online_views_with_the_reference_client(http_api, client_account, monkeypatch):
    edge = Edge(http_api, monkeypatch)
    client = ngrok.Client(client_account.admin.token, base_url=http_api.base_url)
    credential = client.credentials.create(description="agent")
    sid = edge.session(client_account, credential.id)
    host = _host()
    tid, eid = edge.tunnel(client_account, sid, hostname=host)
    sessions = list(client.tunnel_sessions.list())
    assert [s.id for s in sessions] == [sid]
    session = client.tunnel_sessions.get(sid)
    assert session.credential.id == credential.id and session.agent_version == "1.4.0"
    assert session.transport == "ngrok/2" and session.region == "local"
    [tunnel] = list(client.tunnels.list())
    assert tunnel.id == tid and tunnel.tunnel_session.id == sid and tunnel.endpoint.id == eid
    assert tunnel.public_url == f"https://{host}" and tunnel.backends == []
    assert client.tunnels.get(tid).forwards_to == "http://localhost:8000"
    [endpoint] = list(client.endpoints.list())
    assert endpoint.id == eid and endpoint.type == "agent" and endpoint.url == f"https://{host}"
    got = client.endpoints.get(eid)
    assert got.tunnel.id == tid and got.tunnel_session.id == sid and got.port == 443
    # ngrok-api 0.19.0 sends these with jsonDo, which raises on any 204, the status the hosted
    # API documents for them: the agent accepted, the client then complains.
    with edge.answering() as taken:
        with pytest.raises(RuntimeError, match="unexpected 204"):
            client.tunnel_sessions.stop(sid)
        with pytest.raises(RuntimeError, match="unexpected 204"):
            client.tunnel_sessions.restart(sid)
    assert [c.command for c in taken] == ["stop", "restart"]
    # a refusal is the client's API error, with the hosted code
    with edge.answering("refused", "no handler"):
        with pytest.raises(ngrok.Error) as refused_stop:
            client.tunnel_sessions.stop(sid)
    assert refused_stop.value.http_status_code == 400
    assert refused_stop.value.error_code == errors.AGENT_STOP_REFUSED
    assert "does not support remote stopping: no handler" in str(refused_stop.value)
    with pytest.raises(ngrok.Error) as refused:
        client.tunnel_sessions.update(sid)
    assert refused.value.http_status_code == 400 and "restart" in str(refused.value)
    assert refused.value.error_code == errors.UNSUPPORTED_OPERATION
    with pytest.raises(ngrok.NotFoundError):
        client.endpoints.get(online.new_endpoint_id())
    edge.call(online.session_ended, client_account.id, sid)
    assert list(client.tunnel_sessions.list()) == []
    assert list(client.endpoints.list()) == []
    other = ngrok.Client(http_api.new_account().admin.token, base_url=http_api.base_url)
    assert list(other.tunnels.list()) == []
