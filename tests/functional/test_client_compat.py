"""Compatibility with the official Python client (``ngrok-api`` 0.19.0), method by method.

Every public method of the client's service objects for the resources in :data:`TABLE` is
found by reflection, and the request it sends (HTTP method and path) is found by calling it
against a recording HTTP client. Then each method is called for real against the running
stack (scripts/serve.py over HTTP) with a recipe that checks its result:

- a resource we serve whose method sends a request our app does not route fails ("the client
  has a route we lack"), and so does a method without a recipe (a new client method shows up
  as a failing test, not as a surprise);
- resources in :data:`NOT_OFFERED` (none now: the HTTPS route modules compression, circuit
  breaker, WebSocket-TCP converter, webhook verification, OAuth and OIDC are served through
  their policy actions, SAML is served and refused by name) skip each method, with the
  reason, and fail if the app ever routes one.

Resources of the client outside the table are not part of this service (kubernetes
operators, application sessions and users, TLS certificates and secrets, tested through
this client in their own files);
vaults and secrets are, tested through this client in tests/functional/test_vaults.py; event
destinations, subscriptions and sources are in the table (docs/EVENTS.md).
"""

import inspect
import json
import re
import uuid
from datetime import datetime, timedelta, timezone

import ngrok
import pytest
from ngrok import datatypes as dt

from app import app
from chalicelib.core import errors
from chalicelib.core.config import get_settings
from tests.functional.test_ssh_credentials import public_line

# client attribute path → collection route in this app. Served now.
SERVED = {
    "api_keys": "/api_keys",
    "credentials": "/credentials",
    "ssh_credentials": "/ssh_credentials",
    "ssh_certificate_authorities": "/ssh_certificate_authorities",
    "ssh_host_certificates": "/ssh_host_certificates",
    "ssh_user_certificates": "/ssh_user_certificates",
    "bot_users": "/bot_users",
    "service_users": "/service_users",
    "abuse_reports": "/abuse_reports",
    "reserved_domains": "/reserved_domains",
    "agent_ingresses": "/agent_ingresses",
    "ip_policies": "/ip_policies",
    "ip_policy_rules": "/ip_policy_rules",
    "backends.http_response": "/backends/http_response",
    "edges.tcp": "/edges/tcp",
    "edges.https": "/edges/https",
    "edges.https_routes": "/edges/https/{edge_id}/routes",
    "edge_modules.tcp_edge_backend": "/edges/tcp/{edge_id}/backend",
    "edge_modules.tcp_edge_ip_restriction": "/edges/tcp/{edge_id}/ip_restriction",
    "edge_modules.tcp_edge_traffic_policy": "/edges/tcp/{edge_id}/traffic_policy",
    "edge_modules.https_edge_route_user_agent_filter": "/edges/https/{edge_id}/routes/{route_id}/user_agent_filter",
    "edge_modules.https_edge_route_response_headers": "/edges/https/{edge_id}/routes/{route_id}/response_headers",
    "backends.tunnel_group": "/backends/tunnel_group",
    "backends.failover": "/backends/failover",
    "backends.weighted": "/backends/weighted",
    "reserved_addrs": "/reserved_addrs",
    "certificate_authorities": "/certificate_authorities",
    "tunnel_sessions": "/tunnel_sessions",
    "tunnels": "/tunnels",
    "endpoints": "/endpoints",
    **{
        f"edge_modules.https_edge_route_{m}": f"/edges/https/{{edge_id}}/routes/{{route_id}}/{m}"
        for m in (
            "backend",
            "ip_restriction",
            "traffic_policy",
            "request_headers",
            # the modules whose rule is a policy action here (chalicelib.core.route_modules)
            "compression",
            "circuit_breaker",
            "websocket_tcp_converter",
            "webhook_verification",
            "oauth",
            "oidc",
            "saml",  # served, and refused by name (ERR_NGROK_7021)
        )
    },
    "edge_modules.https_edge_tls_termination": "/edges/https/{edge_id}/tls_termination",
    "edge_modules.https_edge_mutual_tls": "/edges/https/{edge_id}/mutual_tls",
    "event_destinations": "/event_destinations",
    "event_subscriptions": "/event_subscriptions",
    "event_sources": "/event_subscriptions/{subscription_id}/sources",
    "edges.tls": "/edges/tls",
    "backends.static_address": "/backends/static",
    "ip_restrictions": "/ip_restrictions",
    **{
        f"edge_modules.tls_edge_{m}": f"/edges/tls/{{edge_id}}/{m}"
        for m in ("backend", "ip_restriction", "mutual_tls", "tls_termination", "traffic_policy")
    },
}
# Client resources this service does not offer as routes: the HTTPS route modules whose rule
# is a traffic policy action here (in a route's body they are refused unless null). Their
# methods skip with this reason; one that becomes routed fails until it moves to SERVED.
NOT_OFFERED: dict = {}
TABLE = {**{k: "served" for k in SERVED}, **{k: "not offered" for k in NOT_OFFERED}}


def _service(client, attr):
    obj = client
    for part in attr.split("."):
        obj = getattr(obj, part)
    return obj


def _methods(service):
    return sorted(
        name
        for name, value in inspect.getmembers(service, inspect.ismethod)
        if not name.startswith("_")
    )


class _Recorder:
    """Stands in for the client's HTTP client: records the request a method would send."""

    def __init__(self):
        self.calls = []

    def _record(self, method):
        def send(path, data=None):
            self.calls.append((method, path))
            return {}

        return send

    def __getattr__(self, name):
        if name in ("get", "post", "put", "patch", "delete"):
            return self._record(name.upper())
        raise AttributeError(name)


def _dummy_args(func):
    args = []
    for param in inspect.signature(func).parameters.values():
        if param.default is inspect.Parameter.empty:
            args.append("x")
    return args


def client_request(attr, method):
    """(HTTP method, path with ids as 'x') that ``client.<attr>.<method>`` sends."""
    client = ngrok.Client("unused", base_url="http://127.0.0.1:9")
    recorder = _Recorder()
    client.http_client = recorder
    func = getattr(_service(client, attr), method)
    try:
        func(*_dummy_args(func))
    except Exception:  # noqa: BLE001 - only the recorded request matters here
        pass
    assert recorder.calls, f"{attr}.{method} sent no request"
    return recorder.calls[0]


def app_routes(http_method, path):
    """True when the app routes ``http_method path`` (ids in ``path`` are any segment)."""
    for template, methods in app.routes.items():
        pattern = "^" + re.sub(r"\\{\w+\\}", "[^/]+", re.escape(template)) + "$"
        if re.match(pattern, path):
            view = methods.get(http_method)
            if view is not None and not view.view_name.startswith("method_not_allowed"):
                return True
    return False


def _cases():
    probe = ngrok.Client("unused")
    for attr in TABLE:
        for method in _methods(_service(probe, attr)):
            yield pytest.param(attr, method, id=f"{attr}.{method}")


# ---- recipes ------------------------------------------------------------------------------
def rnd():
    return uuid.uuid4().hex[:12]


POLICY = json.dumps({"on_tcp_connect": [{"name": "r", "actions": [{"type": "deny"}]}]})
HTTP_POLICY = json.dumps({"on_http_request": [{"name": "r", "actions": [{"type": "deny"}]}]})


def _ca_pem():
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "compat test CA")])
    now = datetime.now(timezone.utc)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - timedelta(days=1))
        .not_valid_after(now + timedelta(days=30))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    return cert.public_bytes(serialization.Encoding.PEM).decode()


class Env:
    """One client of one account, and what recipes create for each other."""

    def __init__(self, client):
        self.c = client

    def backend(self):
        return self.c.backends.http_response.create(body="hi").id

    def ip_policy(self):
        return self.c.ip_policies.create().id

    def reserved_addr(self):
        """A TCP edge's hostport must be an address the account reserved."""
        return self.c.reserved_addrs.create().addr

    def tcp_edge(self):
        return self.c.edges.tcp.create(hostports=[self.reserved_addr()]).id

    def tls_edge(self):
        return self.c.edges.tls.create().id

    def terminating_tls_edge(self):
        """Mutual TLS needs termination at the edge (ERR_NGROK_1694)."""
        termination = dt.EndpointTLSTermination(self.c, {"terminate_at": "edge"})
        return self.c.edges.tls.create(tls_termination=termination).id

    def ca(self):
        return self.c.certificate_authorities.create(_ca_pem()).id

    def https_edge(self):
        return self.c.edges.https.create().id

    def ssh_ca(self):
        """One SSH CA per account for the certificates' recipes (at most 10 per account)."""
        if getattr(self, "_ssh_ca", None) is None:
            self._ssh_ca = self.c.ssh_certificate_authorities.create(private_key_type="ed25519").id
        return self._ssh_ca

    def https_route(self):
        edge = self.https_edge()
        return edge, self.c.edges.https_routes.create(edge, "path_prefix", f"/{rnd()}").id


class Crud:
    """create/get/list/update/delete of a collection, with ``create(env)`` kwargs."""

    def __init__(
        self,
        create=lambda env: {},
        update=lambda env: {"metadata": "m"},
        parents=lambda env: (),
        extra=None,
    ):
        self.kwargs, self.update_kwargs, self.parents = create, update, parents
        self.extra = extra or {}

    def run(self, env, svc, method):
        parents = self.parents(env)
        if method in self.extra:
            return self.extra[method](env, svc, self._make(env, svc, parents))
        if method == "create":
            obj = self._make(env, svc, parents)
            assert obj.id and obj.uri.endswith(obj.id)
        elif method == "get":
            obj = self._make(env, svc, parents)
            assert svc.get(*parents, obj.id).id == obj.id
        elif method == "list":
            obj = self._make(env, svc, parents)
            assert obj.id in [item.id for item in svc.list(*parents)]
            if "filter" in inspect.signature(svc.list).parameters:
                hit = svc.list(*parents, filter=f'obj.id == "{obj.id}"')
                assert [item.id for item in hit] == [obj.id]
        elif method == "update":
            obj = self._make(env, svc, parents)
            assert svc.update(*parents, obj.id, **self.update_kwargs(env)).id == obj.id
        elif method == "delete":
            obj = self._make(env, svc, parents)
            svc.delete(*parents, obj.id)
            if hasattr(svc, "get"):
                with pytest.raises(ngrok.NotFoundError):
                    svc.get(*parents, obj.id)
        else:
            pytest.fail(f"no recipe for {method}")

    def _make(self, env, svc, parents):
        return svc.create(*parents, **self.kwargs(env))


class Module:
    """get/replace/delete of an edge or route module; ``build(env, client)`` makes its body."""

    def __init__(self, owner, build):
        self.owner, self.build = owner, build

    def run(self, env, svc, method):
        ids = getattr(env, self.owner)()
        ids = ids if isinstance(ids, tuple) else (ids,)
        replaced = svc.replace(*ids, self.build(env, env.c))
        if method == "replace":
            assert replaced is not None
        elif method == "get":
            assert svc.get(*ids) == replaced
        elif method == "delete":
            svc.delete(*ids)
            with pytest.raises(ngrok.NotFoundError):
                svc.get(*ids)
        else:
            pytest.fail(f"no recipe for {method}")


class Probe:
    """Read-only views of what agents create: list works; an unknown id is a clean 404
    (or, for a refused command, the documented 400)."""

    def __init__(self, prefix):
        self.prefix = prefix

    def run(self, env, svc, method):
        unknown = f"{self.prefix}_{'0' * 6}{'A' * 21}"
        if method == "list":
            assert isinstance(list(svc.list()), list)
            return
        func = getattr(svc, method)
        args = [unknown] + ["x"] * (len(_dummy_args(func)) - 1)
        with pytest.raises(ngrok.Error) as raised:
            func(*args)
        err = raised.value
        assert err.http_status_code == 404 or (
            err.http_status_code == 400 and err.error_code == errors.UNSUPPORTED_OPERATION
        ), err


def _domain_delete_part(part):
    def run(env, svc, obj):
        getattr(svc, f"delete_{part}")(obj.id)
        assert getattr(svc.get(obj.id), part) is None

    return run


RECIPES = {
    "api_keys": Crud(create=lambda env: {"description": "compat"}),
    "credentials": Crud(create=lambda env: {"acl": ["bind:*.example.com"]}),
    "ssh_credentials": Crud(create=lambda env: {"public_key": public_line(), "acl": ["bind:*"]}),
    "ssh_certificate_authorities": Crud(
        create=lambda env: {"description": "compat", "private_key_type": "ecdsa"}
    ),
    # valid_after/valid_until as strings: ngrok-api 0.19.0's default (datetime.min) is not
    # JSON, so a caller of that client always passes them ("" means now / the default)
    "ssh_host_certificates": Crud(
        create=lambda env: {
            "ssh_certificate_authority_id": env.ssh_ca(),
            "public_key": public_line(),
            "principals": ["host.example.com"],
            "valid_after": "",
            "valid_until": "",
        }
    ),
    "ssh_user_certificates": Crud(
        create=lambda env: {
            "ssh_certificate_authority_id": env.ssh_ca(),
            "public_key": public_line(),
            "principals": ["v2"],
            "extensions": {"permit-port-forwarding": ""},
            "valid_after": "",
            "valid_until": "",
        }
    ),
    "bot_users": Crud(
        create=lambda env: {"name": f"bot-{rnd()}"}, update=lambda env: {"name": f"bot-{rnd()}"}
    ),
    "service_users": Crud(
        create=lambda env: {"name": f"svc-{rnd()}"}, update=lambda env: {"active": False}
    ),
    "abuse_reports": Crud(create=lambda env: {"urls": [f"https://{rnd()}.example.com/x"]}),
    "reserved_domains": Crud(
        create=lambda env: {"domain": f"{rnd()}.customer-example.com"},
        extra={
            "delete_certificate": _domain_delete_part("certificate"),
            "delete_certificate_management_policy": _domain_delete_part(
                "certificate_management_policy"
            ),
        },
    ),
    "agent_ingresses": Crud(create=lambda env: {"domain": f"connect-{rnd()}.example.com"}),
    "ip_policies": Crud(),
    "ip_policy_rules": Crud(
        create=lambda env: {
            "cidr": "10.0.0.0/8",
            "action": "allow",
            "ip_policy_id": env.ip_policy(),
        },
        update=lambda env: {"cidr": "10.1.0.0/16"},
    ),
    "backends.http_response": Crud(create=lambda env: {"body": "ok", "status_code": 200}),
    "edges.tcp": Crud(
        create=lambda env: {
            "hostports": [env.reserved_addr()],
            "traffic_policy": dt.EndpointTrafficPolicy(env.c, {"enabled": True, "value": POLICY}),
        }
    ),
    # an HTTPS edge's hostport: a free name under the base domain (or a reserved domain)
    "edges.https": Crud(
        create=lambda env: {"hostports": [f"{rnd()}.{get_settings().base_domain}:443"]}
    ),
    "edges.https_routes": Crud(
        create=lambda env: {"match_type": "path_prefix", "match": f"/{rnd()}"},
        parents=lambda env: (env.https_edge(),),
    ),
    "edge_modules.tcp_edge_backend": Module(
        "tcp_edge", lambda env, c: dt.EndpointBackendMutate(c, {"backend_id": env.backend()})
    ),
    "edge_modules.tcp_edge_ip_restriction": Module(
        "tcp_edge",
        lambda env, c: dt.EndpointIPPolicyMutate(c, {"ip_policy_ids": [env.ip_policy()]}),
    ),
    "edge_modules.tcp_edge_traffic_policy": Module(
        "tcp_edge", lambda env, c: dt.EndpointTrafficPolicy(c, {"enabled": True, "value": POLICY})
    ),
    "edge_modules.https_edge_route_user_agent_filter": Module(
        "https_route",
        lambda env, c: dt.EndpointUserAgentFilter(c, {"allow": ["^curl"], "deny": []}),
    ),
    "edge_modules.https_edge_route_response_headers": Module(
        "https_route",
        lambda env, c: dt.EndpointResponseHeaders(c, {"add": {"x-a": "1"}, "remove": ["server"]}),
    ),
    # ---- routed since the table was first written ----
    "backends.tunnel_group": Crud(create=lambda env: {"labels": {"edge": rnd()}}),
    "backends.failover": Crud(create=lambda env: {"backends": [env.backend()]}),
    "backends.weighted": Crud(create=lambda env: {"backends": {env.backend(): 1}}),
    "ip_restrictions": Crud(
        create=lambda env: {"type": "endpoints", "ip_policy_ids": [env.ip_policy()]},
        update=lambda env: {"enforced": True},
    ),
    "backends.static_address": Crud(
        create=lambda env: {
            "address": "origin.example.com:443",
            "tls": dt.StaticBackendTLS(env.c, {"enabled": True}),
        },
        update=lambda env: {"address": "origin.example.com:8443"},
    ),
    "reserved_addrs": Crud(create=lambda env: {"description": "compat"}),
    "certificate_authorities": Crud(create=lambda env: {"ca_pem": _ca_pem()}),
    "tunnel_sessions": Probe("ts"),
    "tunnels": Probe("tn"),
    "endpoints": None,  # below: agent endpoints are read-only, cloud endpoints CRUD
    "edge_modules.https_edge_route_backend": Module(
        "https_route", lambda env, c: dt.EndpointBackendMutate(c, {"backend_id": env.backend()})
    ),
    "edge_modules.https_edge_route_ip_restriction": Module(
        "https_route",
        lambda env, c: dt.EndpointIPPolicyMutate(c, {"ip_policy_ids": [env.ip_policy()]}),
    ),
    "edge_modules.https_edge_route_traffic_policy": Module(
        "https_route",
        lambda env, c: dt.EndpointTrafficPolicy(c, {"enabled": True, "value": HTTP_POLICY}),
    ),
    "edge_modules.https_edge_route_request_headers": Module(
        "https_route",
        lambda env, c: dt.EndpointRequestHeaders(c, {"add": {"x-b": "2"}, "remove": []}),
    ),
    "edge_modules.https_edge_route_compression": Module(
        "https_route", lambda env, c: dt.EndpointCompression(c, {"enabled": True})
    ),
    "edge_modules.https_edge_route_circuit_breaker": Module(
        "https_route",
        lambda env, c: dt.EndpointCircuitBreaker(
            c, {"enabled": True, "error_threshold_percentage": 0.5}
        ),
    ),
    "edge_modules.https_edge_route_websocket_tcp_converter": Module(
        "https_route", lambda env, c: dt.EndpointWebsocketTCPConverter(c, {"enabled": True})
    ),
    "edge_modules.https_edge_route_webhook_verification": Module(
        "https_route",
        lambda env, c: dt.EndpointWebhookValidation(c, {"provider": "SLACK", "secret": "s3cret"}),
    ),
    # a TLS edge's hostport: a free name under the base domain, as an HTTPS edge's
    "edges.tls": Crud(
        create=lambda env: {
            "hostports": [f"{rnd()}.{get_settings().base_domain}:443"],
            "tls_termination": dt.EndpointTLSTermination(
                env.c, {"terminate_at": "edge", "min_version": "1.2"}
            ),
            "mutual_tls": dt.EndpointMutualTLSMutate(
                env.c,
                {"certificate_authority_ids": [env.ca()]},
            ),
        }
    ),
    "edge_modules.tls_edge_mutual_tls": Module(
        "terminating_tls_edge",
        lambda env, c: dt.EndpointMutualTLSMutate(c, {"certificate_authority_ids": [env.ca()]}),
    ),
    "edge_modules.https_edge_mutual_tls": Module(
        "https_edge",
        lambda env, c: dt.EndpointMutualTLSMutate(c, {"certificate_authority_ids": [env.ca()]}),
    ),
    "edge_modules.tls_edge_backend": Module(
        "tls_edge", lambda env, c: dt.EndpointBackendMutate(c, {"backend_id": env.backend()})
    ),
    "edge_modules.tls_edge_ip_restriction": Module(
        "tls_edge",
        lambda env, c: dt.EndpointIPPolicyMutate(c, {"ip_policy_ids": [env.ip_policy()]}),
    ),
    "edge_modules.tls_edge_tls_termination": Module(
        "tls_edge",
        lambda env, c: dt.EndpointTLSTermination(c, {"terminate_at": "upstream"}),
    ),
    "edge_modules.tls_edge_traffic_policy": Module(
        "tls_edge", lambda env, c: dt.EndpointTrafficPolicy(c, {"enabled": True, "value": POLICY})
    ),
    "edge_modules.https_edge_tls_termination": Module(
        "https_edge", lambda env, c: dt.EndpointTLSTerminationAtEdge(c, {"min_version": "1.2"})
    ),
}


class _Props:
    """A body part for ngrok-api 0.19.0, which sends ``<datatype>._props`` as it is (its
    EventTarget wraps nested dicts in objects json cannot encode: docs/EVENTS.md)."""

    def __init__(self, props):
        self._props = props


_KINESIS = {
    "kinesis": {
        "stream_arn": "arn:aws:kinesis:us-east-1:123456789012:stream/compat",
        "auth": {"role": {"role_arn": "arn:aws:iam::123456789012:role/r"}},
    }
}
_SOURCE = "http_request_complete.v0"
RECIPES["event_destinations"] = Crud(
    create=lambda env: {"description": "compat", "target": _Props(_KINESIS)}
)
RECIPES["event_subscriptions"] = Crud(
    create=lambda env: {"sources": [dt.EventSourceReplace(None, {"type": _SOURCE})]}
)


class _EventSources:
    """The sources of a fresh subscription: add, read, list, update, remove one type."""

    def run(self, env, svc, method):
        sub = env.c.event_subscriptions.create().id
        if method != "create":
            svc.create(sub, type=_SOURCE)
        if method == "create":
            assert svc.create(sub, type=_SOURCE).type == _SOURCE
        elif method == "get":
            assert svc.get(sub, _SOURCE).uri.endswith(f"/sources/{_SOURCE}")
        elif method == "list":
            assert [s.type for s in svc.list(sub).sources] == [_SOURCE]
        elif method == "update":
            assert svc.update(sub, _SOURCE).type == _SOURCE
        elif method == "delete":
            svc.delete(sub, _SOURCE)
            with pytest.raises(ngrok.NotFoundError):
                svc.get(sub, _SOURCE)
        else:
            pytest.fail(f"no recipe for {method}")


RECIPES["event_sources"] = _EventSources()


class _Endpoints:
    """Agent endpoints are read (list/get: probed); cloud endpoints, once ``POST /endpoints``
    is routed, go through the CRUD recipe."""

    crud = Crud(
        create=lambda env: {
            "url": f"https://{rnd()}.{get_settings().base_domain}",
            "type": "cloud",
            "traffic_policy": HTTP_POLICY,
        }
    )
    probe = Probe("ep")

    def run(self, env, svc, method):
        creatable = app_routes("POST", "/endpoints")
        (self.crud if creatable else self.probe).run(env, svc, method)


RECIPES["endpoints"] = _Endpoints()


RECIPES["edge_modules.https_edge_route_oauth"] = Module(
    "https_route",
    lambda env, c: _Props(
        {
            "provider": {
                "google": {
                    "client_id": "compat-id",
                    "client_secret": "compat-secret",
                    "email_domains": ["example.com"],
                }
            }
        }
    ),
)
RECIPES["edge_modules.https_edge_route_oidc"] = Module(
    "https_route",
    lambda env, c: dt.EndpointOIDC(
        c,
        {
            "issuer": "https://issuer.example.com",
            "client_id": "compat-id",
            "client_secret": "compat-secret",
            "scopes": ["openid"],
        },
    ),
)


class _Saml:
    """No SAML identity provider here: a replace is refused by name (ERR_NGROK_7021, as the
    hosted service refuses a module an edge does not support); the module is never set."""

    def run(self, env, svc, method):
        ids = env.https_route()
        if method == "replace":
            module = dt.EndpointSAMLMutate(env.c, {"idp_metadata": "<EntityDescriptor/>"})
            with pytest.raises(ngrok.Error) as raised:
                svc.replace(*ids, module)
            assert raised.value.error_code == errors.MODULE_NOT_SUPPORTED, raised.value
            assert "saml" in str(raised.value)
        elif method == "get":
            with pytest.raises(ngrok.NotFoundError):
                svc.get(*ids)
        else:
            svc.delete(*ids)


RECIPES["edge_modules.https_edge_route_saml"] = _Saml()


@pytest.fixture(scope="module")
def env(http_api):
    account = http_api.new_account(reporter=True)
    return Env(ngrok.Client(account.admin.token, base_url=http_api.base_url))


@pytest.mark.parametrize("attr,method", list(_cases()))
def test_python_client_method_against_the_service(env, attr, method):
    http_method, path = client_request(attr, method)
    routed = app_routes(http_method, path)
    if TABLE[attr] == "not offered":
        assert not routed, f"{attr} is routed now: move it to SERVED"
        pytest.skip(
            f"not offered: {NOT_OFFERED[attr]} ({http_method} {path}): the client has "
            "it; this service offers the rule as a traffic policy action"
        )
    if not routed:
        pytest.fail(
            f"client.{attr}.{method} sends {http_method} {path}, which this service does not route"
        )
    recipe = RECIPES.get(attr)
    assert recipe is not None, f"no recipe for client.{attr}"
    recipe.run(env, _service(env.c, attr), method)


def test_every_table_entry_is_a_client_resource():
    probe = ngrok.Client("unused")
    for attr in TABLE:
        assert _methods(_service(probe, attr)), attr
    assert set(RECIPES) == set(TABLE)


def test_served_routes_are_found_by_the_route_matcher():
    assert app_routes("GET", "/reserved_domains/rd_x")
    assert app_routes("DELETE", "/reserved_domains/rd_x/certificate")
    assert not app_routes("GET", "/reserved_domains/rd_x/certificate")  # 405 view only
    assert not app_routes("GET", "/no_such_thing")
