"""What a traffic policy's request phase decides by: the facts of a request's head and
connection its outcome is a function of (:func:`request_reads`).

A run of ``on_http_request`` whose expressions and actions read nothing but the request's
head, its connection's addresses and TLS, and the endpoint (no clock, no randomness, no
counter, no cache that changes under it, no vault secret, nothing written per request such
as a ``log`` entry) decides alike every request that agrees on the facts it reads. The
edge's compiled core *holds* such a decision: Python decides the first request of a key, and
the core applies the same decision to the next requests with that key (docs/DATA_PLANE.md,
"Held decisions"). The facts are a superset of what a run reads: every dotted name of an
expression counts, even one a rule never reaches.

The facts (celenv's names): ``method``, ``target`` (path and query), ``fields`` (every
field of the head), ``field:<name>`` (the values of one field), ``peer_ip``, ``peer_port``,
``local`` (the address the client reached), ``tls`` (SNI, version, cipher, ALPN).
"""

import functools
from typing import Any, FrozenSet, Iterator, Optional, Set

from chalicelib.core.policy import actions, celenv
from chalicelib.core.policy.template import Template

# The actions whose run depends only on the traffic (and their config), and what each reads
# beyond the templates and expressions of its config.
ACTION_READS = {
    actions.AddHeaders: (),
    actions.RemoveHeaders: (),
    actions.CustomResponse: (),
    actions.Deny: (),
    actions.CloseConnection: (),
    actions.Redirect: (celenv.TARGET,),  # matches the request's URL
    actions.UrlRewrite: (celenv.TARGET,),
    actions.RestrictIps: (celenv.PEER_IP,),  # without ip_policies (below)
    actions.BasicAuth: (celenv.field("authorization"),),
    actions.SetVars: (),
    # its outcome (the URL, a function of what its template reads); where that URL leads is
    # the edge's to keep current (edge/fast_path.py drops a route's held decisions when its
    # account's internal endpoints change)
    actions.ForwardInternal: (),
}
# Not held, and why: rate-limit counts requests; log writes an entry per request; the rest
# read a body, call out, sign in, keep state or read a cache (any action not above).

REQUEST = "on_http_request"


def _programs(value: Any) -> Iterator[celenv.Program]:
    """Every compiled expression under ``value`` (an action's attributes: templates, lists,
    tuples, dicts; a compiled action's config holds no cycle)."""
    if isinstance(value, celenv.Program):
        yield value
    elif isinstance(value, Template):
        for part in value.parts:
            if isinstance(part, celenv.Program):
                yield part
    elif isinstance(value, (list, tuple, set, frozenset)):
        for item in value:
            yield from _programs(item)
    elif isinstance(value, dict):
        for item in value.values():
            yield from _programs(item)


def _action_reads(action: Any) -> Optional[FrozenSet[str]]:
    intrinsic = ACTION_READS.get(type(action))
    if intrinsic is None:
        return None
    if isinstance(action, actions.RestrictIps) and action.ip_policies:
        return None  # the account's IP policies, read through a cache
    found = set(intrinsic)
    for program in _programs(list(vars(action).values())):
        reads = celenv.expression_reads(program.text, REQUEST)
        if reads is None:
            return None
        found |= reads
    return frozenset(found)


def _request_reads(policy: Any) -> Optional[FrozenSet[str]]:
    if policy.secret_refs or policy.has("on_tcp_connect"):
        return None  # (on_tcp_connect: run on a connection's first request, which a held
        # decision would skip)
    found: Set[str] = set()
    for rule in policy.phases.get(REQUEST) or ():
        for program in rule.expressions:
            reads = celenv.expression_reads(program.text, REQUEST)
            if reads is None:
                return None
            found |= reads
        for action in rule.actions:
            reads = _action_reads(action)
            if reads is None:
                return None
            found |= reads
    return frozenset(found)


# per compiled policy (shared and immutable: one per document digest)
request_reads = functools.lru_cache(maxsize=1024)(_request_reads)
request_reads.__doc__ = """The facts every run of ``policy``'s request phase is a function of,
or None when some run depends on more (a clock, a counter, a cache, randomness, a secret, a
per-request entry): its decisions are never held."""
