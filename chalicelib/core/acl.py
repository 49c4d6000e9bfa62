"""Credential ACL rules: the one grammar, and the one answer to "may this bind that?".

Grammar (every rule of a credential's ``acl`` must match it; otherwise 400 naming the rule)::

    rule    = "*" | "bind:" target
    target  = "*" | label | address | domain
    label   = key "=" value          key   = "*" | [A-Za-z0-9_][A-Za-z0-9_./-]*
                                     value = "*" | [A-Za-z0-9_./:@-]+
    address = host ":" port          host  = ["*."] hostname | IPv4 | "[" IPv6 "]"
                                     port  = 1..65535 (decimal, no sign, no leading zeros)
    domain  = ["*."] hostname        (RFC 1123 labels, see chalicelib.core.hostnames)

A target containing ``=`` is a label, else one containing ``:`` (or starting with ``[``)
is an address, else a domain. The prefix ``bind:`` is lower-case; no whitespace anywhere.
Domain and address hosts are stored lower-cased (IPv6 compressed); labels keep their case.

Limits: at most ``MAX_RULES`` (100) rules per credential, each at most
``MAX_RULE_BYTES`` (512) bytes of UTF-8. Duplicate rules are kept as sent.

Matching (:func:`may_bind`):
- An empty ACL, or one holding ``*`` or ``bind:*``, permits everything.
- Otherwise a bind is permitted only when a rule of the same kind matches it:
  - domain ``d``: rule ``bind:d`` (case-insensitive), or a wildcard rule
    ``bind:*.s`` when ``d`` ends in ``.s``. Decision: the wildcard matches subdomains at
    any depth (``a.s``, ``b.a.s``) and the wildcard names themselves (``*.s``, ``*.a.s``),
    as "domains with a common suffix" says; it does not match ``s`` itself.
  - address ``host:port``: same host rule (exact, or ``*.`` suffix as for domains) and the
    same port.
  - labels (a mapping): every ``key=value`` pair must be matched by a label rule, where a
    rule key or value of ``*`` matches any key or value.
- A bind of several things at once (e.g. domain and labels) needs all of them permitted.
"""

import ipaddress
import re
from dataclasses import dataclass
from typing import Any, Iterable, List, Mapping, Optional, Tuple

from chalicelib.core import errors, hostnames

MAX_RULES = 100
MAX_RULE_BYTES = 512
BIND = "bind:"

_KEY_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_./-]*$")
_VALUE_RE = re.compile(r"^[A-Za-z0-9_./:@-]+$")
# The label grammar without '*': what a labeled tunnel and a tunnel group backend carry.
LABEL_KEY_RE = _KEY_RE
LABEL_VALUE_RE = _VALUE_RE
_PORT_RE = re.compile(r"^[1-9][0-9]{0,4}$")


class InvalidRule(ValueError):
    """A rule outside the grammar; ``str(exc)`` says why."""


@dataclass(frozen=True)
class Rule:
    kind: str  # "all" | "domain" | "address" | "label"
    host: str = ""  # domain, or the address's host
    port: int = 0
    key: str = ""
    value: str = ""
    literal: str = "*"  # how an "all" rule was written: "*" or "bind:*"

    @property
    def text(self) -> str:
        """The canonical spelling (what is stored and returned)."""
        if self.kind == "all":
            return self.literal
        if self.kind == "domain":
            return BIND + self.host
        if self.kind == "address":
            return f"{BIND}{self.host}:{self.port}"
        return f"{BIND}{self.key}={self.value}"


ALL = Rule("all")
BIND_ALL = Rule("all", literal=BIND + "*")


def _host(text: str) -> str:
    """The canonical host of an address: a hostname (optional ``*.``), IPv4 or [IPv6]."""
    if text.startswith("[") and text.endswith("]"):
        try:
            return f"[{ipaddress.IPv6Address(text[1:-1]).compressed}]"
        except ValueError:
            raise InvalidRule(f"'{text}' is not an IPv6 address in brackets") from None
    try:
        return hostnames.parse(text, wildcard=True)
    except hostnames.InvalidHostname as exc:
        raise InvalidRule(f"address host '{text}' {exc}") from None


def _port(text: str) -> int:
    if not _PORT_RE.match(text) or not 1 <= int(text) <= 65535:
        raise InvalidRule(f"port '{text}' must be a number from 1 to 65535")
    return int(text)


def parse_rule(text: Any) -> Rule:
    """One rule, parsed, or InvalidRule."""
    if not isinstance(text, str):
        raise InvalidRule("rules must be strings")
    if len(text.encode("utf-8")) > MAX_RULE_BYTES:
        raise InvalidRule(f"a rule may be at most {MAX_RULE_BYTES} bytes")
    if text == "*":
        return ALL
    if not text.startswith(BIND):
        raise InvalidRule("a rule must be '*' or 'bind:<domain|address|label>'")
    target = text[len(BIND) :]
    if not target:
        raise InvalidRule("'bind:' needs a target (a domain, an address, a label or '*')")
    if any(ch.isspace() for ch in target):
        raise InvalidRule("rules may not contain whitespace")
    if target == "*":
        return BIND_ALL
    if "=" in target:
        key, _, value = target.partition("=")
        if key != "*" and not _KEY_RE.match(key):
            raise InvalidRule(
                f"label key '{key}' must be '*' or letters, digits, '_', '.', "
                "'/', '-' (starting with a letter, digit or '_')"
            )
        if value != "*" and not _VALUE_RE.match(value):
            raise InvalidRule(
                f"label value '{value}' must be '*' or letters, digits and "
                "'_', '.', '/', ':', '@', '-'"
            )
        return Rule("label", key=key, value=value)
    if target.startswith("[") or ":" in target:
        host, sep, port = target.rpartition(":")
        if not sep or not host:
            raise InvalidRule("an address must be 'host:port'")
        return Rule("address", host=_host(host), port=_port(port))
    try:
        return Rule("domain", host=hostnames.parse(target, wildcard=True))
    except hostnames.InvalidHostname as exc:
        raise InvalidRule(f"domain '{target}' {exc}") from None


def normalize(rules: Iterable[Any], field: str = "acl") -> List[str]:
    """The canonical rules of a request body; 400 naming the first bad rule."""
    rules = list(rules)
    if len(rules) > MAX_RULES:
        raise errors.InvalidField(
            f"Field '{field}' has {len(rules)} rules; the limit is {MAX_RULES}",
            details={"field": field},
        )
    result = []
    for index, text in enumerate(rules):
        try:
            result.append(parse_rule(text).text)
        except InvalidRule as exc:
            raise errors.InvalidField(
                f"Invalid ACL rule {text!r} in '{field}[{index}]': {exc}",
                details={"field": field, "rule": str(text)},
            ) from None
    return result


def check_field(name: str, value: Any) -> List[str]:
    """validation.Field ``check`` for an ``acl`` list."""
    return normalize(value, name)


# ---- matching --------------------------------------------------------------------------------
def _host_matches(rule_host: str, host: str) -> bool:
    if rule_host == host:
        return True
    suffix = hostnames.suffix_of_wildcard(rule_host)
    return suffix is not None and host.endswith("." + suffix)


def _canonical_host(host: str) -> str:
    host = host.strip().lower().rstrip(".")
    if host.startswith("[") and host.endswith("]"):
        try:
            return f"[{ipaddress.IPv6Address(host[1:-1]).compressed}]"
        except ValueError:
            return host
    return host


def _split_address(address: str) -> Optional[Tuple[str, int]]:
    host, sep, port = address.strip().rpartition(":")
    if not sep or not host or not port.isdigit():
        return None
    return _canonical_host(host), int(port)


def _parsed(rules: Iterable[str]) -> List[Rule]:
    parsed = []
    for text in rules:
        try:
            parsed.append(parse_rule(text))
        except InvalidRule:
            continue  # never stored (checked on write); if it were, it permits nothing
    return parsed


def may_bind(
    rules: Optional[Iterable[str]],
    *,
    domain: Optional[str] = None,
    address: Optional[str] = None,
    labels: Optional[Mapping[str, str]] = None,
) -> bool:
    """Whether an ACL permits binding ``domain``, ``address`` (``host:port``) and ``labels``.

    At least one of them must be given (ValueError otherwise); all given must be permitted.
    """
    if domain is None and address is None and labels is None:
        raise ValueError("may_bind needs a domain, an address or labels")
    rules = list(rules or [])
    if not rules:
        return True
    parsed = _parsed(rules)
    if any(rule.kind == "all" for rule in parsed):
        return True
    if domain is not None:
        wanted = _canonical_host(domain)
        if not wanted or not any(
            rule.kind == "domain" and _host_matches(rule.host, wanted) for rule in parsed
        ):
            return False
    if address is not None:
        split = _split_address(address)
        if split is None:
            return False
        host, port = split
        if not any(
            rule.kind == "address" and rule.port == port and _host_matches(rule.host, host)
            for rule in parsed
        ):
            return False
    if labels is not None:
        label_rules = [rule for rule in parsed if rule.kind == "label"]
        for key, value in labels.items():
            if not any(
                rule.key in ("*", key) and rule.value in ("*", value) for rule in label_rules
            ):
                return False
    return True
