"""Endpoint pooling: several agent endpoints of one account on one URL share its traffic.

An endpoint asks for it with its Bind's ``Extra.PoolingEnabled`` (the SDKs'
``pooling_enabled`` / ``poolingEnabled(true)``, ngrok-go's ``BindExtra.PoolingEnabled``). The
rules are the hosted service's:

- every endpoint of a pool enables pooling: a pooled endpoint cannot join a URL a non-pooled
  one serves, nor a non-pooled endpoint a URL a pool serves (ERR_NGROK_334, saying so);
- a pool is one account's, one protocol's (``http``/``https``/``tls``), one URL's; public
  connections to it are spread round robin over its members (``Registry.http_tunnel``);
- endpoints join and leave freely: the first member holds the name's claim (the store item
  that makes one URL one owner service-wide), and when it leaves, the next member takes the
  claim over (``Binds.drop_tunnel``); the URL goes offline with its last member.

A pool lives on one edge instance: its members are found in that instance's registry. A
pooled endpoint whose URL is held by an endpoint of another instance is refused like any
conflict (``make run`` runs one instance; docs/DEPLOY.md says how several would forward).
TCP addresses and internal endpoints are not pooled here.
"""

from typing import Any, Dict, Optional

from chalicelib.core import binding

POOLABLE = ("http", "https", "tls")


def wants_pooling(extra: Dict[str, Any]) -> bool:
    return extra.get("PoolingEnabled") is True


def join(registry: Any, tunnel: Any, name: str) -> Optional[Any]:
    """Add ``tunnel`` to the pool serving ``name`` on this instance when both enable pooling
    (same account, same protocol); the pool's first member, or None (not joined)."""
    holder = registry.by_host.get(name)
    if (
        holder is None
        or not (holder.pooled and tunnel.pooled)
        or holder.account_id != tunnel.account_id
        or holder.proto != tunnel.proto
        or tunnel.proto not in POOLABLE
    ):
        return None
    if holder.pool is None:
        holder.pool = [holder]
    holder.pool.append(tunnel)
    tunnel.pool = holder.pool
    tunnel.holds_claim = False
    return holder


def refusal(
    exc: binding.Refused, tunnel: Any, holder: Optional[Any], name: str
) -> binding.Refused:
    """The claim's conflict, said the way hosted says it when pooling is involved."""
    if holder is not None and holder.pooled and not tunnel.pooled:
        return binding.Refused(
            exc.code,
            f"The endpoint '{name}' is already online as a pool "
            "of endpoints with pooling enabled; enable pooling "
            "on this endpoint to join it.",
        )
    if tunnel.pooled:
        return binding.Refused(
            exc.code,
            f"The endpoint '{name}' is already online without "
            "pooling enabled (or through another protocol or "
            "account); every endpoint of a pool enables pooling.",
        )
    return exc
