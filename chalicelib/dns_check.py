"""The DNS check of a reserved domain: ``POST /reserved_domains/{domain_id}/dns_check``.

A domain outside the service's base domain is served once its owner adds CNAME records:

- ``<domain>  CNAME  <cname_target>`` (a wildcard domain: the record of ``*.<suffix>``);
- a wildcard domain also needs ``_acme-challenge.<suffix>  CNAME
  <acme_challenge_cname_target>`` (DNS-01 validation of its certificate).

The check asks a DNS resolver for the CNAME of each record's name and reports, per record:

- ``found``: the name has a CNAME to the expected target (compared without case or the final
  dot);
- ``missing``: the name does not exist (NXDOMAIN) or has no CNAME record;
- ``wrong_target``: the name has a CNAME to another target (``found_targets`` lists it);
- ``unknown``: the resolver did not answer in time or answered with an error (SERVFAIL,
  REFUSED); ``msg`` says which. The check can be repeated.

A domain under the base domain needs no record: ``records`` is empty and ``ok`` is true.

The resolver is the ``DNS_CHECK_RESOLVER`` setting (``host`` or ``host:port``; empty: the
system's resolvers from /etc/resolv.conf). Tests point it at a DNS server of their own on
the loopback.

Bounds (docs/DASHBOARD.md): one GetItem (the domain), then at most :data:`MAX_RECORDS`
queries, each given at most :data:`QUERY_TIMEOUT` seconds (UDP, one retry within that
time), so a call takes at most ``MAX_RECORDS * QUERY_TIMEOUT`` seconds of resolving, whatever
the resolver does. Nothing is written. A record's name and target are the domain's own
(validated at reservation), never taken from the request, which has no body.
"""

from typing import Any, Dict, List, Tuple

from chalicelib import reserved_domains, validation, web
from chalicelib.core import hostnames
from chalicelib.core.config import get_settings

QUERY_TIMEOUT = 2.0  # seconds per record
MAX_RECORDS = 2
FOUND, MISSING, WRONG_TARGET, UNKNOWN = "found", "missing", "wrong_target", "unknown"
STATUSES = (FOUND, MISSING, WRONG_TARGET, UNKNOWN)


def _bare(name: str) -> str:
    return name.lower().rstrip(".")


def records(data: Dict[str, Any]) -> List[Tuple[str, str]]:
    """(name, expected target) of every CNAME record a reserved domain needs."""
    wanted: List[Tuple[str, str]] = []
    domain = data["domain"]
    if data.get("cname_target"):
        wanted.append((domain, data["cname_target"]))
    if data.get("acme_challenge_cname_target"):
        suffix = hostnames.suffix_of_wildcard(domain) or domain
        wanted.append((f"_acme-challenge.{suffix}", data["acme_challenge_cname_target"]))
    return wanted[:MAX_RECORDS]


def parse_resolver(raw: str) -> Tuple[str, int]:
    """``host`` or ``host:port`` (an IPv6 address in brackets) as (address, port)."""
    raw = raw.strip()
    if raw.startswith("["):
        host, _, rest = raw[1:].partition("]")
        port = rest[1:] if rest.startswith(":") else "53"
    elif raw.count(":") == 1:
        host, port = raw.split(":")
    else:
        host, port = raw, "53"
    try:
        number = int(port)
    except ValueError:
        raise ValueError(f"DNS_CHECK_RESOLVER={raw!r}: expected host or host:port") from None
    if not host or not 1 <= number <= 65535:
        raise ValueError(f"DNS_CHECK_RESOLVER={raw!r}: expected host or host:port")
    return host, number


def _resolver() -> Any:
    import dns.resolver  # imported on first check, not at cold start

    configured = get_settings().dns_check_resolver
    if configured:
        host, port = parse_resolver(configured)
        resolver = dns.resolver.Resolver(configure=False)
        resolver.nameservers = [host]
        resolver.port = port
    else:
        resolver = dns.resolver.Resolver()
    resolver.timeout = QUERY_TIMEOUT / 2
    resolver.lifetime = QUERY_TIMEOUT
    resolver.cache = None
    return resolver


def check_record(resolver: Any, name: str, expected: str) -> Dict[str, Any]:
    """The status of one CNAME record (never raises for what the resolver answers)."""
    import dns.exception
    import dns.resolver

    result: Dict[str, Any] = {
        "type": "CNAME",
        "name": name,
        "expected_target": expected,
        "status": UNKNOWN,
        "found_targets": [],
        "msg": "",
    }
    try:
        answer = resolver.resolve(name, "CNAME", search=False, raise_on_no_answer=False)
    except dns.resolver.NXDOMAIN:
        result.update(status=MISSING, msg=f"{name} does not exist in DNS")
        return result
    except dns.resolver.LifetimeTimeout:
        result["msg"] = f"the resolver did not answer within {QUERY_TIMEOUT:g} s"
        return result
    except dns.resolver.NoNameservers:
        result["msg"] = "the resolver answered with an error (SERVFAIL or REFUSED)"
        return result
    except dns.exception.DNSException as exc:
        result["msg"] = f"the resolver failed: {type(exc).__name__}"
        return result
    targets = sorted({_bare(rdata.target.to_text()) for rdata in (answer.rrset or [])})
    result["found_targets"] = targets
    if not targets:
        result.update(status=MISSING, msg=f"{name} has no CNAME record")
    elif _bare(expected) in targets:
        result.update(status=FOUND, msg="")
    else:
        result.update(
            status=WRONG_TARGET,
            msg=f"{name} points at {', '.join(targets)}, not {_bare(expected)}",
        )
    return result


def check(c: web.Ctx, domain_id: str) -> Dict[str, Any]:
    """The report of ``POST /reserved_domains/{domain_id}/dns_check`` (404 as a GET)."""
    item = reserved_domains.get_item(c, domain_id)
    wanted = records(item.data)
    results: List[Dict[str, Any]] = []
    if wanted:
        resolver = _resolver()
        results = [check_record(resolver, name, target) for name, target in wanted]
    return {
        "id": item.sk,
        "uri": c.uri(f"{reserved_domains.PATH}/{item.sk}/dns_check"),
        "domain": item.data["domain"],
        "checked_at": validation.now_rfc3339(),
        "ok": all(r["status"] == FOUND for r in results),
        "records": results,
    }
