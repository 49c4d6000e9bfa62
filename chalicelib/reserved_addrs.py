"""Reserved TCP addresses: ``/reserved_addrs``.

Fields: id, uri, created_at, description, metadata, ``addr`` (``host:port``, assigned at
creation, never changed), ``region``.

Rules (where the spec is silent, decided here):
- The API assigns the address, as the hosted service does: the host is ``EDGE_TCP_HOST``
  (default: the base domain, so under the default ``*.localhost`` base domain it resolves to
  the loopback, where the edge listens), the port a free one of ``EDGE_TCP_PORTS`` (default
  ``20000-20099``). The edge reads the same two settings and listens on these ports.
- A port is reserved by at most one address of the whole service: each reservation writes a
  claim item in the same transaction (partition ``U#tcp_port#ports``, sort key the port as 5
  digits; the claim holds ``account_id``, ``reserved_addr_id`` and ``addr``). A port is
  drawn at random (up to :data:`RANDOM_ATTEMPTS` draws); when those collide, the claims are
  read (one Query of that bounded partition) and a free port is drawn from the rest. A full
  range is a 409 naming it. A port an endpoint serves now is not drawn either: an agent's TCP
  endpoint without a reserved address gets a port of the same range from its edge, which
  claims its ``host:port`` as the endpoint's name (``online.claim_hostname``); each drawn
  port's claim is read (one GetItem) and a live one counts as taken. (The edge, for its part,
  checks the reservations before it hands a port out.)
- ``region``: ``""`` (default) or one of au, eu, ap, us, jp, in, sa; informative only (one
  edge region). Create accepts description, metadata, region; update description, metadata.
- A reserved address served by a TCP edge (as a hostport) cannot be deleted (409): the edge's
  hostport counts in its ``refs``. Deleting it frees the port.
- Every principal of the account may manage them (as reserved domains).
"""

import secrets
from typing import Any, Dict, List, Optional, Set, Tuple

from chalicelib import validation, web
from chalicelib.core import errors, ids, online, refs, reservations, store
from chalicelib.core.config import get_settings
from chalicelib.reserved_domains import REGIONS
from chalicelib.validation import DESCRIPTION, METADATA, Field
from chalicelib.web import Ctx

COLLECTION = "reserved_addr"
PREFIX = ids.PREFIXES["reserved_addr"]
PATH = "/reserved_addrs"
LIST_KEY = "reserved_addrs"
RANDOM_ATTEMPTS = 3
MAX_ATTEMPTS = 8


def _check_region(name: str, value: str) -> str:
    if value not in ("",) + REGIONS:
        raise errors.InvalidField(
            f"Field '{name}' must be \"\" or one of {', '.join(REGIONS)}", details={"field": name}
        )
    return value


CREATE_FIELDS = [DESCRIPTION, METADATA, Field("region", "string", check=_check_region)]
UPDATE_FIELDS = [DESCRIPTION, METADATA]


def render(c: Ctx, item: store.Item) -> Dict[str, Any]:
    return {
        **web.resource_fields(c, PATH, item),
        "addr": item.data["addr"],
        "region": item.data.get("region", ""),
    }


def taken_ports() -> Set[int]:
    return set(reservations.addr_claims())


def _next_port(
    low: int, high: int, tried: Set[int], attempt: int, known: Optional[Set[int]]
) -> Optional[int]:
    """A random port to try: any of the range first, then one not claimed (``known``)."""
    if known is None:
        return low + secrets.randbelow(high - low + 1)
    free = [p for p in range(low, high + 1) if p not in tried and p not in known]
    return secrets.choice(free) if free else None


def create(c: Ctx, fields: Dict[str, Any]) -> Dict[str, Any]:
    settings = get_settings()
    low, high = settings.edge_tcp_ports
    host = settings.edge_tcp_host
    tried: Set[int] = set()
    taken = errors.Conflict("port taken")  # identity marks a lost claim, never returned
    full = errors.Conflict(
        f"No TCP address is free: every port of the configured range {low}-{high} is reserved "
        "or served by an endpoint"
    )
    known: Optional[Set[int]] = None
    for attempt in range(MAX_ATTEMPTS):
        if attempt == RANDOM_ATTEMPTS:
            known = taken_ports()
        port = _next_port(low, high, tried, attempt, known)
        if port is None:
            raise full
        if port in tried:
            continue
        tried.add(port)
        addr = f"{host}:{port}"
        if online.hostname_holder(addr) is not None:
            continue  # an agent's TCP endpoint serves it now
        addr_id = ids.new_id(PREFIX)
        data = {
            "description": fields.get("description", ""),
            "metadata": fields.get("metadata", ""),
            "region": fields.get("region", ""),
            "addr": addr,
            "port": port,
            "created_at": validation.now_rfc3339(),
        }
        item = store.new_item(
            store.collection_pk(c.account_id, COLLECTION),
            addr_id,
            kind=COLLECTION,
            account_id=c.account_id,
            data=data,
        )
        claim = store.new_item(
            reservations.PORTS_PK,
            reservations.port_sk(port),
            kind="tcp_port",
            data={
                "kind": "reserved_addr",
                "account_id": c.account_id,
                "reserved_addr_id": addr_id,
                "addr": addr,
            },
        )
        try:
            store.commit([store.put_new(item), store.put_new(claim, taken)])
        except errors.Conflict as exc:
            if exc is not taken:
                raise
            continue
        return render(c, item)
    raise errors.Conflict(
        f"No free TCP address could be claimed after {MAX_ATTEMPTS} attempts "
        "(many reservations at the same time); retry the request"
    )


def get_item(account_id: str, addr_id: str) -> store.Item:
    return store.get_by_id(account_id, COLLECTION, PREFIX, addr_id, "reserved address")


def get(c: Ctx, addr_id: str) -> Dict[str, Any]:
    return render(c, get_item(c.account_id, addr_id))


def list_page(c: Ctx, limit: int, before_id: Optional[str]) -> Tuple[List[Dict[str, Any]], bool]:
    return web.rendered_page(c, COLLECTION, limit, before_id, render)


def update(c: Ctx, addr_id: str, fields: Dict[str, Any]) -> Dict[str, Any]:
    """One UpdateItem of the sent fields (404 when absent)."""
    return web.updated(c, COLLECTION, PREFIX, addr_id, fields, "reserved address", render)


def delete(c: Ctx, addr_id: str) -> None:
    """GetItem (its port), then one transaction: the address (409 while a TCP edge serves
    it) and its port's claim."""
    item = get_item(c.account_id, addr_id)
    in_use = errors.Conflict(
        f"The reserved address '{item.data['addr']}' is served by a TCP "
        "edge; remove it from the edge's hostports first"
    )
    missing = errors.NotFound(f"No reserved address with id '{addr_id}' exists")
    store.commit(
        [
            refs.delete_unreferenced(item.pk, item.sk, missing, in_use),
            store.drop(reservations.PORTS_PK, reservations.port_sk(item.data["port"])),
        ]
    )
