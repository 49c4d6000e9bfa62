"""Geo location, autonomous system and IP categories of a client address: the traffic policy
variables ``conn.geo.*`` and ``conn.client_ip.*`` (the hosted service's GeoIP and IP
Intelligence variables).

- **Geo and AS** come from the country and AS database the ``geoip2fast`` package bundles,
  built from MaxMind's GeoLite2 Country and ASN data (CC BY-SA 4.0: this product includes
  GeoLite2 data created by MaxMind, https://www.maxmind.com). It is country-level: the hosted
  service's city, subdivision, postal code, coordinates, radius and AS number are not in it,
  so those variables are not declared and a policy naming them is refused at creation
  (chalicelib/core/policy/celenv.py), never answered with empty values. Private, loopback
  and reserved addresses have no country and no AS organization (""). The database is loaded
  once per process, at its first use (about 0.8 s of CPU and 107 MiB of memory, measured
  here); an edge starts loading it in a background thread as soon as it compiles a policy
  that names one of these variables (``WARM_ON_COMPILE``, set by the edge), so the API,
  which only compiles, never loads it.
- **Categories** come from lists the operator installs: one file per category in the
  directory ``EDGE_IP_CATEGORIES_DIR``, named ``<category>.txt`` (``proxy.anonymous.tor.txt``
  from the Tor project's exit list, ``blocklist.firehol.level1.txt``, ``com.github.txt``…),
  one address or CIDR per line, ``#`` starting a comment. ``conn.client_ip.is_tor_node`` is
  ``'proxy.anonymous.tor' in conn.client_ip.categories``; ``is_on_blocklist`` is true for
  any category named ``blocklist.*``, as the hosted docs define both. With no directory, no
  address has a category. The lists are read at first use, at most MAX_CATEGORY_NETWORKS
  networks in all (a file past that is refused whole, with a log line), and each lookup is a
  binary search per category.
"""

import bisect
import functools
import ipaddress
import logging
import os
import threading
from typing import Any, Dict, List, Optional, Tuple

log = logging.getLogger("policy.ipintel")

DATABASE = "geoip2fast-asn-ipv6.dat.gz"
MAX_CATEGORY_NETWORKS = 1_000_000
LOOKUP_CACHE = 10_000  # addresses whose answers are kept (least recently used dropped)
TOR = "proxy.anonymous.tor"
BLOCKLIST_PREFIX = "blocklist."

WARM_ON_COMPILE = False  # the edge sets it: compiling a policy that needs geo starts the load

_lock = threading.Lock()
_geo: Optional[Any] = None
_categories: Optional[Dict[str, Tuple[List[int], List[int]]]] = None


def _database() -> Any:
    global _geo
    with _lock:
        if _geo is None:
            from geoip2fast import GeoIP2Fast

            _geo = GeoIP2Fast(geoip2fast_data_file=DATABASE, verbose=False)
        return _geo


def warm() -> None:
    """Load the geo database in a background thread (no wait)."""
    if _geo is None:
        threading.Thread(target=_database, name="geoip-load", daemon=True).start()


def note_needs(names: Any) -> None:
    """A compiled expression reads ``names``: warm the database if one is a geo or AS one."""
    if WARM_ON_COMPILE and any(n.startswith(("conn.geo.", "conn.client_ip.as.")) for n in names):
        warm()


@functools.lru_cache(maxsize=LOOKUP_CACHE)
def geo(ip: str) -> Tuple[str, str, str]:
    """(country code, country name, AS organization) of ``ip``; "" for what is not known."""
    try:
        found = _database().lookup(ip)
    except Exception:  # not an address the database reads
        return "", "", ""
    if getattr(found, "is_private", False) or found.country_code in ("", "--"):
        return "", "", ""
    return found.country_code or "", found.country_name or "", found.asn_name or ""


def load_categories(folder: str) -> Dict[str, Tuple[List[int], List[int]]]:
    """Each category's networks as sorted (starts, ends) integer ranges, overlapping and
    adjacent ones merged into one, IPv4 and IPv6 apart (IPv6 offset past the IPv4 space)."""
    out: Dict[str, Tuple[List[int], List[int]]] = {}
    total = 0
    try:
        names = sorted(os.listdir(folder))
    except OSError as exc:
        log.warning("IP categories: cannot read %s: %r", folder, exc)
        return out
    for name in names:
        if not name.endswith(".txt"):
            continue
        category = name[: -len(".txt")]
        ranges = []
        try:
            with open(os.path.join(folder, name), "rb") as handle:
                for number, raw in enumerate(handle, 1):
                    # bytes that are not UTF-8 become U+FFFD: such a line is not a network
                    text = raw.decode(errors="replace").partition("#")[0].strip()
                    if not text:
                        continue
                    try:
                        net = ipaddress.ip_interface(text).network  # host bits allowed
                    except ValueError:
                        log.warning("IP categories: %s line %d is not a network", name, number)
                        continue
                    base = 0 if net.version == 4 else 1 << 32
                    ranges.append(
                        (base + int(net.network_address), base + int(net.broadcast_address))
                    )
        except OSError as exc:
            log.warning("IP categories: cannot read %s: %r", name, exc)
            continue
        if total + len(ranges) > MAX_CATEGORY_NETWORKS:
            log.warning(
                "IP categories: %s refused: %d networks, more than %d in all",
                name,
                total + len(ranges),
                MAX_CATEGORY_NETWORKS,
            )
            continue
        total += len(ranges)
        starts: List[int] = []
        ends: List[int] = []
        for start, end in sorted(ranges):
            if ends and start <= ends[-1] + 1:
                ends[-1] = max(ends[-1], end)
            else:
                starts.append(start)
                ends.append(end)
        out[category] = (starts, ends)
    return out


def _category_table() -> Dict[str, Tuple[List[int], List[int]]]:
    global _categories
    with _lock:
        if _categories is None:
            folder = os.environ.get("EDGE_IP_CATEGORIES_DIR", "")
            _categories = load_categories(folder) if folder else {}
        return _categories


@functools.lru_cache(maxsize=LOOKUP_CACHE)
def categories(ip: str) -> Tuple[str, ...]:
    """The categories ``ip`` is in, sorted."""
    try:
        address = ipaddress.ip_address(ip)
    except ValueError:
        return ()
    key = (0 if address.version == 4 else 1 << 32) + int(address)
    found = []
    for category, (starts, ends) in _category_table().items():
        at = bisect.bisect_right(starts, key) - 1
        if at >= 0 and key <= ends[at]:
            found.append(category)
    return tuple(sorted(found))


def reset() -> None:
    """Forget the category lists and every cached answer (tests; a changed directory)."""
    global _categories
    with _lock:
        _categories = None
    categories.cache_clear()
    geo.cache_clear()
