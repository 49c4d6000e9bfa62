"""``${secrets.get('vault', 'name')}`` in traffic policies: finding the references.

A policy names a secret by its vault's name and its own; the API refuses a document naming a
secret its account does not have (400 naming the element), the edge resolves the names per
request from its cache (``edge/secrets.py``) through ``conn.secret_resolver``. Only calls
whose two arguments are string literals can be checked (and are the documented form); a
call with computed arguments is resolved at the edge and, when nothing answers, fails as
an expression does (empty value, an error in the outcome).
"""

import re
from typing import Any, List, Tuple

CALL = re.compile(
    r"""secrets\s*\.\s*get\s*\(\s*(?:'([^'\\]*)'|"([^"\\]*)")\s*,\s*"""
    r"""(?:'([^'\\]*)'|"([^"\\]*)")\s*\)"""
)


def refs_in(value: Any, where: str) -> List[Tuple[str, str, str]]:
    """Every (path, vault name, secret name) named by a literal ``secrets.get`` call in the
    strings of ``value`` (an action's config, walked), paths as the engine names them."""
    out: List[Tuple[str, str, str]] = []
    if isinstance(value, str):
        for match in CALL.finditer(value):
            out.append(
                (
                    where,
                    match.group(1) if match.group(1) is not None else match.group(2),
                    match.group(3) if match.group(3) is not None else match.group(4),
                )
            )
    elif isinstance(value, dict):
        for key, item in value.items():
            out.extend(refs_in(item, f"{where}.{key}"))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            out.extend(refs_in(item, f"{where}[{index}]"))
    return out
