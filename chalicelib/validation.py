"""Strict parsing of JSON request bodies.

Each operation declares its accepted fields as :class:`Field` objects; :func:`parse` returns
the fields that were sent (after checks and normalisation) or raises a 400 that names the
field and the rule. Rules common to every operation:

- unknown fields: 400 naming the field and listing the accepted ones;
- ``null`` for an optional field means "not sent" (clients of this API family send it);
- strings are measured in UTF-8 bytes, not characters;
- booleans are JSON booleans and integers JSON integers (``true`` is not ``1``);
- ``id`` may appear in a body when it equals the id in the path (clients of this family send
  it in PATCH bodies); any other value is a 400.
"""

from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Callable, Dict, Iterable, List, Optional

from chalicelib.core import errors

DESCRIPTION_MAX_BYTES = 255
METADATA_MAX_BYTES = 4096

Checker = Callable[[str, Any], Any]


@dataclass(frozen=True)
class Field:
    name: str
    type: str  # "string" | "boolean" | "integer" | "string_list" | "string_map" | "object" | "any"
    required: bool = False
    max_bytes: Optional[int] = None
    max_items: Optional[int] = None
    check: Optional[Checker] = None  # (name, value) -> normalised value, raises InvalidField


def utf8_len(value: str) -> int:
    return len(value.encode("utf-8"))


def _type_error(name: str, expected: str, value: Any) -> errors.InvalidField:
    got = (
        "null"
        if value is None
        else {
            bool: "boolean",
            int: "integer",
            float: "number",
            str: "string",
            list: "array",
            dict: "object",
        }.get(type(value), type(value).__name__)
    )
    return errors.InvalidField(
        f"Field '{name}' must be {expected}, got {got}", details={"field": name}
    )


def check_string(name: str, value: Any, max_bytes: Optional[int] = None) -> str:
    if not isinstance(value, str):
        raise _type_error(name, "a string", value)
    if max_bytes is not None and utf8_len(value) > max_bytes:
        raise errors.InvalidField(
            f"Field '{name}' is {utf8_len(value)} bytes; the limit is {max_bytes} bytes (UTF-8)",
            details={"field": name},
        )
    return value


def check_value(f: Field, value: Any) -> Any:
    name = f.name
    if f.type == "string":
        value = check_string(name, value, f.max_bytes)
    elif f.type == "boolean":
        if not isinstance(value, bool):
            raise _type_error(name, "a boolean", value)
    elif f.type == "integer":
        if isinstance(value, bool) or not isinstance(value, int):
            raise _type_error(name, "an integer", value)
    elif f.type == "string_list":
        if not isinstance(value, list):
            raise _type_error(name, "an array of strings", value)
        if f.max_items is not None and len(value) > f.max_items:
            raise errors.InvalidField(
                f"Field '{name}' has {len(value)} entries; the limit is {f.max_items}",
                details={"field": name},
            )
        for index, entry in enumerate(value):
            check_string(f"{name}[{index}]", entry, f.max_bytes)
    elif f.type == "string_map":
        if not isinstance(value, dict):
            raise _type_error(name, "an object of string values", value)
        if f.max_items is not None and len(value) > f.max_items:
            raise errors.InvalidField(
                f"Field '{name}' has {len(value)} entries; the limit is {f.max_items}",
                details={"field": name},
            )
        for key, entry in value.items():
            check_string(f"{name}.{key}", entry, f.max_bytes)
    elif f.type == "object":
        if not isinstance(value, dict):
            raise _type_error(name, "an object", value)
    if f.check is not None:
        value = f.check(name, value)
    return value


def parse(
    body: Optional[Dict[str, Any]], fields: Iterable[Field], path_id: Optional[str] = None
) -> Dict[str, Any]:
    """The sent fields of ``body``, checked; raises a 400 naming the first bad field."""
    fields = list(fields)
    by_name = {f.name: f for f in fields}
    body = dict(body or {})
    if "id" in body and "id" not in by_name:
        sent = body.pop("id")
        if path_id is None or sent != path_id:
            raise errors.InvalidField(
                f"Field 'id' ({sent!r}) does not match the id in the path"
                if path_id
                else "Field 'id' cannot be set by the caller",
                details={"field": "id"},
            )
    for name in body:
        if name not in by_name:
            accepted = ", ".join(sorted(by_name)) or "none"
            raise errors.UnknownField(
                f"Unknown field '{name}'; accepted fields: {accepted}", details={"field": name}
            )
    result: Dict[str, Any] = {}
    for f in fields:
        value = body.get(f.name)
        if value is None:
            if f.required:
                raise errors.MissingField(
                    f"Field '{f.name}' is required", details={"field": f.name}
                )
            continue
        result[f.name] = check_value(f, value)
    return result


DESCRIPTION = Field("description", "string", max_bytes=DESCRIPTION_MAX_BYTES)
METADATA = Field("metadata", "string", max_bytes=METADATA_MAX_BYTES)


def now_rfc3339() -> str:
    """Current UTC time as RFC 3339 with second precision, e.g. ``2026-11-21T10:00:00Z``."""
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def require_non_empty(name: str, value: List[Any]) -> List[Any]:
    if not value:
        raise errors.InvalidField(f"Field '{name}' must not be empty", details={"field": name})
    return value
