"""HTTPS edges ``/edges/https`` with their modules ``tls_termination`` and ``mutual_tls``
(``/edges/https/{edge_id}/<module>``), their routes ``/edges/https/{edge_id}/routes`` and the
route modules ``backend``, ``ip_restriction``, ``user_agent_filter``, ``request_headers``,
``response_headers`` and ``traffic_policy``; the edge's read is
:func:`chalicelib.core.routing.https_edge_for_hostport`.

HTTPS edge fields: id, uri, created_at, description, metadata, hostports (null when none),
mutual_tls ``{enabled, certificate_authorities: [Ref]}`` and tls_termination ``{enabled,
terminate_at: "edge", min_version}`` (null when unset), routes (every route, oldest first).

Route fields: id, edge_id, uri, created_at, description, metadata, match_type
(``exact_path`` | ``path_prefix``), match, every module the reference client reads (null when
unset): backend ``{enabled, backend: Ref}``, ip_restriction ``{enabled, ip_policies: [Ref]}``,
user_agent_filter, request_headers, response_headers, traffic_policy ``{enabled, value}``,
circuit_breaker, compression, oauth, oidc, webhook_verification, websocket_tcp_converter
(each the policy action the edge runs: chalicelib.core.route_modules; secrets write-only,
rendered null); saml always null: refused by name (400 ERR_NGROK_7021, no SAML here).

Rules (where the spec is silent, decided here):
- Hostports follow :mod:`chalicelib.edge_modules`, including ownership: a hostport's host must
  be a domain the account reserved (exactly or under one of its wildcards) or a free name
  under the base domain (400 naming the hostport otherwise). They share one service-wide
  namespace with TCP edges' hostports (409 when taken).
- An edge has at most :data:`MAX_ROUTES` routes (400 beyond). The edge's ``refs`` counts its
  routes; creating or deleting a route updates it, so a route cannot slip in while its edge
  is being deleted. Deleting an edge deletes its routes, hostports and references in one
  transaction when they fit (else routes first, see :func:`delete`).
- Routes live in the edge's partition right after it (sort key ``<edge id>#<route id>``), so
  an edge with its routes is one Query; a route of another edge, or of an edge that does not
  exist, is 404.
- ``match`` is a non-empty string of at most 1024 bytes. In a route PATCH, an absent, null or
  empty ``match_type``/``match`` leaves it unchanged (the reference client sends ``""`` for
  both by default); description and metadata are replaced when sent. A module sent in a
  create, PATCH or edge PATCH replaces the module whole; PATCH never removes a module.
- Modules (route and edge): GET 200 (404 when unset, or when the edge or route does not
  exist); PUT replaces the whole module and returns it (200); DELETE 204 (also when it was not
  set). PUT bodies may be the module itself or ``{"module": {...}, "edge_id": …, "id": …}``.
- backend ``{enabled, backend_id}``: any backend of the account (HTTP response, tunnel group,
  failover, weighted); ip_restriction ``{enabled, ip_policy_ids}``: 1–10 distinct IP
  policies; traffic_policy ``{enabled, value}`` (see :mod:`chalicelib.traffic_policy`).
  References are counted (``refs``) in the route's transaction: a backend or IP policy that a
  route uses cannot be deleted (409).
- user_agent_filter: ``enabled`` (default true), ``allow`` and ``deny`` (default ``[]``):
  at most 20 patterns each, each at most 512 bytes and a valid RE2 regular expression (400
  naming the pattern otherwise).
- request_headers and response_headers: ``enabled`` (default true); ``add``: at most 20
  headers (names are HTTP tokens, lower-cased, none differing only in case; values at most
  1024 bytes, no CR/LF), ``{}`` when none; ``remove``: at most 20 header names, lower-cased,
  duplicates dropped, ``[]`` when none.
- tls_termination ``{enabled, min_version}``: min_version one of 1.0, 1.1, 1.2, 1.3, or null
  (the edge's default, TLS 1.2; "1.0" and "1.1" are accepted as the hosted API does and mean
  TLS 1.2 on the wire: see edge.tls); TLS always terminates at the edge: ``terminate_at`` is
  rendered ``edge``; a body may send ``"edge"`` (a GET's module PUT back), ``"upstream"`` is a
  400 saying pass-through is not served (the reference client's
  ``EndpointTLSTerminationAtEdge`` has no such field).
- mutual_tls ``{enabled, certificate_authority_ids}``: 1–10 distinct certificate authorities
  (/certificate_authorities) of the account, counted in their ``refs``.

Store calls: edge create 1 (PutItem, or a transaction with hostport claims and references;
claiming a hostport first reads its reservation: 1 BatchGetItem, plus the online claim of a
base-domain name); edge get 1 Query (edge + routes); edge list 1 Query while the page's edges
average fewer than :data:`LIST_ROUTES_GUESS` routes (one more per such page read otherwise);
edge PATCH 2 (an UpdateItem of description/metadata, or with hostports or edge modules a
GetItem + transaction; then the response's routes: 1 Query); edge module PUT/DELETE: GetItem
+ transaction; edge delete 2 (Query of edge + routes, one transaction). Route create 1
(transaction: route + the edge's route counter, conditioned on the edge existing and on the
limit, + reference counters); route get, PATCH and module GET/PUT/DELETE 1, except that a
change of ``backend`` or ``ip_restriction`` reads the route first (its old references) and
writes a transaction; route list 1 Query; route delete: GetItem + transaction (route,
counter, references).
"""

import json
from collections import Counter
from typing import Any, Dict, List, Optional, Tuple

import re2

from chalicelib import (
    certificate_authorities,
    edge_modules,
    http_headers,
    rest,
    traffic_policy,
    validation,
)
from chalicelib.core import errors, ids, refs, route_modules, store
from chalicelib.edge_modules import HOSTPORTS
from chalicelib.validation import DESCRIPTION, METADATA, Field, parse
from chalicelib.web import Ctx
from chalicelib.core import routing

COLLECTION = routing.HTTPS_EDGE_COLLECTION
PREFIX = ids.PREFIXES["https_edge"]
PATH = "/edges/https"
LIST_KEY = "https_edges"

ROUTE_COLLECTION = "https_edge_route"
ROUTE_PREFIX = ids.PREFIXES["https_edge_route"]
ROUTE_LIST_KEY = "routes"

MAX_ROUTES = 50
MAX_MATCH_BYTES = 1024
MATCH_TYPES = ("exact_path", "path_prefix")
MAX_PATTERNS = 20
MAX_PATTERN_BYTES = 512
MAX_ADD_HEADERS = 20
MAX_REMOVE_HEADERS = 20

ROUTE_MODULES = routing.ROUTE_MODULES
# Refused by name (ERR_NGROK_7021): no SAML identity provider here (docs/CONTRACT.md).
UNSUPPORTED_ROUTE_MODULES = ("saml",)
EDGE_MODULES = routing.HTTPS_EDGE_MODULES
TLS_VERSIONS = ("1.0", "1.1", "1.2", "1.3")
MAX_CERTIFICATE_AUTHORITIES = 10


def _no_missing(collection: str, resource_id: str) -> errors.ApiError:
    return errors.Internal()  # only reached for a reference added, never on a delete


def _unsupported(name: str, value: Any) -> Any:
    raise errors.ModuleNotSupported(
        f"The module {name} is not supported on an edge of type https by this service (it "
        "runs no SAML identity provider integration); send null or leave it out",
        details={"field": name},
    )


# ---- route modules: parsing and rendering ------------------------------------------------------
_RE2_OPTIONS = re2.Options()
_RE2_OPTIONS.log_errors = False


def _patterns(name: str, value: List[str]) -> List[str]:
    for index, pattern in enumerate(value):
        try:
            re2.compile(pattern, _RE2_OPTIONS)
        except re2.error as exc:
            reason = (
                exc.args[0].decode() if exc.args and isinstance(exc.args[0], bytes) else str(exc)
            )
            raise errors.InvalidField(
                f"Field '{name}[{index}]': pattern '{pattern}' is not a valid RE2 regular "
                f"expression ({reason})",
                details={"field": f"{name}[{index}]"},
            ) from None
    return value


UA_FIELDS = [
    edge_modules.ENABLED,
    Field(
        "allow",
        "string_list",
        max_bytes=MAX_PATTERN_BYTES,
        max_items=MAX_PATTERNS,
        check=_patterns,
    ),
    Field(
        "deny", "string_list", max_bytes=MAX_PATTERN_BYTES, max_items=MAX_PATTERNS, check=_patterns
    ),
]
RH_FIELDS = [
    edge_modules.ENABLED,
    Field("add", "any", check=lambda n, v: http_headers.check_map(n, v, MAX_ADD_HEADERS)),
    Field("remove", "any", check=lambda n, v: http_headers.check_names(n, v, MAX_REMOVE_HEADERS)),
]


def parse_user_agent_filter(field: Optional[str], value: Any) -> Dict[str, Any]:
    return edge_modules.parse_module(field, value, UA_FIELDS, allow=[], deny=[])


def parse_headers(field: Optional[str], value: Any) -> Dict[str, Any]:
    """request_headers and response_headers: the same shape and limits."""
    return edge_modules.parse_module(field, value, RH_FIELDS, add={}, remove=[])


parse_response_headers = parse_request_headers = parse_headers

# A route serves HTTP: every phase runs (edge_modules' TRAFFIC_POLICY_FIELDS are TCP edges':
# on_tcp_connect only).
ROUTE_TRAFFIC_POLICY_FIELDS = [
    edge_modules.ENABLED,
    Field(
        "value",
        "string",
        required=True,
        check=lambda n, v: traffic_policy.check_document(n, v, protocol="https"),
    ),
]


def parse_route_traffic_policy(field: Optional[str], value: Any) -> Dict[str, Any]:
    return edge_modules.parse_module(field, value, ROUTE_TRAFFIC_POLICY_FIELDS)


# ---- the modules that are policy actions here (chalicelib.core.route_modules) -----------------
MAX_SECRET_BYTES = 4096
MAX_SCOPES = 32
_ACTION_FIELDS = {  # an action config key → the module field it comes from
    "error_threshold": "error_threshold_percentage",
    "window_duration": "rolling_window",
    "tripped_duration": "tripped_duration",
    "volume_threshold": "volume_threshold",
    "num_buckets": "num_buckets",
    "issuer_url": "issuer",
    "auth_id": "cookie_prefix",
    "max_session_duration": "maximum_duration",
    "idle_session_duration": "inactivity_timeout",
    "userinfo_refresh_interval": "auth_check_interval",
    "allow_cors_preflight": "options_passthrough",
}


def _number(name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise errors.InvalidField(f"Field '{name}' must be a number", details={"field": name})
    return value


def _seconds(name: str, value: int) -> int:
    if value < 0:
        raise errors.InvalidField(
            f"Field '{name}' must be a number of seconds, 0 or more", details={"field": name}
        )
    return value


def _as_rules(module_name: str, field: Optional[str], build: Any, module: Dict[str, Any]) -> None:
    """Compile what the module becomes (the edge enforces exactly that): a 400 naming the
    module's field when the engine refuses it."""
    from chalicelib.core import binding
    from chalicelib.core.policy import PolicyError, compile_policy

    prefix = f"{field}." if field else ""
    try:
        phases = build(module)
        compile_policy(json.dumps(phases))
    except binding.Refused as exc:
        raise errors.InvalidField(
            f"Field '{field or module_name}': {exc.message}",
            details={"field": field or module_name},
        ) from None
    except PolicyError as exc:
        key = exc.path.rpartition(".")[2]
        where = f"{prefix}{_ACTION_FIELDS.get(key, key)}"
        raise errors.InvalidField(
            f"Field '{where}': {exc.message}", details={"field": where}
        ) from None


def _request_rules(rules: List[Dict[str, Any]]) -> Dict[str, Any]:
    return {"on_http_request": rules}


CB_FIELDS = [
    edge_modules.ENABLED,
    Field("tripped_duration", "integer", check=_seconds),
    Field("rolling_window", "integer", check=_seconds),
    Field("num_buckets", "integer", check=_seconds),
    Field("volume_threshold", "integer", check=_seconds),
    Field("error_threshold_percentage", "any", check=_number),
]
ENABLED_ONLY = [edge_modules.ENABLED]
WEBHOOK_FIELDS = [
    edge_modules.ENABLED,
    Field("provider", "string", required=True, max_bytes=64),
    Field("secret", "string", required=True, max_bytes=MAX_SECRET_BYTES),
]
SESSION_FIELDS = [
    Field("options_passthrough", "boolean"),
    Field("cookie_prefix", "string", max_bytes=64),
    Field("inactivity_timeout", "integer", check=_seconds),
    Field("maximum_duration", "integer", check=_seconds),
    Field("auth_check_interval", "integer", check=_seconds),
]
OIDC_FIELDS = [
    edge_modules.ENABLED,
    *SESSION_FIELDS,
    Field("issuer", "string", required=True, max_bytes=1024),
    Field("client_id", "string", required=True, max_bytes=1024),
    Field("client_secret", "string", required=True, max_bytes=MAX_SECRET_BYTES),
    Field("scopes", "string_list", max_bytes=256, max_items=MAX_SCOPES),
]
OAUTH_FIELDS = [edge_modules.ENABLED, *SESSION_FIELDS, Field("provider", "object", required=True)]
OAUTH_PROVIDER_FIELDS = [
    Field("client_id", "string", max_bytes=1024),
    Field("client_secret", "string", max_bytes=MAX_SECRET_BYTES),
    Field("scopes", "string_list", max_bytes=256, max_items=MAX_SCOPES),
    Field("email_addresses", "string_list", max_bytes=320, max_items=1000),
    Field("email_domains", "string_list", max_bytes=253, max_items=1000),
    Field("teams", "string_list", max_bytes=256, max_items=100),
    Field("organizations", "string_list", max_bytes=256, max_items=100),
]


def parse_circuit_breaker(field: Optional[str], value: Any) -> Dict[str, Any]:
    from chalicelib.core.policy import breaker

    module = edge_modules.parse_module(
        field,
        value,
        CB_FIELDS,
        tripped_duration=int(breaker.TRIPPED),
        rolling_window=int(breaker.WINDOW),
        num_buckets=breaker.BUCKETS,
        volume_threshold=breaker.VOLUME,
        error_threshold_percentage=0.5,
    )
    _as_rules(
        "circuit_breaker", field, lambda m: _request_rules([route_modules.breaker_rule(m)]), module
    )
    return module


def parse_enabled_only(field: Optional[str], value: Any) -> Dict[str, Any]:
    """compression and websocket_tcp_converter: ``{enabled}``."""
    return edge_modules.parse_module(field, value, ENABLED_ONLY)


def parse_webhook_verification(field: Optional[str], value: Any) -> Dict[str, Any]:
    module = edge_modules.parse_module(field, value, WEBHOOK_FIELDS)
    _as_rules(
        "webhook_verification",
        field,
        lambda m: _request_rules([route_modules.webhook_rule(m)]),
        module,
    )
    return module


def parse_oidc(field: Optional[str], value: Any) -> Dict[str, Any]:
    module = edge_modules.parse_module(field, value, OIDC_FIELDS, scopes=[])
    _as_rules("oidc", field, lambda m: _request_rules(route_modules.oidc_rules(m)), module)
    return module


def parse_oauth(field: Optional[str], value: Any) -> Dict[str, Any]:
    module = edge_modules.parse_module(field, value, OAUTH_FIELDS)
    prefix = f"{field}." if field else ""
    providers = module["provider"]
    if len(providers) != 1:
        raise errors.InvalidField(
            f"Field '{prefix}provider' must name exactly one provider, such as "
            '{"google": {"client_id": …, "client_secret": …}}',
            details={"field": f"{prefix}provider"},
        )
    ((name, settings),) = providers.items()
    where = f"{prefix}provider.{name}"
    settings = edge_modules.parse_module(where, settings, OAUTH_PROVIDER_FIELDS)
    settings.pop("enabled", None)
    for key in ("client_id", "client_secret"):
        if not settings.get(key):
            raise errors.InvalidField(
                f"Field '{where}.{key}' is required: this service has no managed OAuth "
                "applications (register one with the provider)",
                details={"field": f"{where}.{key}"},
            )
    for key in ("teams", "organizations"):
        if settings.get(key):
            raise errors.InvalidField(
                f"Field '{where}.{key}' is not offered by this service (sign-in is checked "
                "by email address and domain); send [] or leave it out",
                details={"field": f"{where}.{key}"},
            )
    module["provider"] = {name: settings}
    _as_rules("oauth", field, lambda m: _request_rules(route_modules.oauth_rules(m)), module)
    return module


MODULE_PARSERS = {
    "backend": edge_modules.parse_backend,
    "ip_restriction": edge_modules.parse_ip_restriction,
    "user_agent_filter": parse_user_agent_filter,
    "request_headers": parse_headers,
    "response_headers": parse_headers,
    "traffic_policy": parse_route_traffic_policy,
    "circuit_breaker": parse_circuit_breaker,
    "compression": parse_enabled_only,
    "oauth": parse_oauth,
    "oidc": parse_oidc,
    "webhook_verification": parse_webhook_verification,
    "websocket_tcp_converter": parse_enabled_only,
}


def _copy(c: Ctx, module: Optional[Dict[str, Any]]) -> Optional[Dict[str, Any]]:
    return None if module is None else dict(module)


def _write_only(c: Ctx, module: Optional[Dict[str, Any]]) -> Optional[Dict[str, Any]]:
    """A module with a secret: the secret is write-only (rendered null)."""
    if module is None:
        return None
    body = dict(module)
    for key in ("secret", "client_secret"):
        if key in body:
            body[key] = None
    if isinstance(body.get("provider"), dict):
        body["provider"] = {
            name: {**settings, "client_secret": None}
            for name, settings in body["provider"].items()
        }
    return body


MODULE_RENDERERS = {
    "backend": edge_modules.render_backend,
    "ip_restriction": edge_modules.render_ip_restriction,
    "user_agent_filter": _copy,
    "request_headers": _copy,
    "response_headers": _copy,
    "traffic_policy": edge_modules.render_traffic_policy,
    "circuit_breaker": _copy,
    "compression": _copy,
    "oauth": _write_only,
    "oidc": _write_only,
    "webhook_verification": _write_only,
    "websocket_tcp_converter": _copy,
}
assert tuple(MODULE_PARSERS) == tuple(MODULE_RENDERERS) == ROUTE_MODULES


# ---- edge modules -------------------------------------------------------------------------------
def check_min_version(name: str, value: str) -> str:
    if value not in TLS_VERSIONS:
        raise errors.InvalidField(
            f"Field '{name}': '{value[:16]}' is not a supported TLS "
            f"version; supported: {', '.join(TLS_VERSIONS)}",
            details={"field": name},
        )
    return value


def _check_ca_ids(name: str, value: List[str]) -> List[str]:
    if not value:
        raise errors.InvalidField(
            f"Field '{name}' must name at least one certificate authority", details={"field": name}
        )
    for index, entry in enumerate(value):
        if not ids.is_valid(entry, certificate_authorities.PREFIX):
            raise errors.InvalidField(
                f"Field '{name}[{index}]' must be the id of a certificate authority "
                f"({certificate_authorities.PREFIX}_…), got '{entry[:64]}'",
                details={"field": f"{name}[{index}]"},
            )
    if len(set(value)) != len(value):
        raise errors.InvalidField(
            f"Field '{name}' lists a certificate authority more than once", details={"field": name}
        )
    return value


def _check_terminate_at(name: str, value: str) -> str:
    if value == "upstream":
        raise errors.InvalidField(
            f"Field '{name}': 'upstream' is not supported: this edge terminates TLS itself "
            "(passing TLS through to the agent is not served, and the HTTPS edge's routes "
            "and mutual_tls need the decrypted traffic); send 'edge' or leave it out",
            details={"field": name},
        )
    if value != "edge":
        raise errors.InvalidField(
            f"Field '{name}' must be 'edge', got '{value[:16]}'", details={"field": name}
        )
    return value


TLS_FIELDS = [
    edge_modules.ENABLED,
    Field("min_version", "string", max_bytes=16, check=check_min_version),
    Field("terminate_at", "string", max_bytes=16, check=_check_terminate_at),
]
MTLS_FIELDS = [
    edge_modules.ENABLED,
    Field(
        "certificate_authority_ids",
        "string_list",
        required=True,
        max_bytes=64,
        max_items=MAX_CERTIFICATE_AUTHORITIES,
        check=_check_ca_ids,
    ),
]


def parse_tls_termination(field: Optional[str], value: Any) -> Dict[str, Any]:
    module = edge_modules.parse_module(field, value, TLS_FIELDS, min_version=None)
    module.pop("terminate_at", None)  # always "edge": rendered, never stored
    return module


def parse_mutual_tls(field: Optional[str], value: Any) -> Dict[str, Any]:
    return edge_modules.parse_module(field, value, MTLS_FIELDS)


def render_tls_termination(c: Ctx, module: Optional[Dict[str, Any]]) -> Optional[Dict[str, Any]]:
    if module is None:
        return None
    return {
        "enabled": module["enabled"],
        "terminate_at": "edge",
        "min_version": module.get("min_version"),
    }


def render_mutual_tls(c: Ctx, module: Optional[Dict[str, Any]]) -> Optional[Dict[str, Any]]:
    if module is None:
        return None
    return {
        "enabled": module["enabled"],
        "certificate_authorities": [
            c.ref(certificate_authorities.PATH, ca) for ca in module["certificate_authority_ids"]
        ],
    }


EDGE_MODULE_PARSERS = {"tls_termination": parse_tls_termination, "mutual_tls": parse_mutual_tls}
EDGE_MODULE_RENDERERS = {
    "tls_termination": render_tls_termination,
    "mutual_tls": render_mutual_tls,
}


# ---- fields -------------------------------------------------------------------------------------
def _match_type(name: str, value: str) -> str:
    if value not in MATCH_TYPES:
        raise errors.InvalidField(
            f"Field '{name}' must be 'exact_path' or 'path_prefix', got '{value[:64]}'",
            details={"field": name},
        )
    return value


EDGE_FIELDS = [DESCRIPTION, METADATA, HOSTPORTS] + [
    Field(name, "any", check=parser) for name, parser in EDGE_MODULE_PARSERS.items()
]
_MODULE_FIELDS = [Field(name, "any", check=parser) for name, parser in MODULE_PARSERS.items()] + [
    Field(name, "any", check=_unsupported) for name in UNSUPPORTED_ROUTE_MODULES
]
ROUTE_CREATE_FIELDS = [
    DESCRIPTION,
    METADATA,
    Field("match_type", "string", required=True, max_bytes=32, check=_match_type),
    Field(
        "match",
        "string",
        required=True,
        max_bytes=MAX_MATCH_BYTES,
        check=lambda n, v: validation.require_non_empty(n, v),
    ),
] + _MODULE_FIELDS
ROUTE_UPDATE_FIELDS = [
    DESCRIPTION,
    METADATA,
    Field("match_type", "string", max_bytes=32, check=lambda n, v: _match_type(n, v) if v else v),
    Field("match", "string", max_bytes=MAX_MATCH_BYTES),
] + _MODULE_FIELDS


# ---- rendering ----------------------------------------------------------------------------------
LIST_ROUTES_GUESS = 3  # routes per edge a list page's first read makes room for


def _edge_pk(account_id: str) -> str:
    return store.collection_pk(account_id, COLLECTION)


def _route_sk(edge_id: str, route_id: str) -> str:
    return f"{edge_id}#{route_id}"


def _edge_missing(edge_id: str) -> errors.NotFound:
    return errors.NotFound(f"No HTTPS edge with id '{edge_id}' exists")


def _route_missing(route_id: str) -> errors.NotFound:
    return errors.NotFound(f"No HTTPS edge route with id '{route_id}' exists")


def routes_path(edge_id: str) -> str:
    return f"{PATH}/{edge_id}/routes"


def render_route(c: Ctx, item: store.Item) -> Dict[str, Any]:
    data = item.data
    edge_id = data["edge_id"]
    body = {
        "edge_id": edge_id,
        "id": item.sk.rpartition("#")[2],
        "created_at": data["created_at"],
        "match_type": data["match_type"],
        "match": data["match"],
        "uri": c.uri(f"{routes_path(edge_id)}/{item.sk.rpartition('#')[2]}"),
        "description": data.get("description", ""),
        "metadata": data.get("metadata", ""),
    }
    for name in UNSUPPORTED_ROUTE_MODULES:
        body[name] = None
    for name in ROUTE_MODULES:
        body[name] = MODULE_RENDERERS[name](c, data.get(name))
    return body


def _edge_and_routes(account_id: str, edge_id: str) -> Tuple[store.Item, List[store.Item]]:
    """The edge and its routes, oldest first: one Query (404 when there is no such edge)."""
    if not ids.is_valid(edge_id, PREFIX):
        raise _edge_missing(edge_id)
    Model_ = store.model()
    items = list(
        Model_.query(
            _edge_pk(account_id), Model_.sk.between(edge_id, edge_id + "$"), consistent_read=True
        )
    )
    if not items or items[0].sk != edge_id:
        raise _edge_missing(edge_id)
    return items[0], items[1:]


def render(c: Ctx, item: store.Item, routes: List[store.Item]) -> Dict[str, Any]:
    data = item.data
    return {
        "id": item.sk,
        "description": data.get("description", ""),
        "metadata": data.get("metadata", ""),
        "created_at": data["created_at"],
        "uri": c.uri(f"{PATH}/{item.sk}"),
        "hostports": data.get("hostports") or None,
        "mutual_tls": render_mutual_tls(c, data.get("mutual_tls")),
        "tls_termination": render_tls_termination(c, data.get("tls_termination")),
        "routes": [render_route(c, route) for route in routes],
    }


# ---- edges --------------------------------------------------------------------------------------
@store.retrying
def create(c: Ctx, fields: Dict[str, Any]) -> Dict[str, Any]:
    edge_id = ids.new_id(PREFIX)
    data = {
        "description": fields.get("description", ""),
        "metadata": fields.get("metadata", ""),
        "hostports": fields.get("hostports") or None,
        **{name: fields[name] for name in EDGE_MODULES if name in fields},
        "created_at": validation.now_rfc3339(),
    }
    item = store.new_item(
        _edge_pk(c.account_id), edge_id, kind=COLLECTION, account_id=c.account_id, data=data
    )
    store.commit(
        [store.put_new(item)] + edge_modules.edge_ops(c.account_id, COLLECTION, edge_id, {}, data)
    )
    return render(c, item, routes=[])


def get_item(account_id: str, edge_id: str) -> store.Item:
    return store.get_by_id(account_id, COLLECTION, PREFIX, edge_id, "HTTPS edge")


def get(c: Ctx, edge_id: str) -> Dict[str, Any]:
    return render(c, *_edge_and_routes(c.account_id, edge_id))


def list_page(c: Ctx, limit: int, before_id: Optional[str]) -> Tuple[List[Dict[str, Any]], bool]:
    """A newest-first page of edges with their routes from one Query of the partition: an
    edge's routes come just before it in that order. The read makes room for
    :data:`LIST_ROUTES_GUESS` routes per edge; a page whose edges have more reads on."""
    Model_ = store.model()
    condition = Model_.sk < before_id if before_id else None
    page_size = (limit + 1) * (1 + LIST_ROUTES_GUESS)
    edges: List[Dict[str, Any]] = []
    pending: List[store.Item] = []
    more = False
    for item in Model_.query(
        _edge_pk(c.account_id),
        condition,
        scan_index_forward=False,
        page_size=page_size,
        consistent_read=True,
    ):
        if len(edges) == limit:
            more = True  # any further item: another edge (a route implies its edge)
            break
        if "#" in item.sk:
            pending.append(item)
            continue
        routes = [r for r in reversed(pending) if r.sk.startswith(item.sk + "#")]
        edges.append(render(c, item, routes))
        pending = []
    return edges, more


def _replace_routes(c: Ctx, edge_id: str) -> Dict[str, Any]:
    return render(c, *_edge_and_routes(c.account_id, edge_id))


# Edge fields whose change involves other items (hostport claims, reference counters).
LINKED_FIELDS = frozenset({"hostports"}) | frozenset(EDGE_MODULES)


def update(c: Ctx, edge_id: str, fields: Dict[str, Any]) -> Dict[str, Any]:
    """description/metadata: one UpdateItem; with hostports or modules: one GetItem and one
    transaction. Then one Query for the response (edge + routes)."""
    if not fields:
        return get(c, edge_id)
    if LINKED_FIELDS & set(fields):
        _update_hostports(c, edge_id, fields)
    else:
        if not ids.is_valid(edge_id, PREFIX):
            raise _edge_missing(edge_id)
        store.write(
            store.set_fields(
                _edge_pk(c.account_id), edge_id, fields, missing=_edge_missing(edge_id)
            )
        )
    return _replace_routes(c, edge_id)


@store.retrying
def _update_hostports(c: Ctx, edge_id: str, fields: Dict[str, Any]) -> None:
    """The read-modify-write of linked fields (hostports, edge modules)."""
    item = get_item(c.account_id, edge_id)
    new = {**item.data, **fields}
    ops = edge_modules.edge_ops(c.account_id, COLLECTION, edge_id, item.data, new)
    item.data = new
    store.commit([store.save(item)] + ops)


@store.retrying
def delete(c: Ctx, edge_id: str) -> None:
    """One Query (edge + routes), then one transaction deleting them, the hostports and every
    reference they hold. When that is more than a transaction holds (routes referring to
    many distinct backends and IP policies), the routes are deleted first, each in its own
    transaction, then the edge: a failure in between leaves an edge with fewer routes, never
    a wrong count."""
    item, routes = _edge_and_routes(c.account_id, edge_id)
    ops = [store.delete(item)] + [store.drop(route.pk, route.sk) for route in routes]
    ops += edge_modules.edge_ops(c.account_id, COLLECTION, edge_id, item.data, {})
    ops += refs.move(
        c.account_id,
        sum((edge_modules.refs_of(r.data) for r in routes), Counter()),
        Counter(),
        _no_missing,
    )
    if len(ops) <= store.MAX_TRANSACTION_OPS:
        store.commit(ops)
        return
    for route in routes:
        delete_route(c, edge_id, route.sk.rpartition("#")[2])
    delete(c, edge_id)


# ---- routes -------------------------------------------------------------------------------------
def route_fields(
    raw: Dict[str, Any], edge_id: str, route_id: Optional[str] = None
) -> Dict[str, Any]:
    """The checked fields of a route create (no ``route_id``) or update body.

    ``edge_id`` (and ``id`` in an update) may be sent when they equal the path's.
    """
    raw = dict(raw)
    sent_edge = raw.pop("edge_id", None)
    if sent_edge is not None and sent_edge != edge_id:
        raise errors.InvalidField(
            f"Field 'edge_id' ({sent_edge!r}) does not match the edge in the path",
            details={"field": "edge_id"},
        )
    if route_id is None:
        return parse(raw, ROUTE_CREATE_FIELDS)
    return parse(raw, ROUTE_UPDATE_FIELDS, path_id=route_id)


def create_route(c: Ctx, edge_id: str, raw: Dict[str, Any]) -> Dict[str, Any]:
    """One transaction: the route, and the edge's route counter + 1 on condition that the
    edge exists (404) and has fewer than MAX_ROUTES routes (400)."""
    fields = route_fields(raw, edge_id)
    edge_modules.check_policy_refs(c.account_id, fields)
    if not ids.is_valid(edge_id, PREFIX):
        raise _edge_missing(edge_id)
    data = {
        "edge_id": edge_id,
        "description": "",
        "metadata": "",
        **{k: v for k, v in fields.items() if k not in UNSUPPORTED_ROUTE_MODULES},
        "created_at": validation.now_rfc3339(),
    }
    route_id = ids.new_id(ROUTE_PREFIX)
    references = edge_modules.ref_ops(c.account_id, {}, data)
    route = store.new_item(
        _edge_pk(c.account_id),
        _route_sk(edge_id, route_id),
        kind=ROUTE_COLLECTION,
        account_id=c.account_id,
        data=data,
    )
    full = errors.BadRequest(
        f"HTTPS edge '{edge_id}' already has {MAX_ROUTES} routes, the limit; delete one first"
    )
    store.commit(
        [
            store.put_new(route),
            store.set_fields(
                _edge_pk(c.account_id),
                edge_id,
                {},
                refs=1,
                require=lambda e: f"{e.path('refs')} < {e.value(MAX_ROUTES)}",
                explain=lambda old: full,
                missing=_edge_missing(edge_id),
            ),
        ]
        + references
    )
    return render_route(c, route)


def _route_key(account_id: str, edge_id: str, route_id: str) -> Tuple[str, str]:
    if not ids.is_valid(edge_id, PREFIX) or not ids.is_valid(route_id, ROUTE_PREFIX):
        raise _route_missing(route_id)
    return _edge_pk(account_id), _route_sk(edge_id, route_id)


def get_route_item(account_id: str, edge_id: str, route_id: str) -> store.Item:
    """The route, or 404 (also when the edge does not exist). The edge is not read: deleting
    an edge deletes its routes in the same transaction, so a route found proves its edge."""
    item = store.get(*_route_key(account_id, edge_id, route_id))
    if item is None:
        raise _route_missing(route_id)
    return item


def get_route(c: Ctx, edge_id: str, route_id: str) -> Dict[str, Any]:
    return render_route(c, get_route_item(c.account_id, edge_id, route_id))


def list_routes(
    c: Ctx, edge_id: str, limit: int, before_id: Optional[str]
) -> Tuple[List[Dict[str, Any]], bool]:
    """One Query, newest first, of the edge's routes and then the edge itself (so a missing
    edge is a 404 without a second read)."""
    if not ids.is_valid(edge_id, PREFIX):
        raise _edge_missing(edge_id)
    Model_ = store.model()
    high = _route_sk(edge_id, before_id) if before_id else edge_id + "$"
    items = list(
        Model_.query(
            _edge_pk(c.account_id),
            Model_.sk.between(edge_id, high),
            scan_index_forward=False,
            limit=limit + 2,
            page_size=limit + 2,
            consistent_read=True,
        )
    )
    routes = [i for i in items if i.sk != edge_id and i.sk != high]
    seen_edge = any(i.sk == edge_id for i in items)
    if not seen_edge and len(routes) <= limit:
        raise _edge_missing(edge_id)
    return [render_route(c, item) for item in routes[:limit]], len(routes) > limit


def _set_route(c: Ctx, edge_id: str, route_id: str, fields: Dict[str, Any]) -> store.Item:
    return store.write(
        store.set_fields(
            *_route_key(c.account_id, edge_id, route_id), fields, missing=_route_missing(route_id)
        )
    )


def update_route(c: Ctx, edge_id: str, route_id: str, raw: Dict[str, Any]) -> Dict[str, Any]:
    """One UpdateItem of the sent fields."""
    fields = route_fields(raw, edge_id, route_id)
    edge_modules.check_policy_refs(c.account_id, fields)
    changes = {
        k: v
        for k, v in fields.items()
        if k not in UNSUPPORTED_ROUTE_MODULES and not (k in ("match_type", "match") and v == "")
    }
    if not changes:
        return get_route(c, edge_id, route_id)
    if LINKED_ROUTE_MODULES & set(changes):
        return render_route(c, _replace_route(c, edge_id, route_id, changes))
    return render_route(c, _set_route(c, edge_id, route_id, changes))


# Route modules that refer to other items: changing them reads the route's old references.
LINKED_ROUTE_MODULES = frozenset({"backend", "ip_restriction"})


@store.retrying
def _replace_route(
    c: Ctx, edge_id: str, route_id: str, changes: Dict[str, Any], nested: bool = True
) -> store.Item:
    """GetItem of the route, then one transaction: the route (version-checked) and the
    reference counters moved from its old modules to the new ones."""
    route = get_route_item(c.account_id, edge_id, route_id)
    new = {**route.data, **changes}
    ops = edge_modules.ref_ops(c.account_id, route.data, new, nested=nested)
    route.data = new
    store.commit([store.save(route)] + ops)
    return route


@store.retrying
def delete_route(c: Ctx, edge_id: str, route_id: str) -> None:
    """GetItem of the route (404 when absent), then one transaction: the route, the edge's
    route counter - 1 and the route's reference counters."""
    route = get_route_item(c.account_id, edge_id, route_id)
    store.commit(
        [
            store.delete(route),
            store.set_fields(route.pk, edge_id, {}, refs=-1, missing=store.VersionConflict()),
        ]
        + edge_modules.ref_ops(c.account_id, route.data, {})
    )


# ---- route modules ------------------------------------------------------------------------------
def _module_name(name: str) -> str:
    if name not in MODULE_PARSERS and name not in UNSUPPORTED_ROUTE_MODULES:
        raise errors.NotFound(f"HTTPS edge routes have no module '{name}'")
    return name


def get_module(c: Ctx, edge_id: str, route_id: str, name: str) -> Dict[str, Any]:
    route = get_route_item(c.account_id, edge_id, route_id)
    if name in UNSUPPORTED_ROUTE_MODULES:  # never set (a PUT is refused)
        raise errors.NotFound(f"Route '{route_id}' has no {name} module")
    module = route.data.get(_module_name(name))
    if module is None:
        raise errors.NotFound(f"Route '{route_id}' has no {name} module")
    return MODULE_RENDERERS[name](c, module)


def put_module(
    c: Ctx, edge_id: str, route_id: str, name: str, raw: Dict[str, Any]
) -> Dict[str, Any]:
    """One UpdateItem of the module (backend, ip_restriction: GetItem + transaction)."""
    body = edge_modules.module_body(raw, {"edge_id": edge_id, "id": route_id})
    if _module_name(name) in UNSUPPORTED_ROUTE_MODULES:
        get_route_item(c.account_id, edge_id, route_id)  # 404 first, when there is none
        _unsupported(name, body)
    module = MODULE_PARSERS[name](None, body)
    edge_modules.check_policy_refs(c.account_id, {name: module}, nested=False)
    if name in LINKED_ROUTE_MODULES:
        _replace_route(c, edge_id, route_id, {name: module}, nested=False)
    else:
        _set_route(c, edge_id, route_id, {name: module})
    return MODULE_RENDERERS[name](c, module)


def delete_module(c: Ctx, edge_id: str, route_id: str, name: str) -> None:
    """One UpdateItem setting the module to null (404 only when the route is absent);
    backend and ip_restriction: GetItem + transaction (their references)."""
    if _module_name(name) in UNSUPPORTED_ROUTE_MODULES:  # never set: the route must exist
        get_route_item(c.account_id, edge_id, route_id)
        return
    if name in LINKED_ROUTE_MODULES:
        _replace_route(c, edge_id, route_id, {name: None})
    else:
        _set_route(c, edge_id, route_id, {name: None})


# ---- edge modules: /edges/https/{edge_id}/tls_termination | mutual_tls -------------------------
@store.retrying
def _replace_edge(c: Ctx, edge_id: str, changes: Dict[str, Any], nested: bool = True) -> None:
    item = get_item(c.account_id, edge_id)
    new = {**item.data, **changes}
    ops = edge_modules.edge_ops(c.account_id, COLLECTION, edge_id, item.data, new, nested)
    item.data = new
    store.commit([store.save(item)] + ops)


def _write_edge_module(c: Ctx, edge_id: str, name: str, module: Dict[str, Any]) -> None:
    """GetItem of the edge, then one transaction (the edge, its certificate authorities'
    counters)."""
    _replace_edge(c, edge_id, {name: module}, nested=False)


def _remove_edge_module(c: Ctx, edge_id: str, name: str) -> None:
    _replace_edge(c, edge_id, {name: None})


MODULE_HANDLERS = edge_modules.EdgeModules(
    "HTTPS edge",
    EDGE_MODULE_PARSERS,
    EDGE_MODULE_RENDERERS,
    get_item,
    _write_edge_module,
    _remove_edge_module,
    check_refs=False,  # tls_termination and mutual_tls name no IP policy
)
get_edge_module = MODULE_HANDLERS.get
put_edge_module = MODULE_HANDLERS.put
delete_edge_module = MODULE_HANDLERS.delete


EDGE_OPS = rest.Ops(
    prefix=PREFIX,
    list_key=LIST_KEY,
    create=create,
    get=get,
    list_page=list_page,
    update=update,
    delete=delete,
    create_fields=EDGE_FIELDS,
    update_fields=EDGE_FIELDS,
)
# Route bodies are parsed by route_fields() (create and update differ in defaults).
ROUTE_OPS = rest.Ops(
    prefix=ROUTE_PREFIX,
    list_key=ROUTE_LIST_KEY,
    create=create_route,
    get=get_route,
    list_page=list_routes,
    update=update_route,
    delete=delete_route,
)
