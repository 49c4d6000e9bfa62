"""HTTP header names and values in request bodies (backends, response-headers modules).

- A name is an RFC 9110 token (``!#$%&'*+-.^_`|~``, digits, letters), 1–256 bytes. Names are
  stored and returned lower-cased; two names of one map that differ only in case are a 400
  (which value would win is not something a caller should have to guess).
- A value is a string without CR, LF or NUL (they would split or truncate the header), at
  most :data:`MAX_VALUE_BYTES` bytes.
"""

import re
from typing import Any, Dict, List

from chalicelib.core import errors

MAX_NAME_BYTES = 256
MAX_VALUE_BYTES = 1024
_TOKEN_RE = re.compile(r"^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$")


def _bad(field: str, msg: str) -> errors.InvalidField:
    return errors.InvalidField(f"Field '{field}': {msg}", details={"field": field})


def is_token(name: Any) -> bool:
    return isinstance(name, str) and bool(_TOKEN_RE.match(name)) and len(name) <= MAX_NAME_BYTES


def check_name(field: str, name: Any) -> str:
    """A valid header name, lower-cased."""
    if not isinstance(name, str):
        raise _bad(field, "header names must be strings")
    if not is_token(name):
        raise _bad(
            field,
            f"'{name[:64]}' is not a valid HTTP header name (a token of letters, "
            f"digits and !#$%&'*+-.^_`|~, at most {MAX_NAME_BYTES} bytes)",
        )
    return name.lower()


def check_value(field: str, name: str, value: Any) -> str:
    if not isinstance(value, str):
        raise _bad(field, f"the value of header '{name}' must be a string")
    if any(ch in value for ch in "\r\n\x00"):
        raise _bad(field, f"the value of header '{name}' must not contain CR, LF or NUL")
    if len(value.encode("utf-8")) > MAX_VALUE_BYTES:
        raise _bad(field, f"the value of header '{name}' is longer than {MAX_VALUE_BYTES} bytes")
    return value


def check_map(field: str, value: Any, max_items: int) -> Dict[str, str]:
    """A header map: names lower-cased and unique ignoring case, values checked."""
    if not isinstance(value, dict):
        raise _bad(field, "must be an object mapping header names to values")
    if len(value) > max_items:
        raise _bad(field, f"has {len(value)} headers; the limit is {max_items}")
    result: Dict[str, str] = {}
    for name, entry in value.items():
        lower = check_name(field, name)
        if lower in result:
            raise _bad(
                field, f"header '{lower}' appears more than once (names are case-insensitive)"
            )
        result[lower] = check_value(field, lower, entry)
    return result


def check_names(field: str, value: Any, max_items: int) -> List[str]:
    """A list of header names: lower-cased, duplicates (ignoring case) dropped, order kept."""
    if not isinstance(value, list):
        raise _bad(field, "must be an array of header names")
    if len(value) > max_items:
        raise _bad(field, f"has {len(value)} entries; the limit is {max_items}")
    result: List[str] = []
    for entry in value:
        lower = check_name(field, entry)
        if lower not in result:
            result.append(lower)
    return result
