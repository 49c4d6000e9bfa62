"""The HTTPS edge route modules whose rule is a policy action here, translated once: the API
checks a module by compiling what it becomes (chalicelib.https_edges), the edge enforces that
same translation (edge.edges.EdgeRouter), and an agent's Bind options go through the same
functions (edge.enforce), so each rule has one implementation:

- ``oauth`` ``{enabled, provider: {<name>: {client_id, client_secret, scopes,
  email_addresses, email_domains}}, options_passthrough, cookie_prefix, inactivity_timeout,
  maximum_duration, auth_check_interval}`` → the ``oauth`` action (edge/identity.py), then a
  403 for a signed-in visitor outside ``email_addresses``/``email_domains``;
- ``oidc`` ``{enabled, issuer, client_id, client_secret, scopes, …the same session fields}`` →
  ``openid-connect``;
- ``webhook_verification`` ``{enabled, provider, secret}`` → ``verify-webhook``;
- ``circuit_breaker`` ``{enabled, tripped_duration, rolling_window, num_buckets,
  volume_threshold, error_threshold_percentage}`` → ``circuit-breaker``;
- ``compression`` ``{enabled}`` → ``compress-response``;
- ``websocket_tcp_converter`` ``{enabled}``: not an action; the edge converts the route's
  WebSocket connections as the agent option does (edge/wstcp.py).

Session fields map to the sign-in actions' config: ``cookie_prefix`` → ``auth_id``,
``maximum_duration`` → ``max_session_duration``, ``inactivity_timeout`` →
``idle_session_duration``, ``auth_check_interval`` → ``userinfo_refresh_interval`` (seconds;
0 or absent: the action's default), ``options_passthrough`` → ``allow_cors_preflight``.
"""

import json
from typing import Any, Dict, List, Optional

from chalicelib.core import binding, edge_errors

SESSION_FIELDS = {
    "cookie_prefix": "auth_id",
    "maximum_duration": "max_session_duration",
    "inactivity_timeout": "idle_session_duration",
    "auth_check_interval": "userinfo_refresh_interval",
    "options_passthrough": "allow_cors_preflight",
}


def refuse(names: List[str]) -> binding.Refused:
    return binding.Refused(
        edge_errors.INVALID_OPTION,
        "This edge cannot honour the endpoint option(s) "
        f"{', '.join(names)}; the bind is refused rather "
        "than served without them.",
    )


def _cel_string(text: str) -> str:
    return json.dumps(text)  # a JSON string literal is a valid CEL string literal


def identity_rules(
    option: str, module: Dict[str, Any], extra: Optional[Dict[str, Any]] = None
) -> List[Dict[str, Any]]:
    """The rules of an agent's ``OAuth`` (``provider``) or ``OIDC`` (``issuer_url``) option:
    the sign-in action with the option's client id, secret and scopes (and ``extra`` action
    config: a route module's session fields), then, when the option lists ``allow_emails``
    or ``allow_domains``, a 403 for a signed-in visitor matching none (case-insensitive, as
    the hosted module compares them). Refused without a client id and secret."""
    if not isinstance(module, dict):
        raise refuse([option])
    if module.get("sealed_client_secret"):
        raise refuse([f"{option} with a sealed client secret"])
    if not module.get("client_id") or not module.get("client_secret"):
        raise refuse(
            [
                f"{option} without client_id and client_secret (this edge has no "
                "managed OAuth applications)"
            ]
        )
    kind = "oidc" if option == "OIDC" else "oauth"
    config: Dict[str, Any] = {
        key: module[key] for key in ("client_id", "client_secret") if module.get(key)
    }
    if module.get("scopes"):
        config["scopes"] = [s for s in module["scopes"] if isinstance(s, str)]
    config.update(extra or {})
    if kind == "oidc":
        config["issuer_url"] = module.get("issuer_url") or ""
        action = {"type": "openid-connect", "config": config}
    else:
        config["provider"] = module.get("provider") or ""
        action = {"type": "oauth", "config": config}
    rules: List[Dict[str, Any]] = [{"name": f"{kind} sign-in", "actions": [action]}]
    emails = [e.lower() for e in module.get("allow_emails") or [] if isinstance(e, str)]
    domains = [
        d.lower().lstrip("@") for d in module.get("allow_domains") or [] if isinstance(d, str)
    ]
    if emails or domains:
        email = f"actions.ngrok.{kind}.identity.email.lower()"
        tests = [f"{email} == {_cel_string(e)}" for e in emails] + [
            f"{email}.endsWith({_cel_string('@' + d)})" for d in domains
        ]
        rules.append(
            {
                "name": f"{kind} allowed emails",
                "expressions": [f"!({' || '.join(tests)})"],
                "actions": [{"type": "deny", "config": {"status_code": 403}}],
            }
        )
    return rules


def enabled(module: Any) -> bool:
    return isinstance(module, dict) and module.get("enabled", True) is not False


def _session(module: Dict[str, Any]) -> Dict[str, Any]:
    extra: Dict[str, Any] = {}
    for field, key in SESSION_FIELDS.items():
        value = module.get(field)
        if value in (None, "", 0, False):
            continue
        extra[key] = value if isinstance(value, (str, bool)) else f"{int(value)}s"
    return extra


def oauth_rules(module: Dict[str, Any]) -> List[Dict[str, Any]]:
    """The route module ``oauth`` as rules (its one provider, by name)."""
    providers: Dict[str, Any] = module.get("provider") or {}
    name, found = next(iter(providers.items()), ("", {}))
    settings: Dict[str, Any] = found or {}
    option = {
        "provider": name,
        "client_id": settings.get("client_id"),
        "client_secret": settings.get("client_secret"),
        "scopes": settings.get("scopes") or [],
        "allow_emails": settings.get("email_addresses") or [],
        "allow_domains": settings.get("email_domains") or [],
    }
    return identity_rules("OAuth", option, _session(module))


def oidc_rules(module: Dict[str, Any]) -> List[Dict[str, Any]]:
    """The route module ``oidc`` as rules."""
    option = {
        "issuer_url": module.get("issuer"),
        "client_id": module.get("client_id"),
        "client_secret": module.get("client_secret"),
        "scopes": module.get("scopes") or [],
    }
    return identity_rules("OIDC", option, _session(module))


def webhook_rule(module: Dict[str, Any]) -> Dict[str, Any]:
    return {
        "name": "webhook verification",
        "actions": [
            {
                "type": "verify-webhook",
                "config": {
                    "provider": str(module.get("provider") or "").lower(),
                    "secret": module.get("secret") or "",
                },
            }
        ],
    }


def breaker_rule(module: Dict[str, Any]) -> Dict[str, Any]:
    config: Dict[str, Any] = {}
    if module.get("error_threshold_percentage") is not None:
        config["error_threshold"] = module["error_threshold_percentage"]
    if module.get("volume_threshold"):
        config["volume_threshold"] = module["volume_threshold"]
    if module.get("rolling_window"):
        config["window_duration"] = f"{int(module['rolling_window'])}s"
    if module.get("tripped_duration"):
        config["tripped_duration"] = f"{int(module['tripped_duration'])}s"
    if module.get("num_buckets"):
        config["num_buckets"] = module["num_buckets"]
    return {"name": "circuit breaker", "actions": [{"type": "circuit-breaker", "config": config}]}


COMPRESSION_RULE = {
    "name": "compression",
    "actions": [{"type": "compress-response", "config": {}}],
}


def sign_in_rules(route: Dict[str, Any]) -> List[Dict[str, Any]]:
    """on_http_request rules of a route's oauth, oidc and webhook_verification modules (after
    its ip_restriction, before its user_agent_filter: the hosted module order)."""
    rules: List[Dict[str, Any]] = []
    if enabled(route.get("oauth")):
        rules += oauth_rules(route["oauth"])
    if enabled(route.get("oidc")):
        rules += oidc_rules(route["oidc"])
    if enabled(route.get("webhook_verification")):
        rules.append(webhook_rule(route["webhook_verification"]))
    return rules


def breaker_rules(route: Dict[str, Any]) -> List[Dict[str, Any]]:
    """on_http_request: the circuit breaker, the last of the route's modules."""
    module = route.get("circuit_breaker")
    return [breaker_rule(module)] if module and enabled(module) else []


def response_rules(route: Dict[str, Any]) -> List[Dict[str, Any]]:
    """on_http_response: compression, after response_headers."""
    return [dict(COMPRESSION_RULE)] if enabled(route.get("compression")) else []


def converts_websockets(route: Dict[str, Any]) -> bool:
    return enabled(route.get("websocket_tcp_converter"))
