"""A DNS server of our own on the loopback (dnspython over UDP, in a thread), for the API's DNS
check (``DNS_CHECK_RESOLVER``) in tests and benchmarks.

It answers CNAME questions from ``cnames`` (name -> target; a name it does not hold is
NXDOMAIN), or, with ``silent``, never answers (a resolver that times out)."""

import socket
import threading
from typing import Dict

import dns.flags
import dns.message
import dns.rcode
import dns.rdatatype
import dns.rrset


class LoopbackDns:
    def __init__(self, cnames: Dict[str, str] = None, silent: bool = False) -> None:
        self.cnames = {k.lower().rstrip("."): v for k, v in (cnames or {}).items()}
        self.silent = silent
        self.questions = 0
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def __enter__(self) -> "LoopbackDns":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self.sock.close()

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                data, peer = self.sock.recvfrom(4096)
            except OSError:
                return
            self.questions += 1
            if self.silent:
                continue
            query = dns.message.from_wire(data)
            reply = dns.message.make_response(query)
            reply.flags |= dns.flags.AA
            question = query.question[0]
            name = question.name.to_text().lower().rstrip(".")
            target = self.cnames.get(name)
            if target is None:
                reply.set_rcode(dns.rcode.NXDOMAIN)
            elif question.rdtype in (dns.rdatatype.CNAME, dns.rdatatype.A):
                reply.answer.append(
                    dns.rrset.from_text(question.name, 60, "IN", "CNAME", target.rstrip(".") + ".")
                )
            try:
                self.sock.sendto(reply.to_wire(), peer)
            except OSError:
                return
