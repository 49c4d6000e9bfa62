"""Store calls per route: a counter on the botocore client, and one request to every route.

:class:`StoreCalls` counts every botocore call made in this process while it is active, by
operation name, and tells the authorizer's calls (made inside ``chalicelib.auth.resolve``)
from the view's. :func:`measure_routes` sends one ordinary, successful request to every route
of the app in-process (chalice.test.Client: the authorizer runs) and returns, per route, the
status and both counts. The unit test pins them (tests/unit/test_store_calls.py) and
``make bench`` prints them (bench/bench.py). :func:`app_routes` lists the routes it must cover.
"""

import os
import threading
from collections import Counter
from contextlib import contextmanager
from typing import Any, Callable, Dict, Iterator, List, Tuple

from botocore.client import BaseClient

_local = threading.local()


class StoreCalls:
    """Counts botocore calls: ``authorizer`` and ``view`` Counters of operation names."""

    def __init__(self) -> None:
        self.authorizer: Counter = Counter()
        self.view: Counter = Counter()

    def reset(self) -> None:
        self.authorizer.clear()
        self.view.clear()

    @contextmanager
    def active(self) -> Iterator["StoreCalls"]:
        from chalicelib import auth

        original_call = BaseClient._make_api_call
        original_resolve = auth.resolve
        calls = self

        def counted_call(client: Any, operation: str, params: Dict[str, Any]) -> Any:
            if not getattr(_local, "uncounted", False):  # another component's (the edge's)
                phase = calls.authorizer if getattr(_local, "in_authorizer", False) else calls.view
                phase[operation] += 1
            return original_call(client, operation, params)

        def tagged_resolve(*args: Any, **kwargs: Any) -> Any:
            _local.in_authorizer = True
            try:
                return original_resolve(*args, **kwargs)
            finally:
                _local.in_authorizer = False

        BaseClient._make_api_call = counted_call
        auth.resolve = tagged_resolve
        try:
            yield self
        finally:
            BaseClient._make_api_call = original_call
            auth.resolve = original_resolve


Row = Dict[str, Any]


@contextmanager
def _loopback_resolver() -> Iterator[None]:
    from chalicelib.core import config
    from stacks.dns_server import LoopbackDns

    before = os.environ.get("DNS_CHECK_RESOLVER")
    with LoopbackDns() as server:
        os.environ["DNS_CHECK_RESOLVER"] = server.address
        config.reset_settings()
        try:
            yield
        finally:
            if before is None:
                os.environ.pop("DNS_CHECK_RESOLVER", None)
            else:
                os.environ["DNS_CHECK_RESOLVER"] = before
            config.reset_settings()


@contextmanager
def _edge_answers(online: Any, instance_id: str) -> Iterator[None]:
    """While inside, the API's pause between two reads of a command's answer is the edge's
    turn: it takes ``instance_id``'s commands and answers each "accepted" (as the edge does
    once the agent accepted), its store calls left out of the count."""
    original = online.pause

    def edge_turn(seconds: float) -> None:
        _local.uncounted = True
        try:
            for command in online.take_commands(instance_id):
                online.answer_command(command, "accepted")
        finally:
            _local.uncounted = False

    online.pause = edge_turn
    try:
        yield
    finally:
        online.pause = original


def _ed25519_line() -> str:
    """An ``ssh-ed25519`` public key line (any 32 bytes are one) for /ssh_credentials."""
    import base64
    import os
    import struct

    def string(value: bytes) -> bytes:
        return struct.pack(">I", len(value)) + value

    blob = string(b"ssh-ed25519") + string(os.urandom(32))
    return f"ssh-ed25519 {base64.b64encode(blob).decode()} costs"


def measure_routes(api: Any, account: Any) -> Dict[str, Row]:
    """One request to every route, in an order that leaves each one something to act on.

    ``api`` is a stacks.inprocess.InProcessApi, ``account`` a fresh account of it (abuse reporter). Returns
    ``{"METHOD /path/{param}": {"status", "authorizer", "view", "view_ops"}}``.
    """
    calls = StoreCalls()
    rows: Dict[str, Row] = {}
    admin = account.admin

    def run(route: str, send: Callable[[], Any], status: int) -> Any:
        calls.reset()
        with calls.active():
            resp = send()
        assert resp.status == status, (route, resp)
        rows[route] = {
            "status": resp.status,
            "authorizer": sum(calls.authorizer.values()),
            "view": sum(calls.view.values()),
            "view_ops": dict(calls.view),
            "authorizer_ops": dict(calls.authorizer),
        }
        return resp.json if resp.text else None

    def crud(
        path: str, param: str, create: Dict[str, Any], patch: Dict[str, Any], delete: bool = True
    ) -> str:
        rid = run(f"POST {path}", lambda: admin.post(path, create), 201)["id"]
        run(f"GET {path}", lambda: admin.get(path), 200)
        run(f"GET {path}/{{{param}}}", lambda: admin.get(f"{path}/{rid}"), 200)
        run(f"PATCH {path}/{{{param}}}", lambda: admin.patch(f"{path}/{rid}", patch), 200)
        if delete:
            run(f"DELETE {path}/{{{param}}}", lambda: admin.delete(f"{path}/{rid}"), 204)
        return rid

    crud("/api_keys", "key_id", {"description": "k"}, {"description": "k2"})
    crud("/credentials", "credential_id", {"acl": ["bind:*.example.com"]}, {"metadata": "m"})
    crud(
        "/ssh_credentials",
        "ssh_credential_id",
        {"public_key": _ed25519_line(), "acl": ["bind:*.example.com"]},
        {"metadata": "m"},
    )
    ssh_ca = crud(
        "/ssh_certificate_authorities",
        "ssh_certificate_authority_id",
        {"private_key_type": "ed25519"},
        {"description": "d"},
        delete=False,
    )
    for path, param in (
        ("/ssh_host_certificates", "ssh_host_certificate_id"),
        ("/ssh_user_certificates", "ssh_user_certificate_id"),
    ):
        crud(
            path,
            param,
            {"ssh_certificate_authority_id": ssh_ca, "public_key": _ed25519_line()},
            {"description": "d"},
        )
    run(
        "DELETE /ssh_certificate_authorities/{ssh_certificate_authority_id}",
        lambda: admin.delete(f"/ssh_certificate_authorities/{ssh_ca}"),
        204,
    )
    ingress = crud(
        "/agent_ingresses",
        "agent_ingress_id",
        {"domain": "connect.costs-example.com"},
        {"description": "d"},
        delete=False,
    )
    run(
        "DELETE /agent_ingresses/{agent_ingress_id}/certificate_management_policy",
        lambda: admin.delete(f"/agent_ingresses/{ingress}/certificate_management_policy"),
        204,
    )
    run(
        "DELETE /agent_ingresses/{agent_ingress_id}",
        lambda: admin.delete(f"/agent_ingresses/{ingress}"),
        204,
    )
    bot = crud("/bot_users", "bot_id", {"name": "b1"}, {"active": False}, delete=False)
    admin.post("/api_keys", {"owner_id": bot})
    run("DELETE /bot_users/{bot_id}", lambda: admin.delete(f"/bot_users/{bot}"), 204)
    service = crud(
        "/service_users", "service_user_id", {"name": "s1"}, {"active": False}, delete=False
    )
    admin.post("/api_keys", {"owner_id": service})
    run(
        "DELETE /service_users/{service_user_id}",
        lambda: admin.delete(f"/service_users/{service}"),
        204,
    )
    domain = crud(
        "/reserved_domains",
        "domain_id",
        {"domain": "costs.example.com"},
        {"description": "d"},
        delete=False,
    )
    with _loopback_resolver():  # the DNS check asks a DNS server of our own
        run(
            "POST /reserved_domains/{domain_id}/dns_check",
            lambda: admin.post(f"/reserved_domains/{domain}/dns_check"),
            200,
        )
    for part in ("certificate", "certificate_management_policy"):
        run(
            f"DELETE /reserved_domains/{{domain_id}}/{part}",
            lambda: admin.delete(f"/reserved_domains/{domain}/{part}"),
            204,
        )
    run(
        "DELETE /reserved_domains/{domain_id}",
        lambda: admin.delete(f"/reserved_domains/{domain}"),
        204,
    )
    addr = crud(
        "/reserved_addrs", "addr_id", {"description": "a"}, {"metadata": "m"}, delete=False
    )
    hostport = admin.get(f"/reserved_addrs/{addr}").json["addr"]
    policy = crud(
        "/ip_policies", "policy_id", {"description": "p"}, {"metadata": "m"}, delete=False
    )
    crud(
        "/ip_policy_rules",
        "rule_id",
        {"ip_policy_id": policy, "cidr": "10.0.0.0/8", "action": "allow"},
        {"description": "r"},
    )
    crud(
        "/ip_restrictions",
        "restriction_id",
        {"type": "endpoints", "ip_policy_ids": [policy]},
        {"enforced": True},
    )
    run("DELETE /ip_policies/{policy_id}", lambda: admin.delete(f"/ip_policies/{policy}"), 204)
    backend = crud(
        "/backends/http_response", "backend_id", {"body": "hi"}, {"description": "b"}, delete=False
    )
    policy = admin.post("/ip_policies", {}).json["id"]

    edge = crud(
        "/edges/tcp", "edge_id", {"hostports": [hostport]}, {"description": "e"}, delete=False
    )
    modules = {
        "backend": {"backend_id": backend},
        "ip_restriction": {"ip_policy_ids": [policy]},
        "traffic_policy": {"value": '{"on_tcp_connect": []}'},
    }
    for name, module in modules.items():
        base = f"/edges/tcp/{{edge_id}}/{name}"
        run(f"PUT {base}", lambda: admin.put(f"/edges/tcp/{edge}/{name}", module), 200)
        run(f"GET {base}", lambda: admin.get(f"/edges/tcp/{edge}/{name}"), 200)
        run(f"DELETE {base}", lambda: admin.delete(f"/edges/tcp/{edge}/{name}"), 204)
    run("DELETE /edges/tcp/{edge_id}", lambda: admin.delete(f"/edges/tcp/{edge}"), 204)
    run("DELETE /reserved_addrs/{addr_id}", lambda: admin.delete(f"/reserved_addrs/{addr}"), 204)
    group = crud(
        "/backends/tunnel_group",
        "backend_id",
        {"labels": {"app": "web"}},
        {"labels": {"app": "api"}},
        delete=False,
    )
    crud(
        "/backends/failover",
        "backend_id",
        {"backends": [group, backend]},
        {"backends": [backend, group]},
    )
    crud(
        "/backends/weighted",
        "backend_id",
        {"backends": {group: 1, backend: 2}},
        {"backends": {group: 3}},
    )
    crud(
        "/backends/static",
        "backend_id",
        {"address": "origin.example.com:443", "tls": {"enabled": True}},
        {"address": "origin.example.com:8443"},
    )
    run(
        "DELETE /backends/tunnel_group/{backend_id}",
        lambda: admin.delete(f"/backends/tunnel_group/{group}"),
        204,
    )
    from stacks.certs import SmallCA

    crud(
        "/tls_certificates",
        "certificate_id",
        SmallCA().upload_body(["costs.example.com"]),
        {"description": "t"},
    )
    ca = crud(
        "/certificate_authorities",
        "ca_id",
        {"ca_pem": SmallCA("Costs CA").pem},
        {"description": "c"},
        delete=False,
    )

    edge = crud(
        "/edges/https",
        "edge_id",
        {"hostports": ["costs.tunnels.localhost:443"]},
        {"description": "e"},
        delete=False,
    )
    edge_modules = {
        "tls_termination": {"min_version": "1.2"},
        "mutual_tls": {"certificate_authority_ids": [ca]},
    }
    for name, module in edge_modules.items():
        base = f"/edges/https/{{edge_id}}/{name}"
        run(f"PUT {base}", lambda: admin.put(f"/edges/https/{edge}/{name}", module), 200)
        run(f"GET {base}", lambda: admin.get(f"/edges/https/{edge}/{name}"), 200)
        run(f"DELETE {base}", lambda: admin.delete(f"/edges/https/{edge}/{name}"), 204)
    tls_edge = crud(
        "/edges/tls",
        "edge_id",
        {"hostports": ["costs-tls.tunnels.localhost:443"], "tls_termination": {}},
        {"description": "e"},
        delete=False,
    )
    tls_modules = {  # mutual_tls while tls_termination is there, then tls_termination
        "backend": {"backend_id": backend},
        "ip_restriction": {"ip_policy_ids": [policy]},
        "traffic_policy": {"value": '{"on_tcp_connect": []}'},
        "mutual_tls": {"certificate_authority_ids": [ca]},
        "tls_termination": {"terminate_at": "edge", "min_version": "1.3"},
    }
    for name, module in tls_modules.items():
        base = f"/edges/tls/{{edge_id}}/{name}"
        run(f"PUT {base}", lambda: admin.put(f"/edges/tls/{tls_edge}/{name}", module), 200)
        run(f"GET {base}", lambda: admin.get(f"/edges/tls/{tls_edge}/{name}"), 200)
        run(f"DELETE {base}", lambda: admin.delete(f"/edges/tls/{tls_edge}/{name}"), 204)
    run("DELETE /edges/tls/{edge_id}", lambda: admin.delete(f"/edges/tls/{tls_edge}"), 204)
    run(
        "DELETE /certificate_authorities/{ca_id}",
        lambda: admin.delete(f"/certificate_authorities/{ca}"),
        204,
    )
    routes = f"/edges/https/{edge}/routes"
    route = run(
        "POST /edges/https/{edge_id}/routes",
        lambda: admin.post(routes, {"match_type": "path_prefix", "match": "/"}),
        201,
    )["id"]
    run("GET /edges/https/{edge_id}/routes", lambda: admin.get(routes), 200)
    run(
        "GET /edges/https/{edge_id}/routes/{route_id}", lambda: admin.get(f"{routes}/{route}"), 200
    )
    run(
        "PATCH /edges/https/{edge_id}/routes/{route_id}",
        lambda: admin.patch(f"{routes}/{route}", {"description": "r"}),
        200,
    )
    route_modules = {
        "user_agent_filter": {"deny": ["bot.*"]},
        "response_headers": {"add": {"x-a": "1"}},
        "request_headers": {"add": {"x-b": "1"}},
        "traffic_policy": {"value": '{"on_http_request": []}'},
        "backend": {"backend_id": backend},
        "ip_restriction": {"ip_policy_ids": [policy]},
        "circuit_breaker": {"error_threshold_percentage": 0.5},
        "compression": {},
        "oauth": {"provider": {"google": {"client_id": "i", "client_secret": "s"}}},
        "oidc": {"issuer": "https://issuer.example.com", "client_id": "i", "client_secret": "s"},
        "webhook_verification": {"provider": "github", "secret": "s"},
        "websocket_tcp_converter": {},
    }
    for name, module in route_modules.items():
        base = f"/edges/https/{{edge_id}}/routes/{{route_id}}/{name}"
        run(f"PUT {base}", lambda: admin.put(f"{routes}/{route}/{name}", module), 200)
        run(f"GET {base}", lambda: admin.get(f"{routes}/{route}/{name}"), 200)
        run(f"DELETE {base}", lambda: admin.delete(f"{routes}/{route}/{name}"), 204)
    saml = "/edges/https/{edge_id}/routes/{route_id}/saml"  # refused by name: reads the route
    run(f"PUT {saml}", lambda: admin.put(f"{routes}/{route}/saml", {}), 400)
    run(f"GET {saml}", lambda: admin.get(f"{routes}/{route}/saml"), 404)
    run(f"DELETE {saml}", lambda: admin.delete(f"{routes}/{route}/saml"), 204)
    run(
        "DELETE /backends/http_response/{backend_id}",
        lambda: admin.delete(f"/backends/http_response/{backend}"),
        204,
    )
    run("GET /edges/https/{edge_id}", lambda: admin.get(f"/edges/https/{edge}"), 200)
    run(
        "DELETE /edges/https/{edge_id}/routes/{route_id}",
        lambda: admin.delete(f"{routes}/{route}"),
        204,
    )
    admin.post(routes, {"match_type": "exact_path", "match": "/x"})
    run("DELETE /edges/https/{edge_id}", lambda: admin.delete(f"/edges/https/{edge}"), 204)

    # online state, as the edge writes it (chalicelib.core.online), then its read views
    from chalicelib.core import online

    cred = admin.post("/credentials", {}).json
    sid, tid, eid = online.new_session_id(), online.new_tunnel_id(), online.new_endpoint_id()
    online.session_started(
        account_id=account.id,
        session_id=sid,
        credential_id=cred["id"],
        instance_id="edge-costs",
        agent_version="1",
        os="linux",
        ip="127.0.0.1",
        metadata="",
        region="local",
        owner_id=cred["owner_id"],
    )
    online.tunnel_started(
        account_id=account.id,
        session_id=sid,
        tunnel_id=tid,
        instance_id="edge-costs",
        proto="https",
        public_url="https://costs.tunnels.localhost",
        hostname="costs.tunnels.localhost",
        endpoint_id=eid,
    )
    run("GET /tunnel_sessions", lambda: admin.get("/tunnel_sessions"), 200)
    run("GET /tunnel_sessions/{session_id}", lambda: admin.get(f"/tunnel_sessions/{sid}"), 200)
    run("GET /tunnels", lambda: admin.get("/tunnels"), 200)
    run("GET /tunnels/{tunnel_id}", lambda: admin.get(f"/tunnels/{tid}"), 200)
    run("GET /endpoints", lambda: admin.get("/endpoints"), 200)
    run("GET /endpoints/{endpoint_id}", lambda: admin.get(f"/endpoints/{eid}"), 200)
    cloud = run(
        "POST /endpoints",
        lambda: admin.post(
            "/endpoints",
            {
                "url": "https://cloud-costs.tunnels.localhost",
                "type": "cloud",
                "traffic_policy": "on_http_request: [{actions: [{type: deny}]}]",
            },
        ),
        201,
    )["id"]
    run(
        "PATCH /endpoints/{endpoint_id}",
        lambda: admin.patch(f"/endpoints/{cloud}", {"description": "d"}),
        200,
    )
    run("DELETE /endpoints/{endpoint_id}", lambda: admin.delete(f"/endpoints/{cloud}"), 204)
    # stop/restart wait for the edge's answer: here the edge (its store calls not counted)
    # takes the command and answers "accepted" during the API's first pause, so the count is
    # the API's own calls with one read of the answer
    for action, status in (("stop", 204), ("restart", 204), ("update", 400)):
        with _edge_answers(online, "edge-costs"):
            run(
                f"POST /tunnel_sessions/{{session_id}}/{action}",
                lambda: admin.post(f"/tunnel_sessions/{sid}/{action}", {}),
                status,
            )

    _events_and_inspector(
        run, crud, admin, account, cloud_url="https://costs-insp.tunnels.localhost"
    )

    report = run(
        "POST /abuse_reports",
        lambda: admin.post("/abuse_reports", {"urls": ["https://bad.example.net/"]}),
        201,
    )["id"]
    run("GET /abuse_reports/{report_id}", lambda: admin.get(f"/abuse_reports/{report}"), 200)

    # vaults and secrets (chalicelib/vaults.py)
    vault = crud("/vaults", "vault_id", {"name": "costs"}, {"description": "v"}, delete=False)
    crud(
        "/vault_secrets",
        "secret_id",
        {"name": "s", "value": "v", "vault_id": vault},
        {"value": "w"},
    )
    run("GET /vaults/{vault_id}/secrets", lambda: admin.get(f"/vaults/{vault}/secrets"), 200)
    run("DELETE /vaults/{vault_id}", lambda: admin.delete(f"/vaults/{vault}"), 204)
    # sign-ins as the edge records them (chalicelib.core.app_sessions), then their views
    import time as _time
    from chalicelib.core import app_sessions

    session_id, user_id = app_sessions.record_signin(
        account.id,
        "ep_x",
        "https://costs.tunnels.localhost",
        ("idp", "https://idp.test"),
        {"sub": "u1", "em": "a@x.test", "nm": "A"},
        "ua",
        "127.0.0.1",
        _time.time(),
        _time.time() + 60,
    )
    for path, rid in (("/app/sessions", session_id), ("/app/users", user_id)):
        param = "app_session_id" if "sessions" in path else "app_user_id"
        run(f"GET {path}", lambda: admin.get(path), 200)
        run(f"GET {path}/{{{param}}}", lambda: admin.get(f"{path}/{rid}"), 200)
        run(f"DELETE {path}/{{{param}}}", lambda: admin.delete(f"{path}/{rid}"), 204)
    return rows


def _events_and_inspector(
    run: Callable[..., Any], crud: Callable[..., Any], admin: Any, account: Any, cloud_url: str
) -> None:
    """Event destinations, subscriptions and sources; the traffic inspector (a captured
    request written as the edge writes it, its endpoint URL a loopback server for replay)."""
    import http.server
    import threading
    import time as _time

    target = {
        "kinesis": {
            "stream_arn": "arn:aws:kinesis:us-east-1:123456789012:stream/s",
            "auth": {"role": {"role_arn": "arn:aws:iam::123456789012:role/r"}},
        }
    }
    dest = crud(
        "/event_destinations",
        "destination_id",
        {"target": target},
        {"metadata": "m"},
        delete=False,
    )
    sub = crud(
        "/event_subscriptions",
        "subscription_id",
        {"destination_ids": [dest]},
        {"metadata": "m"},
        delete=False,
    )
    sources = f"/event_subscriptions/{sub}/sources"
    base = "/event_subscriptions/{subscription_id}/sources"
    kind = "http_request_complete.v0"
    run(f"POST {base}", lambda: admin.post(sources, {"type": kind}), 201)
    run(f"GET {base}", lambda: admin.get(sources), 200)
    run(f"GET {base}/{{type}}", lambda: admin.get(f"{sources}/{kind}"), 200)
    run(f"PATCH {base}/{{type}}", lambda: admin.patch(f"{sources}/{kind}"), 200)
    run(f"DELETE {base}/{{type}}", lambda: admin.delete(f"{sources}/{kind}"), 204)
    run(
        "DELETE /event_subscriptions/{subscription_id}",
        lambda: admin.delete(f"/event_subscriptions/{sub}"),
        204,
    )
    run(
        "DELETE /event_destinations/{destination_id}",
        lambda: admin.delete(f"/event_destinations/{dest}"),
        204,
    )

    from chalicelib.core import ids, store
    from chalicelib.core import inspector as layout

    server = http.server.HTTPServer(("127.0.0.1", 0), _Ok)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    endpoint = admin.post(
        "/endpoints", {"url": cloud_url, "type": "cloud", "traffic_policy": ""}
    ).json["id"]
    request_id = ids.new_id("req")
    item = store.new_item(
        layout.pk(account.id, endpoint),
        request_id,
        kind=layout.KIND,
        account_id=account.id,
        data={
            "id": request_id,
            "endpoint_id": endpoint,
            "endpoint_url": f"http://127.0.0.1:{server.server_port}",
            "method": "GET",
            "target": "/",
            "host": "costs.example",
            "request_headers": {},
            "request_body": None,
        },
    )
    item.expires_at = int(_time.time()) + 60
    item.save()
    captured = "/endpoints/{endpoint_id}/captured_requests"
    path = f"/endpoints/{endpoint}/captured_requests"
    run(f"GET {captured}", lambda: admin.get(path), 200)
    run(f"GET {captured}/{{request_id}}", lambda: admin.get(f"{path}/{request_id}"), 200)
    run(
        f"POST {captured}/{{request_id}}/replay",
        lambda: admin.post(f"{path}/{request_id}/replay", {}),
        200,
    )
    run(
        "PUT /endpoints/{endpoint_id}/capture",
        lambda: admin.put(f"/endpoints/{endpoint}/capture", {"capture_bodies": True}),
        200,
    )
    run(
        "GET /endpoints/{endpoint_id}/capture",
        lambda: admin.get(f"/endpoints/{endpoint}/capture"),
        200,
    )
    server.shutdown()


class _Ok(__import__("http.server").server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


def app_routes() -> List[Tuple[str, str]]:
    """(METHOD, path) of every authorized route of the app."""
    from app import app

    found = []
    for path, by_method in app.routes.items():
        for method, entry in by_method.items():
            if entry.view_name.startswith("method_not_allowed") or entry.authorizer is None:
                continue
            found.append((method, path))
    return sorted(found)
