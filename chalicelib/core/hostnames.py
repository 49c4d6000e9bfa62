"""Hostname syntax shared by every resource that names hosts (reserved domains, ACL rules,
abuse-report URLs).

A hostname is RFC 1123: dot-separated labels of ``a-z``, ``0-9`` and ``-`` (not first or
last), each 1–63 bytes, at most 253 bytes in all, no trailing dot. Names are compared and
stored lower-cased. A wildcard is allowed only where the caller asks for it, and only as a
whole leading ``*.`` label (``*.example.com``; never ``a*.example.com`` or ``a.*.com``).

Functions raise :class:`InvalidHostname` with the reason; callers turn it into a 400 that
names their field.
"""

import re
from typing import Optional

MAX_HOSTNAME_BYTES = 253
MAX_LABEL_BYTES = 63
WILDCARD_PREFIX = "*."

_LABEL_RE = re.compile(r"^[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?$")


class InvalidHostname(ValueError):
    """The value is not a hostname; ``str(exc)`` says why."""


def parse(
    value: str, *, wildcard: bool = False, min_labels: int = 1, numeric_tld: bool = True
) -> str:
    """``value`` as a canonical (lower-case) hostname, or InvalidHostname.

    ``wildcard``: accept a leading ``*.``. ``min_labels``: labels required after the
    wildcard. ``numeric_tld``: accept a last label of digits only (an IPv4 address is
    syntactically a hostname; domains that must be real DNS names pass False).
    """
    if not isinstance(value, str) or not value:
        raise InvalidHostname("must be a non-empty hostname")
    name = value.lower()
    if len(name.encode("utf-8")) > MAX_HOSTNAME_BYTES:
        raise InvalidHostname(f"is longer than {MAX_HOSTNAME_BYTES} bytes")
    rest = name
    if name.startswith(WILDCARD_PREFIX):
        if not wildcard:
            raise InvalidHostname("may not be a wildcard")
        rest = name[len(WILDCARD_PREFIX) :]
    labels = rest.split(".")
    for label in labels:
        if label == "*":
            raise InvalidHostname("may use a wildcard only as a leading '*.'")
        if not _LABEL_RE.match(label):
            if not label:
                raise InvalidHostname("has an empty label (leading, trailing or double dot)")
            if len(label) > MAX_LABEL_BYTES:
                raise InvalidHostname(f"has a label longer than {MAX_LABEL_BYTES} bytes")
            raise InvalidHostname(
                f"has an invalid label '{label}' (letters, digits and '-' only, not at either end)"
            )
    if len(labels) < min_labels:
        raise InvalidHostname(f"must have at least {min_labels} labels")
    if not numeric_tld and labels[-1].isdigit():
        raise InvalidHostname("must end in a name, not a number")
    return name


def is_wildcard(name: str) -> bool:
    return name.startswith(WILDCARD_PREFIX)


def is_within(name: str, domain: str) -> bool:
    """True when ``name`` is ``domain`` or one of its subdomains (both canonical)."""
    return name == domain or name.endswith("." + domain)


def suffix_of_wildcard(name: str) -> Optional[str]:
    """``example.com`` for ``*.example.com``; None for a name without wildcard."""
    return name[len(WILDCARD_PREFIX) :] if is_wildcard(name) else None
