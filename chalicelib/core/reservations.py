"""Who reserved a name or a TCP address: the reads both planes make before a bind, and the
index the API keeps when it reserves.

A domain reservation is a uniqueness item ``(DOMAIN_NAMESPACE, name)`` holding the account and
the reserved domain's id; it is also indexed under each of its ancestors
(``UNDER_NAMESPACE``), so "what is reserved under this name" is one Query. A TCP address is a
claim item of its port in one partition (``PORTS_PK``). The resource modules
(``chalicelib.reserved_domains``, ``chalicelib.reserved_addrs``) write these; this module
reads them for the API and the edge alike.
"""

from typing import Any, Dict, List, Optional

from chalicelib.core import hostnames, store

DOMAIN_NAMESPACE = "reserved_domain"
PORTS_PK = store.unique_pk("tcp_port", "ports")


# ---- one owner per name (reservations, and the edge's binds) ---------------------------------
# A name belongs to one account whatever its form: an exact reservation, a wildcard over it, a
# name it is under (a parent can set cookies for its children), a reservation under it, or a
# live endpoint on it or on a name it is under. Reservations are also indexed under each of
# their ancestors (UNDER_NAMESPACE) so "what is reserved under this name" is one Query.
UNDER_NAMESPACE = "reserved_domain_under"


def bare(domain: str) -> str:
    return hostnames.suffix_of_wildcard(domain) or domain


def ancestors(name: str) -> List[str]:
    """The names ``name`` is under, with at least two labels: a.b.example.com ->
    b.example.com, example.com."""
    labels = name.split(".")
    return [".".join(labels[i:]) for i in range(1, len(labels) - 1)]


def under_index_ops(domain: str, account_id: str) -> List[store.Op]:
    return [
        store.put_raw(
            store.unique_pk(UNDER_NAMESPACE, ancestor),
            domain,
            UNDER_NAMESPACE,
            {"account_id": account_id},
        )
        for ancestor in ancestors(bare(domain))
    ]


def reserved_under(name: str) -> List[Dict[str, str]]:
    """Reservations (exact or wildcard) strictly under ``name``: ``{"domain", "account_id"}``
    each (one Query)."""
    return [
        {"domain": item.sk, "account_id": (item.data or {}).get("account_id", "")}
        for item in store.query_all(store.unique_pk(UNDER_NAMESPACE, name))
    ]


def holder_keys(names: List[str]) -> List[Dict[str, Any]]:
    """The raw keys of the reservations of ``names`` (for a BatchGetItem with other keys)."""
    return [
        {"pk": {"S": store.unique_pk(DOMAIN_NAMESPACE, name)}, "sk": {"S": store.UNIQUE_SK}}
        for name in names
    ]


def holders_in(names: List[str], read: List[Dict[str, Any]]) -> Dict[str, str]:
    """:func:`holders` out of ``read``, raw items of a BatchGetItem of :func:`holder_keys`
    (and any others)."""
    by_pk = {key["pk"]["S"]: name for name, key in zip(names, holder_keys(names))}
    found = {}
    for raw in read:
        pk = raw["pk"]["S"]
        if pk in by_pk and raw["sk"]["S"] == store.UNIQUE_SK:
            found[by_pk[pk]] = _raw_data(raw)["account_id"]
    return found


def _raw_data(raw: Dict[str, Any]) -> Dict[str, Any]:
    """``data`` of a raw item: a map (a JSON string in items of the first layout)."""
    if "S" in raw["data"]:
        return store.Item.data.deserialize(raw["data"])
    return store.from_av(raw["data"])


def holders(names: List[str]) -> Dict[str, str]:
    """Reserved name -> its account, for those of ``names`` that are reserved (one
    BatchGetItem)."""
    keys = [(store.unique_pk(DOMAIN_NAMESPACE, name), store.UNIQUE_SK) for name in names]
    by_pk = {pk: name for name, (pk, _) in zip(names, keys)}
    return {
        by_pk[item.pk]: item.data["account_id"]
        for item in store.model().batch_get(keys, consistent_read=True)
    }


def bind_conflict(account_id: str, name: str) -> Optional[str]:
    """The reserved name of another account that makes ``name`` theirs (``name`` is under
    it, or it is under ``name``), or None. For the edge's binds (the covering reservation
    itself is :func:`domain_reservation`'s)."""
    for holder_name, holder in holders(ancestors(name)).items():
        if holder != account_id:
            return holder_name
    for under in reserved_under(name):
        if under["account_id"] != account_id:
            return under["domain"]
    return None


# ---- ownership (edges, and the edge's binds) ---------------------------------------------------
def candidates(hostname: str) -> List[str]:
    """The reservations that could cover ``hostname``, most specific first: the name itself,
    then ``*.`` + each parent (``a.b.c`` → ``a.b.c``, ``*.b.c``, ``*.c``)."""
    labels = hostname.split(".")
    return [hostname] + ["*." + ".".join(labels[i:]) for i in range(1, len(labels))]


def domain_reservation(hostname: str) -> Optional[Dict[str, str]]:
    """The reservation covering ``hostname`` (canonical, lower-case): the exact reservation,
    else the nearest wildcard, as ``{"account_id", "reserved_domain_id", "domain"}``; None
    when nobody reserved it. One BatchGetItem of the candidates' uniqueness items."""
    names = candidates(hostname)
    keys = [(store.unique_pk(DOMAIN_NAMESPACE, name), store.UNIQUE_SK) for name in names]
    found = {item.pk: item for item in store.model().batch_get(keys, consistent_read=True)}
    for name, (pk, _) in zip(names, keys):
        item = found.get(pk)
        if item is not None:
            return {
                "account_id": item.data["account_id"],
                "reserved_domain_id": item.data["reserved_domain_id"],
                "domain": name,
            }
    return None


def port_sk(port: int) -> str:
    return f"{port:05d}"


def addr_claims() -> Dict[int, Dict[str, Any]]:
    """Every claimed port → its claim (``{"kind": "reserved_addr", "account_id",
    "reserved_addr_id", "addr"}``): one Query of the addr_claims partition, whose size is bounded
    by the configured range. The edge listens on these ports for TCP edges."""
    return {int(item.sk): dict(item.data or {}) for item in store.query_all(PORTS_PK)}


# ---- ownership (edges, and the edge's binds) ---------------------------------------------------
def addr_reservation(addr: str) -> Optional[Dict[str, str]]:
    """The reservation of the TCP address ``host:port`` (canonical: lower-case host), as
    ``{"account_id", "reserved_addr_id", "addr"}``, or None when nobody reserved exactly it.
    One GetItem (of the port's claim)."""
    host, sep, port = addr.rpartition(":")
    if not sep or not (port.isascii() and port.isdigit()) or not 1 <= int(port) <= 65535:
        return None
    item = store.get(PORTS_PK, port_sk(int(port)))
    if item is None or item.data.get("kind") != "reserved_addr" or item.data.get("addr") != addr:
        return None
    return {
        "account_id": item.data["account_id"],
        "reserved_addr_id": item.data["reserved_addr_id"],
        "addr": item.data["addr"],
    }
