"""What the edge hands the engine: a connection, a request, a response (plain objects).

The edge builds these from its sockets and parsed HTTP/1.1 heads; the engine reads them and
changes the request and response in place (headers, URL) for actions that do not answer
directly. Derived views (query parameters, cookies, user agent) are computed on first use and
recomputed after a change.
"""

import datetime
import functools
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional, Tuple
from urllib.parse import parse_qs, urlsplit, urlunsplit

Headers = List[Tuple[str, str]]

# (account id, IP policy id) -> that account's rules of that policy as [(action "allow" |
# "deny", cidr), …] oldest first, or None when the account has no such policy.
IpPolicyResolver = Callable[[str, str], Optional[List[Tuple[str, str]]]]


def utcnow() -> datetime.datetime:
    return datetime.datetime.now(datetime.timezone.utc)


@dataclass
class Endpoint:
    """The endpoint that serves the traffic (``endpoint.*`` variables)."""

    id: str = ""
    url: str = ""  # e.g. https://app.example.com or tcp://1.tcp.example.com:20001
    host: str = ""
    port: int = 0
    protocol: str = "https"  # http, https, tcp, tls
    account_id: str = ""  # whose endpoint: scopes restrict-ips ``ip_policies``

    @property
    def addr(self) -> str:
        return f"{self.host}:{self.port}" if self.port else self.host


@dataclass
class Conn:
    """One public connection (``conn.*`` variables)."""

    client_ip: str
    client_port: int
    server_ip: str = "127.0.0.1"
    server_port: int = 0
    ts_start: datetime.datetime = field(default_factory=utcnow)
    endpoint: Endpoint = field(default_factory=Endpoint)
    server_region: str = "local"
    bytes_in: int = 0
    bytes_out: int = 0
    # TLS between the client and the edge (empty on plain HTTP/TCP). tls_version as Python's
    # SSLObject.version() ("TLSv1.3") or already "1.3"; cipher from SSLObject.cipher()[0].
    tls_version: str = ""
    tls_cipher_suite: str = ""
    tls_sni: str = ""
    tls_alpn: str = ""
    # the client certificate the edge verified (DER; empty without mutual TLS): the
    # conn.tls.client.* variables (chalicelib/core/policy/tlsclient.py)
    tls_client_der: bytes = b""
    # How restrict-ips resolves ``ip_policies`` for this traffic (called with
    # ``endpoint.account_id``); None: nothing resolves, such actions deny (fail closed).
    ip_policy_resolver: Optional[IpPolicyResolver] = None
    # How ``secrets.get(vault, name)`` reads a vault secret of ``endpoint.account_id``: the
    # value, or None when the account has no such secret (the call then fails). None: no
    # secret resolves (the edge sets it for policies that name secrets, edge/secrets.py).
    secret_resolver: Optional[Callable[[str, str], Optional[str]]] = None


@functools.lru_cache(maxsize=4096)  # header names repeat from request to request
def canonical(name: str) -> str:
    """Go's canonical MIME header key: ``x-api-version`` -> ``X-Api-Version``."""
    return "-".join(part[:1].upper() + part[1:].lower() for part in name.split("-"))


def _header_map(headers: Headers) -> Dict[str, List[str]]:
    """Lower-case names (the reference) and, the same lists, canonical names: the hosted
    docs' own examples read ``req.headers['X-Api-Version']`` and ``'Authorization' in
    req.headers``. ``size(req.headers)`` therefore counts most names twice."""
    out: Dict[str, List[str]] = {}
    for name, value in headers:
        out.setdefault(name.lower(), []).append(value)
    for name in list(out):
        out.setdefault(canonical(name), out[name])
    return out


def _cookies(values: List[str]) -> Dict[str, List[Dict[str, str]]]:
    out: Dict[str, List[Dict[str, str]]] = {}
    for line in values:
        for part in line.split(";"):
            name, sep, value = part.strip().partition("=")
            if name and sep:
                value = value.strip()
                if len(value) > 1 and value[0] == value[-1] == '"':
                    value = value[1:-1]
                out.setdefault(name, []).append({"name": name, "value": value})
    return out


class _Message:
    headers: Headers

    def header_map(self) -> Dict[str, List[str]]:
        key = tuple(self.headers)
        cache = self.__dict__.get("_hmap")
        if cache is None or cache[0] != key:
            cache = (key, _header_map(self.headers))
            self.__dict__["_hmap"] = cache
        return cache[1]

    def get_header(self, name: str) -> List[str]:
        return self.header_map().get(name.lower(), [])

    def add_header(self, name: str, value: str) -> None:
        """Append a value to ``name``'s (add-headers semantics: what was there stays)."""
        before = tuple(self.headers)
        self.headers.append((name, value))
        lowered = name.lower()
        cache = self.__dict__.get("_hmap")
        if cache is not None and cache[0] == before:
            self._patch_map(before, lowered, cache[1].get(lowered, []) + [value])

    def set_header(self, name: str, value: str) -> None:
        """Replace every value of ``name`` by ``value`` (add-headers semantics)."""
        lowered = name.lower()
        before = tuple(self.headers)
        self.headers = [(k, v) for k, v in self.headers if k.lower() != lowered]
        self.headers.append((name, value))
        self._patch_map(before, lowered, [value])

    def remove_header(self, name: str) -> bool:
        lowered = name.lower()
        before = tuple(self.headers)
        kept = [(k, v) for k, v in self.headers if k.lower() != lowered]
        removed = len(kept) != len(self.headers)
        self.headers = kept
        self._patch_map(before, lowered, None)
        return removed

    def _patch_map(self, before: tuple, lowered: str, values: Optional[List[str]]) -> None:
        """Bring a header map computed for ``before`` up to date with one name's change (a
        policy of several add-headers rules would otherwise rebuild it once per rule)."""
        cache = self.__dict__.get("_hmap")
        if cache is None or cache[0] != before:
            return
        hmap = dict(cache[1])
        hmap.pop(lowered, None)
        hmap.pop(canonical(lowered), None)
        if values is not None:
            hmap[lowered] = values
            hmap.setdefault(canonical(lowered), values)
        self.__dict__["_hmap"] = (tuple(self.headers), hmap)


@dataclass
class Request(_Message):
    """One HTTP request. ``url`` is the full URL (scheme://host[:port]/path?query).

    ``body`` is None until the edge has read it (only when an Outcome asked for it);
    ``body_complete`` is False when the edge stopped at the size it was asked for.
    """

    method: str
    url: str
    headers: Headers = field(default_factory=list)
    version: str = "HTTP/1.1"
    content_length: Optional[int] = None
    body: Optional[bytes] = None
    body_complete: bool = True
    body_rewritten: bool = False  # request-body-find-replace changed ``body``: send it instead
    ts_header_received: datetime.datetime = field(default_factory=utcnow)

    @classmethod
    def from_target(
        cls, method: str, scheme: str, host: str, target: str, headers: Headers, **kwargs
    ) -> "Request":
        """Build from an HTTP/1.1 request line's target and the Host header value. An
        absolute-form target (``GET http://host/path``) keeps its path and query; the scheme
        and host stay those of the connection and the Host header."""
        if not target.startswith("/") and "://" in target:
            parts = urlsplit(target)
            target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        elif not target.startswith("/"):
            target = "/" if target in ("", "*") else f"/{target}"
        return cls(
            method=method, url=f"{scheme}://{host}{target}", headers=list(headers), **kwargs
        )

    def split(self):
        key = self.url
        cache = self.__dict__.get("_split")
        if cache is None or cache[0] != key:
            cache = (key, urlsplit(self.url))
            self.__dict__["_split"] = cache
        return cache[1]

    @property
    def path(self) -> str:
        return self.split().path or "/"

    @property
    def query(self) -> str:
        return self.split().query

    @property
    def target(self) -> str:
        """What goes on the request line upstream: path and query."""
        return self.path + (f"?{self.query}" if self.query else "")

    @property
    def host(self) -> str:
        """The Host header's value (what ``req.host`` names)."""
        values = self.get_header("host")
        return values[0] if values else self.split().netloc.rpartition("@")[2]

    def query_params(self) -> Dict[str, List[str]]:
        return parse_qs(self.query, keep_blank_values=True)

    def cookies(self) -> Dict[str, List[Dict[str, str]]]:
        return _cookies(self.get_header("cookie"))

    def set_url(self, url: str) -> None:
        parts = urlsplit(url)
        self.url = urlunsplit(parts)


@dataclass
class Response(_Message):
    """One HTTP response head from upstream."""

    status_code: int
    headers: Headers = field(default_factory=list)
    version: str = "HTTP/1.1"

    def cookies(self) -> Dict[str, List[Dict[str, object]]]:
        out: Dict[str, List[Dict[str, object]]] = {}
        for line in self.get_header("set-cookie"):
            first, *attrs = line.split(";")
            name, sep, value = first.strip().partition("=")
            if not (name and sep):
                continue
            cookie: Dict[str, object] = {
                "name": name,
                "value": value.strip(),
                "domain": "",
                "path": "",
                "same_site": "",
                "secure": False,
                "http_only": False,
                "unparsed_attributes": {},
            }
            for attr in attrs:
                key, _, val = attr.strip().partition("=")
                lk = key.lower()
                if lk in ("domain", "path"):
                    cookie[lk] = val
                elif lk == "samesite":
                    cookie["same_site"] = val
                elif lk in ("secure", "httponly"):
                    cookie["secure" if lk == "secure" else "http_only"] = True
                elif key:
                    cookie["unparsed_attributes"][key] = val  # type: ignore[index]
            out.setdefault(name, []).append(cookie)
        for cookies in out.values():
            cookies.sort(key=lambda c: -len(str(c["path"])))
        return out
