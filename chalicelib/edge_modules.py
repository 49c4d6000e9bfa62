"""What TCP and HTTPS edges share: hostports, the TCP modules, references, module bodies.

Hostports
- ``host:port``: host is a DNS hostname (RFC 1123 labels, at most 253 bytes; an IPv4 address
  fits that shape too), lower-cased; port is a decimal integer from 1 to 65535 without
  leading zeros. At most :data:`MAX_HOSTPORTS` per edge, no duplicates within one edge.
- One hostport is served by at most one edge of the whole service, TCP or HTTPS: each is a
  uniqueness item (namespace ``hostport``) written in the same transaction as the edge, so
  two concurrent claims end with exactly one owner; the other gets 409. The item holds
  ``{account_id, kind, edge_id}``; a TCP edge's also ``edge``, a copy of what the edge
  process needs (hostports and modules), rewritten in every transaction that changes them,
  so the edge finds a TCP edge by hostport with one GetItem (an HTTPS edge: that GetItem and
  one Query of the edge with its routes).
- Ownership (:func:`hostport_owner`): an HTTPS hostport's host must be reserved by the account
  (exactly or under a wildcard) or be a free name under the base domain; a TCP hostport must
  be an address the account reserved. Checked when a hostport is claimed (400 naming it); the
  reservation it uses counts it in its ``refs``. :func:`ownership_violations` lists stored
  edges that break the rule (``python -m chalicelib.admin check-edges``).

Modules (stored form → response form)
- ``backend`` ``{enabled (default true), backend_id}`` → ``{enabled, backend: Ref}``.
  ``backend_id`` is required and must name a backend of the caller's account of any kind
  (HTTP response, tunnel group, failover, weighted: :mod:`chalicelib.backends`).
- ``ip_restriction`` ``{enabled (default true), ip_policy_ids}`` → ``{enabled, ip_policies:
  [Ref]}``. ``ip_policy_ids``: 1 to 10 distinct IP policies of the caller's account.
- ``traffic_policy`` ``{enabled (default true), value}``; ``value`` is required and checked
  by :mod:`chalicelib.traffic_policy` for a TCP endpoint (on_tcp_connect only).
- A reference to something that does not exist in the caller's account (including another
  account's resource) is a 400 naming the field and the id: the body is wrong, the path is
  not. Each referenced item's ``refs`` counter is moved in the edge's transaction, with its
  version as condition, so a concurrent delete of the referenced item either fails with 409
  or makes this write retry and then refuse the reference.

Module bodies of PUT: the module object itself, or ``{"module": {...}}`` with optional
``id``/``edge_id`` naming the path's resources (other clients of the API family send that).
"""

import re
from collections import Counter
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Mapping, Optional, Tuple

from chalicelib import (
    backends,
    certificate_authorities,
    ip_policies,
    reserved_addrs,
    reserved_domains,
    traffic_policy,
)
from chalicelib.core import errors, hostnames, ids, refs, store
from chalicelib.core.config import get_settings
from chalicelib.validation import Field, parse
from chalicelib.web import Ctx
from chalicelib.core import reservations
from chalicelib.core import routing

HOSTPORT_NAMESPACE = routing.HOSTPORT_NAMESPACE
MAX_HOSTPORTS = 10
MAX_IP_POLICIES = 10
_LABEL_RE = re.compile(r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$")


def _bad(field: str, msg: str) -> errors.InvalidField:
    return errors.InvalidField(f"Field '{field}' {msg}", details={"field": field})


# ---- hostports --------------------------------------------------------------------------------
def check_hostport(field: str, value: Any) -> str:
    if not isinstance(value, str):
        raise _bad(field, "must be a string 'host:port'")
    host, sep, port = value.strip().rpartition(":")
    host = host.lower().rstrip(".")
    if not sep or not host:
        raise _bad(field, f"must be 'host:port', got '{value[:300]}'")
    # isascii: str.isdigit() is also true for '²' and other digits int() refuses.
    if (
        not (port.isascii() and port.isdigit())
        or str(int(port)) != port
        or not 1 <= int(port) <= 65535
    ):
        raise _bad(field, f"must have a port from 1 to 65535, got '{value[:300]}'")
    if len(host) > 253 or not all(_LABEL_RE.match(label) for label in host.split(".")):
        raise _bad(field, f"must have a valid hostname as host, got '{value[:300]}'")
    return f"{host}:{port}"


def check_hostports(field: str, value: Any) -> List[str]:
    if not isinstance(value, list):
        raise _bad(field, "must be an array of 'host:port' strings")
    if len(value) > MAX_HOSTPORTS:
        raise _bad(field, f"has {len(value)} entries; the limit is {MAX_HOSTPORTS}")
    result: List[str] = []
    for index, entry in enumerate(value):
        hostport = check_hostport(f"{field}[{index}]", entry)
        if hostport in result:
            raise _bad(field, f"lists '{hostport}' more than once")
        result.append(hostport)
    return result


HOSTPORTS = Field("hostports", "any", check=check_hostports)


# ---- modules: parsing -------------------------------------------------------------------------
def parse_module(
    field: Optional[str], value: Any, fields: List[Field], **defaults: Any
) -> Dict[str, Any]:
    """Parse a module object: ``enabled`` defaults to true, other absent fields to
    ``defaults``. Errors name ``<field>.<name>`` (just ``<name>`` for a PUT, ``field=None``).
    Shared by the TCP modules here and the HTTPS route modules."""
    if not isinstance(value, dict):
        raise _bad(field or "module", "must be an object")
    try:
        parsed = parse(value, fields)
    except errors.ApiError as exc:
        name = exc.details.get("field", "")
        if field and name:
            exc.msg = exc.msg.replace(f"'{name}'", f"'{field}.{name}'", 1)
            exc.details["field"] = f"{field}.{name}"
        raise
    return {"enabled": True, **defaults, **parsed}


def _check_backend_id(name: str, value: str) -> str:
    return backends.check_backend_id(name, value)


def check_policy_ids(name: str, value: List[str]) -> List[str]:
    if not value:
        raise _bad(name, "must name at least one IP policy")
    for index, entry in enumerate(value):
        if not ids.is_valid(entry, ip_policies.POLICY_PREFIX):
            raise _bad(
                f"{name}[{index}]",
                f"must be the id of an IP policy "
                f"({ip_policies.POLICY_PREFIX}_…), got '{entry[:64]}'",
            )
    if len(set(value)) != len(value):
        raise _bad(name, "lists an IP policy more than once")
    return value


ENABLED = Field("enabled", "boolean")
BACKEND_FIELDS = [
    ENABLED,
    Field("backend_id", "string", required=True, max_bytes=64, check=_check_backend_id),
]
IP_RESTRICTION_FIELDS = [
    ENABLED,
    Field(
        "ip_policy_ids",
        "string_list",
        required=True,
        max_bytes=64,
        max_items=MAX_IP_POLICIES,
        check=check_policy_ids,
    ),
]
TRAFFIC_POLICY_FIELDS = [
    ENABLED,
    Field("value", "string", required=True, check=traffic_policy.check_tcp_document),
]


def parse_backend(field: Optional[str], value: Any) -> Dict[str, Any]:
    return parse_module(field, value, BACKEND_FIELDS)


def parse_ip_restriction(field: Optional[str], value: Any) -> Dict[str, Any]:
    return parse_module(field, value, IP_RESTRICTION_FIELDS)


def parse_traffic_policy(field: Optional[str], value: Any) -> Dict[str, Any]:
    return parse_module(field, value, TRAFFIC_POLICY_FIELDS)


TCP_MODULES = {
    "backend": parse_backend,
    "ip_restriction": parse_ip_restriction,
    "traffic_policy": parse_traffic_policy,
}


# ---- modules: rendering -----------------------------------------------------------------------
def render_backend(c: Ctx, module: Optional[Dict[str, Any]]) -> Optional[Dict[str, Any]]:
    if module is None:
        return None
    kind = routing.kind_of(module["backend_id"]) or routing.HTTP_RESPONSE
    return {"enabled": module["enabled"], "backend": c.ref(kind.path, module["backend_id"])}


def render_ip_restriction(c: Ctx, module: Optional[Dict[str, Any]]) -> Optional[Dict[str, Any]]:
    if module is None:
        return None
    return {
        "enabled": module["enabled"],
        "ip_policies": [c.ref(ip_policies.POLICY_PATH, p) for p in module["ip_policy_ids"]],
    }


def render_traffic_policy(c: Ctx, module: Optional[Dict[str, Any]]) -> Optional[Dict[str, Any]]:
    if module is None:
        return None
    return {"enabled": module["enabled"], "value": module["value"]}


TCP_RENDERERS = {
    "backend": render_backend,
    "ip_restriction": render_ip_restriction,
    "traffic_policy": render_traffic_policy,
}


# ---- references -------------------------------------------------------------------------------
_REF_FIELDS = {
    # collection: (module, field in the module, what it is)
    ip_policies.POLICY_COLLECTION: ("ip_restriction", "ip_policy_ids", "IP policy"),
    certificate_authorities.COLLECTION: (
        "mutual_tls",
        "certificate_authority_ids",
        "certificate authority",
    ),
    reserved_domains.COLLECTION: ("hostports", "", "reserved domain"),
    reserved_addrs.COLLECTION: ("hostports", "", "reserved address"),
}


def refs_of(data: Dict[str, Any]) -> Counter:
    """(collection, id) → how many times the edge (or route) data refers to it: its backend,
    IP policies, certificate authorities, and the reservations its hostports use."""
    counts: Counter = Counter()
    backend = data.get("backend")
    if backend:
        kind = routing.kind_of(backend["backend_id"])
        if kind is not None:
            counts[(kind.collection, backend["backend_id"])] += 1
    restriction = data.get("ip_restriction")
    if restriction:
        for policy_id in restriction["ip_policy_ids"]:
            counts[(ip_policies.POLICY_COLLECTION, policy_id)] += 1
    mutual_tls = data.get("mutual_tls")
    if mutual_tls:
        for ca_id in mutual_tls["certificate_authority_ids"]:
            counts[(certificate_authorities.COLLECTION, ca_id)] += 1
    for collection, resource_id in (data.get("hostport_refs") or {}).values():
        counts[(collection, resource_id)] += 1
    return counts


def check_policy_refs(account_id: str, fields: Dict[str, Any], nested: bool = True) -> None:
    """400 when the ``traffic_policy`` module among ``fields`` names, in a restrict-ips
    action's ``ip_policies``, an IP policy the account does not have (field
    ``traffic_policy.value``, or ``value`` when not ``nested``, as in a module PUT)."""
    module = fields.get("traffic_policy")
    if module and module.get("value"):
        traffic_policy.check_ip_policies(
            account_id, "traffic_policy.value" if nested else "value", module["value"]
        )


def ref_ops(
    account_id: str, old: Dict[str, Any], new: Dict[str, Any], nested: bool = True
) -> List[store.Op]:
    """Move the ``refs`` counters from what ``old`` uses to what ``new`` uses.

    Reads nothing: each counter that changes is an update in the edge's transaction,
    conditioned on the referenced item existing; a new reference to an item that does not
    exist fails it with a 400 naming the field (``backend.backend_id``, or ``backend_id``
    when not ``nested``, as in a module PUT) and the id.
    """

    def missing(collection: str, resource_id: str) -> errors.ApiError:
        backend_kind = next(
            (k for k in routing.KINDS.values() if k.collection == collection), None
        )
        module, name, what = (
            ("backend", "backend_id", backend_kind.what)
            if backend_kind
            else _REF_FIELDS[collection]
        )
        field = (f"{module}.{name}" if nested else name) if name else module
        return errors.InvalidField(
            f"Field '{field}': no {what} with id '{resource_id}' exists in this account",
            details={"field": field},
        )

    return refs.move(account_id, refs_of(old), refs_of(new), missing)


# ---- hostport ownership -----------------------------------------------------------------------
TCP_EDGE = "tcp_edge"
HTTPS_EDGE = "https_edge"
TLS_EDGE = "tls_edge"  # hostports as HTTPS edges' (a domain's name), served by SNI
# What a TCP edge's hostport items carry for the edge process (see the module docstring).
TCP_COPY_FIELDS = routing.TCP_COPY_FIELDS


def hostport_owner(account_id: str, kind: str, hostport: str) -> Optional[Tuple[str, str]]:
    """The reservation that lets ``account_id`` serve ``hostport`` on an edge of ``kind``, as
    (collection, id), or None for a free name under the base domain; else a 400 naming it.

    - HTTPS: the host must be a domain the account reserved (exactly, or under one of its
      wildcards, the most specific reservation deciding), or a name under the base domain
      that no other account reserved and no other account's online endpoint serves.
    - TCP: ``host:port`` must be exactly an address the account reserved (/reserved_addrs).
    - TLS: as HTTPS (the name is what the client's SNI carries).
    """

    def refused(why: str, error: Any = errors.InvalidField) -> errors.InvalidField:
        return error(
            f"Hostport '{hostport}' {why}", details={"field": "hostports", "hostport": hostport}
        )

    if kind == TCP_EDGE:
        found = reservations.addr_reservation(hostport)
        if found is None or found["account_id"] != account_id:
            raise refused(
                "is not a TCP address reserved by this account; reserve one with "
                "POST /reserved_addrs and use its 'addr'"
            )
        return reserved_addrs.COLLECTION, found["reserved_addr_id"]
    host = hostport.rpartition(":")[0]
    settings = get_settings()
    if host == settings.edge_tcp_host and kind == TLS_EDGE:
        raise refused(  # the hosted ERR_NGROK_7133's words
            "is a TCP address: TLS edges can only be associated with reserved domains "
            "(or names under the base domain)",
            errors.TlsEdgeTcpAddress,
        )
    if host == settings.edge_tcp_host:
        raise refused(
            "has the host of the service's TCP addresses; those are served by TCP "
            "edges (reserve one with POST /reserved_addrs)"
        )
    found = reservations.domain_reservation(host)
    if found is not None:
        if found["account_id"] != account_id:
            raise refused(f"is under '{found['domain']}', a domain reserved by another account")
        return reserved_domains.COLLECTION, found["reserved_domain_id"]
    base = settings.base_domain
    if host != base and hostnames.is_within(host, base):
        from chalicelib.core import online

        holder = online.hostname_holder(host)
        if holder is not None and holder["account_id"] != account_id:
            raise refused(
                "is a name under the base domain that an online endpoint of another account serves"
            )
        return None
    raise refused(
        f"is not under a domain reserved by this account (reserve '{host}' with POST "
        f"/reserved_domains) nor a name under '{base}'"
    )


def ownership_violations() -> List[Dict[str, str]]:
    """Every stored edge hostport that breaks the ownership rule of :func:`hostport_owner`
    (edges stored before the rule, or whose reservation went away by other means), as
    ``{"account_id", "kind", "edge_id", "hostport", "reason"}``. An operator's check: it
    scans the table (never on a request path)."""
    Model_ = store.model()
    found: List[Dict[str, str]] = []
    condition = Model_.kind.is_in(TCP_EDGE, HTTPS_EDGE, TLS_EDGE)
    for item in Model_.scan(condition, consistent_read=True):
        for hp in (item.data or {}).get("hostports") or []:
            try:
                hostport_owner(item.account_id, item.kind, hp)
            except errors.InvalidField as exc:
                found.append(
                    {
                        "account_id": item.account_id,
                        "kind": item.kind,
                        "edge_id": item.sk,
                        "hostport": hp,
                        "reason": exc.msg,
                    }
                )
    return sorted(found, key=lambda v: (v["account_id"], v["edge_id"], v["hostport"]))


def hostport_ops(
    account_id: str, kind: str, edge_id: str, old: Dict[str, Any], new: Dict[str, Any]
) -> List[store.Op]:
    """Release the hostports no longer served and claim the new ones (409 when taken, 400 when
    the account may not serve them); for a TCP edge, also rewrite the kept ones' copy of the
    edge (see the module docstring).

    Sets ``new["hostport_refs"]`` (hostport → [collection, id] of the reservation it uses),
    so that :func:`refs_of` counts the reservations the edge's hostports hold."""
    old_list, new_list = old.get("hostports") or [], new.get("hostports") or []
    old_refs = old.get("hostport_refs") or {}
    if new:
        held = {}
        for hp in new_list:
            if hp in old_list:
                if hp in old_refs:
                    held[hp] = list(old_refs[hp])
                continue
            owner = hostport_owner(account_id, kind, hp)
            if owner is not None:
                held[hp] = list(owner)
        new["hostport_refs"] = held
    owner_data: Dict[str, Any] = {"account_id": account_id, "kind": kind, "edge_id": edge_id}
    if kind == TCP_EDGE:
        owner_data["edge"] = {k: new.get(k) for k in TCP_COPY_FIELDS}
    ops = [store.release(HOSTPORT_NAMESPACE, hp) for hp in sorted(set(old_list) - set(new_list))]
    for hp in sorted(set(new_list)):
        if hp in old_list:
            if kind == TCP_EDGE:
                # Ours: the edge's own version condition, in this transaction, proves it.
                ops.append(
                    store.set_fields(
                        store.unique_pk(HOSTPORT_NAMESPACE, hp),
                        store.UNIQUE_SK,
                        owner_data,
                        missing=store.VersionConflict(),
                    )
                )
            continue
        ops.append(
            store.unique(
                HOSTPORT_NAMESPACE,
                hp,
                owner_data,
                errors.Conflict(
                    f"Hostport '{hp}' is already served by another edge", details={"hostport": hp}
                ),
            )
        )
        if kind in (HTTPS_EDGE, TLS_EDGE) and hp.endswith(":443"):
            ops.append(_no_cloud_endpoint(hp, hp.rpartition(":")[0]))
        elif kind == TCP_EDGE:
            ops.append(_no_cloud_endpoint(hp, hp))
    return ops


def _no_cloud_endpoint(hostport: str, name: str) -> store.Op:
    """A check, in the edge's transaction, that no cloud endpoint serves ``name`` (the
    hostport's host for an HTTPS edge, the address for a TCP edge: one host or address, one
    endpoint, chalicelib.cloud_endpoints; a cloud endpoint's claim carries ``data.cloud``)."""
    from chalicelib.core import online

    request = {
        "Key": {
            "pk": {"S": store.unique_pk(online.CLAIM_NAMESPACE, name)},
            "sk": {"S": store.UNIQUE_SK},
        },
        "ConditionExpression": "attribute_not_exists(#d.#c)",
        "ExpressionAttributeNames": {"#d": "data", "#c": "cloud"},
    }
    return store.Op(
        "check",
        None,
        raw=request,
        error=errors.Conflict(
            f"Hostport '{hostport}' is served by a cloud endpoint (/endpoints); delete it first",
            details={"hostport": hostport},
        ),
    )


def edge_ops(
    account_id: str,
    kind: str,
    edge_id: str,
    old: Dict[str, Any],
    new: Dict[str, Any],
    nested: bool = True,
) -> List[store.Op]:
    """The writes that go with an edge's own write, in its transaction, when its data goes
    from ``old`` to ``new`` (``{}`` for a create or a delete): hostports released, claimed
    (and for TCP edges rewritten), ``refs`` counters moved (backends, IP policies,
    certificate authorities, reservations). Every check (409 on a taken hostport, 400 on a
    missing reference, at commit; 400 on a hostport the account may not serve, now) happens
    before or at that one commit. ``new`` gains ``hostport_refs`` (see
    :func:`hostport_ops`)."""
    ops = hostport_ops(account_id, kind, edge_id, old, new)
    if kind == HTTPS_EDGE:
        ops += tls_index_ops(account_id, edge_id, old, new)
    elif kind == TLS_EDGE:
        ops += tls_edge_index_ops(account_id, edge_id, old, new)
    return ref_ops(account_id, old, new, nested=nested) + ops


# ---- the TLS index (what the edge's HTTPS listener needs before a handshake) -------------------
TLS_INDEX_KIND = "https_edge_tls"


def tls_of(data: Dict[str, Any]) -> Optional[Dict[str, Any]]:
    """What an HTTPS edge's enabled TLS modules ask of the handshake: ``min_version`` (when
    set) and ``certificate_authority_ids`` (mutual TLS), or None when nothing."""
    spec: Dict[str, Any] = {}
    tls = data.get("tls_termination")
    if tls and tls.get("enabled", True) is not False and tls.get("min_version"):
        spec["min_version"] = tls["min_version"]
    mtls = data.get("mutual_tls")
    if mtls and mtls.get("enabled", True) is not False and mtls.get("certificate_authority_ids"):
        spec["certificate_authority_ids"] = list(mtls["certificate_authority_ids"])
    return spec or None


def tls_index_ops(
    account_id: str, edge_id: str, old: Dict[str, Any], new: Dict[str, Any]
) -> List[store.Op]:
    """Keep one index item per hostport of an edge whose TLS modules ask something
    (:func:`tls_of`), in the edge's own transaction: dropped for hostports that no longer
    need one, (re)written for every one that does (so a stored edge from before the index
    gets its items on its next change; :mod:`chalicelib.migrate` writes the others)."""
    old_hps = set(old.get("hostports") or []) if tls_of(old) else set()
    spec = tls_of(new) if new else None
    new_hps = set(new.get("hostports") or []) if spec else set()
    ops = [store.drop(store.EDGE_TLS_PK, hp) for hp in sorted(old_hps - new_hps)]
    for hp in sorted(new_hps):
        ops.append(
            store.put_raw(
                store.EDGE_TLS_PK,
                hp,
                TLS_INDEX_KIND,
                {"account_id": account_id, "edge_id": edge_id, **spec},
            )
        )
    return ops


TLS_EDGE_INDEX_KIND = "tls_edge_copy"


def tls_edge_index_ops(
    account_id: str, edge_id: str, old: Dict[str, Any], new: Dict[str, Any]
) -> List[store.Op]:
    """A TLS edge's copy for the edge process, one item per hostport (partition
    ``store.TLS_EDGE_PK``), dropped and rewritten in the edge's own transaction: the TLS
    listener serves by SNI from these without a store call per connection
    (:func:`chalicelib.core.routing.tls_edges`)."""
    old_hps = set(old.get("hostports") or [])
    new_hps = set(new.get("hostports") or []) if new else set()
    ops = [store.drop(store.TLS_EDGE_PK, hp) for hp in sorted(old_hps - new_hps)]
    copy = {name: new.get(name) for name in ("hostports",) + routing.TLS_EDGE_MODULES}
    for hp in sorted(new_hps):
        ops.append(
            store.put_raw(
                store.TLS_EDGE_PK,
                hp,
                TLS_EDGE_INDEX_KIND,
                {"account_id": account_id, "edge_id": edge_id, "edge": copy},
            )
        )
    return ops


# ---- module PUT bodies ------------------------------------------------------------------------
def module_body(raw: Dict[str, Any], path_ids: Dict[str, str]) -> Dict[str, Any]:
    """The module object of a PUT body, plain or wrapped as ``{"module": {...}, "id": …}``."""
    if "module" not in raw:
        return raw
    for key, value in raw.items():
        if key == "module":
            continue
        if key not in path_ids:
            raise errors.UnknownField(
                f"Unknown field '{key}'; accepted fields: module, {', '.join(sorted(path_ids))}",
                details={"field": key},
            )
        if value is not None and value != path_ids[key]:
            raise errors.InvalidField(
                f"Field '{key}' ({value!r}) does not match the path", details={"field": key}
            )
    module = raw["module"]
    if not isinstance(module, dict):
        raise _bad("module", "must be an object")
    return module


# ---- module sub-resources of an edge: /edges/<kind>/{edge_id}/<module> --------------------------
@dataclass(frozen=True)
class EdgeModules:
    """GET/PUT/DELETE of the modules of one kind of edge (TCP, TLS, HTTPS), one rule for the
    three: an unknown module name is a 404 ("<what>s have no module '<name>'"), an unset one a
    404 on GET; a PUT body may be wrapped (``{"module": …}``, :func:`module_body`) and is
    parsed by the module's parser, its policy references checked (``check_refs``), then
    written by ``write``; DELETE of any known module is ``remove`` (204 also when unset)."""

    what: str  # "TCP edge": in the messages
    parsers: Mapping[str, Callable[..., Dict[str, Any]]]
    renderers: Mapping[str, Callable[..., Any]]
    get_item: Callable[[str, str], Any]  # (account id, edge id) -> the edge's item, or 404
    write: Callable[[Ctx, str, str, Dict[str, Any]], None]  # (c, edge id, name, module)
    remove: Callable[[Ctx, str, str], None]  # (c, edge id, name)
    check_refs: bool = True

    def name(self, name: str) -> str:
        if name not in self.parsers:
            raise errors.NotFound(f"{self.what}s have no module '{name}'")
        return name

    def get(self, c: Ctx, edge_id: str, name: str) -> Dict[str, Any]:
        item = self.get_item(c.account_id, edge_id)
        module = item.data.get(self.name(name))
        if module is None:
            raise errors.NotFound(f"{self.what} '{edge_id}' has no {name} module")
        rendered: Dict[str, Any] = self.renderers[name](c, module)
        return rendered

    def put(self, c: Ctx, edge_id: str, name: str, raw: Dict[str, Any]) -> Dict[str, Any]:
        body = module_body(raw, {"id": edge_id, "edge_id": edge_id})
        module = self.parsers[self.name(name)](None, body)
        if self.check_refs:
            check_policy_refs(c.account_id, {name: module}, nested=False)
        self.write(c, edge_id, name, module)
        rendered: Dict[str, Any] = self.renderers[name](c, module)
        return rendered

    def delete(self, c: Ctx, edge_id: str, name: str) -> None:
        self.remove(c, edge_id, self.name(name))
