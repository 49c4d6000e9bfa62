"""Query parameters that narrow a list to items with given field values, as the official API
clients send them (``GET /endpoints?id=ep_1&id=ep_2&url=https://a.example``: each parameter
repeated once per value; the clients mark them deprecated in favour of ``filter``).

They are read as the equivalent ``filter`` expression (chalicelib.filters) and run through the
same filtered list: values of one parameter are alternatives (``obj.id in [...]``), different
parameters must all hold, and a ``filter`` sent too must hold as well. So their bounds are
``filter``'s (one page reads at most ``filters.SCAN_LIMIT`` items), plus at most
:data:`MAX_VALUES` values per parameter and :data:`MAX_VALUE_LENGTH` characters per value
(400 ERR_NGROK_215 beyond). A ``url`` is compared as the API shows it (``public_url`` /
``url``: scheme, host, and the port when not the scheme's default), a trailing ``/`` ignored.
"""

import json
from typing import Any, Dict, List, Optional

from chalicelib.core import errors

MAX_VALUES = 100
MAX_VALUE_LENGTH = 1024


def _values(query: Any, name: str) -> List[str]:
    if query is None or name not in query:
        return []
    getlist = getattr(query, "getlist", None)
    values = (
        list(getlist(name)) if getlist is not None else ([query[name]] if name in query else [])
    )
    if len(values) > MAX_VALUES:
        raise errors.InvalidQuery(
            f"Query parameter '{name}' given {len(values)} times; at most {MAX_VALUES} values",
            details={"parameter": name},
        )
    out = []
    for value in values:
        if len(value) > MAX_VALUE_LENGTH:
            raise errors.InvalidQuery(
                f"A value of query parameter '{name}' is longer than "
                f"{MAX_VALUE_LENGTH} characters",
                details={"parameter": name},
            )
        out.append(value)
    return out


def expression(query: Any, fields: Dict[str, str], text: Optional[str]) -> Optional[str]:
    """The ``filter`` expression of ``fields`` (query parameter -> field of ``obj``) present in
    ``query``, joined with ``text`` (the request's own ``filter``); ``text`` alone when none
    of them was sent."""
    parts = []
    for name, field in fields.items():
        values = _values(query, name)
        if not values:
            continue
        if name == "url":
            values = [v[:-1] if v.endswith("/") else v for v in values]
        parts.append(f"obj.{field} in {json.dumps(values)}")
    if not parts:
        return text
    if text is not None:
        parts.append(f"({text})")
    return " && ".join(parts)
