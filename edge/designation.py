"""One instance of a cluster serves what needs one counter: a designated instance for a
rate-limited cloud endpoint or HTTPS edge (docs/CLUSTER.md, "Rate limits exact without a
shared counter").

A traffic policy's ``rate-limit`` counts in the memory of the instance that runs it
(chalicelib/core/policy/ratelimit.py). An agent endpoint's requests all run on the instance
holding it; a cloud endpoint or an HTTPS edge has no holder, so one whose policy limits gets
one: :func:`designate`, rendezvous hashing of its key over the serving instances, the same
answer on every instance that reads the same registry.
"""

import hashlib
from typing import Any, Dict, Iterable, List, Optional

from chalicelib.core.policy import document


def rate_limited(policy: Any) -> bool:
    """Whether a traffic policy (the document's text, or parsed) has a ``rate-limit``
    action in any phase. A document that does not parse has none (the API refused it when
    it was written)."""
    if not policy:
        return False
    try:
        parsed = document.parse(policy) if isinstance(policy, str) else policy
    except document.PolicyError:
        return False
    if not isinstance(parsed, dict):
        return False
    return any(
        isinstance(rule, dict)
        and any(
            isinstance(action, dict) and action.get("type") == "rate-limit"
            for action in rule.get("actions") or []
        )
        for phase in parsed.values()
        if isinstance(phase, list)
        for rule in phase
    )


def route_rate_limited(route: Dict[str, Any]) -> bool:
    """Whether an HTTPS edge route's enabled ``traffic_policy`` module has a rate-limit (the
    other modules never limit)."""
    module = route.get("traffic_policy")
    if not isinstance(module, dict) or not module or module.get("enabled", True) is False:
        return False
    return rate_limited(module.get("value"))


def not_refused(live: List[Dict[str, Any]], refused: Dict[str, float]) -> List[Dict[str, Any]]:
    """The registry's instances but those whose relay address refused a connection (``refused``:
    address -> when, epoch seconds) since their lease's last renewal (``renewed_at``): killed,
    their lease not ended yet. One that renewed its lease after the refusal (started again on
    the same address) is designated again at once, so every instance agrees once more."""
    return [
        i
        for i in live
        if i.get("address") not in refused
        or float(i.get("renewed_at") or 0) > refused[str(i.get("address"))]
    ]


def designate(name: str, live: List[Dict[str, Any]]) -> Optional[Dict[str, Any]]:
    """The serving instance that serves ``name`` for the whole cluster: rendezvous (highest
    random weight) hashing of the name with each serving instance's id, so every instance
    that reads the same registry picks the same one, and an instance joining or leaving moves
    only the names it wins or held. None when no instance serves."""
    serving = [i for i in live if i.get("state") == "serving" and i.get("address")]
    if not serving:
        return None
    return max(
        serving,
        key=lambda i: hashlib.sha256(f"{i['instance_id']}|{name}".encode()).digest(),
    )


def candidates(
    live: List[Dict[str, Any]], holding: Iterable[Iterable[str]]
) -> List[Dict[str, Any]]:
    """The instances an HTTPS edge's designation is chosen among: ``holding`` gives, for each
    label set of the edge's tunnel-group backends, the instances holding an online matching
    tunnel. The serving instances holding one of every set; else those holding one of any
    set; else (no labeled tunnel online, or none on a serving instance) every serving one,
    which all answer the same way."""
    serving = [i for i in live if i.get("state") == "serving" and i.get("address")]
    sets = [set(ids) for ids in holding]
    if not sets:
        return serving
    every = set.intersection(*sets)
    anyone = set.union(*sets)
    for wanted in (every, anyone):
        chosen = [i for i in serving if i["instance_id"] in wanted]
        if chosen:
            return chosen
    return serving
