"""The ACME worker: orders, renews and installs managed certificates of reserved domains and
agent ingresses.

Runs as a component of ``make run`` (``python -m chalicelib.acme.worker``: a pass every
``ACME_WORKER_SECONDS``) and as a Chalice scheduled function in AWS (``app.acme_worker``).
Several may run at once: each queue entry is taken under a lease
(chalicelib.core.acme_orders), so a
certificate is ordered by one worker at a time; an order in progress is kept on the entry, so
a worker that dies mid-order is followed by one that resumes that same order.

One pass, per due entry (``due_at`` passed, lease free); the entry's ``domain_id`` names a
reserved domain (``rd_…``) or an agent ingress (``agin_…``), both read and written alike:
1. the domain is read; no policy any more (or no domain): the entry is dropped;
2. ``certificate_management_status.provisioning_job`` says the job runs (``started_at``);
3. an order is placed (a new key of the policy's type, a CSR for the domain) and written to
   the entry, or the entry's order is resumed;
4. each pending authorization is answered: a wildcard by DNS-01 (the TXT published by the
   DNS provider, chalicelib.acme.dns, at the domain's ``acme_challenge_cname_target``, which
   the user's ``_acme-challenge`` CNAME points to), other names by HTTP-01 or TLS-ALPN-01
   (``ACME_CHALLENGES``, in order; a retry uses the next one, so a domain that can pass only
   one of them gets it on the next attempt), answered by the edge (edge/challenges.py); an
   agent ingress always by HTTP-01 (its port 443 may be the agent listener, which does not
   answer TLS-ALPN-01);
5. the order is finalized and the certificate installed in one transaction: a new
   ``/tls_certificates`` item (``issued_at`` set, key sealed), the domain's ``certificate``
   pointing at it, its status ``renews_at`` (two thirds into the lifetime) with no job, the
   previous issued certificate deleted (an uploaded one released), the served index item
   (an agent ingress's under ``agent_ingress#<domain>``, read by the agent listener only),
   the entry due again at ``renews_at``.
On failure the job shows the ACME problem's text, ``error_code`` (``DNS_ERROR`` when a
validation failed: the user's DNS or reachability; ``INTERNAL_ERROR`` otherwise) and
``retries_at``; the entry is due again then (orders.RETRY_BACKOFF: 1 min, 5 min, 15 min, 1 h,
4 h, then every 12 h) and the next attempt places a new order.

Settings: ``ACME_DIRECTORY_URL`` (unset: no ACME, the worker idles), ``ACME_CA_BUNDLE`` (the CA
of the directory's own TLS, e.g. Pebble's), ``ACME_EMAIL`` (account contact, optional),
``ACME_CHALLENGES`` (default ``http-01,tls-alpn-01``), ``ACME_WORKER_SECONDS`` (10),
``ACME_ORDER_TIMEOUT`` (seconds an order may take to validate and finalize, 120).
"""

import datetime
import logging
import os
import secrets
import sys
import time
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple

import josepy as jose
from acme import challenges, client, crypto_util, errors as acme_errors, messages
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa

from chalicelib import tls_certificates, validation
from chalicelib.core import ids, keywrap, refs, store
from chalicelib.acme import dns
from chalicelib.core import acme_orders as orders

log = logging.getLogger("acme.worker")

DOMAIN_COLLECTION = "reserved_domain"
INGRESS_COLLECTION = "agent_ingress"
INGRESS_PREFIX = ids.PREFIXES[INGRESS_COLLECTION] + "_"
CERT = tls_certificates.COLLECTION
VALIDATION_PROBLEMS = {
    "connection",
    "dns",
    "unauthorized",
    "incorrectResponse",
    "tls",
    "caa",
    "rejectedIdentifier",
    "unknownHost",
}


# ---- TLS-ALPN-01 (RFC 8737): acme 5.x dropped the challenge class; registered here --------------
if "tls-alpn-01" not in challenges.Challenge.TYPES:

    @challenges.ChallengeResponse.register
    class TLSALPN01Response(challenges.KeyAuthorizationChallengeResponse):
        """The (empty) response to a TLS-ALPN-01 challenge."""

        typ = "tls-alpn-01"

    @challenges.Challenge.register
    class TLSALPN01(challenges.KeyAuthorizationChallenge):
        """RFC 8737: the server presents a certificate with the key authorization's digest."""

        response_cls = TLSALPN01Response
        typ = response_cls.typ

        def validation(self, account_key: jose.JWK, **unused: Any) -> str:
            return self.key_authorization(account_key)


@dataclass
class Settings:
    directory_url: str
    ca_bundle: Optional[str] = None
    email: Optional[str] = None
    challenges: List[str] = field(default_factory=lambda: ["http-01", "tls-alpn-01"])
    order_timeout: float = 120.0
    owner: str = field(default_factory=lambda: f"worker_{secrets.token_hex(6)}")
    lease_seconds: int = orders.LEASE_SECONDS

    @classmethod
    def from_env(cls, env: Optional[Dict[str, str]] = None) -> Optional["Settings"]:
        env = os.environ if env is None else env
        url = (env.get("ACME_DIRECTORY_URL") or "").strip()
        if not url:
            return None
        wanted = [
            c.strip()
            for c in (env.get("ACME_CHALLENGES") or "http-01,tls-alpn-01").split(",")
            if c.strip()
        ]
        unknown = [c for c in wanted if c not in ("http-01", "tls-alpn-01")]
        if unknown or not wanted:
            raise ValueError(
                f"ACME_CHALLENGES: {','.join(unknown) or 'empty'}; use http-01 "
                "and/or tls-alpn-01 (DNS-01 is used for wildcards)"
            )
        return cls(
            directory_url=url,
            ca_bundle=(env.get("ACME_CA_BUNDLE") or None),
            email=(env.get("ACME_EMAIL") or None),
            challenges=wanted,
            order_timeout=float(env.get("ACME_ORDER_TIMEOUT") or 120),
        )


def _now() -> float:
    return time.time()


def _rfc3339(epoch: float) -> str:
    return datetime.datetime.fromtimestamp(epoch, datetime.timezone.utc).strftime(
        "%Y-%m-%dT%H:%M:%SZ"
    )


def _epoch(text: str) -> float:
    return (
        datetime.datetime.strptime(text, "%Y-%m-%dT%H:%M:%SZ")
        .replace(tzinfo=datetime.timezone.utc)
        .timestamp()
    )


# ---- the ACME account (one per directory, shared by every worker) -----------------------------
def _acme_client(settings: Settings) -> client.ClientV2:
    sk = orders.account_sk(settings.directory_url)
    context = {"acme_account": sk}
    item = store.get(orders.ACCOUNT_PK, sk)
    verify: Any = settings.ca_bundle or True
    if item is not None:
        key = jose.JWK.json_loads(keywrap.open_sealed(item.data["key"], context))
        net = client.ClientNetwork(
            key, alg=jose.ES256, user_agent="tunnel-service-acme", verify_ssl=verify
        )
        directory = client.ClientV2.get_directory(settings.directory_url, net)
        acme = client.ClientV2(directory, net)
        net.account = messages.RegistrationResource(
            body=messages.Registration(), uri=item.data["uri"]
        )
        return acme
    key = jose.JWKEC(key=ec.generate_private_key(ec.SECP256R1()))
    net = client.ClientNetwork(
        key, alg=jose.ES256, user_agent="tunnel-service-acme", verify_ssl=verify
    )
    directory = client.ClientV2.get_directory(settings.directory_url, net)
    acme = client.ClientV2(directory, net)
    regr = acme.new_account(
        messages.NewRegistration.from_data(email=settings.email, terms_of_service_agreed=True)
    )
    account = store.new_item(
        orders.ACCOUNT_PK,
        sk,
        kind="acme_account",
        data={
            "uri": regr.uri,
            "directory": settings.directory_url,
            "key": keywrap.seal(key.json_dumps().encode(), context),
        },
    )
    try:
        store.commit([store.put_new(account)])
    except Exception:  # another worker registered first: use its account
        return _acme_client(settings)
    return acme


# ---- status writes on the reserved domain ----------------------------------------------------
def _is_ingress(domain_id: str) -> bool:
    return domain_id.startswith(INGRESS_PREFIX)


def _domain_pk(account_id: str, domain_id: str) -> str:
    """The collection of the queue entry's ``domain_id``: an agent ingress's or a domain's."""
    collection = INGRESS_COLLECTION if _is_ingress(domain_id) else DOMAIN_COLLECTION
    return store.collection_pk(account_id, collection)


class _PolicyGone(Exception):
    """The domain lost its policy (or was deleted) while the worker was at it."""


def _set_status(account_id: str, domain_id: str, status: Dict[str, Any]) -> None:
    try:
        store.write(
            store.set_fields(
                _domain_pk(account_id, domain_id),
                domain_id,
                {"certificate_management_status": status},
                require=lambda e: f"attribute_type({e.data('certificate_management_policy')}, "
                f"{e.value('M')})",
                missing=_PolicyGone(),
                explain=lambda old: _PolicyGone(),
            )
        )
    except store.VersionConflict:
        raise _PolicyGone() from None


# ---- one order ---------------------------------------------------------------------------------
def _new_key(policy: Dict[str, Any]) -> Any:
    if (policy or {}).get("private_key_type") == "rsa":
        return rsa.generate_private_key(65537, 2048)
    return ec.generate_private_key(ec.SECP256R1())


def _key_pem(key: Any) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def _begin(
    acme: client.ClientV2, entry: store.Item, domain: Dict[str, Any], owner: str
) -> Tuple[messages.OrderResource, Dict[str, Any]]:
    """Place a new order and write it to the entry (before any challenge is answered)."""
    data = entry.data
    key = _new_key(domain.get("certificate_management_policy") or {})
    key_pem = _key_pem(key)
    csr_pem = crypto_util.make_csr(key_pem, [domain["domain"]])
    orderr = acme.new_order(csr_pem)
    context = {"acme_order": entry.sk}
    order = {
        "url": orderr.uri,
        "csr": csr_pem.decode("ascii"),
        "key": keywrap.seal(key_pem, context),
    }
    orders.update_held(entry.sk, owner, {"order": order})
    data["order"] = order
    return orderr, order


def _resume(acme: client.ClientV2, order: Dict[str, Any]) -> messages.OrderResource:
    """The order an earlier worker placed, read back from the CA (POST-as-GET)."""
    response = acme._post_as_get(order["url"])
    body = messages.Order.from_json(response.json())
    authorizations = [
        acme._authzr_from_response(acme._post_as_get(url), uri=url) for url in body.authorizations
    ]
    return messages.OrderResource(
        body=body,
        uri=order["url"],
        authorizations=authorizations,
        csr_pem=order["csr"].encode("ascii"),
    )


def _answer(
    acme: client.ClientV2,
    orderr: messages.OrderResource,
    domain: Dict[str, Any],
    kinds: List[str],
    published: List[Tuple[str, Any]],
) -> None:
    """Publish and answer one challenge of each pending authorization."""
    account_key = acme.net.key
    for authzr in orderr.authorizations:
        if authzr.body.status != messages.STATUS_PENDING:
            continue
        name = authzr.body.identifier.value
        wildcard = bool(authzr.body.wildcard) or domain["domain"].startswith("*.")
        offered = {c.chall.typ: c for c in authzr.body.challenges}
        wanted = ["dns-01"] if wildcard else kinds
        challb = next((offered[k] for k in wanted if k in offered), None)
        if challb is None:
            raise RuntimeError(
                f"the CA offers {', '.join(sorted(offered))} for {name}; this "
                f"service answers {', '.join(wanted)}"
            )
        response, validation_text = challb.chall.response_and_validation(account_key)
        if challb.chall.typ == "http-01":
            sk = orders.http01_sk(challb.chall.encode("token"))
            orders.put_challenge(sk, name, validation_text)
            published.append(("challenge", sk))
        elif challb.chall.typ == "tls-alpn-01":
            sk = orders.tls_alpn01_sk(name)
            orders.put_challenge(sk, name, validation_text)
            published.append(("challenge", sk))
        else:
            target = domain.get("acme_challenge_cname_target")
            provider = dns.provider()
            if not target or provider is None:
                raise RuntimeError(
                    "a wildcard domain is validated by DNS-01, and no DNS "
                    "provider is configured (DNS_LISTEN or DNS_ROUTE53_ZONE_ID)"
                )
            provider.publish(target, validation_text)
            published.append(("dns", (provider, target, validation_text)))
        acme.answer_challenge(challb, response)


def _problem(exc: BaseException) -> Tuple[str, str]:
    """(error_code, msg) of a failed attempt: the ACME problem's own text where there is one."""
    if isinstance(exc, acme_errors.ValidationError):
        for authzr in exc.failed_authzrs:
            for challb in authzr.body.challenges:
                if challb.error is not None:
                    kind = (challb.error.typ or "").rsplit(":", 1)[-1]
                    code = (
                        orders.DNS_ERROR if kind in VALIDATION_PROBLEMS else orders.INTERNAL_ERROR
                    )
                    return code, (
                        f"{authzr.body.identifier.value}: {challb.chall.typ} failed: "
                        f"{challb.error.detail or kind}"
                    )[:1000]
        return orders.DNS_ERROR, "validation failed"
    if isinstance(exc, messages.Error):
        kind = (exc.typ or "").rsplit(":", 1)[-1]
        code = orders.DNS_ERROR if kind in VALIDATION_PROBLEMS else orders.INTERNAL_ERROR
        return code, (exc.detail or str(exc))[:1000]
    if isinstance(exc, acme_errors.TimeoutError):
        return orders.INTERNAL_ERROR, "the certificate authority did not finish the order in time"
    return orders.INTERNAL_ERROR, f"{type(exc).__name__}: {str(exc)[:500]}"


def _install(entry: store.Item, owner: str, fullchain: str, key_pem: str) -> str:
    """One transaction: the issued certificate, the domain pointing at it with its renewal
    time, the previous certificate released, the served index, the entry due at renewal."""
    data = entry.data
    account_id, domain_id = data["account_id"], data["domain_id"]
    domain = store.get(_domain_pk(account_id, domain_id), domain_id)
    if domain is None or domain.data.get("certificate_management_policy") is None:
        raise _PolicyGone()
    fields, key_text = tls_certificates.parse(fullchain, key_pem)
    issued = _now()
    fields["issued_at"] = _rfc3339(issued)
    cert = tls_certificates.new_item(
        account_id,
        fields,
        key_text,
        issued_at=fields["issued_at"],
        domain_id=domain_id,
        description=f"managed certificate for {domain.data['domain']}",
    )
    cert.refs = 1
    start, end = _epoch(fields["not_before"]), _epoch(fields["not_after"])
    renews = start + (end - start) * 2 / 3
    status = {"renews_at": _rfc3339(renews), "provisioning_job": None}
    version = domain.version or 0
    served = (
        tls_certificates.ingress_served_op
        if _is_ingress(domain_id)
        else tls_certificates.served_op
    )
    ops = [
        store.put_new(cert),
        store.set_fields(
            domain.pk,
            domain.sk,
            {"certificate_id": cert.sk, "certificate_management_status": status},
            require=store.at_version(version),
            missing=_PolicyGone(),
        ),
        served(domain.data["domain"], account_id, domain_id, cert.sk, fields),
        orders.held_op(
            entry.sk,
            owner,
            {
                "due_at": renews,
                "attempts": 0,
                "order": None,
                "lease_owner": None,
                "lease_until": 0,
            },
        ),
    ]
    old = domain.data.get("certificate_id")
    if old:
        old_item = store.get(store.collection_pk(account_id, CERT), old)
        if old_item is not None and old_item.data.get("managed_for"):
            ops.append(store.drop(old_item.pk, old_item.sk))
        elif old_item is not None:
            ops += refs.move(account_id, {(CERT, old): 1}, {}, lambda *a: _PolicyGone())
    store.commit(ops)
    return cert.sk


def process(settings: Settings, entry: store.Item, acme: Optional[client.ClientV2] = None) -> str:
    """Work on one claimed entry; returns what happened (``issued``, ``failed``, ``dropped``,
    ``lost``)."""
    owner = settings.owner
    data = entry.data
    account_id, domain_id = data["account_id"], data["domain_id"]
    domain_item = store.get(_domain_pk(account_id, domain_id), domain_id)
    if domain_item is None or domain_item.data.get("certificate_management_policy") is None:
        try:
            store.commit(
                [
                    store.remove_item(
                        orders.QUEUE_PK,
                        entry.sk,
                        require=lambda e: f"{e.data('lease_owner')} = {e.value(owner)}",
                    )
                ]
            )
        except Exception:
            pass
        return "dropped"
    domain = domain_item.data
    status = dict(domain.get("certificate_management_status") or {})
    job = status.get("provisioning_job") or {}
    started = job.get("started_at") if job.get("retries_at") is None and job else None
    msg = orders.RENEWING_MSG if domain.get("certificate_id") else orders.PROVISIONING_MSG
    started = started or validation.now_rfc3339()
    published: List[Tuple[str, Any]] = []
    try:
        _set_status(
            account_id,
            domain_id,
            {
                "renews_at": status.get("renews_at"),
                "provisioning_job": {
                    "error_code": None,
                    "msg": msg,
                    "started_at": started,
                    "retries_at": None,
                },
            },
        )
        acme = acme or _acme_client(settings)
        order = data.get("order")
        if order:
            log.info("resuming order %s for %s", order["url"], domain["domain"])
            orderr = _resume(acme, order)
            if orderr.body.status == messages.STATUS_INVALID:
                raise messages.Error(
                    typ="urn:ietf:params:acme:error:malformed",
                    detail="the order in progress became invalid",
                )
        else:
            orderr, order = _begin(acme, entry, domain, owner)
        kinds = (
            settings.challenges[int(data.get("attempts") or 0) % len(settings.challenges) :]
            + settings.challenges[: int(data.get("attempts") or 0) % len(settings.challenges)]
        )
        if _is_ingress(domain_id):
            kinds = ["http-01"]
        _answer(acme, orderr, domain, kinds, published)
        deadline = datetime.datetime.now() + datetime.timedelta(seconds=settings.order_timeout)
        orderr = acme.poll_and_finalize(orderr, deadline)
        key_pem = keywrap.open_sealed(order["key"], {"acme_order": entry.sk}).decode("ascii")
        cert_id = _install(entry, owner, orderr.fullchain_pem, key_pem)
        log.info("issued %s for %s", cert_id, domain["domain"])
        return "issued"
    except (orders.LeaseLost, _PolicyGone):
        return "lost"
    except Exception as exc:
        code, text = _problem(exc)
        attempts = int(data.get("attempts") or 0) + 1
        retries = _now() + orders.retry_delay(attempts)
        log.warning("order for %s failed (%s): %s", domain["domain"], code, text)
        try:
            _set_status(
                account_id,
                domain_id,
                {
                    "renews_at": status.get("renews_at"),
                    "provisioning_job": {
                        "error_code": code,
                        "msg": text,
                        "started_at": started,
                        "retries_at": _rfc3339(retries),
                    },
                },
            )
            orders.update_held(
                entry.sk,
                owner,
                {
                    "attempts": attempts,
                    "due_at": retries,
                    "order": None,
                    "lease_owner": None,
                    "lease_until": 0,
                },
            )
        except (orders.LeaseLost, _PolicyGone):
            return "lost"
        return "failed"
    finally:
        for kind, what in published:
            try:
                if kind == "challenge":
                    orders.drop_challenge(what)
                else:
                    provider, target, text = what
                    provider.remove(target, text)
            except Exception as exc:
                log.warning("could not remove a challenge answer: %r", exc)


def run_once(settings: Optional[Settings] = None, now: Optional[float] = None) -> Dict[str, str]:
    """One pass over the due entries: ``{queue sk: outcome}`` of those this worker took."""
    settings = settings or Settings.from_env()
    if settings is None:
        return {}
    now = _now() if now is None else now
    results: Dict[str, str] = {}
    acme = None
    for entry in orders.entries():
        data = entry.data
        if float(data.get("due_at") or 0) > now or float(data.get("lease_until") or 0) >= now:
            continue
        try:
            claimed = orders.claim(entry.sk, settings.owner, now, settings.lease_seconds)
        except orders.LeaseLost:
            continue
        if acme is None:
            try:
                acme = _acme_client(settings)
            except Exception as exc:  # the CA is away: this entry waits for the next pass
                log.warning("cannot reach the ACME directory: %r", exc)
                orders.update_held(
                    entry.sk, settings.owner, {"lease_until": 0, "lease_owner": None}
                )
                results[entry.sk] = "unreachable"
                break
        results[entry.sk] = process(settings, claimed, acme)
    return results


def scheduled_pass() -> Dict[str, str]:
    """One pass, as the Chalice scheduled function ``acme_worker`` runs it in AWS (app.py):
    the settings from the function's environment, its outcomes logged and returned."""
    store.configure()
    settings = Settings.from_env()
    if settings is None:
        log.info("ACME_DIRECTORY_URL is not set: nothing to do")
        return {}
    outcomes = run_once(settings)
    log.info("acme pass: %s", outcomes or "nothing due")
    return outcomes


def main(argv: Optional[List[str]] = None) -> int:
    """The worker loop; ``--once``: one pass, its outcomes printed as JSON."""
    import json

    argv = sys.argv[1:] if argv is None else argv
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s"
    )
    store.configure()
    settings = Settings.from_env()
    if "--once" in argv:
        print(json.dumps(run_once(settings) if settings else {}), flush=True)
        return 0
    interval = float(os.environ.get("ACME_WORKER_SECONDS") or 10)
    if settings is None:
        print("acme worker: ACME_DIRECTORY_URL is not set, nothing to do", flush=True)
    else:
        print(
            f"acme worker {settings.owner}: managed certificates from "
            f"{settings.directory_url}, a pass every {interval:g} s",
            flush=True,
        )
    import signal

    stop = []
    signal.signal(signal.SIGTERM, lambda *a: stop.append(1))
    signal.signal(signal.SIGINT, lambda *a: stop.append(1))
    while not stop:
        if settings is not None:
            try:
                run_once(settings)
            except Exception:
                log.exception("ACME pass failed")
        slept = 0.0
        while slept < interval and not stop:
            time.sleep(0.2)
            slept += 0.2
    return 0


if __name__ == "__main__":
    sys.exit(main())
