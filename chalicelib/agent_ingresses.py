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
- Certificates: ``certificate_management_policy`` null (the default, as hosted: its
  "internal CA" choice) leaves the domain to what the store has for it: the edge's agent
  listener serves it by SNI with an uploaded or ACME-issued certificate of a reserved domain
  covering it (docs/CERTIFICATES.md), else one its local CA issues. A policy is validated as a
  reserved domain's (chalicelib.reserved_domains.POLICY: ``{"authority": "letsencrypt",
  "private_key_type": "ecdsa" or "rsa"}``, missing keys take the default, anything else 400)
  and puts the ingress on the ACME work queue (chalicelib.core.acme_orders) in the same
  transaction; ``certificate_management_status`` then follows the order as a reserved
  domain's does (``renews_at``, ``provisioning_job``; rendered by
  chalicelib.reserved_domains.certificate_status, so with no ACME directory configured its
  job says so). The worker validates the domain by HTTP-01 on the edge's HTTP listener (the
  service's DNS server answers the domain's A/AAAA with the edge's addresses), and the issued
  certificate is the agent listener's for the domain ahead of any other (served index entry
  ``agent_ingress#<domain>``: docs/CERTIFICATES.md).
- ``DELETE /agent_ingresses/{id}/certificate_management_policy`` (as for reserved domains: a
  null in a PATCH means "not sent") stops managed certificates: the policy and its status
  become null, the ingress leaves the queue, and its issued certificate is deleted (the
  ingress has no ``certificate`` field to detach it by, so the agent listener goes back to
  the store's or its local CA's); 204, also when there was none. Deleting the ingress does
  the same.
- Agents that connect with the domain as their TLS server name must authenticate as the
  ingress's account: another account's authtoken is refused (ERR_NGROK_107), as hosted.
- PATCH takes description, metadata and a policy (one on a managed ingress keeps the
  provisioning status and applies to the next order). Every principal of the account may
  manage them, as reserved domains.

Store calls: POST one Query (the count), the reservation reads (reservation_conflict), one
TransactWriteItems (the ingress and the service-wide index entry ``AGENTINGRESS#index`` /
domain the edge reads, conditioned on not existing: one per domain; with a policy the queue
entry); GET one GetItem; list one Query; PATCH one UpdateItem (with a policy: one GetItem +
one TransactWriteItems, the ingress conditioned on its version and its queue entry); DELETE
(and DELETE of the policy) one GetItem + one TransactWriteItems.
"""

from typing import Any, Dict, List, Optional, Tuple

from chalicelib import reserved_domains, tls_certificates, validation, web
from chalicelib.core import acme_orders as orders
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


CREATE_FIELDS = [
    DESCRIPTION,
    METADATA,
    Field("domain", "string", required=True, check=_check_domain),
    reserved_domains.POLICY,
]
UPDATE_FIELDS = [DESCRIPTION, METADATA, reserved_domains.POLICY]
PARTS = ("certificate_management_policy",)


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
        "certificate_management_policy": data.get("certificate_management_policy"),
        "certificate_management_status": reserved_domains.certificate_status(data),
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
            "certificate_management_policy": None,
            "certificate_management_status": None,
            "certificate_id": None,  # the issued certificate (the ACME worker writes it)
        },
    )
    if fields.get("certificate_management_policy") is not None:
        item.data["certificate_management_policy"] = fields["certificate_management_policy"]
        item.data["certificate_management_status"] = orders.initial_status(item.data["created_at"])
    index = store.new_item(
        INDEX_PK,
        domain,
        kind="agent_ingress_index",
        data={"account_id": c.account_id, "agent_ingress_id": ingress_id},
    )
    ops = [
        store.put_new(item),
        store.put_new(
            index,
            errors.Conflict(
                f"The domain {domain} already has an agent ingress",
                details={"field": "domain"},
            ),
        ),
    ]
    if item.data["certificate_management_policy"] is not None:
        ops.append(orders.enqueue_op(c.account_id, ingress_id, domain))
    store.commit(ops)
    return render(c, item)


def _get(c: Ctx, ingress_id: str) -> store.Item:
    return store.get_by_id(c.account_id, COLLECTION, PREFIX, ingress_id, "agent ingress")


def get(c: Ctx, ingress_id: str) -> Dict[str, Any]:
    return render(c, _get(c, ingress_id))


def list_page(c: Ctx, limit: int, before_id: Optional[str]) -> Tuple[List[Dict[str, Any]], bool]:
    return web.rendered_page(c, COLLECTION, limit, before_id, render)


def update(c: Ctx, ingress_id: str, fields: Dict[str, Any]) -> Dict[str, Any]:
    fields = {k: v for k, v in fields.items() if v is not None}
    if "certificate_management_policy" in fields:
        return _update_policy(c, ingress_id, fields)
    return web.updated(c, COLLECTION, PREFIX, ingress_id, fields, "agent ingress", render)


def _missing(ingress_id: str) -> errors.NotFound:
    return errors.NotFound(f"No agent ingress with id '{ingress_id}' exists")


@store.retrying
def _update_policy(c: Ctx, ingress_id: str, fields: Dict[str, Any]) -> Dict[str, Any]:
    """A policy on an unmanaged ingress starts its provisioning job and queues it; on a
    managed one it replaces the policy (the next order uses it)."""
    old = _get(c, ingress_id)
    changes = dict(fields)
    ops: List[store.Op] = []
    if old.data.get("certificate_management_policy") is None:
        changes["certificate_management_status"] = orders.initial_status(validation.now_rfc3339())
        ops.append(orders.enqueue_op(c.account_id, ingress_id, old.data["domain"]))
    version = old.version or 0
    ops.insert(
        0,
        store.set_fields(
            old.pk,
            old.sk,
            changes,
            require=store.at_version(version),
            missing=_missing(ingress_id),
        ),
    )
    store.commit(ops)
    old.data = {**old.data, **changes}
    return render(c, old)


def _unmanaged_ops(c: Ctx, item: store.Item) -> List[store.Op]:
    """Out of the queue, its issued certificate and its served index entry deleted."""
    ops = [
        orders.dequeue_op(c.account_id, item.sk),
        tls_certificates.ingress_unserved_op(item.data["domain"]),
    ]
    if item.data.get("certificate_id"):
        ops.append(
            store.drop(
                store.collection_pk(c.account_id, tls_certificates.COLLECTION),
                item.data["certificate_id"],
            )
        )
    return ops


@store.retrying
def delete(c: Ctx, ingress_id: str) -> None:
    """One GetItem (its domain, its issued certificate), one transaction: the ingress, its
    index entry, its queue entry, its issued certificate and its served index entry."""
    item = _get(c, ingress_id)
    store.commit(
        [store.delete(item), store.drop(INDEX_PK, item.data["domain"])] + _unmanaged_ops(c, item)
    )


@store.retrying
def delete_part(c: Ctx, ingress_id: str, part: str) -> None:
    """``DELETE /agent_ingresses/{id}/certificate_management_policy``: one GetItem, then one
    transaction (the ingress conditioned on its version): policy and status null, no
    certificate, out of the queue."""
    item = _get(c, ingress_id)
    version = item.version or 0
    store.commit(
        [
            store.set_fields(
                item.pk,
                item.sk,
                {
                    "certificate_management_policy": None,
                    "certificate_management_status": None,
                    "certificate_id": None,
                },
                require=store.at_version(version),
                missing=_missing(ingress_id),
            )
        ]
        + _unmanaged_ops(c, item)
    )
