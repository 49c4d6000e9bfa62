"""Pebble (the ACME test CA) and pebble-challtestsrv (its mock DNS) as processes, on loopback.

Debian's ``pebble`` package ships no TLS certificate for Pebble's own API: a small CA is made
here (its certificate is the ACME_CA_BUNDLE). challtestsrv answers every A question with
127.0.0.1 (``-defaultIPv6 ""``: no AAAA), so every name resolves to the edge; Pebble's
validation ports are the edge's HTTP and HTTPS listeners.
"""

import json
import os
import shutil
import subprocess
import time
from dataclasses import dataclass, field
from typing import List, Optional

import requests

from stacks.ports import free_port
from stacks.certs import SmallCA, key_pem, pem


def available() -> Optional[str]:
    """None when both binaries are installed, else what is missing."""
    missing = [b for b in ("pebble", "pebble-challtestsrv") if shutil.which(b) is None]
    return ", ".join(missing) or None


@dataclass
class Pebble:
    folder: str
    http_port: int
    tls_port: int
    validity_seconds: int = 0
    resolver_port: Optional[int] = None  # Pebble's DNS (default: challtestsrv itself)
    port: int = field(default_factory=free_port)
    management_port: int = field(default_factory=free_port)
    dns_port: int = field(default_factory=free_port)
    dns_management_port: int = field(default_factory=free_port)
    processes: List[subprocess.Popen] = field(default_factory=list)

    @property
    def directory_url(self) -> str:
        return f"https://127.0.0.1:{self.port}/dir"

    @property
    def ca_bundle(self) -> str:
        return os.path.join(self.folder, "pebble-tls-ca.pem")

    def start(self) -> "Pebble":
        os.makedirs(self.folder, exist_ok=True)
        tls_ca = SmallCA("Pebble API test CA")
        cert, key = tls_ca.leaf(["localhost", "127.0.0.1"])
        with open(self.ca_bundle, "w") as fh:
            fh.write(tls_ca.pem)
        with open(os.path.join(self.folder, "cert.pem"), "w") as fh:
            fh.write(pem(cert))
        with open(os.path.join(self.folder, "key.pem"), "w") as fh:
            fh.write(key_pem(key))
        config = {
            "pebble": {
                "listenAddress": f"127.0.0.1:{self.port}",
                "managementListenAddress": f"127.0.0.1:{self.management_port}",
                "certificate": os.path.join(self.folder, "cert.pem"),
                "privateKey": os.path.join(self.folder, "key.pem"),
                "httpPort": self.http_port,
                "tlsPort": self.tls_port,
                "ocspResponderURL": "",
                "externalAccountBindingRequired": False,
            }
        }
        if self.validity_seconds:
            config["pebble"]["certificateValidityPeriod"] = self.validity_seconds
        config_path = os.path.join(self.folder, "pebble-config.json")
        with open(config_path, "w") as fh:
            json.dump(config, fh)
        dns_log = open(os.path.join(self.folder, "challtestsrv.log"), "wb")
        self.processes.append(
            subprocess.Popen(
                [
                    "pebble-challtestsrv",
                    "-defaultIPv4",
                    "127.0.0.1",
                    "-defaultIPv6",
                    "",
                    "-dns01",
                    f"127.0.0.1:{self.dns_port}",
                    "-http01",
                    "",
                    "-https01",
                    "",
                    "-tlsalpn01",
                    "",
                    "-management",
                    f"127.0.0.1:{self.dns_management_port}",
                ],
                stdout=dns_log,
                stderr=subprocess.STDOUT,
            )
        )
        env = {
            **os.environ,
            "PEBBLE_VA_NOSLEEP": "1",
            "PEBBLE_AUTHZREUSE": "0",
            "PEBBLE_WFE_NONCEREJECT": "0",
        }
        log = open(os.path.join(self.folder, "pebble.log"), "wb")
        self.processes.append(
            subprocess.Popen(
                [
                    "pebble",
                    "-config",
                    config_path,
                    "-dnsserver",
                    f"127.0.0.1:{self.resolver_port or self.dns_port}",
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                cwd=self.folder,
            )
        )
        deadline = time.time() + 30
        while time.time() < deadline:
            try:
                requests.get(self.directory_url, verify=self.ca_bundle, timeout=2)
                requests.get(f"http://127.0.0.1:{self.dns_management_port}/", timeout=2)
                return self
            except requests.RequestException:
                if any(p.poll() is not None for p in self.processes):
                    break
                time.sleep(0.2)
        self.stop()
        raise RuntimeError(f"pebble did not start: {self.log()}")

    def log(self) -> str:
        out = ""
        for name in ("pebble.log", "challtestsrv.log"):
            try:
                with open(os.path.join(self.folder, name), errors="replace") as fh:
                    out += f"--- {name}\n" + fh.read()[-3000:]
            except OSError:
                pass
        return out

    def root_pem(self) -> str:
        """Pebble's issuing root (what a client of the issued certificates trusts)."""
        resp = requests.get(
            f"https://127.0.0.1:{self.management_port}/roots/0", verify=self.ca_bundle, timeout=10
        )
        resp.raise_for_status()
        return resp.text

    def set_a(self, host: str, addresses: List[str]) -> None:
        """Answer A questions for ``host`` with ``addresses`` ([]: the default, 127.0.0.1)."""
        requests.post(
            f"http://127.0.0.1:{self.dns_management_port}/clear-a", json={"host": host}, timeout=5
        ).raise_for_status()
        if not addresses:
            return
        requests.post(
            f"http://127.0.0.1:{self.dns_management_port}/add-a",
            json={"host": host, "addresses": addresses},
            timeout=5,
        ).raise_for_status()

    def stop(self) -> None:
        for process in reversed(self.processes):
            if process.poll() is None:
                process.terminate()
                try:
                    process.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait()
        self.processes.clear()


class CnameResolver:
    """A small recursive resolver in front of challtestsrv, for Pebble's DNS-01 lookups (Pebble
    2.4 does not follow a CNAME itself, and challtestsrv does not recurse): a question for a
    name in ``cnames`` (the user's ``_acme-challenge`` records) is answered with that CNAME
    plus the target's records, asked of ``authority`` (the service's own DNS server); every
    other question is passed to ``upstream``. UDP on 127.0.0.1, in a thread."""

    def __init__(self, upstream: int, authority: int):
        import socket
        import threading

        self.upstream, self.authority = upstream, authority
        self.cnames: dict = {}
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        import dns.message
        import dns.query
        import dns.rdataclass
        import dns.rdatatype
        import dns.rrset

        while True:
            try:
                wire, peer = self.sock.recvfrom(4096)
            except OSError:
                return
            try:
                query = dns.message.from_wire(wire)
                question = query.question[0]
                name = question.name.to_text().rstrip(".").lower()
                target = self.cnames.get(name)
                if target is None:
                    answer = dns.query.udp(query, "127.0.0.1", port=self.upstream, timeout=5)
                else:
                    inner = dns.message.make_query(target, question.rdtype)
                    found = dns.query.udp(inner, "127.0.0.1", port=self.authority, timeout=5)
                    answer = dns.message.make_response(query)
                    answer.answer.append(
                        dns.rrset.from_text(
                            question.name, 60, dns.rdataclass.IN, dns.rdatatype.CNAME, target + "."
                        )
                    )
                    answer.answer.extend(found.answer)
                    answer.set_rcode(found.rcode())
                self.sock.sendto(answer.to_wire(), peer)
            except Exception:  # a malformed or unanswerable question: no answer
                continue

    def stop(self) -> None:
        self.sock.close()
