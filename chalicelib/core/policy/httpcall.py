"""The http-request action's rules that the edge and the API share: its bounds, the call the
action asks the edge to make (:class:`Call`), the variables its answer sets, the retry
condition's CEL environment, and which destinations an edge may reach (the SSRF rule).

The engine does no I/O: the action renders its config into a :class:`Call` and the phase
pauses (``Outcome.kind == HTTP_REQUEST``); the edge makes the call (edge/http_request.py),
hands the result to :func:`result_vars`, and the phase resumes after the action.

Destinations (docs/SECURITY.md, "http-request"):
- ``<name>.internal`` URLs reach the account's internal agent endpoint bound on this edge
  (through its agent, as the hosted service does by default); the internal endpoint's own
  traffic policy is not run for these calls.
- Any other URL is refused unless the operator lists networks in
  ``EDGE_HTTP_REQUEST_ALLOW`` (CIDRs, comma-separated; empty by default: the hosted service
  also disables external requests by default). The host is resolved once per fetch and the
  connection goes to the address checked (no second lookup to rebind). The address must be
  in a listed network; an address that is not globally routable (loopback, private,
  link-local, CGNAT, multicast, unspecified, reserved, IPv4-mapped forms of those) must be
  in a listed network that lies inside one of those special blocks itself: ``0.0.0.0/0``
  opens the internet, never the edge's own host or its private network, which must be
  named (``127.0.0.1/32``, ``10.1.0.0/16``). Each redirect is checked the same way.
"""

import ipaddress
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

MAX_RESPONSE_BODY = 256 * 1024  # hosted: "limited to 256 KB" (the decoded body)
MAX_REQUEST_BODY = 256 * 1024  # a rendered request body longer than this is an error
MAX_RESPONSE_HEAD = 64 * 1024  # a response head (status line and headers)
MAX_RETRIES = 3  # hosted: "retried (up to 3 times)": at most 4 attempts
MAX_PER_REQUEST = 10  # http-request actions one client request may run (both phases)
MAX_HOPS = 3  # hosted loop protection: a request that came from http-request 3 times
HOPS_HEADER = "ngrok-req-hops"  # how many http-request calls the request came through
METHODS = ("GET", "PUT", "POST", "PATCH", "DELETE", "OPTIONS")
MAX_QUERY_PARAMS = 32
MAX_QUERY_KEY = 128
MAX_QUERY_VALUE = 8192
TIMEOUT_DEFAULT, TIMEOUT_MIN, TIMEOUT_MAX = 3, 1, 30
MAX_REDIRECTS = 100  # the hosted schema's maximum (default 0: not followed)
RETRY_PHASE = "http_request.retry_condition"  # the retry condition's own CEL environment

Network = Union[ipaddress.IPv4Network, ipaddress.IPv6Network]
Address = Union[ipaddress.IPv4Address, ipaddress.IPv6Address]

SPECIAL: Tuple[Network, ...] = tuple(
    ipaddress.ip_network(n)
    for n in (
        "0.0.0.0/8",
        "10.0.0.0/8",
        "100.64.0.0/10",
        "127.0.0.0/8",
        "169.254.0.0/16",
        "172.16.0.0/12",
        "192.0.0.0/24",
        "192.0.2.0/24",
        "192.168.0.0/16",
        "198.18.0.0/15",
        "198.51.100.0/24",
        "203.0.113.0/24",
        "224.0.0.0/4",
        "240.0.0.0/4",
        "::/128",
        "::1/128",
        "64:ff9b::/96",
        "100::/64",
        "2001:db8::/32",
        "fc00::/7",
        "fe80::/10",
        "ff00::/8",
    )
)


@dataclass
class Call:
    """One http-request action's call, its config rendered for this request."""

    method: str
    url: str
    headers: List[Tuple[str, str]]
    body: bytes
    timeout: float
    max_redirects: int
    on_error: str
    retry: Optional[Any] = None  # a celenv.Program over the retry variables, or None
    hops: int = 1  # this call's hop count (the request's own plus one)
    client_ip: str = ""
    errors: List[str] = field(default_factory=list)

    def wants_retry(self, attempts: int, last: Dict[str, Any]) -> bool:
        """The retry condition after a failed attempt (``last``: its req, res, error);
        False when there is none, past MAX_RETRIES, or when the condition fails."""
        if self.retry is None or attempts > MAX_RETRIES:
            return False
        from chalicelib.core.policy import celenv

        values = {
            "attempts": attempts,
            "last_attempt.req": last.get("req") or {},
            "last_attempt.res": last.get("res") or {},
            "last_attempt.error": last.get("error") or "",
        }
        traffic = celenv.Traffic(None, action_vars=values)
        try:
            return self.retry.evaluate(traffic) is True
        except celenv.EvalError as exc:
            self.errors.append(f"http-request retry_condition: {exc}")
            return False


def response_record(
    status: int, headers: Sequence[Tuple[str, str]], body: bytes, ip: str, ms: int
) -> Dict[str, Any]:
    """One response as the result variables show it (``res`` and ``attempts[i]``): header
    names lower-cased, each with its list of values; the body as text (UTF-8, invalid bytes
    replaced)."""
    header: Dict[str, List[str]] = {}
    for name, value in headers:
        header.setdefault(name.lower(), []).append(value)
    return {
        "resolved_ip": ip,
        "header": header,
        "status_code": status,
        "statusCode": status,  # the hosted docs' retry_condition example reads this name
        "time_ms": str(ms),
        "body": body.decode("utf-8", "replace"),
    }


def request_record(call: Call, url: str) -> Dict[str, Any]:
    header: Dict[str, List[str]] = {}
    for name, value in call.headers:
        header.setdefault(name.lower(), []).append(value)
    return {
        "method": call.method,
        "header": header,
        "url": url,
        "body": call.body.decode("utf-8", "replace"),
    }


def result_vars(
    req: Dict[str, Any],
    res: Optional[Dict[str, Any]],
    attempts: List[Dict[str, Any]],
    error: Optional[Tuple[str, str]],
) -> Dict[str, Any]:
    """The action's result variables (``actions.ngrok.http_request.*``): ``req``, ``res``
    (the last response, with its body; empty when none came), ``attempts`` (every response,
    without bodies), ``error.code`` / ``error.message``."""
    return {
        "req": req,
        "res": res or {},
        "attempts": [
            {
                "resolved_ip": a["resolved_ip"],
                "response_header": a["header"],
                "response_status_code": a["status_code"],
                "response_time_ms": a["time_ms"],
            }
            for a in attempts
        ],
        "error.code": error[0] if error else "",
        "error.message": error[1] if error else "",
    }


def parse_allow(text: str) -> List[Network]:
    """EDGE_HTTP_REQUEST_ALLOW: comma-separated CIDRs (a bare address is its /32 or /128).
    ValueError naming the entry that is not one."""
    networks = []
    for entry in (text or "").split(","):
        entry = entry.strip()
        if not entry:
            continue
        try:
            networks.append(ipaddress.ip_network(entry, strict=False))
        except ValueError:
            raise ValueError(f"EDGE_HTTP_REQUEST_ALLOW: '{entry[:64]}' is not a CIDR") from None
    return networks


def _plain(address: Address) -> Address:
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address


def is_special(address: Address) -> bool:
    address = _plain(address)
    return any(address.version == n.version and address in n for n in SPECIAL)


def refused_destination(address: Address, allow: Sequence[Network]) -> Optional[str]:
    """None when an edge with ``allow`` may connect to ``address`` for an external
    http-request; else why not (the module docstring's rule)."""
    if not allow:
        return (
            "requests to external URLs are disabled on this edge (the operator enables "
            "them with EDGE_HTTP_REQUEST_ALLOW); use an internal endpoint "
            "(https://<name>.internal)"
        )
    address = _plain(address)
    inside = [n for n in allow if n.version == address.version and address in n]
    if not inside:
        return f"{address} is not in a network EDGE_HTTP_REQUEST_ALLOW lists"
    if not is_special(address):
        return None
    for network in inside:
        if any(network.version == s.version and network.subnet_of(s) for s in SPECIAL):  # type: ignore[arg-type]
            return None
    return (
        f"{address} is a loopback, private or reserved address; EDGE_HTTP_REQUEST_ALLOW "
        "must name its network itself (a wider network such as 0.0.0.0/0 does not open it)"
    )
