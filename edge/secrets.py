"""``${secrets.get('vault', 'name')}`` at the edge: the values a policy names, read from the
store (chalicelib.core.vault_secrets: three GetItems and one unseal per secret) and cached
per (account, vault, secret) for CACHE_SECONDS, at most CACHE_ENTRIES entries (oldest
dropped first). A secret changed or deleted through the API is in force at every edge
instance within CACHE_SECONDS. A missing secret (or one that does not open) resolves to
nothing: the template renders empty and the outcome records the error (for a sign-in
action's client_secret, the provider then refuses the code: fail closed).
"""

import logging
import time
from collections import OrderedDict
from typing import Any, Callable, Dict, Optional, Tuple

from chalicelib.core import keywrap, vault_secrets

CACHE_SECONDS = 10.0
CACHE_ENTRIES = 4096
log = logging.getLogger(__name__)
_cache: "OrderedDict[Tuple[str, str, str], Tuple[float, Optional[str]]]" = OrderedDict()


def _read(account_id: str, vault: str, name: str) -> Optional[str]:
    try:
        return vault_secrets.value_of(account_id, vault, name)
    except (keywrap.SealError, UnicodeDecodeError, KeyError) as exc:
        log.warning("vault secret %r/%r of %s does not open: %s", vault, name, account_id, exc)
        return None


async def value(
    edge: Any, account_id: str, vault: str, name: str, clock: Callable[[], float] = time.monotonic
) -> Optional[str]:
    key = (account_id, vault, name)
    now = clock()
    hit = _cache.get(key)
    if hit is not None and hit[0] > now:
        return hit[1]
    found = await edge.call(_read, account_id, vault, name)
    _cache[key] = (now + CACHE_SECONDS, found)
    _cache.move_to_end(key)
    while len(_cache) > CACHE_ENTRIES:
        _cache.popitem(last=False)
    return found


async def resolver(edge: Any, account_id: str, policy: Any) -> Callable[[str, str], Optional[str]]:
    """``conn.secret_resolver`` for one run of ``policy`` (which names secrets)."""
    values: Dict[Tuple[str, str], Optional[str]] = {}
    for _, vault, name in policy.secret_refs:
        if (vault, name) not in values:
            values[(vault, name)] = await value(edge, account_id, vault, name)
    return lambda vault, name: values.get((vault, name))
