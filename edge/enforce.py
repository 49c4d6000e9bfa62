"""What the edge applies to an endpoint's traffic, from the agent's Bind options.

The SDKs apply none of the modules or the traffic policy they send in Bind: the edge must.
Every module is translated into traffic policy rules, so one engine (chalicelib.core.policy)
enforces modules and policies alike (and the route modules of edges, which translate the same
way). The rules run in the hosted service's module order, before the endpoint's own policy:

    on_http_request:  IPRestriction, BasicAuth, OAuth, OIDC, WebhookVerification, UserAgentFilter,
                      RequestHeaders, then the TrafficPolicy's rules
    on_http_response: ResponseHeaders, Compression, then the TrafficPolicy's rules
    on_tcp_connect:   IPRestriction, then the TrafficPolicy's rules

User agent filter: a User-Agent matching an ``allow`` pattern passes; otherwise one matching
a ``deny`` pattern, or any when ``allow`` is not empty, is refused with 403.

MutualTLSCA is enforced by the HTTPS listener's handshake (``edge.tls``), as the
``mutual_tls`` module of HTTPS edges. Options enforced elsewhere are taken out of the options
before they reach this module (edge.agents): CircuitBreaker (``edge.breaker``),
WebsocketTCPConverter (``edge.wstcp``), ProxyProto (``edge.proxyproto``), the CLI 2.x's
``Auth`` string (turned into BasicAuth) and HostHeaderRewrite (``edge.legacy``). OAuth and OIDC
become the ``oauth`` / ``openid-connect`` actions (:func:`identity_rules`, run by
``edge.identity``), after BasicAuth. Options this edge cannot honour (SAML; OAuth or OIDC
without the operator's own client id and secret, or with a sealed one; hashed basic auth
passwords), or
one of the former reaching here by another path, refuse the bind with ERR_NGROK_1602 naming
them: never accepted and ignored.
A TrafficPolicy the engine refuses is ERR_NGROK_2201 with the element it names, and so is
one whose restrict-ips ``ip_policies`` name an IP policy the agent's account does not have
(:func:`check_ip_policies`, as the API refuses such a document). They are resolved per
request from the edge's cache (edge.edges.EdgeRouter.ip_policy_resolver).
"""

import json
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, TypeGuard

from chalicelib.core import binding, edge_errors, ip_rules, route_modules
from chalicelib.core.policy import Policy, PolicyError, compile_policy
from chalicelib.core.policy import document as policy_document

UNSUPPORTED_HTTP = (
    "SAML",
    "CircuitBreaker",
    "WebsocketTCPConverter",
    "HostHeaderRewrite",
    "ProxyProto",
    "Auth",
)
UNSUPPORTED_TCP = ("ProxyProto",)


@dataclass
class Enforcement:
    """The compiled policy an endpoint's traffic runs through (None: nothing to apply)."""

    policy: Optional[Policy] = None
    document: str = ""


def _is_set(value: Any) -> TypeGuard[Any]:
    """Present in the Bind options. ``{}`` counts: presence-only modules (Compression,
    WebsocketTCPConverter) are sent as empty objects; unset ones are null or absent."""
    return value is not None and value is not False and value not in ("", 0, [])


_refuse = route_modules.refuse


# A basic auth credential of an agent's option (the SDKs' basic_auth, the CLI 2.x's -auth, the
# SSH gateway's --basic-auth): the hosted service's bounds and errors, checked before the
# option becomes the basic-auth action (whose own bounds are the same).
MIN_PASSWORD, MAX_PASSWORD = 8, 128
MAX_USERNAME = 128


def check_credential(user: str, password: str) -> None:
    """Refused with the hosted service's code for a credential it refuses."""
    if not user:
        raise binding.Refused(
            edge_errors.BASIC_AUTH_USERNAME_EMPTY,
            "Invalid basic auth credential. Username must not be zero length.",
        )
    if len(user) > MAX_USERNAME:
        raise binding.Refused(
            edge_errors.BASIC_AUTH_USERNAME_LENGTH,
            "Invalid basic auth credential. Username must be at most "
            f"{MAX_USERNAME} characters, got {len(user)}.",
        )
    if not MIN_PASSWORD <= len(password) <= MAX_PASSWORD:
        raise binding.Refused(
            edge_errors.BASIC_AUTH_PASSWORD_LENGTH,
            f"Invalid basic auth credential. Password must be between {MIN_PASSWORD} and "
            f"{MAX_PASSWORD} characters, got {len(password)}.",
        )


def _cel_string(text: str) -> str:
    return json.dumps(text)  # a JSON string literal is a valid CEL string literal


def ua_rule(module: Dict[str, Any]) -> Dict[str, Any]:
    """The deny rule of a user agent filter module (``allow`` / ``deny`` RE2 patterns)."""
    allow = [p for p in module.get("allow") or [] if isinstance(p, str)]
    deny = [p for p in module.get("deny") or [] if isinstance(p, str)]

    def any_of(patterns: List[str]) -> str:
        return " || ".join(f"req.user_agent.matches({_cel_string(p)})" for p in patterns)

    expression = f"!({any_of(allow)})" if allow else any_of(deny)
    return {
        "name": "user agent filter",
        "expressions": [expression],
        "actions": [{"type": "deny", "config": {"status_code": 403}}],
    }


identity_rules = route_modules.identity_rules  # one translation: chalicelib.core.route_modules


def header_actions(module: Dict[str, Any]) -> List[Dict[str, Any]]:
    """remove-headers then add-headers actions of a headers module (SDK or API shape)."""
    actions = []
    remove = [n for n in module.get("remove") or [] if isinstance(n, str)]
    if remove:
        actions.append({"type": "remove-headers", "config": {"headers": remove}})
    added: Dict[str, str] = {}
    add = module.get("add") or []
    if isinstance(add, dict):  # the API's modules: {name: value}
        added.update({str(k): str(v) for k, v in add.items()})
        add = []
    for entry in add:  # the SDK's Bind option: ["Name:value", ...]
        if isinstance(entry, str) and ":" in entry:
            name, value = entry.split(":", 1)
            added[name.strip()] = value.strip()
    for name, value in (module.get("addParsed") or {}).items():
        added[name] = value
    if added:
        actions.append({"type": "add-headers", "config": {"headers": added}})
    return actions


def _module_rules(opts: Dict[str, Any], kind: str) -> Dict[str, List[Dict[str, Any]]]:
    phases: Dict[str, List[Dict[str, Any]]] = {}

    def add(phase: str, name: str, actions: List[Dict[str, Any]]) -> None:
        if actions:
            phases.setdefault(phase, []).append({"name": name, "actions": actions})

    ipr = opts.get("IPRestriction")
    if _is_set(ipr):
        config = {
            k: [c for c in ipr.get(src) or []]
            for k, src in (("allow", "allow_cidrs"), ("deny", "deny_cidrs"))
            if ipr.get(src)
        }
        add(
            "on_tcp_connect" if kind == "tcp" else "on_http_request",
            "ip restriction",
            [{"type": "restrict-ips", "config": config}],
        )
    if kind == "tcp":
        return phases
    basic = opts.get("BasicAuth")
    if _is_set(basic):
        creds = []
        for cred in basic.get("credentials") or []:
            if cred.get("hashed_password") and not cred.get("cleartext_password"):
                raise _refuse(["BasicAuth with hashed passwords"])
            user, password = cred.get("username") or "", cred.get("cleartext_password") or ""
            check_credential(user, password)
            creds.append(f"{user}:{password}")
        add(
            "on_http_request",
            "basic auth",
            [{"type": "basic-auth", "config": {"credentials": creds}}],
        )
    for option in ("OAuth", "OIDC"):  # sign-in: the openid-connect / oauth actions
        if _is_set(opts.get(option)):
            phases.setdefault("on_http_request", []).extend(identity_rules(option, opts[option]))
    hook = opts.get("WebhookVerification")
    if _is_set(hook):
        if not hook.get("secret"):
            raise _refuse(["WebhookVerification with a sealed secret"])
        add(
            "on_http_request",
            "webhook verification",
            [
                {
                    "type": "verify-webhook",
                    "config": {"provider": hook.get("provider", ""), "secret": hook["secret"]},
                }
            ],
        )
    ua = opts.get("UserAgentFilter")
    if _is_set(ua):
        phases.setdefault("on_http_request", []).append(ua_rule(ua))
    if _is_set(opts.get("RequestHeaders")):
        add("on_http_request", "request headers", header_actions(opts["RequestHeaders"]))
    if _is_set(opts.get("ResponseHeaders")):
        add("on_http_response", "response headers", header_actions(opts["ResponseHeaders"]))
    if opts.get("Compression") is not None:
        add("on_http_response", "compression", [{"type": "compress-response", "config": {}}])
    return phases


def parse_document(text: Any) -> Dict[str, Any]:
    """A TrafficPolicy option (JSON or YAML text, or already a mapping) as a mapping, parsed by
    the engine's own parser (:func:`chalicelib.core.policy.document.parse`: its size limit and
    nesting guard), or Refused saying why."""
    if isinstance(text, dict):
        return text
    if not isinstance(text, str):
        raise binding.Refused(
            edge_errors.INVALID_TRAFFIC_POLICY, "TrafficPolicy must be a JSON or YAML document"
        )
    try:
        doc = policy_document.parse(text)
    except PolicyError as exc:
        raise binding.Refused(
            edge_errors.INVALID_TRAFFIC_POLICY, f"Invalid traffic policy: {str(exc)[:300]}"
        ) from None
    if not isinstance(doc, dict):
        raise binding.Refused(
            edge_errors.INVALID_TRAFFIC_POLICY, "TrafficPolicy must be a mapping of phases"
        )
    return doc


def _asks_termination(phases: Dict[str, Any]) -> bool:
    rules = phases.get("on_tcp_connect")
    return isinstance(rules, list) and any(
        isinstance(rule, dict)
        and isinstance(rule.get("actions"), list)
        and any(isinstance(a, dict) and a.get("type") == "terminate-tls" for a in rule["actions"])
        for rule in rules
    )


def build(opts: Dict[str, Any], kind: str, terminates: bool = False) -> Enforcement:
    """The enforcement of one endpoint's Bind options, or Refused. A ``terminate-tls``
    action is refused unless ``terminates`` (a TLS endpoint: edge/passthrough.py applies it;
    an HTTP or TCP endpoint here runs no handshake it could change)."""
    unsupported = UNSUPPORTED_TCP if kind == "tcp" else UNSUPPORTED_HTTP
    refused = [name for name in unsupported if _is_set(opts.get(name))]
    if refused:
        raise _refuse(refused)
    phases = _module_rules(opts, kind)
    user = opts.get("TrafficPolicy")
    if _is_set(user):
        doc = parse_document(user)
        for phase, rules in doc.items():
            if isinstance(rules, list):
                phases.setdefault(phase, []).extend(rules)
            else:
                phases[phase] = rules  # let the engine name what is wrong with it
    if not terminates and _asks_termination(phases):
        raise binding.Refused(
            edge_errors.INVALID_TRAFFIC_POLICY,
            "Invalid traffic policy: terminate-tls runs on TLS endpoints and TLS edges "
            "here; this endpoint's handshake is not one it can change",
        )
    if not phases:
        return Enforcement()
    enforcement = compile_document(phases)
    if kind == "http" and enforcement.policy is not None:
        try:  # (an HTTP endpoint's on_tcp_connect forwards nothing: its requests do)
            enforcement.policy.check_protocol("http")
        except PolicyError as exc:
            raise binding.Refused(
                edge_errors.INVALID_TRAFFIC_POLICY, f"Invalid traffic policy: {exc}"
            ) from None
    return enforcement


def check_internal(proto: str, enforcement: Enforcement) -> None:
    """An internal HTTP(S) endpoint's policy runs no on_tcp_connect rules: such an endpoint
    is reached by a request's forward-internal, never by a connection of its own. Refused
    (ERR_NGROK_2262), as the hosted service refuses it."""
    policy = getattr(enforcement, "policy", None)
    if proto in ("http", "https") and policy is not None and policy.has("on_tcp_connect"):
        raise binding.Refused(
            edge_errors.INTERNAL_TCP_CONNECT,
            "Internal HTTP/HTTPS endpoints do not support the on_tcp_connect traffic policy "
            "phase; use a TCP or TLS endpoint instead",
        )


def compile_document(phases: Dict[str, Any]) -> Enforcement:
    """Compile a document of phases (modules' rules and a policy's), or Refused naming the
    element the engine refuses."""
    document = json.dumps(phases, sort_keys=True)
    try:
        policy = compile_policy(document)
    except PolicyError as exc:
        raise binding.Refused(
            edge_errors.INVALID_TRAFFIC_POLICY, f"Invalid traffic policy: {exc}"
        ) from None
    return Enforcement(policy=policy, document=document)


def http_options(opts: Dict[str, Any]) -> Enforcement:
    return build(opts, "http")


def tcp_options(opts: Dict[str, Any]) -> Enforcement:
    return build(opts, "tcp")


def tls_options(opts: Dict[str, Any]) -> Enforcement:
    """A TLS endpoint's: as a TCP endpoint's, and its policy may terminate (terminate-tls)."""
    return build(opts, "tcp", terminates=True)


async def check_ip_policies(
    edge: Any, account_id: str, enforcement: Optional[Enforcement]
) -> None:
    """Refused (ERR_NGROK_2201 naming the element) when the policy names an IP policy the
    account does not have; one store read per named policy, at bind only."""
    policy = enforcement.policy if enforcement is not None else None
    if policy is not None and policy.secret_refs:  # ${secrets.get(...)}: same refusal
        from chalicelib.core import vault_secrets

        missing_secrets = await edge.call(
            vault_secrets.missing_of, account_id, [(v, n) for _, v, n in policy.secret_refs]
        )
        for path, vault, name in policy.secret_refs:
            if (vault, name) in missing_secrets:
                raise binding.Refused(
                    edge_errors.INVALID_TRAFFIC_POLICY,
                    f"Invalid traffic policy: {path}: the secret "
                    f"'{name[:64]}' does not exist in a vault "
                    f"'{vault[:64]}' of this account",
                )
    if policy is None or not policy.ip_policy_ids:
        return
    missing = set(await edge.call(ip_rules.missing_of, account_id, list(policy.ip_policy_ids)))
    for path, ident in policy.ip_policy_refs:
        if ident in missing:
            raise binding.Refused(
                edge_errors.INVALID_TRAFFIC_POLICY,
                f"Invalid traffic policy: {path}: the IP "
                f"policy '{ident}' does not exist in this "
                "account",
            )
