"""Cloud endpoints: the writes of ``POST``/``PATCH``/``DELETE /endpoints`` (``type: "cloud"``).

A cloud endpoint is an endpoint item of the account's ``endpoint`` collection (the same
collection as agent endpoints, chalicelib.core.online) with no session (``owner`` unset: live while
it exists), and the **served-name claim** of its host (``unique_pk("served_host", name)``,
``owner`` = the endpoint id, no TTL), whose data carries ``cloud``: the copy of what the edge
needs to serve it (id, account, url, host, traffic_policy). The edge finds a cloud endpoint by
host with one GetItem of that claim (:func:`chalicelib.core.online.cloud_endpoint_for`); both items
are written in one transaction, so the copy is never older than the endpoint.

Rules (the hosted API's, where its docs say; decided here where they are silent)
- ``url``: ``https://host`` or ``http://host`` (a trailing ``/`` is dropped; the scheme's own
  port, or the port the edge serves the scheme on, may be given and is dropped; any other
  port, a path, query, fragment or user info is a 400), or ``tcp://host:port``. ``tls://``
  cloud endpoints are not served: 400 saying so.
- The URL is stored without a port and **shown with the port the edge serves it on** when
  that is not the scheme's own (:func:`public_url`: ``url``, ``public_url``, ``hostport`` and
  ``port`` of the endpoint; under ``make run`` ``https://host:8443``), as agent endpoints'
  URLs are (the edge writes them with its public port): the API knows the edge's public
  ports from the settings both read (chalicelib.core.config ``edge_public_port``). Internal
  URLs are never shown with a port (no public listener serves them).
- A public ``tcp://`` URL must be exactly a TCP address the account reserved
  (``/reserved_addrs``, as for TCP edges): else a 400. Its policy may use only
  ``on_tcp_connect`` (and must ``forward-internal`` to a ``tcp://…internal`` endpoint, or the
  connection is closed).
- Public host (not ``*.internal``): a domain the account reserved (exactly, or under one of its
  wildcards, the most specific reservation deciding) or a name under ``BASE_DOMAIN`` (not the
  base itself, nor ``EDGE_TCP_HOST``) nobody else reserved: the rule of HTTPS edge hostports
  and agent binds. Another account's domain: 400 ``ERR_NGROK_320``; a domain nobody reserved:
  400 ``ERR_NGROK_7117``.
- Internal host (``name.internal``, any name: no reservation needed): needs the ``internal``
  binding. Internal names are namespaced per account (the hosted docs: "even if another user
  has the same internal endpoint URL as you, your traffic will never flow to their
  endpoint"): the claim's name is ``<host>@<account id>``, so two accounts can each have
  ``https://api.internal``, and within one account one endpoint (cloud or agent) holds it.
- One host, one endpoint (or one pool), service-wide (whatever the scheme): a host this account's cloud
  endpoint already serves is 409 ``ERR_NGROK_18009``; one an online agent endpoint or another
  account serves, or an HTTPS edge's ``host:443`` hostport, is 409 ``ERR_NGROK_334``; a TCP
  address the same, against agent TCP endpoints and TCP edges on it. A claim
  left by an agent endpoint whose session went stale is taken over (the edge's own rule).
- ``bindings``: one of ``["public"]`` or ``["internal"]``; when not sent, ``internal`` for a
  ``.internal`` URL and ``public`` otherwise; a binding that does not match the URL is a 400
  (the hosted docs: internal URLs "must end with .internal and use the internal binding").
  ``kubernetes`` is not served (400).
- ``type``: ``cloud`` (the default when not sent); anything else is a 400 (agent endpoints are
  made by agents).
- ``traffic_policy``: validated by the engine the edge runs (chalicelib.core.policy): 400
  ``ERR_NGROK_18002`` naming the element; checked against the URL's protocol (a ``tcp://``
  endpoint runs only ``on_tcp_connect``), also when a PATCH changes only the url. ``""`` (or not sent) is stored; the edge then
  answers every request with ``ERR_NGROK_6029`` (a cloud endpoint's policy must end in a
  terminating action; the hosted docs check that when traffic arrives, not at creation).
- A reserved domain (or TCP address) a cloud endpoint's URL uses counts it in its ``refs``
  (moved in the endpoint's transaction): it cannot be deleted (409) while the endpoint serves
  it.
- ``description`` ≤ 255 bytes, ``metadata`` ≤ 4096 bytes (the API's usual limits).
- ``pooling_enabled``: ``true`` (public http/https URLs only: on tcp:// or an internal URL a
  400) joins the URL's pool (chalicelib.core.pooling: the claim lists the pool's cloud and
  agent members, at most 20, else 400 ``ERR_NGROK_18020``); a pooled endpoint where one
  without pooling serves is 400 ``ERR_NGROK_18016``, one without pooling where a pool of the
  account serves 400 ``ERR_NGROK_18017``. PATCH turns pooling off only for the pool's last
  member (others share the URL: 18017); on, the endpoint's claim becomes a pool of one.
- PATCH changes any of url, traffic_policy, description, metadata, bindings with the same
  checks (a new url moves the claim in the same transaction). PATCH or DELETE of an **agent**
  endpoint is a 400 ``ERR_UNSUPPORTED_OPERATION`` (its agent manages it: stop the agent or
  its tunnel session); of an offline one, or another account's, a 404.

Store calls: POST = 1 BatchGetItem (the reservation covering a public host; none for an
internal one) + 1 TransactWriteItems. PATCH = 1 GetItem (the endpoint: the claim to move and
the version to write against) + the reservation read when ``url`` changes + 1
TransactWriteItems. DELETE = 1 GetItem + 1 TransactWriteItems (endpoint and claim together).
"""

from typing import Any, Dict, List, Optional, Tuple
from urllib.parse import urlsplit

from botocore.exceptions import ClientError

from chalicelib import reserved_domains, traffic_policy
from chalicelib.core import errors, hostnames, online, pooling, store
from chalicelib.core.config import get_settings
from chalicelib.core import reservations

INTERNAL_SUFFIX = ".internal"
MAX_URL_BYTES = 1024
SCHEMES = {"https": 443, "http": 80, "tcp": None}  # tcp: the port is part of the address
NOT_SERVED_SCHEMES = ("tls",)
BINDINGS = ("public", "internal")
HTTPS_EDGE_PORT = 443  # HTTPS edges claim "host:443" (edge_modules.HOSTPORT_NAMESPACE)


def _bad(field: str, msg: str, cls=errors.InvalidField) -> errors.ApiError:
    return cls(f"Field '{field}' {msg}", details={"field": field})


def is_internal(host: str) -> bool:
    return host.endswith(INTERNAL_SUFFIX)


# ---- field checks -------------------------------------------------------------------------------
def check_url(field: str, value: Any) -> str:
    """The canonical URL (``scheme://host``), or a 400 naming ``field``."""
    if not isinstance(value, str) or not value.strip():
        raise _bad(field, "must be a URL such as 'https://example.com'")
    if len(value.encode("utf-8")) > MAX_URL_BYTES:
        raise _bad(field, f"is longer than {MAX_URL_BYTES} bytes")
    text = value.strip()
    try:
        parts = urlsplit(text)
        port = parts.port
    except ValueError:
        raise _bad(field, f"is not a valid URL: '{text[:300]}'") from None
    scheme = parts.scheme.lower()
    if scheme in NOT_SERVED_SCHEMES:
        raise _bad(
            field,
            f"has scheme '{scheme}': this service serves https, http and tcp "
            "cloud endpoints (tls ones are not offered)",
        )
    if scheme not in SCHEMES:
        raise _bad(field, f"must start with https://, http:// or tcp://, got '{text[:300]}'")
    if parts.username is not None or parts.password is not None:
        raise _bad(field, "must not carry user info")
    if (
        parts.path not in ("", "/")
        or parts.query
        or parts.fragment
        or "#" in text
        or text.endswith("?")
    ):
        raise _bad(field, "must be scheme://host only (no path, query or fragment)")
    if scheme == "tcp":
        if parts.path or port is None or port == 0:
            raise _bad(field, "must be tcp://host:port (a TCP address: a port from 1 to 65535)")
    elif port is not None and port not in (SCHEMES[scheme], served_port(scheme)):
        served = served_port(scheme)
        also = (
            f" or the port the edge serves it on ({served})" if served != SCHEMES[scheme] else ""
        )
        raise _bad(
            field, f"may only use the scheme's own port ({SCHEMES[scheme]}){also}, got {port}"
        )
    try:
        host = hostnames.parse(parts.hostname or "", min_labels=2, numeric_tld=False)
    except hostnames.InvalidHostname as exc:
        raise _bad(field, f"has an invalid host: {exc}") from None
    return f"tcp://{host}:{port}" if scheme == "tcp" else f"{scheme}://{host}"


def check_type(field: str, value: Any) -> str:
    if value != "cloud":
        raise _bad(
            field,
            f"must be 'cloud' (agent endpoints are started by agents), got {str(value)[:100]!r}",
        )
    return value


def check_bindings(field: str, value: List[str]) -> List[str]:
    if len(value) != 1 or value[0] not in BINDINGS:
        raise _bad(
            field, 'must be ["public"] or ["internal"] (kubernetes bindings are not served)'
        )
    return list(value)


def check_pooling(field: str, value: bool) -> bool:
    return value


def check_poolable(data: Dict[str, Any]) -> None:
    """A pooled cloud endpoint is a public http(s) one (decided here, as for agent endpoints:
    TCP addresses and internal endpoints are not pooled)."""
    scheme, host = split(data["url"])
    if data.get("pooling_enabled") and (scheme == "tcp" or is_internal(host)):
        raise _bad(
            "pooling_enabled",
            "may be true only for a public https:// or http:// URL (TCP addresses and "
            "internal endpoints are not pooled here)",
        )


def check_policy(field: str, value: Any, protocol: Optional[str] = None) -> str:
    """The document if the engine accepts it (for an endpoint of ``protocol``: ``tcp`` runs
    only on_tcp_connect); else 400 ERR_NGROK_18002 naming the element."""
    try:
        return traffic_policy.check_document(field, value, protocol=protocol) if value else value
    except errors.InvalidField as exc:
        raise errors.InvalidCloudPolicy(exc.msg, details={"field": field}) from None


def check_internal_policy(field: str, value: str) -> None:
    """400 ERR_NGROK_2262 when an internal HTTP(S) endpoint's (valid) document has
    on_tcp_connect rules: such an endpoint is reached by a request's forward-internal, never
    by a connection of its own (the hosted rule)."""
    if not value:
        return
    from chalicelib.core.policy.engine import compile_policy  # (the CEL runtime loads on use)

    if compile_policy(value).has("on_tcp_connect"):
        raise errors.InternalTcpConnect(
            f"Field '{field}' is not a valid traffic policy: internal HTTP/HTTPS endpoints "
            "do not support the on_tcp_connect phase; use a TCP or TLS endpoint instead",
            details={"field": field},
        )


def served_port(scheme: str) -> Optional[int]:
    """The port the edge serves public ``scheme`` URLs on (http, https), as its URLs name it."""
    settings = get_settings()
    return {"http": settings.edge_public_http_port, "https": settings.edge_public_https_port}.get(
        scheme
    )


def public_url(url: str) -> str:
    """A stored (canonical) URL as the API shows it: with the edge's public port when that is
    not the scheme's own (tcp:// URLs carry theirs already; internal ones have none)."""
    scheme, host = split(url)
    port = served_port(scheme)
    if port is None or port == SCHEMES[scheme] or is_internal(host):
        return url
    return f"{scheme}://{host}:{port}"


def split(url: str) -> Tuple[str, str]:
    """(scheme, host) of a canonical URL (the port of a tcp:// one left out)."""
    scheme, _, rest = url.partition("://")
    return scheme, rest.rpartition(":")[0] if scheme == "tcp" else rest


def address(url: str) -> str:
    """``host:port`` of a tcp:// URL."""
    return url.partition("://")[2]


def resolve_bindings(url: str, bindings: Optional[List[str]]) -> List[str]:
    internal = is_internal(split(url)[1])
    if bindings is None:
        return ["internal" if internal else "public"]
    if (bindings[0] == "internal") != internal:
        raise _bad(
            "bindings",
            'must be ["internal"] for a URL under .internal and ["public"] for any other URL',
        )
    return bindings


def addr_of(account_id: str, url: str) -> str:
    """The reserved address id a public tcp:// URL uses, or a 400: TCP addresses are served
    only when the account reserved them (POST /reserved_addrs), as for TCP edges."""
    addr = address(url)
    found = reservations.addr_reservation(addr)
    if found is None or found["account_id"] != account_id:
        raise _bad(
            "url",
            f"is not a TCP address this account reserved ('{addr}'); reserve "
            "one with POST /reserved_addrs and use its 'addr'",
        )
    return found["reserved_addr_id"]


def domain_of(account_id: str, host: str) -> Optional[str]:
    """The reserved domain id a public ``host`` uses (None: a free name under the base
    domain), or a 400 (another account's domain, a domain nobody reserved)."""
    settings = get_settings()
    if host == settings.edge_tcp_host:
        raise _bad("url", f"has the host of the service's TCP addresses ({host})")
    found = reservations.domain_reservation(host)
    if found is not None:
        if found["account_id"] != account_id:
            raise _bad(
                "url",
                f"is under '{found['domain']}', a domain reserved for another account",
                errors.DomainNotOwned,
            )
        return found["reserved_domain_id"]
    base = settings.base_domain
    if host != base and hostnames.is_within(host, base):
        return None
    raise _bad(
        "url",
        f"is not on a domain this account reserved (reserve '{host}' with POST "
        f"/reserved_domains) nor a name under '{base}'",
        errors.DomainNotReserved,
    )


# ---- items --------------------------------------------------------------------------------------
def _endpoint_key(account_id: str, endpoint_id: str) -> Dict[str, Any]:
    return online.raw_key(store.collection_pk(account_id, online.ENDPOINTS), endpoint_id)


def _endpoint_item(
    account_id: str, endpoint_id: str, data: Dict[str, Any], version: int
) -> Dict[str, Any]:
    return {
        **_endpoint_key(account_id, endpoint_id),
        "kind": {"S": online.ENDPOINTS},
        "account_id": {"S": account_id},
        "data": store.to_av(data),
        "refs": {"N": "0"},
        "version": {"N": str(version)},
    }


def claim_of(account_id: str, data: Dict[str, Any]) -> str:
    """The claim's name: the host (http, https), the address (tcp), ``<host>@<account>``
    (internal, whatever the scheme: one internal name, one endpoint per account)."""
    scheme, host = split(data["url"])
    if scheme == "tcp" and not is_internal(host):
        return address(data["url"])
    return online.claim_name(host, account_id)


def _held_by(endpoint_id: str) -> Dict[str, Any]:
    """The condition of a write to a claim: this endpoint holds it."""
    return {
        "ConditionExpression": "#o = :o",
        "ExpressionAttributeNames": {"#o": "owner"},
        "ExpressionAttributeValues": {":o": {"S": endpoint_id}},
    }


def _rewrite_claim(account_id: str, endpoint_id: str, data: Dict[str, Any]) -> Dict[str, Any]:
    """The transaction part that rewrites the claim this endpoint holds (its copy of the
    endpoint, what the edge serves from)."""
    return {
        "Put": {
            "TableName": online.raw_table(),
            "Item": _claim_item(account_id, endpoint_id, data),
            **_held_by(endpoint_id),
        }
    }


def _release_claim(name: str, endpoint_id: str) -> Dict[str, Any]:
    """The transaction part that frees the claim of ``name`` this endpoint holds."""
    return {
        "Delete": {
            "TableName": online.raw_table(),
            "Key": online.claim_key(name),
            **_held_by(endpoint_id),
        }
    }


def _claim_item(account_id: str, endpoint_id: str, data: Dict[str, Any]) -> Dict[str, Any]:
    name = claim_of(account_id, data)
    scheme, host = split(data["url"])
    copy = {
        "id": endpoint_id,
        "account_id": account_id,
        "url": data["url"],
        "host": host,
        "port": data.get("port"),
        "scheme": scheme,
        "internal": is_internal(host),
        "traffic_policy": data.get("traffic_policy", ""),
    }
    return {
        **online.claim_key(name),
        "kind": {"S": online.CLAIM_NAMESPACE},
        "account_id": {"S": account_id},
        "owner": {"S": endpoint_id},
        "instance_id": {"S": "api"},
        "heartbeat_at": {"N": online.ms_text(online.now())},
        "data": store.to_av(
            {"endpoint_id": endpoint_id, "account_id": account_id, "name": name, "cloud": copy}
        ),
    }


def _domain_ref(account_id: str, data: Dict[str, Any], delta: int) -> List[Dict[str, Any]]:
    """Move the ``refs`` of the reserved domain (or TCP address) ``data``'s URL uses (none: no
    op), so that a reservation a cloud endpoint serves cannot be deleted (409, as for edge
    hostports)."""
    from chalicelib import reserved_addrs

    if data.get("domain_id"):
        collection, rid = reserved_domains.COLLECTION, data["domain_id"]
    elif data.get("tcp_addr_id"):
        collection, rid = reserved_addrs.COLLECTION, data["tcp_addr_id"]
    else:
        return []
    key = online.raw_key(store.collection_pk(account_id, collection), rid)
    return [
        {
            "Update": {
                "TableName": online.raw_table(),
                "Key": key,
                "UpdateExpression": "ADD refs :d, version :one",
                "ConditionExpression": "attribute_exists(pk)",
                "ExpressionAttributeValues": {":d": {"N": str(delta)}, ":one": {"N": "1"}},
            }
        }
    ]


def _hostport_free(hostport: str) -> Dict[str, Any]:
    from chalicelib import edge_modules

    key = online.raw_key(
        store.unique_pk(edge_modules.HOSTPORT_NAMESPACE, hostport), store.UNIQUE_SK
    )
    return {
        "ConditionCheck": {
            "TableName": online.raw_table(),
            "Key": key,
            "ConditionExpression": "attribute_not_exists(pk)",
        }
    }


class _Taken(Exception):
    """The claim is held; ``raw`` is the holder as it was."""

    def __init__(self, raw: Optional[Dict[str, Any]]):
        super().__init__("claim held")
        self.raw = raw


def _claim_ops(
    account_id: str, endpoint_id: str, data: Dict[str, Any], held: Optional[Dict[str, Any]]
) -> List[Dict[str, Any]]:
    """Put the claim: new (nobody holds it), or over ``held`` (a stale holder, as read)."""
    put = {
        "TableName": online.raw_table(),
        "Item": _claim_item(account_id, endpoint_id, data),
        "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
    }
    if held is None:
        put["ConditionExpression"] = "attribute_not_exists(pk)"
    else:
        put.update(
            ConditionExpression="#o = :old AND heartbeat_at = :hb",
            ExpressionAttributeNames={"#o": "owner"},
            ExpressionAttributeValues={":old": held["owner"], ":hb": held["heartbeat_at"]},
        )
    ops = [{"Put": put}]
    scheme, host = split(data["url"])
    if not is_internal(host):
        ops.append(
            _hostport_free(
                address(data["url"]) if scheme == "tcp" else f"{host}:{HTTPS_EDGE_PORT}"
            )
        )
    return ops


def _transact(ops: List[Dict[str, Any]], claim_index: int) -> None:
    """Run the transaction; _Taken when the claim's condition failed, EndpointUrlInUse when an
    HTTPS edge holds the hostport, VersionConflict when the endpoint changed meanwhile."""
    try:
        online.raw_client().transact_write_items(TransactItems=ops)
    except ClientError as exc:
        error = exc.response.get("Error", {})
        if error.get("Code") in ("TransactionConflictException", "TransactionInProgressException"):
            raise store.VersionConflict() from None
        if error.get("Code") != "TransactionCanceledException":
            raise
        reasons = exc.response.get("CancellationReasons") or []
        for index, reason in enumerate(reasons):
            if reason.get("Code") != "ConditionalCheckFailed":
                continue
            if index == claim_index:
                raise _Taken(reason.get("Item")) from None
            if "Update" in ops[index]:  # a reserved domain's refs: it was deleted meanwhile
                raise errors.Conflict(
                    "The reserved domain of the endpoint's URL was deleted meanwhile",
                    details={"field": "url"},
                ) from None
            if "ConditionCheck" in ops[index]:
                raise errors.EndpointUrlInUse(
                    "The endpoint URL's host is served by an HTTPS edge (its hostport "
                    f"'{ops[index]['ConditionCheck']['Key']['pk']['S'].split('#')[-1]}'); "
                    "remove it from the edge first",
                    details={"field": "url"},
                ) from None
            raise store.VersionConflict() from None
        raise store.VersionConflict() from None


def _write_claiming(
    account_id: str, endpoint_id: str, data: Dict[str, Any], other_ops: List[Dict[str, Any]]
) -> None:
    """``other_ops`` and the claim of ``data``'s host in one transaction, taking over a stale
    holder (re-read only on that failure path); 409 when a live endpoint holds it."""
    held = None
    for _ in range(store.RETRIES):
        ops = other_ops + _claim_ops(account_id, endpoint_id, data, held)
        try:
            _transact(ops, len(other_ops))
            return
        except _Taken as taken:
            raw = taken.raw or online.get_raw(online.claim_key(claim_of(account_id, data)))
            if raw is None:
                held = None
                continue
            holder_data = online.data_of(raw)
            if (
                pooling.is_pool(raw)
                and online.str_attr(raw, "account_id") == account_id
                and (pooling.members(raw)[0] or online.claim_live(raw))
            ):
                raise errors.PoolingDisabledConflict(
                    f"The endpoint URL {data['url']} is served by a pool of endpoints with "
                    "pooling enabled; a cloud endpoint without pooling cannot join it "
                    "(set pooling_enabled to true)",
                    details={"field": "pooling_enabled"},
                ) from None
            if holder_data.get("cloud") and online.str_attr(raw, "account_id") == account_id:
                raise errors.CloudEndpointExists(
                    f"This account already has a cloud endpoint on {data['url']} "
                    f"({online.str_attr(raw, 'owner')})",
                    details={"field": "url"},
                ) from None
            if online.claim_is_live(raw):
                raise errors.EndpointUrlInUse(
                    f"The endpoint URL {data['url']} is already online (served by another "
                    "endpoint); stop it first or use another URL",
                    details={"field": "url"},
                ) from None
            held = raw
    raise errors.Conflict(f"'{data['url']}' is being claimed by another endpoint at the same time")


def check_secrets(account_id: str, data: Dict[str, Any]) -> None:
    """400 ERR_NGROK_18002 when the policy reads a vault secret the account does not have."""
    try:
        traffic_policy.check_secrets(account_id, "traffic_policy", data.get("traffic_policy"))
    except errors.InvalidField as exc:
        raise errors.InvalidCloudPolicy(exc.msg, details={"field": "traffic_policy"}) from None


def create(account_id: str, endpoint_id: str, data: Dict[str, Any]) -> store.Item:
    check_secrets(account_id, data)
    check_poolable(data)
    put = {
        "Put": {
            "TableName": online.raw_table(),
            "Item": _endpoint_item(account_id, endpoint_id, data, 1),
            "ConditionExpression": "attribute_not_exists(pk)",
        }
    }
    if data.get("pooling_enabled"):
        _pool_join(account_id, endpoint_id, data, [put], _domain_ref(account_id, data, 1))
    else:
        _write_claiming(account_id, endpoint_id, data, [put] + _domain_ref(account_id, data, 1))
    return store.model().from_raw_data(_endpoint_item(account_id, endpoint_id, data, 1))


def read(account_id: str, endpoint_id: str, what: str = "endpoint") -> store.Item:
    """The cloud endpoint (1 GetItem); 404 when there is none (or the agent endpoint is
    offline), 400 when it is a live agent endpoint (its agent manages it)."""
    item = store.get_by_id(account_id, online.ENDPOINTS, online.ENDPOINT_PREFIX, endpoint_id, what)
    if item.owner or (item.data or {}).get("type", "agent") != "cloud":
        online.live_item(
            account_id, online.ENDPOINTS, online.ENDPOINT_PREFIX, endpoint_id, what
        )  # 404 when offline
        raise errors.UnsupportedOperation(
            f"Endpoint '{endpoint_id}' is an agent endpoint: its agent manages it (stop the "
            "agent, or its tunnel session with POST /tunnel_sessions/{id}/stop); only cloud "
            "endpoints are changed or deleted through this API"
        )
    return item


def update(account_id: str, old: store.Item, data: Dict[str, Any]) -> store.Item:
    """Write ``data`` over ``old`` (as read): the endpoint conditioned on its version, the
    claim rewritten (same host) or moved (new host), in one transaction."""
    check_secrets(account_id, data)
    check_poolable(data)
    version = int(old.version or 0)
    endpoint_id = old.sk
    put = {
        "Put": {
            "TableName": online.raw_table(),
            "Item": _endpoint_item(account_id, endpoint_id, data, version + 1),
            "ConditionExpression": "attribute_exists(pk) AND version = :v",
            "ExpressionAttributeValues": {":v": {"N": str(version)}},
        }
    }
    old_name, new_name = claim_of(account_id, old.data), claim_of(account_id, data)
    refs = (
        []
        if (old.data.get("domain_id"), old.data.get("tcp_addr_id"))
        == (data.get("domain_id"), data.get("tcp_addr_id"))
        else _domain_ref(account_id, old.data, -1) + _domain_ref(account_id, data, 1)
    )
    if old.data.get("pooling_enabled") or data.get("pooling_enabled"):
        _update_pooled(account_id, endpoint_id, old.data, data, put, refs)
        return store.model().from_raw_data(put["Put"]["Item"])
    if old_name == new_name:
        claim = _rewrite_claim(account_id, endpoint_id, data)
        _transact([put, claim] + refs, -1)
        return store.model().from_raw_data(put["Put"]["Item"])
    release = _release_claim(old_name, endpoint_id)
    _write_claiming(account_id, endpoint_id, data, [put, release] + refs)
    return store.model().from_raw_data(put["Put"]["Item"])


def delete(account_id: str, old: store.Item) -> None:
    endpoint_id = old.sk
    if old.data.get("pooling_enabled"):
        name = claim_of(account_id, old.data)
        raw = pooling.read(name)
        if endpoint_id in pooling.members(raw)[0]:
            gone = {
                "Delete": {
                    "TableName": online.raw_table(),
                    "Key": _endpoint_key(account_id, endpoint_id),
                    "ConditionExpression": "version = :v",
                    "ExpressionAttributeValues": {":v": {"N": str(int(old.version or 0))}},
                }
            }
            ops = [gone, _pool_leave_op(account_id, name, raw, endpoint_id, old.data)]
            _transact(ops + _domain_ref(account_id, old.data, -1), -1)
            return
    ops = [
        {
            "Delete": {
                "TableName": online.raw_table(),
                "Key": _endpoint_key(account_id, endpoint_id),
                "ConditionExpression": "version = :v",
                "ExpressionAttributeValues": {":v": {"N": str(int(old.version or 0))}},
            }
        },
        {
            "Delete": {
                "TableName": online.raw_table(),
                "Key": online.claim_key(claim_of(account_id, old.data)),
                "ConditionExpression": "attribute_not_exists(pk) OR #o = :o",
                "ExpressionAttributeNames": {"#o": "owner"},
                "ExpressionAttributeValues": {":o": {"S": endpoint_id}},
            }
        },
    ]
    _transact(ops + _domain_ref(account_id, old.data, -1), -1)


# ---- pooled cloud endpoints (chalicelib.core.pooling) -----------------------------------------
def _pool_error(exc: pooling.Mismatch, url: str) -> errors.ApiError:
    if exc.kind == pooling.FULL:
        return errors.PoolFull(
            f"The maximum number of endpoints allowed in the pool of {url} has been "
            f"exceeded: {pooling.MAX_MEMBERS} endpoints per pool",
            details={"field": "url"},
        )
    if exc.kind == pooling.NOT_POOLED_HERE:
        return errors.PoolingEnabledConflict(
            f"The endpoint URL {url} is served by an endpoint that has pooling disabled; a "
            "cloud endpoint with pooling enabled cannot join it",
            details={"field": "pooling_enabled"},
        )
    return errors.EndpointUrlInUse(
        f"The endpoint URL {url} is already online ({exc.detail}); stop it first or use "
        "another URL",
        details={"field": "url"},
    )


def _pool_leave_op(
    account_id: str,
    name: str,
    raw: Optional[Dict[str, Any]],
    endpoint_id: str,
    data: Dict[str, Any],
) -> Dict[str, Any]:
    """The write taking ``endpoint_id`` out of the pool claim ``raw`` of ``name``."""
    clouds, agents = pooling.left(raw, endpoint_id)
    return pooling.write_op(
        raw,
        name,
        account_id,
        split(data["url"])[0],
        clouds,
        agents,
        pooling.copies_for(account_id, clouds[:1]),
    )


def _pool_join(
    account_id: str,
    endpoint_id: str,
    data: Dict[str, Any],
    ops: List[Dict[str, Any]],
    refs: List[Dict[str, Any]],
) -> None:
    """``ops``, the join of the pool of ``data``'s URL and ``refs`` in one transaction,
    the claim read again when it changed meanwhile."""
    name = claim_of(account_id, data)
    scheme, host = split(data["url"])
    for _ in range(store.RETRIES):
        raw = pooling.read(name)
        try:
            clouds, agents = pooling.joined(
                raw, account_id=account_id, proto=scheme, member_id=endpoint_id, cloud=True
            )
        except pooling.Mismatch as exc:
            raise _pool_error(exc, data["url"]) from None
        claim = pooling.write_op(
            raw,
            name,
            account_id,
            scheme,
            clouds,
            agents,
            {endpoint_id: pooling.copy_of(endpoint_id, data, account_id)},
        )
        try:
            _transact(ops + [claim, _hostport_free(f"{host}:{HTTPS_EDGE_PORT}")] + refs, len(ops))
            return
        except _Taken:
            continue
    raise errors.Conflict(f"'{data['url']}' is being claimed by another endpoint at the same time")


def _update_pooled(
    account_id: str,
    endpoint_id: str,
    old: Dict[str, Any],
    data: Dict[str, Any],
    put: Dict[str, Any],
    refs: List[Dict[str, Any]],
) -> None:
    """An update where the old or the new state is pooled. Decided here: pooling may be
    turned off only by the pool's last member (others share the URL: 400 ERR_NGROK_18017,
    as a new endpoint without pooling would be); turned on, the endpoint's own claim
    becomes a pool of one; a new url leaves the old pool (or claim) and joins the new one in
    the same transaction."""
    old_name, new_name = claim_of(account_id, old), claim_of(account_id, data)
    ops = [put]
    if old_name != new_name:
        if old.get("pooling_enabled"):
            raw_old = pooling.read(old_name)
            if endpoint_id in pooling.members(raw_old)[0]:
                ops.append(_pool_leave_op(account_id, old_name, raw_old, endpoint_id, old))
        else:
            ops.append(_release_claim(old_name, endpoint_id))
    if data.get("pooling_enabled"):
        _pool_join(account_id, endpoint_id, data, ops, refs)
        return
    if old_name != new_name:
        _write_claiming(account_id, endpoint_id, data, ops + refs)
        return
    raw = pooling.read(new_name)
    clouds, agents = pooling.left(raw, endpoint_id)
    if clouds or agents:
        raise errors.PoolingDisabledConflict(
            f"Other endpoints share {data['url']} (a pool of {len(clouds) + len(agents) + 1}); "
            "pooling can be disabled only by the last endpoint of a pool",
            details={"field": "pooling_enabled"},
        )
    claim = _rewrite_claim(account_id, endpoint_id, data)
    _transact(ops + [claim] + refs, -1)
