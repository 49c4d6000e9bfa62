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
"""

import os
import socket
import sys
from typing import List, Optional

from chalicelib.core import store
from chalicelib.core.config import get_settings

DNS_PK = "ACME#dns"
TTL = 60
MAX_VALUES = 8  # 8 digests (43 characters each) fit a 512-byte UDP answer


class Provider:
    def publish(self, name: str, value: str) -> None:
        raise NotImplementedError

    def remove(self, name: str, value: str) -> None:
        raise NotImplementedError


def _name(name: str) -> str:
    return name.lower().rstrip(".")


class OwnServer(Provider):
    """TXT values in the table, answered by :func:`serve`."""

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
def answer(wire: bytes, zone: str, own: OwnServer) -> Optional[bytes]:
    """The response to one DNS query message (None: not a query worth answering)."""
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


def serve(listen: str) -> int:
    host, _, port = listen.rpartition(":")
    store.configure()
    zone = get_settings().cname_zone
    own = OwnServer()
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind((host or "127.0.0.1", int(port)))
    bound = "%s:%d" % sock.getsockname()
    print(f"dns server: authoritative for {zone} on udp {bound}", flush=True)
    import signal

    signal.signal(signal.SIGTERM, lambda *a: sys.exit(0))
    while True:
        wire, peer = sock.recvfrom(4096)
        try:
            out = answer(wire, zone, own)
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
