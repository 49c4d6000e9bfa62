"""Reserved domains: ``/reserved_domains``.

Fields: id, uri, created_at, description, metadata, domain, region, cname_target,
http_endpoint_configuration, https_endpoint_configuration, certificate,
certificate_management_policy, certificate_management_status, acme_challenge_cname_target,
resolves_to. Every field is always present; unset ones are ``null``.

Rules (docs/CONTRACT.md; where the API reference is silent, decided here):
- ``domain`` is required: a hostname (chalicelib.core.hostnames) of at least two labels whose
  last label is not a number, stored lower-cased; a wildcard only as a leading ``*.``
  (``*.a.example.com``). It cannot be changed (not an update field).
- A domain is unique across all accounts, by its exact (lower-cased) name: a uniqueness
  item ``U#reserved_domain#<domain>`` written in the same transaction as the reservation
  (409 for any second reservation, also under concurrent creates); deleting frees it.
  ``*.example.com`` and ``a.example.com`` are different names (overlap is not checked).
- The service's own base domain (``BASE_DOMAIN``), ``*.`` + it, and its parent domains cannot
  be reserved (400): they would claim every name the service hands out.
- A domain outside the base domain gets ``cname_target`` ``<16 random>.<10 random>.<cname
  zone>``, a ``certificate_management_policy`` (default ``{"authority": "letsencrypt",
  "private_key_type": "ecdsa"}``; authority only ``letsencrypt``, key type ``ecdsa`` or
  ``rsa``, missing keys take the default) and a ``certificate_management_status`` whose
  provisioning job started at creation; a wildcard one also gets
  ``acme_challenge_cname_target`` ``<16 random>.acme-challenge.<cname zone>``. A domain
  under the base domain has ``null`` for all four, and sending a policy for it is a 400.
- ``region``: ``""`` (default) or one of au, eu, ap, us, jp, in, sa (400 otherwise).
- ``resolves_to``: a list (at most 10) of ``{"value": <"global" or a region code>}``,
  ``[]`` meaning global resolution (the reference client always sends ``[]``, on create and
  on update). An update that sends it replaces the list, so ``[]`` resets it.
- ``certificate_id`` names a TLS certificate of the account (``/tls_certificates``) whose DNS
  names cover the domain (a wildcard reservation needs the wildcard itself); otherwise 400.
  It and ``certificate_management_policy`` are mutually exclusive (both in one request: 400):
  attaching an uploaded certificate stops management (policy and status become null);
  setting a policy on a domain with an uploaded certificate keeps serving that one until the
  managed certificate is issued, which replaces it. ``certificate`` is the Ref of the
  certificate served (uploaded or issued), else null; the edge serves it for the domain
  (docs/CERTIFICATES.md). ``http_endpoint_configuration`` and
  ``https_endpoint_configuration`` are always null.
- A policy puts the domain on the ACME work queue (chalicelib.core.acme_orders), in the same
  transaction; ``certificate_management_status`` then follows the order (the worker writes it).
  With no ACME directory configured (``ACME_DIRECTORY_URL`` unset for the API) the status is
  rendered saying so, and which certificate the edge serves instead (:func:`certificate_status`).
- Update: description, metadata, certificate_id, certificate_management_policy (a new policy
  on a managed domain keeps the provisioning status and applies to the next order),
  resolves_to.
- Every principal of the account (members and bots too) may create, change and delete its
  reserved domains.
- A reserved domain that an HTTPS edge hostport uses (exactly, or under the wildcard) cannot be
  deleted (409): the edge's hostport counts in its ``refs``.
- ``DELETE /reserved_domains/{id}/certificate`` detaches the certificate (an uploaded one is
  kept in ``/tls_certificates``; an issued one is deleted; with a policy, a new one is
  ordered); 204, also when there is none (404 for an unknown domain), as a DELETE of an unset
  module is. ``DELETE /reserved_domains/{id}/certificate_management_policy`` stops managed
  certificates: the policy and its provisioning status become ``null`` and the domain leaves
  the queue (an issued certificate keeps being served until detached); 204 (also when there
  was none). A later update may set a policy again.
- Deleting a domain deletes its issued certificate and releases an uploaded one.
"""

import secrets
import string
from collections import Counter
from typing import Any, Dict, List, Optional, Tuple

from chalicelib import tls_certificates, validation, web
from chalicelib.core import errors, hostnames, ids, refs, reservations, store
from chalicelib.core import acme_orders as orders
from chalicelib.core.config import get_settings
from chalicelib.validation import DESCRIPTION, METADATA, Field
from chalicelib.web import Ctx

COLLECTION = "reserved_domain"
PREFIX = ids.PREFIXES["reserved_domain"]
PATH = "/reserved_domains"
LIST_KEY = "reserved_domains"

REGIONS = ("au", "eu", "ap", "us", "jp", "in", "sa")
RESOLVES_TO_VALUES = ("global",) + REGIONS
MAX_RESOLVES_TO = 10
AUTHORITIES = ("letsencrypt",)
KEY_TYPES = ("ecdsa", "rsa")
DEFAULT_POLICY = {"authority": "letsencrypt", "private_key_type": "ecdsa"}
PROVISIONING_MSG = orders.PROVISIONING_MSG
CERT = tls_certificates.COLLECTION
_ALPHABET = string.ascii_lowercase + string.digits


def _check_domain(name: str, value: str) -> str:
    try:
        domain = hostnames.parse(value, wildcard=True, min_labels=2, numeric_tld=False)
    except hostnames.InvalidHostname as exc:
        raise errors.InvalidField(
            f"Field '{name}' ({value!r}) {exc}", details={"field": name}
        ) from None
    base = get_settings().base_domain
    bare = hostnames.suffix_of_wildcard(domain) or domain
    if domain == base or hostnames.is_within(base, bare):
        raise errors.InvalidField(
            f"Field '{name}': '{domain}' covers the service's own domain "
            f"'{base}' and cannot be reserved",
            details={"field": name},
        )
    return domain


def _check_region(name: str, value: str) -> str:
    if value not in ("",) + REGIONS:
        raise errors.InvalidField(
            f"Field '{name}' must be \"\" or one of {', '.join(REGIONS)}", details={"field": name}
        )
    return value


def _check_policy(name: str, value: Dict[str, Any]) -> Dict[str, str]:
    unknown = sorted(set(value) - set(DEFAULT_POLICY))
    if unknown:
        raise errors.InvalidField(
            f"Field '{name}.{unknown[0]}' is unknown; accepted: authority, private_key_type",
            details={"field": name},
        )
    policy = dict(DEFAULT_POLICY)
    for key, allowed in (("authority", AUTHORITIES), ("private_key_type", KEY_TYPES)):
        sent = value.get(key)
        if sent is None or sent == "":
            continue
        if sent not in allowed:
            raise errors.InvalidField(
                f"Field '{name}.{key}' must be one of {', '.join(allowed)}, got {sent!r}",
                details={"field": name},
            )
        policy[key] = sent
    return policy


def _check_resolves_to(name: str, value: Any) -> List[Dict[str, str]]:
    if not isinstance(value, list):
        raise errors.InvalidField(
            f"Field '{name}' must be an array of {{\"value\": …}} objects", details={"field": name}
        )
    if len(value) > MAX_RESOLVES_TO:
        raise errors.InvalidField(
            f"Field '{name}' has {len(value)} entries; the limit is {MAX_RESOLVES_TO}",
            details={"field": name},
        )
    result = []
    for index, entry in enumerate(value):
        if (
            not isinstance(entry, dict)
            or set(entry) != {"value"}
            or entry["value"] not in RESOLVES_TO_VALUES
        ):
            raise errors.InvalidField(
                f"Field '{name}[{index}]' must be {{\"value\": v}} with v one of "
                f"{', '.join(RESOLVES_TO_VALUES)}",
                details={"field": name},
            )
        result.append({"value": entry["value"]})
    return result


def _check_certificate_id(name: str, value: str) -> str:
    if not ids.is_valid(value, tls_certificates.PREFIX):
        raise _no_certificate(value)
    return value


def _no_certificate(cert_id: str) -> errors.InvalidField:
    return errors.InvalidField(
        f"Field 'certificate_id': no TLS certificate with id '{cert_id}' exists",
        details={"field": "certificate_id"},
    )


def _certificate_for(account_id: str, cert_id: str, domain: str) -> store.Item:
    """The account's certificate ``cert_id`` if it covers ``domain`` (1 GetItem), else 400."""
    item = store.get(store.collection_pk(account_id, CERT), cert_id)
    if item is None:
        raise _no_certificate(cert_id)
    if not tls_certificates.covers(item.data, domain):
        names = (
            ", ".join(item.data["subject_alternative_names"]["dns_names"][:10])
            or item.data.get("subject_common_name")
            or "none"
        )
        raise errors.InvalidField(
            f"Field 'certificate_id': TLS certificate '{cert_id}' does "
            f"not cover '{domain}' (its DNS names: {names})",
            details={"field": "certificate_id"},
        )
    return item


def _exclusive(fields: Dict[str, Any]) -> None:
    if (
        fields.get("certificate_id") is not None
        and fields.get("certificate_management_policy") is not None
    ):
        raise errors.InvalidField(
            "Fields 'certificate_id' and 'certificate_management_policy' "
            "are mutually exclusive: send one",
            details={"field": "certificate_id"},
        )


POLICY = Field("certificate_management_policy", "object", check=_check_policy)
RESOLVES_TO = Field("resolves_to", "any", check=_check_resolves_to)
CERTIFICATE_ID = Field("certificate_id", "string", check=_check_certificate_id)
CREATE_FIELDS = [
    Field("domain", "string", required=True, check=_check_domain),
    Field("region", "string", check=_check_region),
    DESCRIPTION,
    METADATA,
    CERTIFICATE_ID,
    POLICY,
    RESOLVES_TO,
]
UPDATE_FIELDS = [DESCRIPTION, METADATA, CERTIFICATE_ID, POLICY, RESOLVES_TO]


def _random_label(length: int) -> str:
    return "".join(secrets.choice(_ALPHABET) for _ in range(length))


def is_service_domain(domain: str) -> bool:
    """True for a name under the service's own base domain (no CNAME, no managed cert)."""
    bare = hostnames.suffix_of_wildcard(domain) or domain
    return hostnames.is_within(bare, get_settings().base_domain)


def certificate_status(data: Dict[str, Any]) -> Optional[Dict[str, Any]]:
    """The stored ``certificate_management_status``, as it is for this service: with no ACME
    directory configured (``ACME_DIRECTORY_URL`` unset where the API runs: its stage's
    environment, the same as the worker's) a provisioning job never progresses, so its
    ``msg`` says so and which certificate the edge serves instead (its fallback, or the
    attached upload). Decided when rendering, not stored: configuring ACME later makes the
    stored status true again, with no migration. A job a worker marked failed
    (``error_code`` set) is shown as the worker wrote it: a worker did run for it."""
    status = data.get("certificate_management_status")
    job = (status or {}).get("provisioning_job")
    if job is None or job.get("error_code") or get_settings().acme_directory_url:
        return status
    cert_id = data.get("certificate_id")
    msg = (
        orders.NO_ACME_UPLOADED_MSG.format(cert_id=cert_id)
        if cert_id
        else orders.NO_ACME_FALLBACK_MSG
    )
    return {**status, "provisioning_job": {**job, "msg": msg}}


def render(c: Ctx, item: store.Item) -> Dict[str, Any]:
    data = item.data
    return {
        **web.resource_fields(c, PATH, item),
        "domain": data["domain"],
        "region": data.get("region", ""),
        "cname_target": data.get("cname_target"),
        "http_endpoint_configuration": None,
        "https_endpoint_configuration": None,
        "certificate": c.ref(tls_certificates.PATH, data["certificate_id"])
        if data.get("certificate_id")
        else None,
        "certificate_management_policy": data.get("certificate_management_policy"),
        "certificate_management_status": certificate_status(data),
        "acme_challenge_cname_target": data.get("acme_challenge_cname_target"),
        "resolves_to": list(data.get("resolves_to") or []),
    }


def _taken(domain: str) -> errors.Conflict:
    return errors.Conflict(
        f"The domain '{domain}' is already reserved", details={"field": "domain"}
    )


def create(c: Ctx, fields: Dict[str, Any]) -> Dict[str, Any]:
    """One transaction: the domain, its uniqueness claim, and with a policy its queue entry;
    with ``certificate_id`` the certificate is read first (1 GetItem) and its ``refs`` moved
    and the served index written in the same transaction."""
    _exclusive(fields)
    domain = fields["domain"]
    zone = get_settings().cname_zone
    data: Dict[str, Any] = {
        "domain": domain,
        "region": fields.get("region", ""),
        "description": fields.get("description", ""),
        "metadata": fields.get("metadata", ""),
        "resolves_to": fields.get("resolves_to", []),
        "created_at": validation.now_rfc3339(),
        "cname_target": None,
        "acme_challenge_cname_target": None,
        "certificate_management_policy": None,
        "certificate_management_status": None,
        "certificate_id": None,
    }
    cert = None
    if fields.get("certificate_id") is not None:
        cert = _certificate_for(c.account_id, fields["certificate_id"], domain)
        data["certificate_id"] = cert.sk
    if is_service_domain(domain):
        if "certificate_management_policy" in fields:
            raise errors.InvalidField(
                f"Field 'certificate_management_policy': certificates of '{domain}' are the "
                "service's own; a policy applies only to your own domains",
                details={"field": "certificate_management_policy"},
            )
    else:
        data["cname_target"] = f"{_random_label(16)}.{_random_label(10)}.{zone}"
        if cert is None:
            data["certificate_management_policy"] = fields.get(
                "certificate_management_policy", dict(DEFAULT_POLICY)
            )
            data["certificate_management_status"] = orders.initial_status(data["created_at"])
        if hostnames.is_wildcard(domain):
            data["acme_challenge_cname_target"] = f"{_random_label(16)}.acme-challenge.{zone}"
    conflict = reservation_conflict(c.account_id, domain)
    if conflict is not None:
        raise conflict
    domain_id = ids.new_id(PREFIX)
    item = store.new_item(
        store.collection_pk(c.account_id, COLLECTION),
        domain_id,
        kind=COLLECTION,
        account_id=c.account_id,
        data=data,
    )
    claim = store.unique(
        reservations.DOMAIN_NAMESPACE,
        domain,
        {"account_id": c.account_id, "reserved_domain_id": domain_id},
        _taken(domain),
    )
    ops = [store.put_new(item), claim, *reservations.under_index_ops(domain, c.account_id)]
    if data["certificate_management_policy"] is not None:
        ops.append(orders.enqueue_op(c.account_id, domain_id, domain))
    if cert is not None:
        ops += _attach_ops(c.account_id, domain_id, domain, None, cert)
    store.commit(ops)
    return render(c, item)


def _attach_ops(
    account_id: str,
    domain_id: str,
    domain: str,
    old_cert_id: Optional[str],
    new_cert: Optional[store.Item],
    old_managed: bool = False,
) -> List[store.Op]:
    """Moving the domain from ``old_cert_id`` to ``new_cert`` (None: detached): ``refs`` of
    uploaded certificates, an issued one deleted, the served index item."""
    ops: List[store.Op] = []
    before: Counter = Counter()
    if old_cert_id:
        if old_managed:
            ops.append(store.drop(store.collection_pk(account_id, CERT), old_cert_id))
        else:
            before[(CERT, old_cert_id)] += 1
    after: Counter = Counter({(CERT, new_cert.sk): 1}) if new_cert is not None else Counter()
    ops += refs.move(account_id, before, after, lambda kind, rid: _no_certificate(rid))
    if new_cert is not None:
        ops.append(
            tls_certificates.served_op(domain, account_id, domain_id, new_cert.sk, new_cert.data)
        )
    elif old_cert_id:
        ops.append(tls_certificates.unserved_op(domain))
    return ops


def _managed(account_id: str, cert_id: Optional[str]) -> bool:
    """True when the domain's certificate was issued for it (ACME), so it goes with it."""
    if not cert_id:
        return False
    item = store.get(store.collection_pk(account_id, CERT), cert_id)
    return item is not None and bool(item.data.get("managed_for"))


def get_item(c: Ctx, domain_id: str) -> store.Item:
    return store.get_by_id(c.account_id, COLLECTION, PREFIX, domain_id, "reserved domain")


def get(c: Ctx, domain_id: str) -> Dict[str, Any]:
    return render(c, get_item(c, domain_id))


def list_page(c: Ctx, limit: int, before_id: Optional[str]) -> Tuple[List[Dict[str, Any]], bool]:
    return web.rendered_page(c, COLLECTION, limit, before_id, render)


def update(c: Ctx, domain_id: str, fields: Dict[str, Any]) -> Dict[str, Any]:
    """Description, metadata, resolves_to alone: one UpdateItem of the sent fields. With
    ``certificate_id`` or a policy: the domain is read first (what it served, whether it is
    the service's own), then one transaction (domain conditioned on its version, the
    certificates' ``refs``, the served index, the queue entry), retried when it lost a race."""
    _exclusive(fields)
    fields = {k: v for k, v in fields.items() if v is not None}
    if not fields or not ids.is_valid(domain_id, PREFIX):
        return get(c, domain_id)
    if "certificate_id" in fields or "certificate_management_policy" in fields:
        return _update_certificate(c, domain_id, fields)
    return render(
        c,
        store.write(
            store.set_fields(
                store.collection_pk(c.account_id, COLLECTION),
                domain_id,
                fields,
                missing=errors.NotFound(f"No reserved domain with id '{domain_id}' exists"),
            )
        ),
    )


@store.retrying
def _update_certificate(c: Ctx, domain_id: str, fields: Dict[str, Any]) -> Dict[str, Any]:
    old = get_item(c, domain_id)
    data = old.data
    domain = data["domain"]
    changes = dict(fields)
    ops: List[store.Op] = []
    if "certificate_id" in fields:
        cert = _certificate_for(c.account_id, fields["certificate_id"], domain)
        changes.update(certificate_management_policy=None, certificate_management_status=None)
        if data.get("certificate_id") != cert.sk:
            ops += _attach_ops(
                c.account_id,
                domain_id,
                domain,
                data.get("certificate_id"),
                cert,
                _managed(c.account_id, data.get("certificate_id")),
            )
        else:
            ops.append(
                tls_certificates.served_op(domain, c.account_id, domain_id, cert.sk, cert.data)
            )
        if data.get("certificate_management_policy") is not None:
            ops.append(orders.dequeue_op(c.account_id, domain_id))
    else:
        if not data.get("cname_target"):
            raise errors.InvalidField(
                f"Field 'certificate_management_policy': certificates of '{domain}' are the "
                "service's own",
                details={"field": "certificate_management_policy"},
            )
        if data.get("certificate_management_policy") is None:
            changes["certificate_management_status"] = orders.initial_status(
                validation.now_rfc3339()
            )
            ops.append(orders.enqueue_op(c.account_id, domain_id, domain))
    version = old.version or 0
    ops.insert(
        0,
        store.set_fields(
            old.pk,
            old.sk,
            changes,
            require=store.at_version(version),
            missing=_get_missing(domain_id),
        ),
    )
    store.commit(ops)
    old.data = {**data, **changes}
    return render(c, old)


@store.retrying
def delete(c: Ctx, domain_id: str) -> None:
    """Reads first (1 GetItem: the domain whose claim is released; +1 GetItem when it has a
    certificate: issued ones are deleted with it), then one transaction; 409 while an HTTPS
    edge hostport uses the domain (its ``refs``)."""
    item = get_item(c, domain_id)
    in_use = errors.Conflict(
        f"The reserved domain '{item.data['domain']}' is served by an "
        "HTTPS edge; remove the edge's hostports under it first"
    )
    cert_id = item.data.get("certificate_id")
    store.commit(
        [
            refs.delete_unreferenced(
                item.pk, item.sk, _get_missing(domain_id), in_use, version=item.version or 0
            ),
            store.release(reservations.DOMAIN_NAMESPACE, item.data["domain"]),
            orders.dequeue_op(c.account_id, domain_id),
            *[
                store.drop(
                    store.unique_pk(reservations.UNDER_NAMESPACE, ancestor), item.data["domain"]
                )
                for ancestor in reservations.ancestors(reservations.bare(item.data["domain"]))
            ],
        ]
        + _attach_ops(
            c.account_id,
            domain_id,
            item.data["domain"],
            cert_id,
            None,
            _managed(c.account_id, cert_id),
        )
    )


def _get_missing(domain_id: str) -> errors.NotFound:
    return errors.NotFound(f"No reserved domain with id '{domain_id}' exists")


def reservation_conflict(account_id: str, domain: str) -> Optional[errors.ApiError]:
    """Why ``account_id`` may not reserve ``domain`` (canonical, maybe ``*.``-wildcard), or
    None. Reads: one BatchGetItem of the reservations that could cover it and of the online
    claims of it and the names it is under, then one Query of the reservations under it."""
    from chalicelib.core import online

    bare, wildcard = reservations.bare(domain), hostnames.is_wildcard(domain)
    other = errors.WildcardConflict if wildcard else errors.DomainReservedByOther
    refused = (
        f"This wildcard domain would conflict with a domain reserved for another "
        f"account. Failed to reserve {domain}."
        if wildcard
        else f"This domain is already reserved for another account. Failed to reserve {domain}."
    )
    above = reservations.ancestors(bare) + ([bare] if wildcard else [])
    reserved_names = [domain] + reservations.candidates(bare)[1:] + above
    claimed_names = [bare] + reservations.ancestors(bare)
    read = online.batch_get(
        reservations.holder_keys(reserved_names) + online.hostname_claim_keys(claimed_names)
    )
    holders = reservations.holders_in(reserved_names, read)
    if domain in holders:
        if holders.pop(domain) == account_id:
            return errors.DomainReservedByYou(
                f"This domain is already reserved for your account. Failed to reserve {domain}.",
                details={"field": "domain"},
            )
        return errors.DomainReservedByOther(
            f"This domain is already reserved for another account. Failed to reserve {domain}.",
            details={"field": "domain"},
        )
    if any(holder != account_id for holder in holders.values()):
        return other(refused, details={"field": "domain"})
    if any(r["account_id"] != account_id for r in reservations.reserved_under(bare)):
        return other(refused, details={"field": "domain"})
    for name, holder in online.hostname_holders(claimed_names, read).items():
        if holder.get("account_id") != account_id:
            return errors.DomainInUse(
                f"Another account is running an active endpoint on the "
                f"domain {name}. You may not reserve domains that are "
                "actively in use.",
                details={"field": "domain"},
            )
    return None


# ---- detachable parts: DELETE /reserved_domains/{id}/<part> ---------------------------------
PARTS = ("certificate", "certificate_management_policy")


def delete_part(c: Ctx, domain_id: str, part: str) -> None:
    """``certificate``: 1 GetItem, then (when one is attached) one transaction detaching it.
    ``certificate_management_policy``: one transaction setting the policy and its status to
    null and removing the queue entry (404 when no such domain)."""
    if part == "certificate":
        _detach(c, domain_id)
        return
    missing = errors.NotFound(f"No reserved domain with id '{domain_id}' exists")
    if not ids.is_valid(domain_id, PREFIX):
        raise missing
    store.commit(
        [
            store.set_fields(
                store.collection_pk(c.account_id, COLLECTION),
                domain_id,
                {"certificate_management_policy": None, "certificate_management_status": None},
                missing=missing,
            ),
            orders.dequeue_op(c.account_id, domain_id),
        ]
    )


@store.retrying
def _detach(c: Ctx, domain_id: str) -> None:
    item = get_item(c, domain_id)
    cert_id = item.data.get("certificate_id")
    if not cert_id:
        return
    version = item.version or 0
    ops = [
        store.set_fields(
            item.pk,
            item.sk,
            {"certificate_id": None},
            require=store.at_version(version),
            missing=_get_missing(domain_id),
        )
    ]
    ops += _attach_ops(
        c.account_id,
        domain_id,
        item.data["domain"],
        cert_id,
        None,
        _managed(c.account_id, cert_id),
    )
    if item.data.get("certificate_management_policy") is not None:
        ops.append(orders.enqueue_op(c.account_id, domain_id, item.data["domain"]))
    store.commit(ops)
