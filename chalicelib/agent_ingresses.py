"""Agent ingresses (the hosted "custom connect URL"): ``/agent_ingresses`` (docs/DATA_PLANE.md,
"Agent ingresses").

Fields, as the hosted API and its official clients read them: id (``agin_…``), uri,
created_at, description, metadata, domain, ns_targets, region_domains,
certificate_management_policy, certificate_management_status.

Rules (where the hosted reference is silent, decided here):
- ``domain`` is required: a host name of at least two labels (no wildcard), stored
  lower-cased, set at creation only. It must be the user's own: the service's base domain,
  a name under it or a parent of it is 400 ERR_NGROK_6705 (the hosted code); a domain another
  account reserved (exactly or by a wildcard over it) or serves is 409, as for a reservation
  (chalicelib.reserved_domains.reservation_conflict); the account's own reservation of it is
  fine. One agent ingress per domain service-wide (409); at most MAX_PER_ACCOUNT per account
  (409).
- ``region_domains``: ``[domain]``: this service has one region, and agents connect at the
  domain itself (``connect_url: <domain>:443`` for the agent CLI, ``server_addr`` for the
  SDKs, with the edge's agent port). ``ns_targets``: the names of the service's own DNS
  server (``ns1.`` and ``ns2.`` + ``CNAME_ZONE``, the zone it is authoritative for: docs/
  CERTIFICATES.md); the user delegates the domain to them with NS records, and that server
  answers the domain's A/AAAA with the edge's addresses (``DNS_INGRESS_ADDRESSES``,
  chalicelib/acme/dns.py).
- Certificates: the edge's agent listener serves the domain by SNI with a certificate of the
  store for the name when there is one (an uploaded or ACME-issued certificate of a reserved
  domain covering it: docs/CERTIFICATES.md), else one its local CA issues (the hosted
  service's "internal CA" choice). ``certificate_management_policy`` is null, and a non-null
  one is refused (400): ACME orders are placed for reserved domains only here, so a policy
  would be accepted and not acted on. ``certificate_management_status`` is null.
- Agents that connect with the domain as their TLS server name must authenticate as the
  ingress's account: another account's authtoken is refused (ERR_NGROK_107), as hosted.
- PATCH takes description and metadata (and a null policy). Every principal of the account
  may manage them, as reserved domains.

Store calls: POST one Query (the count), the reservation reads (reservation_conflict), one
TransactWriteItems (the ingress and the service-wide index entry ``AGENTINGRESS#index`` /
domain the edge reads, conditioned on not existing: one per domain); GET one GetItem; list
one Query; PATCH one UpdateItem; DELETE one GetItem + one TransactWriteItems.
"""

from typing import Any, Dict, List, Optional, Tuple

from chalicelib import reserved_domains, validation, web
from chalicelib.core import errors, hostnames, ids, ingresses, store
from chalicelib.core.config import get_settings
from chalicelib.validation import DESCRIPTION, METADATA, Field
from chalicelib.web import Ctx

COLLECTION = "agent_ingress"
PREFIX = ids.PREFIXES["agent_ingress"]
PATH = "/agent_ingresses"
LIST_KEY = "ingresses"
INDEX_PK = ingresses.INDEX_PK  # domain -> account, ingress (what the edge reads)
MAX_PER_ACCOUNT = 10


def _check_domain(name: str, value: str) -> str:
    try:
        domain = hostnames.parse(value, min_labels=2, numeric_tld=False)
    except hostnames.InvalidHostname as exc:
        raise errors.InvalidField(
            f"Field '{name}' ({value[:255]!r}) {exc}", details={"field": name}
        ) from None
    base = get_settings().base_domain
    if hostnames.is_within(domain, base) or hostnames.is_within(base, domain):
        raise errors.AgentIngressDomain(
            f'The agent ingress domain "{domain}" must be a third party domain, you may not '
            f"enter a domain controlled by this service ({base}).",
            details={"field": name},
        )
    return domain


def _check_policy(name: str, value: Any) -> None:
    raise errors.InvalidField(
        f"Field '{name}': managed certificates are ordered for reserved domains only here; "
        "leave it null (the edge serves the domain with a certificate of a reserved domain "
        "covering it, else its local CA's)",
        details={"field": name},
    )


CREATE_FIELDS = [
    DESCRIPTION,
    METADATA,
    Field("domain", "string", required=True, check=_check_domain),
    Field("certificate_management_policy", "object", check=_check_policy),
]
UPDATE_FIELDS = [
    DESCRIPTION,
    METADATA,
    Field("certificate_management_policy", "object", check=_check_policy),
]


def ns_targets() -> List[str]:
    zone = get_settings().cname_zone
    return [f"ns1.{zone}", f"ns2.{zone}"]


def render(c: Ctx, item: store.Item) -> Dict[str, Any]:
    data = item.data
    return {
        "id": item.sk,
        "uri": c.uri(f"{PATH}/{item.sk}"),
        "description": data.get("description", ""),
        "metadata": data.get("metadata", ""),
        "domain": data["domain"],
        "ns_targets": ns_targets(),
        "region_domains": [data["domain"]],
        "created_at": data["created_at"],
        "certificate_management_policy": None,
        "certificate_management_status": None,
    }


def create(c: Ctx, fields: Dict[str, Any]) -> Dict[str, Any]:
    domain = fields["domain"]
    items, _ = store.query_page(store.collection_pk(c.account_id, COLLECTION), MAX_PER_ACCOUNT)
    if len(items) >= MAX_PER_ACCOUNT:
        raise errors.Conflict(
            f"This account has {MAX_PER_ACCOUNT} agent ingresses, the most it may have; "
            "delete one first"
        )
    conflict = reserved_domains.reservation_conflict(c.account_id, domain)
    if conflict is not None and not isinstance(conflict, errors.DomainReservedByYou):
        raise conflict
    ingress_id = ids.new_id(PREFIX)
    item = store.new_item(
        store.collection_pk(c.account_id, COLLECTION),
        ingress_id,
        kind=COLLECTION,
        account_id=c.account_id,
        data={
            "description": fields.get("description", ""),
            "metadata": fields.get("metadata", ""),
            "domain": domain,
            "created_at": validation.now_rfc3339(),
        },
    )
    index = store.new_item(
        INDEX_PK,
        domain,
        kind="agent_ingress_index",
        data={"account_id": c.account_id, "agent_ingress_id": ingress_id},
    )
    store.commit(
        [
            store.put_new(item),
            store.put_new(
                index,
                errors.Conflict(
                    f"The domain {domain} already has an agent ingress",
                    details={"field": "domain"},
                ),
            ),
        ]
    )
    return render(c, item)


def _get(c: Ctx, ingress_id: str) -> store.Item:
    return store.get_by_id(c.account_id, COLLECTION, PREFIX, ingress_id, "agent ingress")


def get(c: Ctx, ingress_id: str) -> Dict[str, Any]:
    return render(c, _get(c, ingress_id))


def list_page(c: Ctx, limit: int, before_id: Optional[str]) -> Tuple[List[Dict[str, Any]], bool]:
    return web.rendered_page(c, COLLECTION, limit, before_id, render)


def update(c: Ctx, ingress_id: str, fields: Dict[str, Any]) -> Dict[str, Any]:
    fields = {k: v for k, v in fields.items() if k != "certificate_management_policy"}
    return web.updated(c, COLLECTION, PREFIX, ingress_id, fields, "agent ingress", render)


@store.retrying
def delete(c: Ctx, ingress_id: str) -> None:
    """One GetItem (its domain), one transaction: the ingress and its index entry."""
    item = _get(c, ingress_id)
    store.commit([store.delete(item), store.drop(INDEX_PK, item.data["domain"])])
