"""Every resource of the API, once: ``app.py`` registers its routes from this table and the
OpenAPI document (chalicelib.openapi) describes them from it, so a resource added here is
served and documented together, and a route cannot exist without its description.

An entry is one of four shapes (chalicelib.rest registers each):

- :class:`Collection`: create, list, get, update, delete of one resource (``ops`` says which);
- :class:`Parts`: GET/PUT/DELETE of named parts of one resource (edge modules, …);
- :class:`Actions`: ``POST {path}/<action>`` commands answering 204 (stop a session, …);
- :class:`Command`: one ``POST`` with an empty body that answers a document (a DNS check);
- :class:`Routes`: routes of other shapes, registered and described by their own module
  (event sources, the traffic inspector).

What the document needs beyond the routes is said here too: the tag, the response schema's
name (its shape lives in chalicelib.openapi), the human name used in summaries, and the
field lists of bodies a module parses itself.
"""

from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Mapping, Optional, Sequence, Tuple, Union

from chalicelib import abuse_reports, agent_ingresses, api_keys, app_sessions, backends, bot_users
from chalicelib import certificate_authorities, event_destinations, event_routes
from chalicelib import event_subscriptions, openapi_events, vaults
from chalicelib import credentials, dns_check, edge_modules, endpoints, http_response_backends
from chalicelib import https_edges, ip_policies, ip_restrictions, reserved_addrs
from chalicelib import reserved_domains, rest
from chalicelib import ssh_certificates, ssh_credentials
from chalicelib import tcp_edges, tls_certificates, tls_edges, tunnel_sessions, tunnels

Schema = Dict[str, Any]
Fields = Sequence[Any]  # a validation.Field list


@dataclass(frozen=True)
class Collection:
    """The collection routes of ``resource`` (a module following rest's naming, or an Ops)."""

    path: str
    resource: Any
    id_param: str
    name: str  # view names: create_<name>, get_<name>, …
    title: str  # in summaries: "Create <title>"
    tag: str
    schema: str  # the response's component schema
    plural: Optional[str] = None  # list_<plural>; default name + "s"
    titles: Optional[str] = None  # plural title; default title + "s"
    ops: Tuple[str, ...] = rest.ALL
    online: bool = False  # written by the edge: list and get read "online …"
    create_doc: Optional[Fields] = None  # the create body's fields, when the view parses raw
    update_doc: Optional[Fields] = None
    field_schemas: Mapping[str, Schema] = field(default_factory=dict)
    summaries: Mapping[str, str] = field(default_factory=dict)  # per op, replacing the default

    @property
    def item_path(self) -> str:
        return f"{self.path}/{{{self.id_param}}}"

    @property
    def resource_ops(self) -> rest.Ops:
        r = self.resource
        return r if isinstance(r, rest.Ops) else rest.Ops.of(r)


@dataclass(frozen=True)
class Part:
    """How the document describes one part: its schema, body fields and field overrides."""

    schema: Optional[str] = None
    fields: Optional[Fields] = None
    field_schemas: Mapping[str, Schema] = field(default_factory=dict)


@dataclass(frozen=True)
class Parts:
    """GET/PUT/DELETE ``{path}/<part>``; a method whose function is None is not served."""

    path: str
    parts: Mapping[str, Part]
    owner: str
    tag: str
    get: Optional[Callable[..., Any]] = None
    put: Optional[Callable[..., Any]] = None
    delete: Optional[Callable[..., Any]] = None
    delete_summary: str = "Remove the {part} module"


@dataclass(frozen=True)
class Actions:
    """``POST {path}/<action>`` → ``handler(c, *params)``, 204; summaries per action."""

    path: str
    handlers: Mapping[str, Callable[..., Any]]
    owner: str
    tag: str
    summaries: Mapping[str, str]


@dataclass(frozen=True)
class Command:
    """``POST {path}`` with an empty body → ``handler(c, *params)``, 200 with its result."""

    path: str
    handler: Callable[..., Any]
    name: str
    tag: str
    schema: str
    summary: str


@dataclass(frozen=True)
class Routes:
    """Routes a module registers itself (``register(route)``), with their description
    (``describe()``: chalicelib.openapi operations by (method, path))."""

    register: Callable[[Callable[..., Any]], None]
    describe: Callable[[], Dict[Tuple[str, str], Any]]


Entry = Union[Collection, Parts, Actions, Command, Routes]


# ---- schema pieces the entries below use (chalicelib.openapi renders them) -----------------
STR: Schema = {"type": "string"}
STR_LIST: Schema = {"type": "array", "items": STR}
STR_MAP: Schema = {"type": "object", "additionalProperties": STR}
BOOL: Schema = {"type": "boolean"}


def nested(fields: Fields, overrides: Optional[Mapping[str, Schema]] = None) -> Schema:
    """A module object inside a body, described from the module's own Field list."""
    return {"nested_fields": fields, "overrides": dict(overrides or {})}


HOSTPORTS: Schema = {
    "type": "array",
    "items": STR,
    "nullable": True,
    "description": "host:port entries, each served by one edge at most",
}
TCP_EDGE_MODULES: Dict[str, Schema] = {
    "hostports": HOSTPORTS,
    "backend": nested(edge_modules.BACKEND_FIELDS),
    "ip_restriction": nested(edge_modules.IP_RESTRICTION_FIELDS),
    "traffic_policy": nested(edge_modules.TRAFFIC_POLICY_FIELDS),
    "policy": {
        "type": "object",
        "nullable": True,
        "properties": {
            "enabled": BOOL,
            "inbound": {"type": "array"},
            "outbound": {"type": "array", "maxItems": 0},
        },
        "description": "the older traffic policy shape (TypeScript client): stored "
        "as traffic_policy, inbound rules as on_tcp_connect",
    },
}
HEADER_CHANGES: Dict[str, Schema] = {
    "add": {**STR_MAP, "description": "header name → value; names are returned lower-cased"},
    "remove": {**STR_LIST, "description": "header names"},
}
ROUTE_PARTS: Dict[str, Part] = {
    "backend": Part("EndpointBackend", edge_modules.BACKEND_FIELDS),
    "ip_restriction": Part("EndpointIPPolicy", edge_modules.IP_RESTRICTION_FIELDS),
    "user_agent_filter": Part("EndpointUserAgentFilter", https_edges.UA_FIELDS),
    "request_headers": Part("EndpointRequestHeaders", https_edges.RH_FIELDS, HEADER_CHANGES),
    "response_headers": Part("EndpointResponseHeaders", https_edges.RH_FIELDS, HEADER_CHANGES),
    "traffic_policy": Part("EndpointTrafficPolicy", https_edges.ROUTE_TRAFFIC_POLICY_FIELDS),
    "circuit_breaker": Part(
        "EndpointCircuitBreaker",
        https_edges.CB_FIELDS,
        {"error_threshold_percentage": {"type": "number", "minimum": 0, "maximum": 1}},
    ),
    "compression": Part("EndpointCompression", https_edges.ENABLED_ONLY),
    "oauth": Part(
        "EndpointOAuth",
        https_edges.OAUTH_FIELDS,
        {
            "provider": {
                "type": "object",
                "description": "one provider by name (google, github, …): {client_id, "
                "client_secret, scopes, email_addresses, email_domains}",
            }
        },
    ),
    "oidc": Part("EndpointOIDC", https_edges.OIDC_FIELDS),
    "webhook_verification": Part("EndpointWebhookValidation", https_edges.WEBHOOK_FIELDS),
    "websocket_tcp_converter": Part("EndpointWebsocketTCPConverter", https_edges.ENABLED_ONLY),
}
assert tuple(ROUTE_PARTS) == tuple(https_edges.ROUTE_MODULES)
# Refused by name (PUT: 400 ERR_NGROK_7021; GET: 404; DELETE: 204): no SAML here.
SAML_PART: Dict[str, Part] = {"saml": Part("EndpointSAML", [])}
TCP_PARTS: Dict[str, Part] = {
    "backend": Part("EndpointBackend", edge_modules.BACKEND_FIELDS),
    "ip_restriction": Part("EndpointIPPolicy", edge_modules.IP_RESTRICTION_FIELDS),
    "traffic_policy": Part("EndpointTrafficPolicy", edge_modules.TRAFFIC_POLICY_FIELDS),
}
assert tuple(TCP_PARTS) == tuple(tcp_edges.MODULES)
HTTPS_EDGE_PARTS: Dict[str, Part] = {
    "tls_termination": Part("EndpointTLSTermination", https_edges.TLS_FIELDS),
    "mutual_tls": Part("EndpointMutualTLS", https_edges.MTLS_FIELDS),
}
assert tuple(HTTPS_EDGE_PARTS) == tuple(https_edges.EDGE_MODULES)
TLS_PARTS: Dict[str, Part] = {
    "backend": Part("EndpointBackend", edge_modules.BACKEND_FIELDS),
    "ip_restriction": Part("EndpointIPPolicy", edge_modules.IP_RESTRICTION_FIELDS),
    "mutual_tls": Part("EndpointMutualTLS", https_edges.MTLS_FIELDS),
    "tls_termination": Part("EndpointTLSTermination", tls_edges.TLS_FIELDS),
    "traffic_policy": Part("EndpointTrafficPolicy", tls_edges.TRAFFIC_POLICY_FIELDS),
}
assert tuple(TLS_PARTS) == tuple(tls_edges.MODULES)
TLS_EDGE_MODULES: Dict[str, Schema] = {
    "hostports": HOSTPORTS,
    "backend": nested(edge_modules.BACKEND_FIELDS),
    "ip_restriction": nested(edge_modules.IP_RESTRICTION_FIELDS),
    "mutual_tls": nested(https_edges.MTLS_FIELDS),
    "tls_termination": nested(tls_edges.TLS_FIELDS),
    "traffic_policy": nested(tls_edges.TRAFFIC_POLICY_FIELDS),
    "policy": TCP_EDGE_MODULES["policy"],
}


def _backend(path: str, ops: rest.Ops, name: str, title: str, schema: str) -> Collection:
    return Collection(
        path, ops, "backend_id", name, title, title[0].upper() + title[1:] + "s", schema
    )


# ---- the table, in the order the routes are registered -----------------------------------
REGISTRY: Tuple[Entry, ...] = (
    # Identity
    Collection("/api_keys", api_keys, "key_id", "api_key", "API key", "API keys", "APIKey"),
    Collection(
        "/credentials",
        credentials,
        "credential_id",
        "credential",
        "credential",
        "Credentials",
        "Credential",
        field_schemas={"owner_id": STR},
    ),
    Collection(
        "/ssh_credentials",
        ssh_credentials,
        "ssh_credential_id",
        "ssh_credential",
        "SSH credential",
        "SSH credentials",
        "SSHCredential",
        field_schemas={"owner_id": STR},
    ),
    # SSH certificate authorities and the certificates they sign (docs/SSH.md)
    Collection(
        "/ssh_certificate_authorities",
        ssh_certificates.CA_OPS,
        "ssh_certificate_authority_id",
        "ssh_certificate_authority",
        "SSH certificate authority",
        "SSH certificate authorities",
        "SSHCertificateAuthority",
        plural="ssh_certificate_authorities",
        titles="SSH certificate authorities",
    ),
    Collection(
        "/ssh_host_certificates",
        ssh_certificates.HOST_OPS,
        "ssh_host_certificate_id",
        "ssh_host_certificate",
        "SSH host certificate",
        "SSH host certificates",
        "SSHHostCertificate",
    ),
    Collection(
        "/ssh_user_certificates",
        ssh_certificates.USER_OPS,
        "ssh_user_certificate_id",
        "ssh_user_certificate",
        "SSH user certificate",
        "SSH user certificates",
        "SSHUserCertificate",
    ),
    Collection("/bot_users", bot_users, "bot_id", "bot_user", "bot user", "Bot users", "BotUser"),
    Collection(
        "/service_users",
        bot_users.SERVICE_USER_OPS,
        "service_user_id",
        "service_user",
        "service user",
        "Service users",
        "BotUser",
    ),
    Collection(
        "/abuse_reports",
        abuse_reports.OPS,
        "report_id",
        "abuse_report",
        "abuse report",
        "Abuse reports",
        "AbuseReport",
        ops=("create", "get"),
        create_doc=abuse_reports.CREATE_FIELDS,
    ),
    # Domains
    Collection(
        "/reserved_domains",
        reserved_domains,
        "domain_id",
        "reserved_domain",
        "reserved domain",
        "Reserved domains",
        "ReservedDomain",
    ),
    Parts(
        "/reserved_domains/{domain_id}",
        {part: Part() for part in reserved_domains.PARTS},
        owner="reserved_domain",
        tag="Reserved domains",
        delete=reserved_domains.delete_part,
        delete_summary="Detach the {part} of a reserved domain",
    ),
    Command(
        "/reserved_domains/{domain_id}/dns_check",
        dns_check.check,
        "dns_check_reserved_domain",
        "Reserved domains",
        "ReservedDomainDNSCheck",
        "Check the domain's CNAME records in DNS (found, missing or wrong target per "
        "record; no body; the resolver is the service's DNS_CHECK_RESOLVER)",
    ),
    Collection(
        "/agent_ingresses",
        agent_ingresses,
        "agent_ingress_id",
        "agent_ingress",
        "agent ingress",
        "Agent ingresses",
        "AgentIngress",
        plural="agent_ingresses",
        titles="agent ingresses",
        field_schemas={
            "certificate_management_policy": {
                "$ref": "#/components/schemas/ReservedDomainCertPolicy"
            }
        },
    ),
    Parts(
        "/agent_ingresses/{agent_ingress_id}",
        {part: Part() for part in agent_ingresses.PARTS},
        owner="agent_ingress",
        tag="Agent ingresses",
        delete=agent_ingresses.delete_part,
        delete_summary="Detach the {part} of an agent ingress",
    ),
    Collection(
        "/reserved_addrs",
        reserved_addrs,
        "addr_id",
        "reserved_addr",
        "reserved address",
        "Reserved addresses",
        "ReservedAddr",
        titles="reserved addresses",
    ),
    # Certificate authorities (for HTTPS edges' mutual_tls)
    Collection(
        "/certificate_authorities",
        certificate_authorities,
        "ca_id",
        "certificate_authority",
        "certificate authority",
        "Certificate authorities",
        "CertificateAuthority",
        plural="certificate_authorities",
        titles="certificate authorities",
    ),
    # TLS certificates (uploaded, or issued by ACME for reserved domains: docs/CERTIFICATES.md)
    Collection(
        "/tls_certificates",
        tls_certificates,
        "certificate_id",
        "tls_certificate",
        "TLS certificate",
        "TLS certificates",
        "TLSCertificate",
    ),
    # IP policies
    Collection(
        "/ip_policies",
        ip_policies.POLICY_OPS,
        "policy_id",
        "ip_policy",
        "IP policy",
        "IP policies",
        "IPPolicy",
        plural="ip_policies",
        titles="IP policies",
    ),
    Collection(
        "/ip_policy_rules",
        ip_policies.RULE_OPS,
        "rule_id",
        "ip_policy_rule",
        "IP policy rule",
        "IP policy rules",
        "IPPolicyRule",
    ),
    Collection(
        "/ip_restrictions",
        ip_restrictions,
        "restriction_id",
        "ip_restriction",
        "IP restriction",
        "IP restrictions",
        "IPRestriction",
    ),
    # Backends
    _backend(
        "/backends/http_response",
        rest.Ops.of(http_response_backends),
        "http_response_backend",
        "HTTP response backend",
        "HTTPResponseBackend",
    ),
    _backend(
        "/backends/tunnel_group",
        backends.TUNNEL_GROUP_OPS,
        "tunnel_group_backend",
        "tunnel group backend",
        "TunnelGroupBackend",
    ),
    _backend(
        "/backends/failover",
        backends.FAILOVER_OPS,
        "failover_backend",
        "failover backend",
        "FailoverBackend",
    ),
    _backend(
        "/backends/static",
        backends.STATIC_OPS,
        "static_backend",
        "static backend",
        "StaticBackend",
    ),
    _backend(
        "/backends/weighted",
        backends.WEIGHTED_OPS,
        "weighted_backend",
        "weighted backend",
        "WeightedBackend",
    ),
    # Edges, routes and modules
    Collection(
        "/edges/tcp",
        tcp_edges,
        "edge_id",
        "tcp_edge",
        "TCP edge",
        "TCP edges",
        "TCPEdge",
        field_schemas=TCP_EDGE_MODULES,
    ),
    Parts(
        "/edges/tcp/{edge_id}",
        TCP_PARTS,
        owner="tcp_edge",
        tag="TCP edges",
        get=tcp_edges.get_module,
        put=tcp_edges.put_module,
        delete=tcp_edges.delete_module,
    ),
    Collection(
        "/edges/https",
        https_edges.EDGE_OPS,
        "edge_id",
        "https_edge",
        "HTTPS edge",
        "HTTPS edges",
        "HTTPSEdge",
        field_schemas={
            "hostports": HOSTPORTS,
            "mutual_tls": nested(https_edges.MTLS_FIELDS),
            "tls_termination": nested(https_edges.TLS_FIELDS),
        },
    ),
    Parts(
        "/edges/https/{edge_id}",
        HTTPS_EDGE_PARTS,
        owner="https_edge",
        tag="HTTPS edges",
        get=https_edges.get_edge_module,
        put=https_edges.put_edge_module,
        delete=https_edges.delete_edge_module,
    ),
    Collection(
        "/edges/https/{edge_id}/routes",
        https_edges.ROUTE_OPS,
        "route_id",
        "https_edge_route",
        "HTTPS edge route",
        "HTTPS edge routes",
        "HTTPSEdgeRoute",
        create_doc=https_edges.ROUTE_CREATE_FIELDS,
        update_doc=https_edges.ROUTE_UPDATE_FIELDS,
        field_schemas={
            name: nested(part.fields or (), part.field_schemas)
            for name, part in ROUTE_PARTS.items()
        },
    ),
    Parts(
        "/edges/https/{edge_id}/routes/{route_id}",
        ROUTE_PARTS,
        owner="https_edge_route",
        tag="HTTPS edge routes",
        get=https_edges.get_module,
        put=https_edges.put_module,
        delete=https_edges.delete_module,
    ),
    Parts(
        "/edges/https/{edge_id}/routes/{route_id}",
        SAML_PART,
        owner="https_edge_route",
        tag="HTTPS edge routes",
        get=https_edges.get_module,
        put=https_edges.put_module,
        delete=https_edges.delete_module,
    ),
    Collection(
        "/edges/tls",
        tls_edges,
        "edge_id",
        "tls_edge",
        "TLS edge",
        "TLS edges",
        "TLSEdge",
        field_schemas=TLS_EDGE_MODULES,
    ),
    Parts(
        "/edges/tls/{edge_id}",
        TLS_PARTS,
        owner="tls_edge",
        tag="TLS edges",
        get=tls_edges.get_module,
        put=tls_edges.put_module,
        delete=tls_edges.delete_module,
    ),
    # Online (written by the edge; read-only here, plus commands to a session's agent)
    Collection(
        "/tunnel_sessions",
        tunnel_sessions,
        "session_id",
        "tunnel_session",
        "tunnel session",
        "Tunnel sessions",
        "TunnelSession",
        ops=("list", "get"),
        online=True,
    ),
    Actions(
        "/tunnel_sessions/{session_id}",
        tunnel_sessions.ACTIONS,
        owner="tunnel_session",
        tag="Tunnel sessions",
        summaries={
            "stop": "Stop the session's agent: 204 once it accepted, 400 ERR_NGROK_805 with its "
            "reason when it refused (waits for its answer, at most 20 s)",
            "restart": "Restart the session's agent: 204 once it accepted, 400 ERR_NGROK_804 "
            "with its reason when it refused (waits for its answer, at most 20 s)",
            "update": "Update the session's agent: not offered by this service (400 "
            "ERR_UNSUPPORTED_OPERATION)",
        },
    ),
    Collection(
        "/tunnels",
        tunnels,
        "tunnel_id",
        "tunnel",
        "tunnel",
        "Tunnels",
        "Tunnel",
        ops=("list", "get"),
        online=True,
    ),
    Collection(
        "/endpoints",
        endpoints,
        "endpoint_id",
        "endpoint",
        "endpoint",
        "Endpoints",
        "Endpoint",
        online=True,
        summaries={
            "create": "Create a cloud endpoint (served by the edge from its "
            "traffic_policy, no agent)",
            "update": "Update a cloud endpoint (only the fields sent; agent endpoints: 400)",
            "delete": "Delete a cloud endpoint, or stop a live agent endpoint (its agent gets a "
            "StopTunnel; 204 once done)",
        },
    ),
    # Vaults and secrets (traffic policies' ${secrets.get('vault', 'name')}: docs/IDENTITY.md)
    Collection("/vaults", vaults.VAULT_OPS, "vault_id", "vault", "vault", "Vaults", "Vault"),
    Collection(
        "/vaults/{vault_id}/secrets",
        vaults.BY_VAULT_OPS,
        "secret_id",
        "vault_secret",
        "secret of a vault",
        "Vaults",
        "Secret",
        plural="secrets_by_vault",
        titles="secrets of a vault",
        ops=("list",),
    ),
    Collection(
        "/vault_secrets",
        vaults.SECRET_OPS,
        "secret_id",
        "vault_secret",
        "vault secret",
        "Vault secrets",
        "Secret",
    ),
    # People signed in through the openid-connect / oauth actions (written by the edge)
    Collection(
        "/app/sessions",
        app_sessions.SESSION_OPS,
        "app_session_id",
        "application_session",
        "application session",
        "Application sessions",
        "ApplicationSession",
        ops=("list", "get", "delete"),
        summaries={
            "get": "Get an application session",
            "delete": "Delete (revoke) an application session",
        },
    ),
    Collection(
        "/app/users",
        app_sessions.USER_OPS,
        "app_user_id",
        "application_user",
        "application user",
        "Application sessions",
        "ApplicationUser",
        ops=("list", "get", "delete"),
        summaries={
            "get": "Get an application user",
            "delete": "Delete (revoke) an application user",
        },
    ),
    # Events (docs/EVENTS.md): destinations, subscriptions, their sources; the inspector
    Collection(
        "/event_destinations",
        event_destinations,
        "destination_id",
        "event_destination",
        "event destination",
        "Event destinations",
        "EventDestination",
        field_schemas={"target": {"$ref": "#/components/schemas/EventTarget"}},
    ),
    Collection(
        "/event_subscriptions",
        event_subscriptions,
        "subscription_id",
        "event_subscription",
        "event subscription",
        "Event subscriptions",
        "EventSubscription",
        field_schemas={
            "sources": {
                "type": "array",
                "nullable": True,
                "items": {"type": "object", "properties": {"type": {"type": "string"}}},
            }
        },
    ),
    Routes(event_routes.register, openapi_events.operations),
)


def register(route: Callable[..., Any]) -> None:
    """Register every entry's routes through ``route`` (app.py's authorized route)."""
    for entry in REGISTRY:
        if isinstance(entry, Collection):
            rest.collection(
                route,
                entry.path,
                entry.resource,
                entry.id_param,
                name=entry.name,
                plural=entry.plural,
                ops=entry.ops,
            )
        elif isinstance(entry, Parts):
            rest.modules(
                route,
                entry.path,
                tuple(entry.parts),
                owner=entry.owner,
                get=entry.get,
                put=entry.put,
                delete=entry.delete,
            )
        elif isinstance(entry, Actions):
            rest.actions(route, entry.path, dict(entry.handlers), owner=entry.owner)
        elif isinstance(entry, Routes):
            entry.register(route)
        else:
            rest.command(route, entry.path, entry.handler, name=entry.name)


def collection_prefix(path: str) -> Optional[str]:
    """The id prefix of the collection served at ``path`` (None when none is)."""
    for entry in REGISTRY:
        if isinstance(entry, Collection) and entry.path == path:
            return entry.resource_ops.prefix
    return None
