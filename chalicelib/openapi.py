"""The OpenAPI 3 document of the whole API, served at ``/openapi.json``.

It is generated from the app's routes (``app.routes``, minus the 405 views that
chalicelib.web adds) and the resource table the app registers them from
(chalicelib.resources), which says per operation what its body and its response are; the
response shapes are the component schemas below. Request bodies are built from the resource modules' ``validation.Field`` lists
(the same lists the views parse with), so a field added to a resource shows up here.
A route the table does not describe still appears (with a generic body), and is listed by
:func:`undescribed_routes`, which a test keeps empty; a table entry the app does not serve
is listed by :func:`unserved_operations`.

Built on first request (never at import: Lambda cold starts), cached per app; only
``servers`` changes per request (it is the caller's base URL, as every ``uri`` is).

Limits of the description: string lengths in the document are the byte limits the service
enforces on UTF-8 (``maxLength`` counts characters, so it is an upper bound); rules checked
by code (ACL syntax, CIDRs, RE2 patterns, …) are named in descriptions, and their failures
are the documented 400.
"""

import copy
import dataclasses
import functools
import threading
from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from chalicelib import filters, resources, validation, web
from chalicelib.core import errors, ids

OPENAPI_PATH = "/openapi.json"
TITLE = "Tunnel management service API"
VERSION = "2"

Schema = Dict[str, Any]


# ---- schema shorthands -------------------------------------------------------------------
def _ref(name: str) -> Schema:
    return {"$ref": f"#/components/schemas/{name}"}


def _nullable(schema: Schema) -> Schema:
    if "$ref" in schema:
        return {"allOf": [schema], "nullable": True}
    return {**schema, "nullable": True}


STR = {"type": "string"}
BOOL = {"type": "boolean"}
INT = {"type": "integer", "format": "int32"}
STR_LIST = {"type": "array", "items": STR}
STR_MAP = {"type": "object", "additionalProperties": STR}
TIMESTAMP = {"type": "string", "description": "RFC 3339, UTC"}
URI = {"type": "string", "description": "absolute address of the resource on this server"}


def _obj(properties: Dict[str, Schema], description: str = "") -> Schema:
    schema: Schema = {"type": "object", "properties": properties, "required": sorted(properties)}
    if description:
        schema["description"] = description
    return schema


def _id(kind: str) -> Schema:
    prefix = ids.PREFIXES[kind]
    return {
        "type": "string",
        "pattern": f"^{prefix}_[0-9A-Za-z]{{27}}$",
        "example": f"{prefix}_{'0' * 6}{'A' * 21}",
    }


def _common(kind: str) -> Dict[str, Schema]:
    return {
        "id": _id(kind),
        "uri": URI,
        "created_at": TIMESTAMP,
        "description": {"type": "string", "maxLength": validation.DESCRIPTION_MAX_BYTES},
        "metadata": {"type": "string", "maxLength": validation.METADATA_MAX_BYTES},
    }


def _without(props: Dict[str, Schema], *names: str) -> Dict[str, Schema]:
    return {k: v for k, v in props.items() if k not in names}


# ---- response schemas (components) -----------------------------------------------------
def _schemas() -> Dict[str, Schema]:
    ref = _obj({"id": STR, "uri": URI}, "a reference to another resource")
    return {
        "Error": _obj(
            {
                "error_code": {
                    "type": "string",
                    "enum": sorted(errors.CATALOG),
                    "description": "stable code from the error catalog",
                },
                "status_code": {"type": "integer", "minimum": 400, "maximum": 599},
                "msg": STR,
                "details": {
                    "type": "object",
                    "required": ["operation_id"],
                    "properties": {"operation_id": STR},
                    "additionalProperties": STR,
                },
            },
            "every non-2xx response",
        ),
        "Ref": ref,
        "APIKey": _obj(
            {**_common("api_key"), "token": _nullable(STR), "owner_id": STR},
            "an API key; `token` only in the create response",
        ),
        "HTTPResponseBackend": _obj(
            {
                **_common("http_response_backend"),
                "body": STR,
                "headers": _nullable(STR_MAP),
                "status_code": {"type": "integer", "minimum": 100, "maximum": 599},
            }
        ),
        "IPPolicy": _obj(_common("ip_policy")),
        "IPRestriction": _obj(
            {
                **_common("ip_restriction"),
                "enforced": BOOL,
                "type": {"type": "string", "enum": ["agent", "endpoints", "api", "dashboard"]},
                "ip_policies": {"type": "array", "items": _ref("Ref")},
            }
        ),
        "IPPolicyRule": _obj(
            {
                **_common("ip_policy_rule"),
                "cidr": STR,
                "ip_policy": _ref("Ref"),
                "action": {"type": "string", "enum": ["allow", "deny"]},
            }
        ),
        "Credential": _obj(
            {**_common("credential"), "token": _nullable(STR), "acl": STR_LIST, "owner_id": STR},
            "a tunnel authtoken credential; `token` only in the create response",
        ),
        "SSHCredential": _obj(
            {
                **_common("ssh_credential"),
                "public_key": {
                    "type": "string",
                    "description": "an OpenSSH authorized_keys line (ssh-ed25519, "
                    "ecdsa-sha2-nistp256/384/521, ssh-rsa of 2048-8192 bits)",
                },
                "acl": STR_LIST,
                "owner_id": STR,
            },
            "an SSH public key that authenticates the edge's SSH gateway (docs/SSH.md)",
        ),
        "SSHCertificateAuthority": _obj(
            {
                **_common("ssh_certificate_authority"),
                "public_key": {
                    "type": "string",
                    "description": "the CA's public key, an OpenSSH authorized_keys line "
                    "(its private key never leaves the service)",
                },
                "key_type": {"type": "string", "enum": ["rsa", "ecdsa", "ed25519"]},
            },
            "an SSH certificate authority whose key the service generated and keeps",
        ),
        "SSHHostCertificate": _obj(
            {
                **_common("ssh_host_certificate"),
                "public_key": STR,
                "key_type": STR,
                "ssh_certificate_authority_id": STR,
                "principals": STR_LIST,
                "valid_after": TIMESTAMP,
                "valid_until": TIMESTAMP,
                "certificate": {
                    "type": "string",
                    "description": "the OpenSSH certificate (…-cert-v01@openssh.com line)",
                },
            },
            "an SSH host certificate signed by an SSH certificate authority of the account",
        ),
        "SSHUserCertificate": _obj(
            {
                **_common("ssh_user_certificate"),
                "public_key": STR,
                "key_type": STR,
                "ssh_certificate_authority_id": STR,
                "principals": STR_LIST,
                "critical_options": STR_MAP,
                "extensions": STR_MAP,
                "valid_after": TIMESTAMP,
                "valid_until": TIMESTAMP,
                "certificate": {
                    "type": "string",
                    "description": "the OpenSSH certificate (…-cert-v01@openssh.com line); "
                    "it authenticates the edge's SSH gateway (docs/SSH.md)",
                },
            },
            "an SSH user certificate signed by an SSH certificate authority of the account",
        ),
        "BotUser": _obj(
            {
                "id": _id("bot_user"),
                "uri": URI,
                "name": STR,
                "active": BOOL,
                "created_at": TIMESTAMP,
            }
        ),
        "EndpointBackend": _obj({"enabled": BOOL, "backend": _ref("Ref")}),
        "EndpointIPPolicy": _obj(
            {"enabled": BOOL, "ip_policies": {"type": "array", "items": _ref("Ref")}}
        ),
        "EndpointTrafficPolicy": _obj({"enabled": BOOL, "value": STR}),
        "TCPEdge": _obj(
            {
                **_common("tcp_edge"),
                "hostports": _nullable(STR_LIST),
                "backend": _nullable(_ref("EndpointBackend")),
                "ip_restriction": _nullable(_ref("EndpointIPPolicy")),
                "traffic_policy": _nullable(_ref("EndpointTrafficPolicy")),
                "policy": {"nullable": True, "description": "always null"},
            }
        ),
        "EndpointUserAgentFilter": _obj({"enabled": BOOL, "allow": STR_LIST, "deny": STR_LIST}),
        "EndpointResponseHeaders": _obj({"enabled": BOOL, "add": STR_MAP, "remove": STR_LIST}),
        "EndpointRequestHeaders": _obj({"enabled": BOOL, "add": STR_MAP, "remove": STR_LIST}),
        "EndpointTLSTermination": _obj(
            {"enabled": BOOL, "terminate_at": STR, "min_version": _nullable(STR)}
        ),
        "EndpointMutualTLS": _obj(
            {"enabled": BOOL, "certificate_authorities": {"type": "array", "items": _ref("Ref")}}
        ),
        "EndpointCircuitBreaker": _obj(
            {
                "enabled": BOOL,
                "tripped_duration": INT,
                "rolling_window": INT,
                "num_buckets": INT,
                "volume_threshold": INT,
                "error_threshold_percentage": {"type": "number"},
            }
        ),
        "EndpointCompression": _obj({"enabled": BOOL}),
        "EndpointWebsocketTCPConverter": _obj({"enabled": BOOL}),
        "EndpointWebhookValidation": _obj(
            {"enabled": BOOL, "provider": STR, "secret": _nullable(STR)},
            "`secret` is write-only: responses show null",
        ),
        "EndpointOAuth": _obj(
            {
                "enabled": BOOL,
                "provider": {"type": "object", "description": "one provider by name"},
                "options_passthrough": BOOL,
                "cookie_prefix": STR,
                "inactivity_timeout": INT,
                "maximum_duration": INT,
                "auth_check_interval": INT,
            },
            "the provider's `client_secret` is write-only: responses show null",
        ),
        "EndpointOIDC": _obj(
            {
                "enabled": BOOL,
                "options_passthrough": BOOL,
                "cookie_prefix": STR,
                "inactivity_timeout": INT,
                "maximum_duration": INT,
                "auth_check_interval": INT,
                "issuer": STR,
                "client_id": STR,
                "client_secret": _nullable(STR),
                "scopes": STR_LIST,
            },
            "`client_secret` is write-only: responses show null",
        ),
        "EndpointSAML": _obj(
            {"enabled": BOOL},
            "not offered: a PUT is refused (400 ERR_NGROK_7021), the module is always null",
        ),
        "HTTPSEdgeRoute": _obj(
            {
                **_common("https_edge_route"),
                "edge_id": STR,
                "match_type": {"type": "string", "enum": ["exact_path", "path_prefix"]},
                "match": STR,
                "backend": _nullable(_ref("EndpointBackend")),
                "ip_restriction": _nullable(_ref("EndpointIPPolicy")),
                "user_agent_filter": _nullable(_ref("EndpointUserAgentFilter")),
                "request_headers": _nullable(_ref("EndpointRequestHeaders")),
                "response_headers": _nullable(_ref("EndpointResponseHeaders")),
                "traffic_policy": _nullable(_ref("EndpointTrafficPolicy")),
                "circuit_breaker": _nullable(_ref("EndpointCircuitBreaker")),
                "compression": _nullable(_ref("EndpointCompression")),
                "oauth": _nullable(_ref("EndpointOAuth")),
                "oidc": _nullable(_ref("EndpointOIDC")),
                "saml": _nullable(_ref("EndpointSAML")),
                "webhook_verification": _nullable(_ref("EndpointWebhookValidation")),
                "websocket_tcp_converter": _nullable(_ref("EndpointWebsocketTCPConverter")),
            }
        ),
        "HTTPSEdge": _obj(
            {
                **_common("https_edge"),
                "hostports": _nullable(STR_LIST),
                "routes": {"type": "array", "items": _ref("HTTPSEdgeRoute")},
                "mutual_tls": _nullable(_ref("EndpointMutualTLS")),
                "tls_termination": _nullable(_ref("EndpointTLSTermination")),
            }
        ),
        "TLSEdge": _obj(
            {
                **_common("tls_edge"),
                "hostports": _nullable(STR_LIST),
                "backend": _nullable(_ref("EndpointBackend")),
                "ip_restriction": _nullable(_ref("EndpointIPPolicy")),
                "mutual_tls": _nullable(_ref("EndpointMutualTLS")),
                "tls_termination": _nullable(_ref("EndpointTLSTermination")),
                "traffic_policy": _nullable(_ref("EndpointTrafficPolicy")),
                "policy": {"nullable": True, "description": "always null"},
            }
        ),
        "StaticBackend": _obj(
            {
                **_common("static_backend"),
                "address": {"type": "string", "description": "host:port the edge forwards to"},
                "tls": _obj({"enabled": BOOL}),
            }
        ),
        "TunnelGroupBackend": _obj(
            {
                **_common("tunnel_group_backend"),
                "labels": STR_MAP,
                "tunnels": {
                    "type": "array",
                    "items": _ref("Ref"),
                    "description": "online tunnels matching the labels (read-only)",
                },
            }
        ),
        "FailoverBackend": _obj({**_common("failover_backend"), "backends": STR_LIST}),
        "WeightedBackend": _obj(
            {
                **_common("weighted_backend"),
                "backends": {
                    "type": "object",
                    "additionalProperties": {"type": "integer", "minimum": 0, "maximum": 10000},
                },
            }
        ),
        "AgentIngress": _obj(
            {
                "id": _id("agent_ingress"),
                "uri": URI,
                "description": STR,
                "metadata": STR,
                "domain": STR,
                "ns_targets": STR_LIST,
                "region_domains": STR_LIST,
                "created_at": TIMESTAMP,
                "certificate_management_policy": _nullable(_ref("ReservedDomainCertPolicy")),
                "certificate_management_status": {"nullable": True, "type": "object"},
            },
            "a domain of the user's where agents connect to the edge (the edge's agent "
            "listener serves it by SNI, with the certificate issued under its policy when "
            "there is one; agents of other accounts are refused there)",
        ),
        "ReservedAddr": _obj({**_common("reserved_addr"), "addr": STR, "region": STR}),
        "CertificateAuthority": _obj(
            {
                **_common("certificate_authority"),
                "ca_pem": STR,
                "subject_common_name": STR,
                "not_before": TIMESTAMP,
                "not_after": TIMESTAMP,
                "key_usages": STR_LIST,
                "extended_key_usages": STR_LIST,
            }
        ),
        "TLSCertificate": _obj(
            {
                **_common("tls_certificate"),
                "certificate_pem": STR,
                "subject_common_name": STR,
                "subject_alternative_names": _obj({"dns_names": STR_LIST, "ips": STR_LIST}),
                "issued_at": _nullable(TIMESTAMP),
                "not_before": TIMESTAMP,
                "not_after": TIMESTAMP,
                "key_usages": STR_LIST,
                "extended_key_usages": STR_LIST,
                "private_key_type": STR,
                "issuer_common_name": STR,
                "serial_number": STR,
                "subject_organization": STR,
                "subject_organizational_unit": STR,
                "subject_locality": STR,
                "subject_province": STR,
                "subject_country": STR,
                "fingerprint": STR,
            }
        ),
        "AbuseReportHostname": _obj(
            {
                "hostname": STR,
                "status": {"type": "string", "enum": ["PENDING", "BANNED", "UNBANNED", "IGNORE"]},
            }
        ),
        "AbuseReport": _obj(
            {
                **_without(_common("abuse_report"), "description"),
                "urls": STR_LIST,
                "status": {
                    "type": "string",
                    "enum": ["PENDING", "PROCESSED", "PARTIALLY_PROCESSED"],
                },
                "hostnames": {"type": "array", "items": _ref("AbuseReportHostname")},
            }
        ),
        "TunnelSession": _obj(
            {
                "id": _id("tunnel_session"),
                "uri": URI,
                "agent_version": STR,
                "credential": _nullable(_ref("Ref")),
                "ip": STR,
                "metadata": STR,
                "os": STR,
                "region": STR,
                "started_at": TIMESTAMP,
                "transport": STR,
            },
            "an online agent session (written by the edge; offline sessions are not shown)",
        ),
        "Tunnel": _obj(
            {
                "id": _id("tunnel"),
                "public_url": STR,
                "started_at": TIMESTAMP,
                "metadata": STR,
                "proto": STR,
                "region": STR,
                "tunnel_session": _ref("Ref"),
                "endpoint": _nullable(_ref("Ref")),
                "labels": _nullable(STR_MAP),
                "backends": {"type": "array", "items": _ref("Ref")},
                "forwards_to": STR,
            },
            "an online tunnel of an agent session",
        ),
        "Endpoint": _obj(
            {
                "id": _id("endpoint"),
                "uri": URI,
                "region": STR,
                "created_at": TIMESTAMP,
                "updated_at": TIMESTAMP,
                "public_url": STR,
                "proto": STR,
                "scheme": STR,
                "hostport": STR,
                "host": STR,
                "port": _nullable(INT),
                "type": {"type": "string", "enum": ["agent", "cloud"]},
                "metadata": STR,
                "description": STR,
                "domain": _nullable(_ref("Ref")),
                "tcp_addr": _nullable(_ref("Ref")),
                "tunnel": _nullable(_ref("Ref")),
                "edge": _nullable(_ref("Ref")),
                "upstream_url": STR,
                "upstream_protocol": STR,
                "url": STR,
                "principal": _nullable(_ref("Ref")),
                "traffic_policy": STR,
                "bindings": STR_LIST,
                "tunnel_session": _nullable(_ref("Ref")),
                "name": STR,
                "pooling_enabled": BOOL,
            },
            "an endpoint: a cloud endpoint, or an agent endpoint while its session is online",
        ),
        "ReservedDomainDNSCheck": _obj(
            {
                "id": _id("reserved_domain"),
                "uri": URI,
                "domain": STR,
                "checked_at": TIMESTAMP,
                "ok": {"type": "boolean", "description": "every record found"},
                "records": {
                    "type": "array",
                    "items": _obj(
                        {
                            "type": {"type": "string", "enum": ["CNAME"]},
                            "name": STR,
                            "expected_target": STR,
                            "status": {
                                "type": "string",
                                "enum": ["found", "missing", "wrong_target", "unknown"],
                                "description": "unknown: the resolver did not answer (see msg)",
                            },
                            "found_targets": STR_LIST,
                            "msg": STR,
                        }
                    ),
                },
            },
            "the DNS check of a reserved domain: one record per CNAME it needs (none for a "
            "domain under the service's base domain)",
        ),
        "Vault": _obj(
            {
                **_common("vault"),
                "updated_at": TIMESTAMP,
                "name": STR,
                "created_by": STR,
                "last_updated_by": STR,
            },
            "a vault of secrets (docs/IDENTITY.md)",
        ),
        "Secret": _obj(
            {
                **_common("vault_secret"),
                "updated_at": TIMESTAMP,
                "name": STR,
                "created_by": _ref("Ref"),
                "last_updated_by": _ref("Ref"),
                "vault": _ref("Ref"),
                "vault_name": STR,
            },
            "a secret of a vault; its value is write-only, never returned",
        ),
        "ApplicationSession": _obj(
            {
                "id": _id("app_session"),
                "uri": URI,
                "public_url": STR,
                "browser_session": {"type": "object"},
                "application_user": _ref("Ref"),
                "created_at": TIMESTAMP,
                "last_active": TIMESTAMP,
                "expires_at": TIMESTAMP,
                "endpoint": _ref("Ref"),
                "edge": _nullable(_ref("Ref")),
                "route": _nullable(_ref("Ref")),
            },
            "a session of a person signed in through an openid-connect or oauth action",
        ),
        "ApplicationUser": _obj(
            {
                "id": _id("app_user"),
                "uri": URI,
                "identity_provider": {"type": "object"},
                "provider_user_id": STR,
                "username": STR,
                "email": STR,
                "name": STR,
                "created_at": TIMESTAMP,
                "last_active": TIMESTAMP,
                "last_login": TIMESTAMP,
            },
            "a person who signed in through an openid-connect or oauth action",
        ),
        "ReservedDomainCertPolicy": _obj({"authority": STR, "private_key_type": STR}),
        "ReservedDomain": _obj(
            {
                **_common("reserved_domain"),
                "domain": STR,
                "region": _nullable(STR),
                "cname_target": _nullable(STR),
                "certificate_management_policy": _nullable(_ref("ReservedDomainCertPolicy")),
                "certificate_management_status": {"nullable": True, "type": "object"},
                "acme_challenge_cname_target": _nullable(STR),
                "certificate": _nullable(_ref("Ref")),
                "resolves_to": {"nullable": True},
            }
        ),
    }


def _event_schemas() -> Dict[str, Schema]:
    from chalicelib import openapi_events

    return openapi_events.schemas()


# ---- the operation table (from chalicelib.resources) --------------------------------------------------------------
@dataclass(frozen=True)
class Op:
    """How one (method, path) is described.

    ``fields`` is the validation.Field list of the body the view parses; ``response`` a component schema; ``list_key`` makes the response a list page of
    that schema; ``status`` the success status.
    """

    summary: str
    tag: str
    response: Optional[str] = None
    status: int = 200
    fields: Optional[Sequence[validation.Field]] = None
    list_key: Optional[str] = None
    list_prefix: Optional[str] = None  # id prefix of before_id
    accepts_id: bool = False  # PATCH bodies may repeat the path's id
    field_schemas: Dict[str, Schema] = field(default_factory=dict)


def _collection_ops(c: resources.Collection) -> Dict[Tuple[str, str], Op]:
    """The described operations of one collection (only those it serves)."""
    o = c.resource_ops
    titles = c.titles or c.title + "s"
    online = "online " if c.online else ""
    create_fields = o.create_fields if o.create_fields is not None else c.create_doc
    update_fields = o.update_fields if o.update_fields is not None else c.update_doc
    described = {
        "create": (
            ("POST", c.path),
            Op(
                f"Create {c.title}",
                c.tag,
                c.schema,
                201,
                create_fields,
                field_schemas=dict(c.field_schemas),
            ),
        ),
        "list": (
            ("GET", c.path),
            Op(
                f"List {online}{titles}, newest first",
                c.tag,
                c.schema,
                list_key=o.list_key,
                list_prefix=o.prefix,
            ),
        ),
        "get": (
            ("GET", c.item_path),
            Op(f"Get {'an online ' if c.online else ''}{c.title}", c.tag, c.schema),
        ),
        "update": (
            ("PATCH", c.item_path),
            Op(
                f"Update {c.title} (only the fields sent)",
                c.tag,
                c.schema,
                fields=update_fields,
                accepts_id=True,
                field_schemas=dict(c.field_schemas),
            ),
        ),
        "delete": (("DELETE", c.item_path), Op(f"Delete {c.title}", c.tag, None, 204)),
    }
    ops = {}
    for name in c.ops:
        key, op = described[name]
        if name in c.summaries:
            op = dataclasses.replace(op, summary=c.summaries[name])
        ops[key] = op
    return ops


def _parts_ops(p: resources.Parts) -> Dict[Tuple[str, str], Op]:
    """GET/PUT/DELETE of each part a Parts entry serves (GET of an unset module: 404)."""
    ops = {}
    for name, part in p.parts.items():
        path, label = f"{p.path}/{name}", name.replace("_", " ")
        if p.get is not None:
            ops[("GET", path)] = Op(f"Get the {label} module", p.tag, part.schema)
        if p.put is not None:
            ops[("PUT", path)] = Op(
                f"Set the {label} module",
                p.tag,
                part.schema,
                fields=part.fields,
                field_schemas=dict(part.field_schemas),
            )
        if p.delete is not None:
            ops[("DELETE", path)] = Op(p.delete_summary.format(part=label), p.tag, None, 204)
    return ops


@functools.lru_cache(maxsize=1)  # the registry is fixed once imported; read per path param
def _operations() -> Dict[Tuple[str, str], Op]:
    """Every operation of chalicelib.resources' table, described."""
    ops: Dict[Tuple[str, str], Op] = {}
    for entry in resources.REGISTRY:
        if isinstance(entry, resources.Collection):
            ops.update(_collection_ops(entry))
        elif isinstance(entry, resources.Parts):
            ops.update(_parts_ops(entry))
        elif isinstance(entry, resources.Actions):
            for action in entry.handlers:
                ops[("POST", f"{entry.path}/{action}")] = Op(
                    entry.summaries[action], entry.tag, None, 204
                )
        elif isinstance(entry, resources.Routes):
            ops.update(entry.describe())
        else:
            ops[("POST", entry.path)] = Op(entry.summary, entry.tag, entry.schema, 200)
    return ops


# ---- building ----------------------------------------------------------------------------
_ERROR_STATUSES = {
    "400": "invalid body, query, version header or field",
    "401": "missing, malformed, unknown or revoked API key",
    "403": "the principal may not do this",
    "404": "no such resource in the caller's account (or malformed id)",
    "409": "conflict: uniqueness, reference, concurrent change",
    "413": "request body too large",
    "414": "request target (path and query) too long",
    "415": "a body that is not application/json",
    "500": "unexpected error (details are logged, never returned)",
}


def _field_schema(f: validation.Field) -> Schema:
    kind = f.type
    if kind == "string":
        schema: Schema = dict(STR)
        if f.max_bytes is not None:
            schema["maxLength"] = f.max_bytes
            schema["description"] = f"at most {f.max_bytes} bytes of UTF-8"
    elif kind == "boolean":
        schema = dict(BOOL)
    elif kind == "integer":
        schema = dict(INT)
    elif kind == "string_list":
        schema = {"type": "array", "items": dict(STR)}
        if f.max_items is not None:
            schema["maxItems"] = f.max_items
        if f.max_bytes is not None:
            schema["items"]["maxLength"] = f.max_bytes
    elif kind == "string_map":
        schema = {"type": "object", "additionalProperties": dict(STR)}
        if f.max_items is not None:
            schema["maxProperties"] = f.max_items
    elif kind == "object":
        schema = {"type": "object"}
    else:
        schema = {}
    if f.check is not None:
        schema["description"] = (
            schema.get("description", "") + "; further rules are checked (400 naming the field)"
        ).lstrip("; ")
    return schema


def _body_schema(
    fields: Sequence[validation.Field], overrides: Mapping[str, Schema], accepts_id: bool
) -> Schema:
    properties: Dict[str, Schema] = {}
    required = []
    for f in fields:
        schema = overrides.get(f.name)
        if schema is not None and "nested_fields" in schema:
            schema = _nullable(_body_schema(schema["nested_fields"], schema["overrides"], False))
        elif schema is None:
            schema = _field_schema(f)
            if not f.required:
                schema = {**schema, "nullable": True}
        properties[f.name] = schema
        if f.required:
            required.append(f.name)
    if accepts_id:
        properties["id"] = {"type": "string", "description": "if sent, the id in the path"}
    body: Schema = {"type": "object", "properties": properties, "additionalProperties": False}
    if required:
        body["required"] = required
    return body


def _path_param(name: str, path: str) -> Schema:
    # The id kind of a path parameter is the one of the collection it follows.
    segments = path.split("/")
    index = segments.index("{" + name + "}")
    collection = "/".join(segments[:index])
    kind = resources.collection_prefix(collection)
    if kind is None:  # a listing its own module describes (a Routes entry)
        listing = _operations().get(("GET", collection))
        kind = listing.list_prefix if listing is not None else None
    schema = {"type": "string"}
    if kind:
        schema = {"type": "string", "pattern": f"^{kind}_[0-9A-Za-z]{{27}}$"}
    return {"name": name, "in": "path", "required": True, "schema": schema}


def _responses(op: Optional[Op]) -> Dict[str, Any]:
    responses: Dict[str, Any] = {}
    if op is None:
        responses["200"] = {"description": "success (undescribed operation)"}
    elif op.status == 204:
        responses["204"] = {"description": "done; empty body"}
    else:
        schema = _ref(op.response) if op.response else {}
        if op.list_key:
            schema = _obj(
                {
                    op.list_key: {"type": "array", "items": _ref(op.response)},
                    "uri": URI,
                    "next_page_uri": _nullable(
                        {**URI, "description": "the next page, null on the last"}
                    ),
                }
            )
        responses[str(op.status)] = {
            "description": "success",
            "content": {"application/json": {"schema": schema}},
        }
    for status, description in _ERROR_STATUSES.items():
        responses[status] = {"$ref": f"#/components/responses/E{status}"}
    return responses


def _operation(method: str, path: str, view_name: str, op: Optional[Op]) -> Dict[str, Any]:
    params: List[Schema] = [{"$ref": "#/components/parameters/ServiceVersion"}]
    for segment in path.split("/"):
        if segment.startswith("{"):
            params.append(_path_param(segment[1:-1], path))
    operation: Dict[str, Any] = {
        "operationId": view_name,
        "summary": op.summary if op else view_name.replace("_", " "),
        "tags": [op.tag] if op else ["Undescribed"],
        "parameters": params,
        "responses": _responses(op),
    }
    if op and op.list_key:
        params += [
            {"$ref": "#/components/parameters/Limit"},
            {
                "name": "before_id",
                "in": "query",
                "required": False,
                "description": "exclusive: items created before this id",
                "schema": {"type": "string", "pattern": f"^{op.list_prefix}_[0-9A-Za-z]{{27}}$"},
            },
            {"$ref": "#/components/parameters/Filter"},
        ]
    if method in ("POST", "PUT", "PATCH"):
        body = None
        if op and op.fields:
            body = _body_schema(op.fields, op.field_schemas, op.accepts_id)
        operation["requestBody"] = {
            "required": method == "PUT",
            "content": {"application/json": {"schema": body or {"type": "object"}}},
        }
    return operation


def _service_routes(app: Any) -> Dict[Tuple[str, str], str]:
    routes = {}
    for path, by_method in app.routes.items():
        if path == OPENAPI_PATH:
            continue
        for method, entry in by_method.items():
            if entry.view_name.startswith("method_not_allowed_"):
                continue
            routes[(method, path)] = entry.view_name
    return routes


def undescribed_routes(app: Any) -> List[Tuple[str, str]]:
    """Routes the app serves that the operation table does not describe (must be empty)."""
    table = _operations()
    missing = []
    for method, path in sorted(_service_routes(app)):
        op = table.get((method, path))
        if op is None:
            missing.append((method, path))
    return missing


def unserved_operations(app: Any) -> List[Tuple[str, str]]:
    """Described operations whose route the app does not (yet) serve."""
    served = _service_routes(app)
    return sorted(key for key in _operations() if key not in served)


def build(app: Any) -> Dict[str, Any]:
    """The document for the routes ``app`` serves (only those)."""
    table = _operations()
    paths: Dict[str, Dict[str, Any]] = {}
    for (method, path), view_name in sorted(_service_routes(app).items()):
        paths.setdefault(path, {})[method.lower()] = _operation(
            method, path, view_name, table.get((method, path))
        )
    paths[OPENAPI_PATH] = {
        "get": {
            "operationId": "get_openapi_document",
            "summary": "This document",
            "tags": ["Docs"],
            "security": [],
            "responses": {
                "200": {
                    "description": "the OpenAPI document",
                    "content": {"application/json": {"schema": {"type": "object"}}},
                },
                "400": {"$ref": "#/components/responses/E400"},
                "500": {"$ref": "#/components/responses/E500"},
            },
        }
    }
    error_content = {"application/json": {"schema": _ref("Error")}}
    return {
        "openapi": "3.0.3",
        "info": {
            "title": TITLE,
            "version": VERSION,
            "description": "Management API of a tunnelling and ingress platform. Every "
            "request needs `Authorization: Bearer <API key>` and "
            "`Service-Version: 2` (or `Ngrok-Version: 2`); every non-2xx "
            "response has the Error body.",
        },
        "servers": [{"url": "/"}],
        "security": [{"bearer": []}],
        "tags": [
            {"name": name}
            for name in sorted({op["tags"][0] for item in paths.values() for op in item.values()})
        ],
        "paths": paths,
        "components": {
            "securitySchemes": {
                "bearer": {
                    "type": "http",
                    "scheme": "bearer",
                    "description": "an API key (see /api_keys)",
                }
            },
            "parameters": {
                "ServiceVersion": {
                    "name": "Service-Version",
                    "in": "header",
                    "required": True,
                    "description": "API version; `Ngrok-Version` is accepted as well",
                    "schema": {"type": "string", "enum": list(web.SUPPORTED_VERSIONS)},
                },
                "Filter": {
                    "name": "filter",
                    "in": "query",
                    "required": False,
                    "description": "a CEL expression over `obj` (the hosted service's "
                    "API filtering subset); a page reads at most "
                    f"{filters.SCAN_LIMIT} items",
                    "schema": {"type": "string", "maxLength": filters.MAX_LENGTH},
                },
                "Limit": {
                    "name": "limit",
                    "in": "query",
                    "required": False,
                    "description": f"page size, 1–{web.MAX_LIMIT} (default {web.DEFAULT_LIMIT})",
                    "schema": {"type": "integer", "minimum": 1, "maximum": web.MAX_LIMIT},
                },
            },
            "responses": {
                f"E{status}": {"description": description, "content": error_content}
                for status, description in _ERROR_STATUSES.items()
            },
            "schemas": {**_schemas(), **_event_schemas()},
        },
    }


_cache: Dict[int, Dict[str, Any]] = {}
_lock = threading.Lock()


def document(app: Any, base_url: Optional[str] = None) -> Dict[str, Any]:
    """The document (built once per app), with ``servers`` set to ``base_url``."""
    with _lock:
        built = _cache.get(id(app))
        if built is None:
            built = build(app)
            _cache[id(app)] = built
    result = copy.copy(built)
    result["servers"] = [{"url": base_url or "/"}]
    return result
