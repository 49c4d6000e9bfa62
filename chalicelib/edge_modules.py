"""What TCP and HTTPS edges share: hostports, the TCP modules, references, module bodies.

Hostports
- ``host:port``: host is a DNS hostname (RFC 1123 labels, at most 253 bytes; an IPv4 address
  fits that shape too), lower-cased; port is a decimal integer from 1 to 65535 without
  leading zeros. At most :data:`MAX_HOSTPORTS` per edge, no duplicates within one edge.
- One hostport is served by at most one edge of the whole service, TCP or HTTPS: each is a
  uniqueness item (namespace ``hostport``) written in the same transaction as the edge, so
  two concurrent claims end with exactly one owner; the other gets 409.

Modules (stored form → response form)
- ``backend`` ``{enabled (default true), backend_id}`` → ``{enabled, backend: Ref}``.
  ``backend_id`` is required and must name an HTTP response backend of the caller's account.
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
from typing import Any, Dict, List, Optional

from chalicelib import errors, http_response_backends, ids, ip_policies, store, traffic_policy
from chalicelib.validation import Field, parse
from chalicelib.web import Ctx

HOSTPORT_NAMESPACE = "hostport"
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
    if not (port.isascii() and port.isdigit()) or str(int(port)) != port \
            or not 1 <= int(port) <= 65535:
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


def hostport_ops(old: Optional[List[str]], new: Optional[List[str]],
                 owner: Dict[str, str]) -> List[store.Op]:
    """Release the hostports no longer served and claim the new ones (409 when taken)."""
    old_set, new_set = set(old or []), set(new or [])
    ops = [store.release(HOSTPORT_NAMESPACE, hp) for hp in sorted(old_set - new_set)]
    for hp in sorted(new_set - old_set):
        ops.append(store.unique(HOSTPORT_NAMESPACE, hp, owner, errors.Conflict(
            f"Hostport '{hp}' is already served by another edge", details={"hostport": hp})))
    return ops


# ---- modules: parsing -------------------------------------------------------------------------
def parse_module(field: Optional[str], value: Any, fields: List[Field],
                 **defaults: Any) -> Dict[str, Any]:
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
    if not ids.is_valid(value, http_response_backends.PREFIX):
        raise _bad(name, f"must be the id of an HTTP response backend "
                         f"({http_response_backends.PREFIX}_…), got '{value[:64]}'")
    return value


def _check_policy_ids(name: str, value: List[str]) -> List[str]:
    if not value:
        raise _bad(name, "must name at least one IP policy")
    for index, entry in enumerate(value):
        if not ids.is_valid(entry, ip_policies.POLICY_PREFIX):
            raise _bad(f"{name}[{index}]", f"must be the id of an IP policy "
                                           f"({ip_policies.POLICY_PREFIX}_…), got '{entry[:64]}'")
    if len(set(value)) != len(value):
        raise _bad(name, "lists an IP policy more than once")
    return value


ENABLED = Field("enabled", "boolean")
BACKEND_FIELDS = [ENABLED, Field("backend_id", "string", required=True, max_bytes=64,
                                 check=_check_backend_id)]
IP_RESTRICTION_FIELDS = [ENABLED, Field("ip_policy_ids", "string_list", required=True,
                                        max_bytes=64, max_items=MAX_IP_POLICIES,
                                        check=_check_policy_ids)]
TRAFFIC_POLICY_FIELDS = [ENABLED, Field("value", "string", required=True,
                                        check=traffic_policy.check_tcp_document)]


def parse_backend(field: Optional[str], value: Any) -> Dict[str, Any]:
    return parse_module(field, value, BACKEND_FIELDS)


def parse_ip_restriction(field: Optional[str], value: Any) -> Dict[str, Any]:
    return parse_module(field, value, IP_RESTRICTION_FIELDS)


def parse_traffic_policy(field: Optional[str], value: Any) -> Dict[str, Any]:
    return parse_module(field, value, TRAFFIC_POLICY_FIELDS)


TCP_MODULES = {"backend": parse_backend, "ip_restriction": parse_ip_restriction,
               "traffic_policy": parse_traffic_policy}


# ---- modules: rendering -----------------------------------------------------------------------
def render_backend(c: Ctx, module: Optional[Dict[str, Any]]) -> Optional[Dict[str, Any]]:
    if module is None:
        return None
    return {"enabled": module["enabled"],
            "backend": c.ref(http_response_backends.PATH, module["backend_id"])}


def render_ip_restriction(c: Ctx, module: Optional[Dict[str, Any]]) -> Optional[Dict[str, Any]]:
    if module is None:
        return None
    return {"enabled": module["enabled"],
            "ip_policies": [c.ref(ip_policies.POLICY_PATH, p) for p in module["ip_policy_ids"]]}


def render_traffic_policy(c: Ctx, module: Optional[Dict[str, Any]]) -> Optional[Dict[str, Any]]:
    if module is None:
        return None
    return {"enabled": module["enabled"], "value": module["value"]}


TCP_RENDERERS = {"backend": render_backend, "ip_restriction": render_ip_restriction,
                 "traffic_policy": render_traffic_policy}


# ---- references -------------------------------------------------------------------------------
_REF_TARGETS = {
    # collection: (module, field in the module, what it is)
    http_response_backends.COLLECTION: ("backend", "backend_id", "HTTP response backend"),
    ip_policies.POLICY_COLLECTION: ("ip_restriction", "ip_policy_ids", "IP policy"),
}


def refs_of(data: Dict[str, Any]) -> Counter:
    """(collection, id) → how many times the edge data refers to it."""
    counts: Counter = Counter()
    backend = data.get("backend")
    if backend:
        counts[(http_response_backends.COLLECTION, backend["backend_id"])] += 1
    restriction = data.get("ip_restriction")
    if restriction:
        for policy_id in restriction["ip_policy_ids"]:
            counts[(ip_policies.POLICY_COLLECTION, policy_id)] += 1
    return counts


def ref_ops(account_id: str, old: Dict[str, Any], new: Dict[str, Any],
            nested: bool = True) -> List[store.Op]:
    """Move the ``refs`` counters from what ``old`` uses to what ``new`` uses.

    Reads nothing: each counter that changes is an update in the edge's transaction,
    conditioned on the referenced item existing; a new reference to an item that does not
    exist fails it with a 400 naming the field (``backend.backend_id``, or ``backend_id``
    when not ``nested``, as in a module PUT) and the id.
    """
    before, after = refs_of(old), refs_of(new)
    ops: List[store.Op] = []
    for key in sorted(set(before) | set(after)):
        delta = after[key] - before[key]
        if delta == 0:
            continue
        collection, resource_id = key
        module, name, what = _REF_TARGETS[collection]
        field = f"{module}.{name}" if nested else name
        missing: Exception = errors.InvalidField(
            f"Field '{field}': no {what} with id '{resource_id}' exists in this account",
            details={"field": field})
        if delta < 0:
            missing = store.VersionConflict()  # counted items cannot be deleted
        ops.append(store.set_fields(store.collection_pk(account_id, collection), resource_id,
                                    {}, refs=delta, missing=missing))
    return ops


def edge_ops(account_id: str, kind: str, edge_id: str, old: Dict[str, Any],
             new: Dict[str, Any], nested: bool = True) -> List[store.Op]:
    """The writes that go with an edge's own write, in its transaction, when its data goes
    from ``old`` to ``new`` (``{}`` for a create or a delete): hostports released and
    claimed, ``refs`` counters moved. Every check (409 on a taken hostport at commit, 400 on a
    missing reference now) happens before or at that one commit."""
    owner = {"account_id": account_id, "kind": kind, "edge_id": edge_id}
    return ref_ops(account_id, old, new, nested=nested) \
        + hostport_ops(old.get("hostports"), new.get("hostports"), owner)


# ---- module PUT bodies ------------------------------------------------------------------------
def module_body(raw: Dict[str, Any], path_ids: Dict[str, str]) -> Dict[str, Any]:
    """The module object of a PUT body, plain or wrapped as ``{"module": {...}, "id": …}``."""
    if "module" not in raw:
        return raw
    for key, value in raw.items():
        if key == "module":
            continue
        if key not in path_ids:
            raise errors.UnknownField(f"Unknown field '{key}'; accepted fields: module, "
                                      f"{', '.join(sorted(path_ids))}", details={"field": key})
        if value is not None and value != path_ids[key]:
            raise errors.InvalidField(f"Field '{key}' ({value!r}) does not match the path",
                                      details={"field": key})
    module = raw["module"]
    if not isinstance(module, dict):
        raise _bad("module", "must be an object")
    return module

