"""IP restrictions (``/ip_restrictions``, chalicelib.ip_restrictions) at the edge.

An account's restrictions of a type (``agent``: its agents' sessions; ``endpoints``: the
traffic of every endpoint and edge of the account) are read through the router's cache (one
Query per account, at most CACHE_SECONDS old) and each is checked as a ``restrict-ips`` action
with its ``ip_policies`` and ``enforce`` (the engine's rule, not a second one: deny rules win,
then allow rules; no rule allows nothing; an unenforced restriction only logs). An address
must pass every enforced restriction of the type.

Where: an agent's Auth (edge/agents.py: refused ERR_NGROK_9040), an HTTP request once routed
(edge/http_routing.py: 403 ERR_NGROK_3203), a TCP connection (edge/tcp_front.py) and a TLS
connection (edge/passthrough.py): closed.
"""

import json
import logging
from typing import Any, Dict, List

from chalicelib.core import edge_errors
from chalicelib.core import policy as tp

log = logging.getLogger("edge.ip_restrictions")

AGENT, ENDPOINTS = "agent", "endpoints"
AGENT_REFUSED = edge_errors.AGENT_IP_RESTRICTED
AGENT_MESSAGE = "We do not allow agents to connect to this service from your IP address ({ip})."


def _document(restriction: Dict[str, Any]) -> Dict[str, Any]:
    config: Dict[str, Any] = {"ip_policies": list(restriction["ip_policy_ids"])}
    if not restriction.get("enforced"):
        config["enforce"] = False
    return {
        "on_tcp_connect": [
            {
                "name": f"ip restriction {restriction['id']}",
                "actions": [{"type": "restrict-ips", "config": config}],
            }
        ]
    }


# What a request an ``endpoints`` restriction refuses is answered (the connection closed after
# it): edge/http_routing.py's, and a decided route's (edge/decided.py)
REFUSED_ANSWER = (403, edge_errors.IP_BLOCKED, "Request blocked by the account's IP restrictions.")


async def allows(edge: Any, account_id: str, kind: str, ip: str) -> bool:
    """Whether ``ip`` passes the account's IP restrictions of ``kind``."""
    if not account_id or not ip:
        return True
    router = edge.router
    restrictions: List[Dict[str, Any]] = await router.ip_restrictions(account_id)
    for restriction in restrictions:
        if restriction.get("type") != kind or not restriction.get("ip_policy_ids"):
            continue
        document = _document(restriction)
        enforcement = await router.compiled(
            ("ipx", json.dumps(document, sort_keys=True)), document
        )
        policy = enforcement.policy
        conn = tp.Conn(
            client_ip=ip,
            client_port=0,
            endpoint=tp.Endpoint(account_id=account_id, protocol="tcp"),
        )
        conn.ip_policy_resolver = await router.ip_policy_resolver(account_id, policy)
        out = policy.on_tcp_connect(conn, policy.new_state())
        if out.kind != tp.CONTINUE:
            log.info("IP restriction %s refused %s (%s)", restriction["id"], ip, kind)
            return False
    return True
