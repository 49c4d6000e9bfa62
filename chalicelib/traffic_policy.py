"""Validation of traffic policy documents (``traffic_policy.value`` of edges and endpoints).

The API validates with the same engine the edge enforces with (:mod:`chalicelib.core.policy`):
a document is accepted only if the engine compiles it, i.e. its shape is right (phases,
rules of ``name``/``expressions``/``actions``, limits: at most 16384 bytes, 64 rules per
phase, 32 expressions of at most 1024 bytes and 32 actions per rule, names of at most 255
bytes), every CEL expression and ``${…}`` interpolation compiles against the variables and
macros of its phase, and every action is one this service runs, in a phase it runs in, with
a config that matches its schema. Anything else is a 400 naming the field and the element
(``on_http_request[0].actions[1].config.status_code``). The stored value is the string
exactly as sent; an empty document (no phases) is allowed and means "no rules".

``restrict-ips`` ``ip_policies`` must name IP policies of the caller's account
(:func:`check_ip_policies`, called where the account is known: HTTPS edge routes' and TCP
edges' traffic_policy module on create, update and module PUT; the edge does the same at an
agent's bind): an id the account does not have is a 400 naming the element, as the hosted
service refuses an IP restriction naming a policy that "does not exist on your account"
(ERR_NGROK_1801). The check is at write time only: a policy may be deleted later (traffic
policies do not hold a reference on it, unlike ``ip_restriction`` modules); from then on the
action refuses every address (fail closed) and says why in
``actions.ngrok.restrict_ips.error``.
"""

from typing import Any, Optional

from chalicelib.core import errors
from chalicelib.core.policy.document import (
    MAX_DOCUMENT_BYTES,
    MAX_RULES_PER_PHASE,
    PHASES,
    PolicyError,
)
from chalicelib.core import ip_rules

__all__ = [
    "MAX_DOCUMENT_BYTES",
    "MAX_RULES_PER_PHASE",
    "PHASES",
    "check_document",
    "check_ip_policies",
    "check_secrets",
    "check_tcp_document",
]


def check_document(field: str, text: Any, protocol: Optional[str] = None) -> str:
    """``text`` if it is a valid policy document (for an endpoint of ``protocol``: ``tcp`` or
    ``tls`` refuse the HTTP phases); a 400 naming ``field`` and the place."""
    if not isinstance(text, str):
        raise errors.InvalidField(
            f"Field '{field}' must be a string holding a JSON or YAML traffic policy document",
            details={"field": field},
        )
    from chalicelib.core.policy.engine import compile_policy  # here: the CEL runtime loads on use

    try:
        compiled = compile_policy(text)
        if protocol:
            compiled.check_protocol(protocol)
    except PolicyError as exc:
        location = f" at {exc.path}" if exc.path else ""
        raise errors.InvalidField(
            f"Field '{field}' is not a valid traffic policy{location}: {exc.message}",
            details={"field": field},
        ) from None
    return text


def check_tcp_document(field: str, text: Any) -> str:
    """check_document for a TCP edge or endpoint: only on_tcp_connect runs there."""
    return check_document(field, text, protocol="tcp")


def unknown_ip_policy(field: str, path: str, policy_id: str) -> errors.InvalidField:
    return errors.InvalidField(
        f"Field '{field}' is not a valid traffic policy at {path}: the "
        f"IP policy '{policy_id[:64]}' does not exist in this account",
        details={"field": field},
    )


def check_ip_policies(account_id: str, field: str, text: Optional[str]) -> None:
    """A 400 naming ``field`` and the element when a (valid) document's restrict-ips
    ``ip_policies`` name an IP policy ``account_id`` does not have. One GetItem per distinct
    id named; nothing read for a document naming none."""
    if not text:
        return
    from chalicelib.core.policy.engine import compile_policy

    check_secrets(account_id, field, text)
    refs = compile_policy(text).ip_policy_refs
    if not refs:
        return
    missing = set(ip_rules.missing_of(account_id, [ident for _, ident in refs]))
    for path, ident in refs:
        if ident in missing:
            raise unknown_ip_policy(field, path, ident)


def check_secrets(account_id: str, field: str, text: Optional[str]) -> None:
    """A 400 naming ``field`` and the element when a (valid) document reads
    ``${secrets.get('vault', 'name')}`` of a secret ``account_id`` does not have (at most
    three GetItems per distinct secret named; nothing read for a document naming none).
    Checked at write time only, as IP policies: a secret deleted later fails at the edge
    (the value renders empty and the outcome records why)."""
    if not text:
        return
    from chalicelib.core.policy.engine import compile_policy

    refs = compile_policy(text).secret_refs
    if not refs:
        return
    from chalicelib.core import vault_secrets

    missing = vault_secrets.missing_of(account_id, [(v, n) for _, v, n in refs])
    for path, vault, name in refs:
        if (vault, name) in missing:
            raise errors.InvalidField(
                f"Field '{field}' is not a valid traffic policy at {path}: the secret "
                f"'{name[:64]}' does not exist in a vault '{vault[:64]}' of this account",
                details={"field": field},
            )
