"""DNS servers for tests and benchmarks.

:class:`LoopbackDns`: a DNS server of our own on the loopback (dnspython over UDP, in a
thread), for the API's DNS check (``DNS_CHECK_RESOLVER``). It answers CNAME questions from
``cnames`` (name -> target; a name it does not hold is NXDOMAIN), or, with ``silent``, never
answers (a resolver that times out).

:class:`ServiceDns`: the service's own authoritative server (``python -m chalicelib.acme.dns``)
as a process on a stack's store, as `make run` starts it with ``DNS_LISTEN``."""

import signal
import socket
import sys
import threading
from typing import Dict, Optional

from stacks.paths import PROJECT_DIR
from stacks.ports import free_port
from stacks.process import Process

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


class ServiceDns:
    """``python -m chalicelib.acme.dns`` on ``store_env`` (a stack's store), listening on a free
    UDP port of the loopback (``port``); ``extra`` adds to its environment (e.g.
    ``DNS_INGRESS_ADDRESSES``). Started by the constructor; :meth:`stop` ends it."""

    def __init__(
        self, store_env: Dict[str, str], log_path: str, extra: Optional[Dict[str, str]] = None
    ) -> None:
        self.port = free_port()
        env = {
            **store_env,
            "DNS_LISTEN": f"127.0.0.1:{self.port}",
            "PYTHONUNBUFFERED": "1",
            **(extra or {}),
        }
        self.process = Process(
            [sys.executable, "-m", "chalicelib.acme.dns"], PROJECT_DIR, env, log_path
        )
        self.process.wait_for_line("dns server", timeout=30)

    def stop(self) -> None:
        self.process.stop(signal.SIGTERM)  # the server exits on it (SIGINT leaves a traceback)
