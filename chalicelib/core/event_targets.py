"""Event destinations' targets and event subscriptions' sources: what both planes agree on.

The API (chalicelib.event_destinations, chalicelib.event_subscriptions) checks and stores
them; the edge's delivery worker (edge/events.py) reads them back from the store. Kept here,
Chalice-free, so the two never disagree on a field name or a rule.

A destination's ``target`` has exactly one of ``kinesis`` (``stream_arn``), ``firehose``
(``delivery_stream_arn``) or ``cloudwatch_logs`` (``log_group_arn``), each with ``auth``:
exactly one of ``role`` (``role_arn``: AssumeRole) or ``creds`` (``aws_access_key_id``,
``aws_secret_access_key``). The region is the ARN's. The secret access key is stored sealed
(chalicelib.core.keywrap, bound to the account and destination id) and never returned
(``null`` in every response).
"""

import re
from typing import Any, Dict, List, Optional, Tuple

from chalicelib.core import errors, event_filters, keywrap

COLLECTION_DESTINATION = "event_destination"
COLLECTION_SUBSCRIPTION = "event_subscription"

KINDS = ("kinesis", "firehose", "cloudwatch_logs")
NOT_OFFERED = ("datadog", "azure_logs_ingestion", "s3", "debug")
ARN_FIELD = {
    "kinesis": "stream_arn",
    "firehose": "delivery_stream_arn",
    "cloudwatch_logs": "log_group_arn",
}

# Event types this service emits (and so accepts as a subscription's source).
HTTP_REQUEST_COMPLETE = "http_request_complete.v0"
TCP_CONNECTION_CLOSED = "tcp_connection_closed.v0"
TRAFFIC_TYPES = (HTTP_REQUEST_COMPLETE, TCP_CONNECTION_CLOSED)
# The hosted service's API events (its "audit" events): ``<resource>_<action>.v0`` for the
# API's collections that have them there (chalicelib/core/audit_events.py emits them).
AUDIT_RESOURCES = {
    "/api_keys": "api_key",
    "/certificate_authorities": "certificate_authority",
    "/reserved_domains": "domain",
    "/event_destinations": "event_destination",
    "/event_subscriptions": "event_subscription",
    "/ip_policies": "ip_policy",
    "/ip_policy_rules": "ip_policy_rule",
    "/reserved_addrs": "tcp_address",
    "/tls_certificates": "tls_certificate",
    "/credentials": "tunnel_credential",
}
AUDIT_ACTIONS = ("created", "updated", "deleted")
AUDIT_TYPES = tuple(
    f"{resource}_{action}.v0" for resource in AUDIT_RESOURCES.values() for action in AUDIT_ACTIONS
)
EVENT_TYPES = TRAFFIC_TYPES + AUDIT_TYPES

MAX_SOURCES = len(EVENT_TYPES)
MAX_DESTINATIONS = 10  # destination ids per subscription
MAX_PER_ACCOUNT = 100  # subscriptions (and destinations) per account: one Query page

_PARTITION = r"arn:(aws|aws-cn|aws-us-gov)"
_REGION = r"([a-z]{2}(-[a-z]+)+-\d)"
_ACCOUNT = r"(\d{12})"
_ARN_RE = {
    "kinesis": re.compile(
        rf"^{_PARTITION}:kinesis:{_REGION}:{_ACCOUNT}:stream/"
        r"([A-Za-z0-9_.-]{1,128})$"
    ),
    "firehose": re.compile(
        rf"^{_PARTITION}:firehose:{_REGION}:{_ACCOUNT}:deliverystream/"
        r"([A-Za-z0-9_.-]{1,64})$"
    ),
    "cloudwatch_logs": re.compile(
        rf"^{_PARTITION}:logs:{_REGION}:{_ACCOUNT}:log-group:"
        r"([A-Za-z0-9_./#-]{1,512})(:\*)?$"
    ),
}
_ROLE_RE = re.compile(rf"^{_PARTITION}:iam::{_ACCOUNT}:role/[A-Za-z0-9+=,.@_/-]{{1,512}}$")
_KEY_ID_RE = re.compile(r"^[A-Z0-9]{16,128}$")


def _bad(field: str, why: str) -> errors.InvalidField:
    return errors.InvalidField(f"Field '{field}' {why}", details={"field": field})


def _object(field: str, value: Any) -> Dict[str, Any]:
    if not isinstance(value, dict):
        raise _bad(field, "must be an object")
    return value


def _only(field: str, value: Dict[str, Any], allowed: Tuple[str, ...]) -> None:
    for key in value:
        if key not in allowed:
            raise errors.UnknownField(
                f"Unknown field '{field}.{key}'; accepted fields: {', '.join(allowed)}",
                details={"field": f"{field}.{key}"},
            )


def check_auth(field: str, value: Any, old: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
    """``{"role": {"role_arn"}}`` or ``{"creds": {"aws_access_key_id",
    "aws_secret_access_key"}}``: the stored form (the secret still in clear: the caller seals
    it). A ``creds`` without a secret keeps ``old``'s (what a client that read the
    destination sends back)."""
    auth = _object(field, value)
    _only(field, auth, ("role", "creds"))
    present = [k for k in ("role", "creds") if auth.get(k) is not None]
    if len(present) != 1:
        raise _bad(field, "must have exactly one of 'role' or 'creds'")
    if present[0] == "role":
        role = _object(f"{field}.role", auth["role"])
        _only(f"{field}.role", role, ("role_arn",))
        arn = role.get("role_arn")
        if not isinstance(arn, str) or not _ROLE_RE.match(arn):
            raise _bad(
                f"{field}.role.role_arn",
                "must be an IAM role ARN (arn:aws:iam::<12 digits>:role/<name>)",
            )
        return {"role": {"role_arn": arn}}
    creds = _object(f"{field}.creds", auth["creds"])
    _only(f"{field}.creds", creds, ("aws_access_key_id", "aws_secret_access_key"))
    key_id, secret = creds.get("aws_access_key_id"), creds.get("aws_secret_access_key")
    if not isinstance(key_id, str) or not _KEY_ID_RE.match(key_id):
        raise _bad(
            f"{field}.creds.aws_access_key_id",
            "must be an AWS access key id (16-128 upper-case letters and digits)",
        )
    if (
        secret is None
        and old is not None
        and (old.get("creds") or {}).get("aws_access_key_id") == key_id
    ):
        return {"creds": dict(old["creds"])}
    if not isinstance(secret, str) or not 1 <= len(secret) <= 128 or not secret.isprintable():
        raise _bad(f"{field}.creds.aws_secret_access_key", "must be 1-128 printable characters")
    return {"creds": {"aws_access_key_id": key_id, "aws_secret_access_key": secret}}


def check_target(value: Any, old: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
    """The stored form of a ``target`` body field: ``{kind: {arn field: …, "auth": …}}``."""
    target = _object("target", value)
    present = [k for k, v in target.items() if v is not None]
    for key in present:
        if key in NOT_OFFERED:
            raise _bad(
                f"target.{key}",
                "is not offered by this service; use kinesis, firehose or cloudwatch_logs",
            )
        if key not in KINDS:
            raise errors.UnknownField(
                f"Unknown field 'target.{key}'; accepted fields: {', '.join(KINDS)}",
                details={"field": f"target.{key}"},
            )
    if len(present) != 1:
        raise _bad("target", "must have exactly one of kinesis, firehose or cloudwatch_logs")
    kind = present[0]
    body = _object(f"target.{kind}", target[kind])
    arn_field = ARN_FIELD[kind]
    _only(f"target.{kind}", body, ("auth", arn_field))
    arn = body.get(arn_field)
    if not isinstance(arn, str) or not _ARN_RE[kind].match(arn):
        raise _bad(
            f"target.{kind}.{arn_field}",
            f"must be an ARN of a {kind} "
            f"{'log group' if kind == 'cloudwatch_logs' else 'stream'}, e.g. "
            f"{EXAMPLE_ARN[kind]}",
        )
    if body.get("auth") is None:
        raise errors.MissingField(
            f"Field 'target.{kind}.auth' is required", details={"field": f"target.{kind}.auth"}
        )
    old_auth = ((old or {}).get(kind) or {}).get("auth")
    return {
        kind: {arn_field: arn, "auth": check_auth(f"target.{kind}.auth", body["auth"], old_auth)}
    }


EXAMPLE_ARN = {
    "kinesis": "arn:aws:kinesis:us-east-1:123456789012:stream/events",
    "firehose": "arn:aws:firehose:us-east-1:123456789012:deliverystream/events",
    "cloudwatch_logs": "arn:aws:logs:us-east-1:123456789012:log-group:events",
}


def kind_of(target: Dict[str, Any]) -> str:
    return next(k for k in KINDS if target.get(k))


def parse_arn(kind: str, arn: str) -> Tuple[str, str, str]:
    """(region, AWS account, resource name) of a stored target ARN."""
    match = _ARN_RE[kind].match(arn)
    if match is None:
        raise ValueError(f"not a {kind} ARN: {arn}")
    groups = match.groups()
    return groups[1], groups[3], groups[4]


def rendered_target(target: Dict[str, Any]) -> Dict[str, Any]:
    """A stored target as the API returns it: every kind present (``null`` when unset), the
    secret never."""
    out: Dict[str, Any] = {k: None for k in KINDS + ("datadog", "azure_logs_ingestion")}
    kind = kind_of(target)
    body = target[kind]
    auth = body["auth"]
    if "role" in auth:
        shown = {"role": dict(auth["role"]), "creds": None}
    else:
        shown = {
            "role": None,
            "creds": {
                "aws_access_key_id": auth["creds"]["aws_access_key_id"],
                "aws_secret_access_key": None,
            },
        }
    out[kind] = {ARN_FIELD[kind]: body[ARN_FIELD[kind]], "auth": shown}
    return out


def check_source_type(field: str, value: Any) -> str:
    if not isinstance(value, str) or value not in EVENT_TYPES:
        raise _bad(
            field, f"must be one of the event types this service emits: {', '.join(EVENT_TYPES)}"
        )
    return value


def check_sources(name: str, value: Any) -> List[Dict[str, Any]]:
    """``[{"type": …, "filter"?: …, "fields"?: […]}]`` → the distinct sources, in order
    (``{"type", "filter", "fields"}``; chalicelib.core.event_filters checks the last two)."""
    if not isinstance(value, list):
        raise _bad(name, "must be an array of objects with a 'type'")
    sources: List[Dict[str, Any]] = []
    for index, entry in enumerate(value):
        where = f"{name}[{index}]"
        entry = _object(where, entry)
        _only(where, entry, ("type", "filter", "fields"))
        kind = check_source_type(f"{where}.type", entry.get("type"))
        if kind in [s["type"] for s in sources]:
            raise _bad(where, f"repeats the type '{kind}'")
        sources.append(check_options(where, kind, entry))
    return sources


def check_options(where: str, kind: str, entry: Dict[str, Any]) -> Dict[str, Any]:
    """One source's ``{"type", "filter", "fields"}``, its filter and fields checked."""
    prefix = f"{where}." if where else ""
    return {
        "type": kind,
        "filter": event_filters.check_filter(f"{prefix}filter", kind, entry.get("filter")),
        "fields": event_filters.check_fields(f"{prefix}fields", kind, entry.get("fields")),
    }


def split_sources(sources: List[Dict[str, Any]]) -> Dict[str, Any]:
    """The stored form of checked sources: ``sources`` (the types, what the edge routes on)
    and ``source_options`` (type → ``{"filter", "fields"}``, only for types that have one)."""
    return {
        "sources": [s["type"] for s in sources],
        "source_options": {
            s["type"]: {"filter": s["filter"], "fields": s["fields"]}
            for s in sources
            if s["filter"] or s["fields"]
        },
    }


def source_options(data: Dict[str, Any], kind: str) -> Dict[str, Any]:
    """A stored subscription's ``{"filter", "fields"}`` of one type ("" and [] when unset)."""
    options = (data.get("source_options") or {}).get(kind) or {}
    return {"filter": options.get("filter") or "", "fields": list(options.get("fields") or [])}


def _context(account_id: str, destination_id: str) -> Dict[str, str]:
    return {"account": account_id, "event_destination": destination_id}


def seal_target(account_id: str, destination_id: str, target: Dict[str, Any]) -> Dict[str, Any]:
    """The target as stored: a creds secret sealed (``aws_secret_access_key_sealed``)."""
    kind = kind_of(target)
    creds = target[kind]["auth"].get("creds")
    if creds is None or "aws_secret_access_key_sealed" in creds:
        return target
    sealed = keywrap.seal(
        creds["aws_secret_access_key"].encode("utf-8"), _context(account_id, destination_id)
    )
    return {
        kind: {
            **target[kind],
            "auth": {
                "creds": {
                    "aws_access_key_id": creds["aws_access_key_id"],
                    "aws_secret_access_key_sealed": sealed,
                }
            },
        }
    }


def open_target(account_id: str, destination_id: str, target: Dict[str, Any]) -> Dict[str, Any]:
    """A stored target with its secret in clear (what the edge's delivery worker uses)."""
    kind = kind_of(target)
    creds = target[kind]["auth"].get("creds")
    if creds is None or "aws_secret_access_key_sealed" not in creds:
        return target
    secret = keywrap.open_sealed(
        creds["aws_secret_access_key_sealed"], _context(account_id, destination_id)
    ).decode("utf-8")
    return {
        kind: {
            **target[kind],
            "auth": {
                "creds": {
                    "aws_access_key_id": creds["aws_access_key_id"],
                    "aws_secret_access_key": secret,
                }
            },
        }
    }
