"""Agent ingresses as the edge reads them (chalicelib.agent_ingresses writes them): one
service-wide index partition, domain → the account and the ingress, that the edge's agent
listener serves by SNI and checks agents' accounts against (docs/DATA_PLANE.md, "Agent
ingresses")."""

from typing import Dict

from chalicelib.core import store

INDEX_PK = "AGENTINGRESS#index"


def index() -> Dict[str, Dict[str, str]]:
    """Every agent ingress domain → ``{account_id, agent_ingress_id}``: one Query of the index
    partition (pages of up to 1 MB, about 10,000 domains each)."""
    return {item.sk: dict(item.data) for item in store.query_all(INDEX_PK)}
