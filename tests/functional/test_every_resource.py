"""Rules every resource shares, written once over a table of resources (as
tests/integration/test_every_route.py does for 401 and 405):

- lists page newest first with ``limit`` and ``before_id``, ``next_page_uri`` null on the last
  page and never an empty last page;
- another account's id is a 404 for every item route (GET, PATCH, DELETE, module routes), and
  the attempt changes nothing;
- a malformed id (too short, too long, bad characters, another resource's prefix) is a 404.

Every error is checked for the contract's whole body (tests/support/contract.py). A resource
added to the service is added to RESOURCES; test_the_table_names_every_item_route fails
until it is.

In-process only, on one table for the module (``module_api``): the rules live in chalicelib.
"""

import itertools
import re
import uuid

import pytest

from app import app
from tests.functional.test_certificate_authorities import make_cert
from tests.functional.test_ssh_credentials import public_line
from chalicelib import openapi
from chalicelib.core import errors
from stacks.certs import SmallCA
from tests.support.contract import assert_error

_counter = itertools.count()


def _n():
    return next(_counter)


def _policy(caller):
    return caller.post("/ip_policies", {}).json["id"]


def _https_edge(caller):
    return caller.post("/edges/https", {}).json["id"]


def _route(caller, edge_id):
    return caller.post(
        f"/edges/https/{edge_id}/routes", {"match_type": "path_prefix", "match": f"/r{_n()}"}
    ).json


class Resource:
    """One collection: how to make an item (``make(caller) -> (list path, item)``)."""

    def __init__(
        self, name, prefix, list_key, make, patch=None, modules=(), listed=True, reporter=False
    ):
        self.name, self.prefix, self.list_key, self.make = name, prefix, list_key, make
        self.patch = {"description": "changed"} if patch is None else patch
        self.modules, self.listed, self.reporter = modules, listed, reporter


def _simple(path, body=lambda: {}):
    return lambda caller: (path, caller.post(path, body()).json)


def _make_rule(caller):
    return "/ip_policy_rules", caller.post(
        "/ip_policy_rules",
        {"ip_policy_id": _policy(caller), "cidr": f"10.{_n() % 250}.0.0/16", "action": "allow"},
    ).json


def _ssh_certificate(path):
    def make(caller):
        ca = caller.post("/ssh_certificate_authorities", {}).json["id"]
        body = {"ssh_certificate_authority_id": ca, "public_key": public_line()}
        return path, caller.post(path, body).json

    return make


def _make_route(caller):
    edge_id = _https_edge(caller)
    return f"/edges/https/{edge_id}/routes", _route(caller, edge_id)


RESOURCES = [
    Resource("api_key", "ak", "keys", _simple("/api_keys")),
    Resource("http_response_backend", "bkdhr", "backends", _simple("/backends/http_response")),
    Resource("ip_policy", "ipp", "ip_policies", _simple("/ip_policies")),
    Resource("ip_policy_rule", "ipr", "ip_policy_rules", _make_rule),
    Resource("credential", "cr", "credentials", _simple("/credentials")),
    Resource(
        "ssh_credential",
        "sshcr",
        "ssh_credentials",
        _simple("/ssh_credentials", lambda: {"public_key": public_line()}),
    ),
    Resource(
        "ssh_certificate_authority",
        "sshca",
        "ssh_certificate_authorities",
        _simple("/ssh_certificate_authorities"),
    ),
    Resource(
        "ssh_host_certificate",
        "shcrt",
        "ssh_host_certificates",
        _ssh_certificate("/ssh_host_certificates"),
    ),
    Resource(
        "ssh_user_certificate",
        "sucrt",
        "ssh_user_certificates",
        _ssh_certificate("/ssh_user_certificates"),
    ),
    Resource(
        "agent_ingress",
        "agin",
        "ingresses",
        _simple(
            "/agent_ingresses",
            lambda: {"domain": f"connect-{_n()}-{uuid.uuid4().hex[:6]}.example.com"},
        ),
        modules=("certificate_management_policy",),
    ),
    Resource(
        "bot_user",
        "bot",
        "bot_users",
        _simple("/bot_users", lambda: {"name": f"bot-{_n()}"}),
        patch={"name": "changed"},
    ),
    Resource(
        "reserved_domain",
        "rd",
        "reserved_domains",
        _simple("/reserved_domains", lambda: {"domain": f"d{_n()}.example.com"}),
        # dns_check: a POST under the item (an action), held to the same id rules
        modules=("certificate", "certificate_management_policy", "dns_check"),
    ),
    Resource(
        "tcp_edge",
        "edgtcp",
        "tcp_edges",
        _simple("/edges/tcp"),
        modules=("backend", "ip_restriction", "traffic_policy"),
    ),
    Resource(
        "tls_edge",
        "edgtls",
        "tls_edges",
        _simple("/edges/tls"),
        modules=("backend", "ip_restriction", "mutual_tls", "tls_termination", "traffic_policy"),
    ),
    Resource(
        "https_edge",
        "edghts",
        "https_edges",
        _simple("/edges/https"),
        modules=("tls_termination", "mutual_tls"),
    ),
    Resource(
        "https_edge_route",
        "edghtsrt",
        None,
        _make_route,
        modules=(
            "user_agent_filter",
            "response_headers",
            "backend",
            "ip_restriction",
            "request_headers",
            "traffic_policy",
            "circuit_breaker",
            "compression",
            "oauth",
            "oidc",
            "saml",
            "webhook_verification",
            "websocket_tcp_converter",
        ),
    ),
    Resource(
        "service_user",
        "bot",
        "service_users",
        _simple("/service_users", lambda: {"name": f"svc-{_n()}"}),
        patch={"name": "changed"},
    ),
    Resource(
        "tunnel_group_backend",
        "bkdtg",
        "backends",
        _simple("/backends/tunnel_group", lambda: {"labels": {"app": f"a{_n()}"}}),
    ),
    Resource(
        "ip_restriction",
        "ipx",
        "ip_restrictions",
        lambda caller: (
            "/ip_restrictions",
            caller.post(
                "/ip_restrictions",
                {"type": "agent", "ip_policy_ids": [_policy(caller)]},
            ).json,
        ),
        patch={"enforced": True},
    ),
    Resource(
        "static_backend",
        "bkdsa",
        "backends",
        _simple("/backends/static", lambda: {"address": f"o{_n()}.example.com:443"}),
    ),
    Resource(
        "failover_backend",
        "bkdfo",
        "backends",
        lambda caller: (
            "/backends/failover",
            caller.post(
                "/backends/failover",
                {"backends": [caller.post("/backends/http_response", {}).json["id"]]},
            ).json,
        ),
    ),
    Resource(
        "weighted_backend",
        "bkdwt",
        "backends",
        lambda caller: (
            "/backends/weighted",
            caller.post(
                "/backends/weighted",
                {"backends": {caller.post("/backends/http_response", {}).json["id"]: 1}},
            ).json,
        ),
    ),
    Resource("reserved_addr", "ra", "reserved_addrs", _simple("/reserved_addrs")),
    Resource(
        "certificate_authority",
        "ca",
        "certificate_authorities",
        _simple("/certificate_authorities", lambda: {"ca_pem": make_cert()[0]}),
    ),
    Resource(
        "tls_certificate",
        "cert",
        "tls_certificates",
        _simple("/tls_certificates", lambda: SmallCA().upload_body([f"t{_n()}.example.com"])),
    ),
    Resource(
        "endpoint",
        "ep",
        "endpoints",
        _simple(
            "/endpoints",
            lambda: {
                "url": f"https://e{_n()}-{uuid.uuid4().hex[:12]}.tunnels.localhost",
                "type": "cloud",
                "traffic_policy": "",
            },
        ),
        # the traffic inspector (chalicelib/captured_requests.py) hangs under the endpoint
        modules=("captured_requests", "capture"),
    ),
    Resource(
        "vault",
        "vault",
        "vaults",
        _simple("/vaults", lambda: {"name": f"v{_n()}"}),
        modules=("secrets",),
    ),
    Resource(
        "vault_secret",
        "secret",
        "secrets",
        lambda caller: (
            "/vault_secrets",
            caller.post(
                "/vault_secrets",
                {
                    "name": f"s{_n()}",
                    "value": "v",
                    "vault_id": caller.post("/vaults", {"name": f"v{_n()}"}).json["id"],
                },
            ).json,
        ),
    ),
    Resource(
        "event_destination",
        "ed",
        "event_destinations",
        _simple(
            "/event_destinations",
            lambda: {
                "target": {
                    "kinesis": {
                        "stream_arn": "arn:aws:kinesis:us-east-1:123456789012:stream/s",
                        "auth": {"role": {"role_arn": "arn:aws:iam::123456789012:role/r"}},
                    }
                }
            },
        ),
    ),
    Resource(
        "event_subscription",
        "esb",
        "event_subscriptions",
        _simple(
            "/event_subscriptions", lambda: {"sources": [{"type": "http_request_complete.v0"}]}
        ),
        modules=("sources",),
    ),
    Resource(
        "abuse_report",
        "abrp",
        None,
        _simple("/abuse_reports", lambda: {"urls": ["https://bad.example.com/x"]}),
        patch={},
        listed=False,
        reporter=True,
    ),
]
BY_NAME = {r.name: r for r in RESOURCES}
# Resources merged after this table was written, not in it yet (their create bodies are their
# branches' to supply): the completeness test lets exactly these through. Add each to
# RESOURCES and remove it here.
PENDING: dict = {}
PENDING_MODULES: set = set()
# Online state the edge writes (no create route): only their id rules are checked here; their
# lists and contents are the edge suite's (tests/edge).
ONLINE = {
    "/tunnels": ("tunnels", []),
    "/tunnel_sessions": ("tunnel_sessions", ["restart", "stop", "update"]),
    # written by the edge at sign-in (tests/edge/test_identity.py)
    "/app/sessions": ("application_sessions", []),
    "/app/users": ("application_users", []),
}
# Ids of items under another resource that no create route makes: captured requests (the
# edge writes them; tests/edge/test_inspector.py checks another account's are a 404).
CHILD_PREFIXES = {"req"}
LISTED = [r for r in RESOURCES if r.listed]
DOCUMENT = openapi.build(app)


def _module_methods(list_path, module):
    """The methods the OpenAPI document serves on ``<list_path>/{id}/<module>``."""
    template = re.sub(r"/[a-z]+_[0-9A-Za-z]{27}(?=/|$)", "/{x}", list_path)
    pattern = re.compile(
        "^"
        + re.escape(template).replace(r"\{x\}", r"\{\w+\}")
        + r"/\{\w+\}/"
        + re.escape(module)
        + "$"
    )
    found = [item for path, item in DOCUMENT["paths"].items() if pattern.match(path)]
    assert found, f"no route for module {module!r} under {list_path}"
    return sorted(m.upper() for m in found[0])


def _item_routes(resource, list_path, item_id):
    """(method, path) of every route that names this item."""
    item = f"{list_path}/{item_id}"
    methods = ["GET"] if resource.name == "abuse_report" else ["GET", "PATCH", "DELETE"]
    routes = [(m, item) for m in methods]
    for module in resource.modules:
        routes += [(m, f"{item}/{module}") for m in _module_methods(list_path, module)]
    return routes


# a valid body for each module's PUT, so that only the path's id can be wrong
MODULE_BODIES = {
    "backend": {"backend_id": "bkdhr_" + "0" * 27},
    "ip_restriction": {"ip_policy_ids": ["ipp_" + "0" * 27]},
    "traffic_policy": {"value": "{}"},
    "user_agent_filter": {"allow": ["x"]},
    "response_headers": {"add": {"x-a": "1"}},
    "request_headers": {"add": {"x-a": "1"}},
    "tls_termination": {"min_version": "1.2"},
    "mutual_tls": {"certificate_authority_ids": ["ca_" + "0" * 27]},
    "capture": {"capture_bodies": True},
    "oauth": {"provider": {"google": {"client_id": "i", "client_secret": "s"}}},
    "oidc": {"issuer": "https://issuer.example.com", "client_id": "i", "client_secret": "s"},
    "webhook_verification": {"provider": "github", "secret": "s"},
}


def _send(caller, method, path, resource):
    if method == "PATCH":
        return caller.patch(path, resource.patch)
    if method == "PUT":
        return caller.put(path, MODULE_BODIES.get(path.rsplit("/", 1)[-1], {}))
    return caller.request(method, path)


@pytest.fixture(scope="module")
def accounts(module_api):
    """Two ordinary accounts and two abuse-reporter accounts, shared by the module's tests."""
    return {
        False: (module_api.new_account(), module_api.new_account()),
        True: (module_api.new_account(reporter=True), module_api.new_account(reporter=True)),
    }


def _doc_prefix(list_path):
    item = next(p for p in DOCUMENT["paths"] if p.startswith(list_path + "/{"))
    param = next(
        p
        for op in DOCUMENT["paths"][item].values()
        for p in op.get("parameters", [])
        if p.get("in") == "path"
    )
    return param["schema"]["pattern"].lstrip("^").split("_")[0]


def test_the_table_names_every_item_route():
    """A new resource (or module) route must be added to RESOURCES (or ONLINE) to be covered."""
    prefixes = {r.prefix for r in RESOURCES} | {_doc_prefix(path) for path in ONLINE}
    assert not prefixes & set(PENDING), "in RESOURCES now: remove from PENDING"
    for path in DOCUMENT["paths"]:
        if any(path.startswith(online + "/") for online in ONLINE) or any(
            path.startswith(pending + "/") for pending in PENDING.values()
        ):
            continue
        child = False
        for name in re.findall(r"\{(\w+)\}", path):
            param = next(
                p
                for op in DOCUMENT["paths"][path].values()
                for p in op.get("parameters", [])
                if p.get("name") == name
            )
            if "pattern" not in param["schema"]:
                continue  # not an id: an event source's {type}
            prefix = param["schema"]["pattern"].lstrip("^").split("_")[0]
            if prefix in CHILD_PREFIXES:  # held to the id rules by their own tests
                child = True
                continue
            assert prefix in prefixes, f"{path}: no resource with prefix {prefix!r} in RESOURCES"
        last = path.rsplit("/", 1)[-1]
        if (
            path.count("{")
            and not last.startswith("{")
            and last != "routes"
            and last not in PENDING_MODULES
            and not child
        ):
            owner = [r for r in RESOURCES if last in r.modules]
            assert owner, f"{path}: module {last!r} missing from RESOURCES"


# ---- pagination --------------------------------------------------------------------------------
@pytest.mark.parametrize("resource", LISTED, ids=[r.name for r in LISTED])
def test_every_list_pages_newest_first_and_ends_without_an_empty_page(module_api, resource):
    account = module_api.new_account()
    caller = account.admin
    list_path, first = resource.make(caller)
    made = [first["id"]]
    if resource.name == "https_edge_route":
        edge_id = list_path.split("/")[3]
        made += [_route(caller, edge_id)["id"] for _ in range(2)]
    else:
        made += [resource.make(caller)[1]["id"] for _ in range(2)]
    key = resource.list_key or "routes"
    everything = caller.get(list_path).json[key]
    assert [i["id"] for i in everything] == sorted((i["id"] for i in everything), reverse=True)
    assert set(made) <= {i["id"] for i in everything}
    total = len(everything)

    for limit in (1, 2, total):
        seen, url, pages = [], f"{list_path}?limit={limit}", 0
        while url:
            page = caller.get(url).json
            pages += 1
            items = [i["id"] for i in page[key]]
            assert items, f"empty page at {url}"
            assert len(items) <= limit
            assert page["uri"].endswith(list_path)
            url = page["next_page_uri"]
            if url:
                assert len(items) == limit
                assert url.endswith(f"{list_path}?before_id={items[-1]}&limit={limit}"), url
            seen += items
        assert seen == [i["id"] for i in everything], limit
        assert pages == -(-total // limit)

    assert_error(caller.get(f"{list_path}?limit=0"), errors.InvalidQuery)
    assert_error(caller.get(f"{list_path}?limit=101"), errors.InvalidQuery)
    other_prefix = "ak" if resource.prefix != "ak" else "ipp"
    assert_error(
        caller.get(f"{list_path}?before_id={other_prefix}_{'0' * 27}"), errors.InvalidQuery
    )


# ---- another account's ids ---------------------------------------------------------------------
@pytest.mark.parametrize("resource", RESOURCES, ids=[r.name for r in RESOURCES])
def test_another_accounts_id_is_404_everywhere_and_changes_nothing(accounts, resource):
    owner, stranger = accounts[resource.reporter]
    list_path, item = resource.make(owner.admin)
    before = owner.admin.get(f"{list_path}/{item['id']}").json
    for method, path in _item_routes(resource, list_path, item["id"]):
        assert_error(_send(stranger.admin, method, path, resource), errors.NotFound)
    assert owner.admin.get(f"{list_path}/{item['id']}").json == before
    if resource.listed and resource.list_key:
        listed = stranger.admin.get(list_path).json[resource.list_key]
        assert item["id"] not in {i["id"] for i in listed}


# ---- malformed ids -----------------------------------------------------------------------------
def _malformed(prefix):
    other = "ak" if prefix != "ak" else "bot"
    return [
        "x",
        f"{prefix}_",
        f"{prefix}_{'0' * 26}",
        f"{prefix}_{'0' * 28}",
        f"{prefix}_{'-' * 27}",
        f"{other}_{'0' * 27}",
        f"{prefix.upper()}_{'0' * 27}",
    ]


@pytest.mark.parametrize("resource", RESOURCES, ids=[r.name for r in RESOURCES])
def test_a_malformed_or_unknown_id_is_404(accounts, resource):
    owner = accounts[resource.reporter][0]
    list_path, item = resource.make(owner.admin)
    unknown = f"{resource.prefix}_{'0' * 27}"
    for bad in _malformed(resource.prefix) + [unknown]:
        for method, path in _item_routes(resource, list_path, bad):
            assert_error(_send(owner.admin, method, path, resource), errors.NotFound)
    if resource.name == "https_edge_route":
        edge_id = list_path.split("/")[3]
        for bad in _malformed("edghts"):
            assert_error(
                owner.admin.get(f"/edges/https/{bad}/routes/{item['id']}"), errors.NotFound
            )
            assert_error(owner.admin.get(f"/edges/https/{bad}/routes"), errors.NotFound)
        assert owner.admin.get(f"/edges/https/{edge_id}/routes/{item['id']}").status == 200


@pytest.mark.parametrize("list_path", sorted(ONLINE))
def test_online_state_ids_that_are_malformed_unknown_or_anothers_are_404(accounts, list_path):
    caller = accounts[False][0].admin
    key, actions = ONLINE[list_path]
    listed = caller.get(list_path)
    assert listed.status == 200 and listed.json[key] == [] and listed.json["next_page_uri"] is None
    prefix = _doc_prefix(list_path)
    for bad in _malformed(prefix) + [f"{prefix}_{'0' * 27}"]:
        assert_error(caller.get(f"{list_path}/{bad}"), errors.NotFound)
        for action in actions:
            assert_error(caller.post(f"{list_path}/{bad}/{action}", {}), errors.NotFound)
