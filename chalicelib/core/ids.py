"""Resource identifiers: ``<prefix>_<27 base62 characters>``.

The 27 characters encode 160 bits: a 48-bit millisecond Unix timestamp followed by 112
random bits, big-endian, in the alphabet ``0-9A-Za-z`` (ASCII order), so that string order is
creation order. Within one process, ids minted in the same millisecond increment the random
part instead of drawing a new one, so they stay strictly increasing (ULID's monotonic rule);
across processes, ids of the same millisecond order randomly, which is what "time-sortable
with millisecond resolution" promises.
"""

import re
import secrets
import threading
import time

ALPHABET = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
ID_LENGTH = 27
_RANDOM_BITS = 112
_RANDOM_MASK = (1 << _RANDOM_BITS) - 1

PREFIXES = {
    "http_response_backend": "bkdhr",
    "tunnel_group_backend": "bkdtg",
    "failover_backend": "bkdfo",
    "weighted_backend": "bkdwt",
    "static_backend": "bkdsa",
    "reserved_addr": "ra",
    "certificate_authority": "ca",
    "tls_certificate": "cert",
    "tcp_edge": "edgtcp",
    "https_edge": "edghts",
    "tls_edge": "edgtls",
    "https_edge_route": "edghtsrt",
    "credential": "cr",
    "ssh_credential": "sshcr",
    "ssh_certificate_authority": "sshca",
    "ssh_host_certificate": "shcrt",
    "ssh_user_certificate": "sucrt",
    "agent_ingress": "agin",
    "bot_user": "bot",
    "user": "usr",
    "api_key": "ak",
    "abuse_report": "abrp",
    "reserved_domain": "rd",
    "ip_policy": "ipp",
    "ip_policy_rule": "ipr",
    "ip_restriction": "ipx",
    "operation": "op",
    # event subscriptions (chalicelib.event_destinations, chalicelib.event_subscriptions),
    # the events the edge and the API send (edge.events) and captured requests (inspector)
    "event_destination": "ed",
    "event_subscription": "esb",
    "event": "ev",
    "captured_request": "req",
    "account": "acct",
    "vault": "vault",
    "vault_secret": "secret",
    "app_user": "appusr",
    "app_session": "appses",
    # online state written by the edge (chalicelib.core.online); the hosted API's prefixes
    "tunnel_session": "ts",
    "tunnel": "tn",
    "endpoint": "ep",
}

_ID_RE = re.compile(r"^([a-z]+)_([0-9A-Za-z]{27})$")
_lock = threading.Lock()
_last = [0, 0]  # [millis, random part] of the last id minted by this process


def _encode(number: int) -> str:
    chars = []
    for _ in range(ID_LENGTH):
        number, rem = divmod(number, 62)
        chars.append(ALPHABET[rem])
    return "".join(reversed(chars))


def new_id(prefix: str) -> str:
    """A new id with the given prefix (``"ak"``, not ``"ak_"``)."""
    with _lock:
        millis = int(time.time() * 1000)
        if millis <= _last[0]:
            millis = _last[0]
            rand = (_last[1] + 1) & _RANDOM_MASK
            if rand == 0:  # 2^112 ids in one millisecond: move to the next one
                millis += 1
                rand = secrets.randbits(_RANDOM_BITS)
        else:
            rand = secrets.randbits(_RANDOM_BITS)
        _last[0], _last[1] = millis, rand
    return f"{prefix}_{_encode((millis << _RANDOM_BITS) | rand)}"


def is_valid(value: object, prefix: str) -> bool:
    """True when ``value`` is a well-formed id with exactly this prefix."""
    if not isinstance(value, str):
        return False
    match = _ID_RE.match(value)
    return match is not None and match.group(1) == prefix


def timestamp_millis(value: str) -> int:
    """The creation time encoded in a well-formed id."""
    number = 0
    for char in value.rsplit("_", 1)[1]:
        number = number * 62 + ALPHABET.index(char)
    return number >> _RANDOM_BITS
