"""DNS-01 answers: where a wildcard domain's TXT record is published, and the service's own DNS.

The user's ``_acme-challenge.<domain>`` CNAME points at the domain's
``acme_challenge_cname_target`` (``<random>.acme-challenge.<CNAME_ZONE>``); the CA follows it
and reads the TXT there. A :class:`Provider` publishes that TXT:

- :class:`Route53` (``DNS_ROUTE53_ZONE_ID``: the hosted zone of ``CNAME_ZONE``; boto3, in AWS):
  UPSERT/DELETE of the TXT record set (every value published for the name is kept in it);
- :class:`OwnServer` (``DNS_LISTEN`` host:port set): the values are items of the table
  (``ACME#dns`` / name), and :func:`serve` (``python -m chalicelib.acme.dns``, a ``make run``
  component) answers for ``CNAME_ZONE`` authoritatively from them (dnspython), one GetItem per
  TXT question; other names of the zone are NXDOMAIN, names outside it REFUSED; UDP answers
  of at most 512 bytes (or the query's EDNS size), at most ``MAX_VALUES`` TXT values a name.

The same server is authoritative for the account's **agent ingress domains** (their
``ns_targets`` name it: ``ns1.``/``ns2.`` + ``CNAME_ZONE``) when ``DNS_INGRESS_ADDRESSES``
lists where agents reach the edge's agent listener (IPv4 and IPv6 addresses, comma-separated):
an ingress domain's A and AAAA questions are answered with those addresses, its NS question
with the two name servers; any other type of it is answered with no record (NODATA). Names
below an ingress domain, and names that are no ingress domain, are REFUSED as before. The
domains are read from the ingress index (chalicelib.core.ingresses, one Query) at most every
``INGRESS_REFRESH`` seconds, never per question, so a flood of questions costs the store
nothing more: a new ingress is answered within that time, a deleted one refused.
"""

import ipaddress
import os
import socket
import sys
import time
from typing import Callable, FrozenSet, List, Optional, Sequence

from chalicelib.core import ingresses, store
from chalicelib.core.config import get_settings

DNS_PK = "ACME#dns"
TTL = 60
MAX_VALUES = 8  # 8 digests (43 characters each) fit a 512-byte UDP answer
INGRESS_REFRESH = 5.0  # seconds an ingress index read is used for
MAX_INGRESS_ADDRESSES = 8  # of each family, in an answer (8 AAAA records fit 512 bytes)


class Provider:
    def publish(self, name: str, value: str) -> None:
        raise NotImplementedError

    def remove(self, name: str, value: str) -> None:
        raise NotImplementedError


def _name(name: str) -> str:
    return name.lower().rstrip(".")


class OwnServer(Provider):
    """TXT values in the table, answered by :func:`serve`; the agent ingress domains, read
    from their index at most every INGRESS_REFRESH seconds."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._domains: FrozenSet[str] = frozenset()
        self._read_at: Optional[float] = None

    def ingress_domains(self) -> FrozenSet[str]:
        now = self._clock()
        if self._read_at is None or now - self._read_at >= INGRESS_REFRESH:
            self._read_at = now  # a failed read is tried again after the same wait
            self._domains = frozenset(_name(domain) for domain in ingresses.index())
        return self._domains

    def values(self, name: str) -> List[str]:
        item = store.get(DNS_PK, _name(name))
        return list(item.data.get("txt") or []) if item is not None else []

    def _write(self, name: str, values: List[str]) -> None:
        if values:
            store.commit(
                [store.put_raw(DNS_PK, _name(name), "acme_dns", {"txt": values[-MAX_VALUES:]})]
            )
        else:
            store.commit([store.drop(DNS_PK, _name(name))])

    def publish(self, name: str, value: str) -> None:
        values = self.values(name)
        if value not in values:
            self._write(name, values + [value])

    def remove(self, name: str, value: str) -> None:
        self._write(name, [v for v in self.values(name) if v != value])


class Route53(Provider):
    def __init__(self, zone_id: str):
        import boto3

        self.zone_id = zone_id
        self.client = boto3.client("route53")

    def _current(self, name: str) -> List[str]:
        answer = self.client.list_resource_record_sets(
            HostedZoneId=self.zone_id,
            StartRecordName=_name(name) + ".",
            StartRecordType="TXT",
            MaxItems="1",
        )
        for rrset in answer.get("ResourceRecordSets", []):
            if rrset["Name"].rstrip(".") == _name(name) and rrset["Type"] == "TXT":
                return [r["Value"].strip('"') for r in rrset["ResourceRecords"]]
        return []

    def _change(self, name: str, values: List[str], action: str) -> None:
        self.client.change_resource_record_sets(
            HostedZoneId=self.zone_id,
            ChangeBatch={
                "Changes": [
                    {
                        "Action": action,
                        "ResourceRecordSet": {
                            "Name": _name(name) + ".",
                            "Type": "TXT",
                            "TTL": TTL,
                            "ResourceRecords": [{"Value": f'"{v}"'} for v in values],
                        },
                    }
                ]
            },
        )

    def publish(self, name: str, value: str) -> None:
        values = self._current(name)
        if value not in values:
            self._change(name, values + [value], "UPSERT")

    def remove(self, name: str, value: str) -> None:
        values = self._current(name)
        if value not in values:
            return
        rest = [v for v in values if v != value]
        if rest:
            self._change(name, rest, "UPSERT")
        else:
            self._change(name, values, "DELETE")


def provider() -> Optional[Provider]:
    zone = (os.environ.get("DNS_ROUTE53_ZONE_ID") or "").strip()
    if zone:
        return Route53(zone)
    if (os.environ.get("DNS_LISTEN") or "").strip():
        return OwnServer()
    return None


# ---- the service's own authoritative server -----------------------------------------------------
def ingress_addresses(raw: str) -> List[str]:
    """``DNS_INGRESS_ADDRESSES`` as a list of addresses (ValueError naming a bad one)."""
    out = []
    for part in (p.strip() for p in raw.split(",")):
        if not part:
            continue
        try:
            out.append(str(ipaddress.ip_address(part)))
        except ValueError:
            raise ValueError(f"DNS_INGRESS_ADDRESSES: {part!r} is not an IP address") from None
    return out


def answer(
    wire: bytes, zone: str, own: OwnServer, addresses: Sequence[str] = ()
) -> Optional[bytes]:
    """The response to one DNS query message (None: not a query worth answering);
    ``addresses``: the agent ingress domains' A/AAAA answers (none: they are not answered)."""
    import dns.exception
    import dns.flags
    import dns.message
    import dns.rcode
    import dns.rdataclass
    import dns.rdatatype
    import dns.rrset

    try:
        query = dns.message.from_wire(wire)
    except Exception:
        return None
    response = dns.message.make_response(query)
    if len(query.question) != 1:
        response.set_rcode(dns.rcode.FORMERR)
        return response.to_wire()
    question = query.question[0]
    name = _name(question.name.to_text())
    if not (name == zone or name.endswith("." + zone)):
        if addresses and name in own.ingress_domains():
            response.flags |= dns.flags.AA
            _ingress_records(response, question, zone, addresses)
        else:
            response.set_rcode(dns.rcode.REFUSED)
        return response.to_wire()
    response.flags |= dns.flags.AA
    values = own.values(name) if question.rdtype in (dns.rdatatype.TXT, dns.rdatatype.ANY) else []
    if values:
        response.answer.append(
            dns.rrset.from_text_list(
                question.name,
                TTL,
                dns.rdataclass.IN,
                dns.rdatatype.TXT,
                ['"%s"' % v for v in values],
            )
        )
    elif name != zone and not own.values(name):
        response.set_rcode(dns.rcode.NXDOMAIN)
    size = max(512, query.payload) if query.edns >= 0 else 512
    try:
        return response.to_wire(max_size=size)
    except dns.exception.TooBig:  # truncated: the resolver may ask again over TCP
        response.answer.clear()
        response.flags |= dns.flags.TC
        return response.to_wire(max_size=size)


def _ingress_records(response, question, zone: str, addresses: Sequence[str]) -> None:
    """An agent ingress domain's answer: A/AAAA its addresses, NS the zone's name servers,
    nothing for another type."""
    import dns.rdataclass
    import dns.rdatatype
    import dns.rrset

    want = question.rdtype
    if want in (dns.rdatatype.A, dns.rdatatype.AAAA):
        version = 4 if want == dns.rdatatype.A else 6
        values = [a for a in addresses if ipaddress.ip_address(a).version == version]
        values = values[:MAX_INGRESS_ADDRESSES]
    elif want == dns.rdatatype.NS:
        values = [f"ns1.{zone}.", f"ns2.{zone}."]
    else:
        values = []
    if values:
        response.answer.append(
            dns.rrset.from_text_list(question.name, TTL, dns.rdataclass.IN, want, values)
        )


def serve(listen: str) -> int:
    host, _, port = listen.rpartition(":")
    store.configure()
    zone = get_settings().cname_zone
    try:
        addresses = ingress_addresses(os.environ.get("DNS_INGRESS_ADDRESSES") or "")
    except ValueError as exc:
        print(str(exc), file=sys.stderr)
        return 2
    own = OwnServer()
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind((host or "127.0.0.1", int(port)))
    bound = "%s:%d" % sock.getsockname()
    ingress = f" and {len(addresses)} agent ingress address(es)" if addresses else ""
    print(f"dns server: authoritative for {zone}{ingress} on udp {bound}", flush=True)
    import signal

    signal.signal(signal.SIGTERM, lambda *a: sys.exit(0))
    while True:
        wire, peer = sock.recvfrom(4096)
        try:
            out = answer(wire, zone, own, addresses)
        except Exception as exc:  # the store away: no answer, the resolver retries
            print(f"dns: {exc!r}", file=sys.stderr, flush=True)
            out = None
        if out is not None:
            sock.sendto(out, peer)


if __name__ == "__main__":
    listen = os.environ.get("DNS_LISTEN") or ""
    if not listen:
        print("DNS_LISTEN (host:port) is not set", file=sys.stderr)
        sys.exit(2)
    sys.exit(serve(listen))
