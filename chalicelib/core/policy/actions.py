"""The actions this engine runs, each checked against the hosted service's config schema.

Every action class is built once per compiled policy from its ``config`` (a PolicyError names
the element when the config is wrong) and run per connection or request. ``run`` returns None
to go on with the next action, or an :class:`~chalicelib.core.policy.outcome.Outcome` that ends
the phase (answer, close, forward) or pauses it (the request body is needed).

Decisions where the hosted docs are silent, written down here:
- add-headers appends (a header already present keeps its values and gets one more);
  header names must be HTTP tokens; a rendered value holding CR or LF is dropped (error).
- custom-response infers ``content-type`` when none is given: ``application/json`` for a
  body that parses as JSON, ``text/html`` for one starting with ``<``, else ``text/plain``;
  status codes are 100-599.
- redirect and url-rewrite use RE2 (the hosted service's Go regexp dialect) and Go's ``$1`` /
  ``${name}`` replacement syntax; a static ``from`` that does not compile is a 400.
- restrict-ips: the allow and deny sets are the ``allow``/``deny`` CIDRs plus the rules of
  the ``ip_policies``, resolved per run through ``conn.ip_policy_resolver`` with the account
  of the endpoint whose policy runs (``conn.endpoint.account_id``): another account's policy
  id resolves to nothing. A deny match refuses; otherwise an allow match, or an empty allow
  set when the deny set is not empty (``deny``-only configs, as the hosted docs' examples
  use them), lets the address through; with both sets empty (only policies without rules)
  nothing is allowed. An id that does not resolve (no resolver, no such policy in the
  account, e.g. deleted since) is an error (``error.code`` ERR_NGROK_1801) and the address
  is refused (fail closed); with ``enforce: false`` every refusal only sets the variables.
  A refusal is a 403 with ``ngrok-error-code: ERR_NGROK_3203`` ("Request blocked by IP
  Policy") and a JSON error body in HTTP phases, a closed connection in on_tcp_connect.
- verify-webhook reads at most 1 MiB of body (MAX_WEBHOOK_BODY); a longer body fails
  verification. Providers: github, gitlab, stripe, slack, shopify, svix, clerk, linear,
  generic_sha256 (``X-Signature-256: sha256=<hex>``, an extension); others are refused.
- jwt-validation: keys from ``jws.keys.sources.additional_jkus`` (fetched, cached 15 minutes)
  and, an extension, an inline JWKS in ``jws.keys.jwks``. A missing or invalid token is a
  401 with ``WWW-Authenticate: Bearer``.
- request-body-find-replace and response-body-find-replace buffer the whole body, at most
  1 MiB (MAX_FIND_REPLACE_BODY; the hosted docs give no bound), apply up to 32 rules
  (MAX_REPLACEMENTS) in order (RE2, every match, Go's ``$1`` / ``$name`` / ``$$``
  replacement syntax) to the bytes, and send the body with its new Content-Length. A longer
  request body is refused with 413 ERR_NGROK_10088 before anything goes upstream; a longer
  response body with 502 ERR_NGROK_3004 before any of it reaches the client: a body too
  large to rewrite is never passed on unrewritten (the action is how secrets are redacted).
  A ``from`` made by CEL that is not a valid RE2 pattern skips that rule and records the
  error. They do nothing for HEAD requests and 1xx, 204 and 304 responses. A response body is
  rewritten before compress-response compresses it, whatever their order.
- circuit-breaker keeps one breaker per action and endpoint (chalicelib/core/policy/breaker.py,
  shared with the agent option): ``num_buckets`` is fixed at 10 as hosted; a breaker that is
  tripped answers 503 ERR_NGROK_3202; ``enforce: false`` counts and never refuses.
- http-request: chalicelib/core/policy/httpcall.py (its bounds, destinations, variables, and
  the decisions where the hosted docs are silent; docs/CONTRACT.md lists them).
- sse-find-replace: chalicelib/core/policy/sse.py; owasp-crs-*: chalicelib/core/policy/waf.py.
- compress-response negotiates gzip and deflate (br when the ``brotli`` module is
  installed; ``compress`` is accepted and never chosen).
"""

import base64
import hashlib
import hmac
import ipaddress
import json
import re
import threading
from typing import Any, Callable, Dict, List, Optional, Tuple

import re2

from chalicelib.core import edge_errors, ip_rules
from chalicelib.core.policy import celenv, identity, jwks, ratelimit
from chalicelib.core.policy.document import PolicyError
from chalicelib.core.policy.outcome import (
    CLOSE,
    FORWARD_INTERNAL,
    HTTP_REQUEST,
    NEED_BODY,
    NEED_KEYS,
    RESPOND,
    TERMINATE_TLS,
    Outcome,
)
from chalicelib.core.policy.template import Template

TCP, REQ, RES = "on_tcp_connect", "on_http_request", "on_http_response"
SSE = "on_event_stream_message"
MAX_HEADERS = 10
MAX_WEBHOOK_BODY = 1 << 20
MAX_FIND_REPLACE_BODY = 1 << 20  # bytes of body a find-replace action buffers (each way)
MAX_REPLACEMENTS = 32  # replacement rules in one find-replace action
MAX_REWRITTEN_BODY = 4 << 20  # bytes a body find-replace may grow a body to (4 MiB)
_TOKEN = re.compile(r"^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$")
_RE2_OPTIONS = re2.Options()
_RE2_OPTIONS.log_errors = False

# Documented by the hosted service, not run here: refused at creation, by name.
UNSUPPORTED = (
    "ai-gateway",
    "oidc",
    "saml",
)


class Run:
    """What an action sees while it runs (``state``: the request's, engine.State)."""

    __slots__ = ("traffic", "phase", "errors", "logs", "outcome", "clock", "state")

    def __init__(self, traffic, phase, outcome, clock, state=None):
        self.traffic = traffic
        self.phase = phase
        self.errors = outcome.errors
        self.logs = outcome.logs
        self.outcome = outcome
        self.clock = clock
        self.state = state

    def render(self, template: Template) -> str:
        return template.render(self.traffic, self.errors)

    def set_vars(self, prefix: str, **values: Any) -> None:
        for key, value in values.items():
            self.traffic.action_vars[f"actions.ngrok.{prefix}.{key}"] = value
            self.traffic.cache.pop(f"actions.ngrok.{prefix}.{key}", None)


# ---- config checking ----------------------------------------------------------------------


class Config:
    def __init__(self, config: Optional[dict], where: str, allowed: Tuple[str, ...]) -> None:
        self.config = config or {}
        self.where = where
        for key in self.config:
            if key not in allowed:
                accepted = ", ".join(allowed) if allowed else "none (this action has no config)"
                raise PolicyError(f"{where}.{key}", f"unknown field; accepted: {accepted}")

    def at(self, key: str) -> str:
        return f"{self.where}.{key}"

    def get(self, key: str, kind, required: bool = False, default: Any = None) -> Any:
        if key not in self.config or self.config[key] is None:
            if required:
                raise PolicyError(self.at(key), "is required")
            return default
        value = self.config[key]
        if kind is int and (isinstance(value, bool) or not isinstance(value, int)):
            raise PolicyError(self.at(key), "must be an integer")
        if kind is not int and not isinstance(value, kind):
            raise PolicyError(self.at(key), f"must be {_kind_name(kind)}")
        return value

    def template(self, key: str, phase: str, required: bool = False) -> Optional[Template]:
        value = self.get(key, str, required)
        return None if value is None else Template(value, phase, self.at(key))

    def headers(self, key: str, phase: str, required: bool = False) -> List[Tuple[str, Template]]:
        value = self.get(key, dict, required, {})
        if required and not value:
            raise PolicyError(self.at(key), "needs at least 1 header")
        if len(value) > MAX_HEADERS:
            raise PolicyError(
                self.at(key), f"has {len(value)} headers; the limit is {MAX_HEADERS}"
            )
        out = []
        for name, template in value.items():
            if not isinstance(name, str) or not _TOKEN.match(name):
                raise PolicyError(f"{self.at(key)}.{name}", "is not a valid header name")
            if isinstance(template, (int, float)) and not isinstance(template, bool):
                template = str(template)
            out.append((name, Template(template, phase, f"{self.at(key)}.{name}")))
        return out

    def strings(self, key: str, required: bool = False, max_items: int = 0) -> List[str]:
        value = self.get(key, list, required, [])
        if required and not value:
            raise PolicyError(self.at(key), "needs at least 1 entry")
        if max_items and len(value) > max_items:
            raise PolicyError(self.at(key), f"has {len(value)} entries; the limit is {max_items}")
        for index, entry in enumerate(value):
            if not isinstance(entry, str):
                raise PolicyError(f"{self.at(key)}[{index}]", "must be a string")
        return value

    def status(self, key: str, default: int, low: int = 100, high: int = 599) -> int:
        value = self.get(key, int, False, default)
        if not low <= value <= high:
            raise PolicyError(self.at(key), f"must be a status code from {low} to {high}")
        return value


def _kind_name(kind) -> str:
    return {
        str: "a string",
        bool: "a boolean (true or false)",
        dict: "a mapping",
        list: "a list",
        (int, float): "a number",
    }.get(kind, str(kind))


def _respond(status: int, headers: List[Tuple[str, str]], body: bytes = b"") -> Outcome:
    return Outcome(
        RESPOND,
        status_code=status,
        headers=headers + [("content-length", str(len(body)))],
        body=body,
    )


def _safe_value(value: str, name: str, errors: List[str]) -> Optional[str]:
    if "\r" in value or "\n" in value:
        errors.append(f"header {name}: value holds CR or LF; dropped")
        return None
    return value


class Action:
    type = ""
    phases: Tuple[str, ...] = ()
    fields: Tuple[str, ...] = ()
    needs_body = 0  # bytes of request body the action reads (0: none)

    def __init__(self, config: Optional[dict], where: str, phase: str) -> None:
        self.where = where
        self.phase = phase
        self.setup(Config(config, f"{where}.config", self.fields), phase)

    def setup(self, c: Config, phase: str) -> None:
        pass

    def run(self, r: Run) -> Optional[Outcome]:
        raise NotImplementedError


# ---- headers, responses, URLs -------------------------------------------------------------


class AddHeaders(Action):
    type, phases, fields = "add-headers", (REQ, RES), ("headers",)

    def setup(self, c, phase):
        self.headers = c.headers("headers", phase, required=True)

    def run(self, r):
        message = r.traffic.req if r.phase == REQ else r.traffic.res
        added = {}
        for name, template in self.headers:
            value = _safe_value(r.render(template), name, r.errors)
            if value is not None:
                message.add_header(name, value)
                added[name] = value
        r.traffic.invalidate(headers_only=True)
        r.set_vars("add_headers", headers_added=added)
        return None


class RemoveHeaders(Action):
    type, phases, fields = "remove-headers", (REQ, RES), ("headers",)

    def setup(self, c, phase):
        self.names = c.strings("headers", required=True, max_items=MAX_HEADERS)
        for index, name in enumerate(self.names):
            if not _TOKEN.match(name):
                raise PolicyError(f"{c.at('headers')}[{index}]", "is not a valid header name")

    def run(self, r):
        message = r.traffic.req if r.phase == REQ else r.traffic.res
        removed = [name for name in self.names if message.remove_header(name)]
        r.traffic.invalidate(headers_only=True)
        r.set_vars("remove_headers", headers_removed=removed)
        return None


def infer_content_type(body: str) -> str:
    stripped = body.strip()
    if stripped[:1] in ("{", "["):
        try:
            json.loads(stripped)
            return "application/json"
        except ValueError:
            pass
    if stripped.startswith("<"):
        return "text/html"
    return "text/plain"


class CustomResponse(Action):
    type, phases, fields = "custom-response", (REQ, RES), ("status_code", "body", "headers")

    def setup(self, c, phase):
        self.status = c.status("status_code", 200)
        self.body = c.template("body", phase)
        self.headers = c.headers("headers", phase)

    def run(self, r):
        body = r.render(self.body) if self.body else ""
        headers = []
        for name, template in self.headers:
            value = _safe_value(r.render(template), name, r.errors)
            if value is not None:
                headers.append((name, value))
        if not any(name.lower() == "content-type" for name, _ in headers):
            headers.append(("content-type", infer_content_type(body)))
        return _respond(self.status, headers, body.encode("utf-8"))


class Deny(Action):
    type, phases = "deny", (TCP, REQ)

    def __init__(self, config, where, phase):
        self.fields = ("status_code",) if phase != TCP else ()
        super().__init__(config, where, phase)

    def setup(self, c, phase):
        self.status = c.status("status_code", 403) if phase != TCP else 0

    def run(self, r):
        if r.phase == TCP:
            return Outcome(CLOSE)
        return _respond(self.status, [])


class CloseConnection(Action):
    type, phases = "close-connection", (TCP, REQ)

    def run(self, r):
        return Outcome(CLOSE)


_GO_GROUP = re.compile(r"\$(?:\{(\w+)\}|(\w+)|\$)")


def go_replacement(to: str) -> Callable[[Any], str]:
    """Go's ReplaceAllString template (``$1``, ``$name``, ``${name}``, ``$$``) as a function
    of the match; as in Go, a group that does not exist or did not match expands to "".
    (``${name}`` in a config is CEL interpolation first, so ``$name`` or ``$1`` is how a
    policy names a group.)"""
    pieces: List[Any] = []
    last = 0
    for found in _GO_GROUP.finditer(to):
        pieces.append(to[last : found.start()])
        if found.group(0) == "$$":
            pieces.append("$")
        else:
            ref = found.group(1) or found.group(2)
            pieces.append((int(ref) if ref.isdigit() else ref,))
        last = found.end()
    pieces.append(to[last:])

    def expand(match) -> str:
        out = []
        for piece in pieces:
            if isinstance(piece, tuple):
                try:
                    out.append(match.group(piece[0]) or "")
                except (IndexError, KeyError):
                    pass
            else:
                out.append(piece)
        return "".join(out)

    return expand


def _regex(pattern: str, where: str):
    try:
        return re2.compile(pattern, _RE2_OPTIONS)
    except re2.error as exc:
        reason = exc.args[0].decode() if exc.args and isinstance(exc.args[0], bytes) else str(exc)
        raise PolicyError(where, f"is not a valid regular expression ({reason})") from None


class _UrlAction(Action):
    fields: Tuple[str, ...] = ("from", "to")
    var = ""

    def setup(self, c, phase):
        self.from_ = c.template("from", phase)
        self.to = c.template("to", phase, required=True)
        self.static_regex = None
        if self.from_ is not None and self.from_.static is not None:
            self.static_regex = _regex(self.from_.static, c.at("from"))

    def rewrite(self, r) -> Optional[str]:
        url = r.traffic.req.url
        to = r.render(self.to)
        if self.from_ is None:
            r.set_vars(self.var, matches=[url], url=to)
            return to
        try:
            regex = self.static_regex or _regex(r.render(self.from_), "from")
        except PolicyError as exc:
            r.set_vars(
                self.var, **{"error.code": edge_errors.RATE_LIMITED, "error.message": exc.message}
            )
            r.errors.append(f"{self.type}: from {exc.message}")
            return None
        expand = go_replacement(to)
        first: List[List[str]] = []

        def replace(match) -> str:  # one pass (the RE2 binding costs ~15 us a call)
            if not first:
                first.append([match.group(0)] + [g or "" for g in match.groups()])
            return expand(match)

        new = regex.sub(replace, url)
        if not first:
            r.set_vars(self.var, matches=[], url=url)
            return None
        r.set_vars(self.var, matches=first[0], url=new)
        return new


class Redirect(_UrlAction):
    type, phases = "redirect", (REQ,)
    fields = ("from", "to", "status_code", "headers")
    var = "redirect"

    def setup(self, c, phase):
        super().setup(c, phase)
        self.status = c.status("status_code", 302, 300, 399)
        self.headers = c.headers("headers", phase)

    def run(self, r):
        new = self.rewrite(r)
        if new is None or new == r.traffic.req.url:
            return None
        if "\r" in new or "\n" in new:
            r.errors.append("redirect: the new URL holds CR or LF")
            return None
        headers = [("location", new)]
        for name, template in self.headers:
            value = _safe_value(r.render(template), name, r.errors)
            if value is not None:
                headers.append((name, value))
        return _respond(self.status, headers)


class UrlRewrite(_UrlAction):
    type, phases = "url-rewrite", (REQ,)
    var = "url_rewrite"

    def run(self, r):
        new = self.rewrite(r)
        if new is not None and new != r.traffic.req.url:
            if "\r" in new or "\n" in new or " " in new:
                r.errors.append("url-rewrite: the new URL holds whitespace; not applied")
                return None
            r.traffic.req.set_url(new)
            r.traffic.invalidate()
        return None


# ---- access ---------------------------------------------------------------------------------

IP_POLICY_ID = re.compile(r"^ipp_[0-9A-Za-z]+$")
BLOCKED = (edge_errors.IP_BLOCKED, "Request blocked by IP Policy")


def _blocked_response() -> Outcome:
    code, msg = BLOCKED
    body = json.dumps({"error_code": code, "status_code": 403, "msg": msg, "details": {}}).encode(
        "utf-8"
    )
    return _respond(403, [("content-type", "application/json"), ("ngrok-error-code", code)], body)


def _network(text: str, where: str):
    try:
        return ipaddress.ip_network(text.strip(), strict=False)
    except ValueError:
        raise PolicyError(where, f"'{text}' is not a CIDR or IP address") from None


class RestrictIps(Action):
    type, phases = "restrict-ips", (TCP, REQ, RES)
    fields = ("enforce", "allow", "deny", "ip_policies")

    def setup(self, c, phase):
        self.enforce = c.get("enforce", bool, default=True)
        self.lists = {}
        for key in ("allow", "deny"):
            entries = []
            for index, text in enumerate(c.strings(key)):
                where = f"{c.at(key)}[{index}]"
                template = Template(text, phase, where)
                entries.append(_network(text, where) if template.static is not None else template)
            self.lists[key] = entries
        self.ip_policies = c.strings("ip_policies")
        for index, ident in enumerate(self.ip_policies):
            if not isinstance(ident, str) or not IP_POLICY_ID.match(ident):
                raise PolicyError(
                    f"{c.at('ip_policies')}[{index}]", "must be an IP policy id (ipp_…)"
                )
        if not (self.lists["allow"] or self.lists["deny"] or self.ip_policies):
            raise PolicyError(c.where, "needs at least one of allow, deny, ip_policies")

    def _networks(self, r, key):
        for entry in self.lists[key]:
            if isinstance(entry, Template):
                try:
                    yield _network(r.render(entry), key)
                except PolicyError as exc:
                    r.errors.append(f"restrict-ips: {exc.message}")
            else:
                yield entry

    def run(self, r):
        ip = celenv.parse_ip(r.traffic.conn.client_ip)
        allow = list(self._networks(r, "allow"))
        deny = list(self._networks(r, "deny"))
        error = None
        if self.ip_policies:
            conn = r.traffic.conn
            resolver = conn.ip_policy_resolver
            account_id = conn.endpoint.account_id
            for ident in self.ip_policies:
                rules = resolver(account_id, ident) if resolver and account_id else None
                if rules is None:
                    error = (
                        edge_errors.IP_POLICY_MISSING,
                        f"The policy {ident} does not exist on the endpoint's account",
                    )
                    continue
                for action, cidr in rules:
                    network = ip_rules.rule_network(cidr)
                    if network is None:
                        error = (
                            edge_errors.IP_POLICY_MISSING,
                            f"IP policy {ident} holds a bad CIDR",
                        )
                        continue
                    (allow if action == "allow" else deny).append(network)
        passed, matched = ip_rules.decide(ip, allow, deny)  # the one rule (core/ip_rules.py)
        allowed = error is None and passed
        r.set_vars(
            "restrict_ips",
            action="allow" if allowed else "deny",
            matched_cidr=str(matched) if matched else "",
            **{
                "error.code": error[0] if error else "",
                "error.message": error[1] if error else "",
            },
        )
        if allowed or not self.enforce:
            return None
        return Outcome(CLOSE) if r.phase == TCP else _blocked_response()


_DURATION = re.compile(r"^(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?$")


def parse_duration(text: str) -> Optional[int]:
    match = _DURATION.match(text.strip()) if isinstance(text, str) else None
    if not match or not any(match.groups()):
        return None
    h, m, s = (int(g or 0) for g in match.groups())
    return h * 3600 + m * 60 + s


class RateLimit(Action):
    type, phases = "rate-limit", (REQ,)
    fields = ("name", "enforce", "algorithm", "capacity", "rate", "bucket_key")

    def setup(self, c, phase):
        self.name = c.get("name", str, required=True)
        if not self.name or len(self.name) >= 1024:
            raise PolicyError(c.at("name"), "must be 1 to 1023 characters")
        self.enforce = c.get("enforce", bool, default=True)
        algorithm = c.get("algorithm", str, required=True)
        if algorithm != "sliding_window":
            raise PolicyError(c.at("algorithm"), "must be sliding_window")
        self.capacity = c.get("capacity", int, required=True)
        if not 1 <= self.capacity <= 2_000_000_000:
            raise PolicyError(c.at("capacity"), "must be from 1 to 2000000000")
        rate = c.get("rate", str, required=True)
        seconds = parse_duration(rate)
        if seconds is None or seconds % 10 or not 60 <= seconds <= 86400:
            raise PolicyError(
                c.at("rate"),
                "must be a duration from 60s to 24h, a multiple "
                "of 10 seconds (for example 60s, 90s, 10m)",
            )
        self.window = seconds
        keys = c.strings("bucket_key", required=True, max_items=10)
        self.keys = []
        for index, text in enumerate(keys):
            where = f"{c.at('bucket_key')}[{index}]"
            try:
                self.keys.append(celenv.compile_expression(text, phase, want_bool=False))
            except celenv.CelError as exc:
                raise PolicyError(where, f"bad CEL: {exc}") from None
        self.scope = ""  # set by the policy: its digest and this action's place

    def run(self, r):
        parts = []
        for program in self.keys:
            try:
                parts.append(celenv.to_text(program.evaluate(r.traffic)))
            except celenv.EvalError as exc:
                r.errors.append(f"rate-limit bucket_key {program.text}: {exc}")
                parts.append("")
        key = "|".join(parts)
        endpoint = r.traffic.conn.endpoint.id  # one endpoint's traffic never spends another's
        allowed, retry_after = ratelimit.LIMITER.hit(
            (self.scope, endpoint, key), self.capacity, self.window, r.clock()
        )
        r.set_vars(
            "rate_limit",
            bucket_key=key,
            limited=not allowed,
            **{"error.code": "", "error.message": ""},
        )
        if allowed or not self.enforce:
            return None
        return _respond(429, [("retry-after", str(retry_after))])


class BasicAuth(Action):
    type, phases, fields = "basic-auth", (REQ,), ("credentials", "realm", "enforce")

    def setup(self, c, phase):
        creds = c.get("credentials", list, required=True)
        if not creds:
            raise PolicyError(c.at("credentials"), "needs at least 1 entry")
        if len(creds) > 10:
            raise PolicyError(c.at("credentials"), f"has {len(creds)} entries; the limit is 10")
        self.credentials = []
        for index, text in enumerate(creds):
            where = f"{c.at('credentials')}[{index}]"
            if isinstance(text, dict):  # the docs' other form: {username, password}
                pair = Config(text, where, ("username", "password"))
                user = pair.get("username", str, required=True)
                password = pair.get("password", str, required=True)
                if ":" in user:
                    raise PolicyError(pair.at("username"), "must not contain ':'")
                text = f"{user}:{password}"
            elif not isinstance(text, str):
                raise PolicyError(
                    where,
                    "must be a 'username:password' string or a mapping with username and password",
                )
            template = Template(text, phase, where)
            if template.static is not None:
                user, sep, password = text.partition(":")
                if not sep or not user:
                    raise PolicyError(where, "must be username:password")
                if not 8 <= len(password) <= 128:
                    raise PolicyError(where, "the password must be 8 to 128 characters")
            self.credentials.append(template)
        self.realm = c.get("realm", str, default="ngrok")
        if len(self.realm) > 128 or not self.realm.isascii() or '"' in self.realm:
            raise PolicyError(c.at("realm"), "must be at most 128 ASCII characters, no '\"'")
        self.enforce = c.get("enforce", bool, default=True)

    def run(self, r):
        presented, username, authorized = False, "", False
        for value in r.traffic.req.get_header("authorization"):
            scheme, _, token = value.strip().partition(" ")
            if scheme.lower() != "basic":
                continue
            try:
                decoded = base64.b64decode(token.strip(), validate=True).decode("utf-8")
            except (ValueError, UnicodeDecodeError):
                continue
            presented = True
            user, _, password = decoded.partition(":")
            username = user
            for template in self.credentials:
                want_user, _, want_password = r.render(template).partition(":")
                ok_user = hmac.compare_digest(user.encode(), want_user.encode())
                ok_password = hmac.compare_digest(password.encode(), want_password.encode())
                if ok_user and ok_password:
                    authorized = True
            break
        r.set_vars(
            "basic_auth",
            **{
                "credentials.presented": presented,
                "credentials.username": username,
                "credentials.authorized": authorized,
            },
        )
        if authorized or not self.enforce:
            return None
        return _respond(
            401,
            [("www-authenticate", f'Basic realm="{self.realm}"'), ("content-type", "text/plain")],
            b"Unauthorized\n",
        )


# ---- webhooks -------------------------------------------------------------------------------


def _hmac_hex(secret: bytes, data: bytes, algo=hashlib.sha256) -> str:
    return hmac.new(secret, data, algo).hexdigest()


def _verify_github(req, body, secret, now):
    sig = (req.get_header("x-hub-signature-256") or [""])[0]
    return sig.startswith("sha256=") and hmac.compare_digest(sig[7:], _hmac_hex(secret, body))


def _verify_gitlab(req, body, secret, now):
    return hmac.compare_digest((req.get_header("x-gitlab-token") or [""])[0].encode(), secret)


def _verify_linear(req, body, secret, now):
    return hmac.compare_digest(
        (req.get_header("linear-signature") or [""])[0], _hmac_hex(secret, body)
    )


def _verify_generic(req, body, secret, now):
    sig = (req.get_header("x-signature-256") or [""])[0]
    return sig.startswith("sha256=") and hmac.compare_digest(sig[7:], _hmac_hex(secret, body))


def _verify_shopify(req, body, secret, now):
    sig = (req.get_header("x-shopify-hmac-sha256") or [""])[0]
    want = base64.b64encode(hmac.new(secret, body, hashlib.sha256).digest()).decode()
    return hmac.compare_digest(sig, want)


TOLERANCE = 300  # seconds a signed timestamp may differ from now (replay prevention)


def _fresh(ts: str, now: float) -> bool:
    return ts.isdigit() and abs(now - int(ts)) <= TOLERANCE


def _verify_stripe(req, body, secret, now):
    header = (req.get_header("stripe-signature") or [""])[0]
    fields: Dict[str, List[str]] = {}
    for item in header.split(","):
        key, _, value = item.strip().partition("=")
        fields.setdefault(key, []).append(value)
    ts = (fields.get("t") or [""])[0]
    if not _fresh(ts, now):
        return False
    want = _hmac_hex(secret, ts.encode() + b"." + body)
    return any(hmac.compare_digest(v, want) for v in fields.get("v1", []))


def _verify_slack(req, body, secret, now):
    ts = (req.get_header("x-slack-request-timestamp") or [""])[0]
    sig = (req.get_header("x-slack-signature") or [""])[0]
    if not _fresh(ts, now):
        return False
    return hmac.compare_digest(sig, "v0=" + _hmac_hex(secret, b"v0:" + ts.encode() + b":" + body))


def _verify_svix(req, body, secret, now):
    ident = (req.get_header("svix-id") or req.get_header("webhook-id") or [""])[0]
    ts = (req.get_header("svix-timestamp") or req.get_header("webhook-timestamp") or [""])[0]
    sigs = (req.get_header("svix-signature") or req.get_header("webhook-signature") or [""])[0]
    if not ident or not _fresh(ts, now):
        return False
    key = secret.decode()
    try:
        raw = base64.b64decode(key[6:] if key.startswith("whsec_") else key)
    except ValueError:
        return False
    want = base64.b64encode(
        hmac.new(raw, f"{ident}.{ts}.".encode() + body, hashlib.sha256).digest()
    ).decode()
    return any(
        hmac.compare_digest(part.partition(",")[2], want)
        for part in sigs.split()
        if part.startswith("v1,")
    )


PROVIDERS = {
    "github": _verify_github,
    "gitlab": _verify_gitlab,
    "stripe": _verify_stripe,
    "slack": _verify_slack,
    "shopify": _verify_shopify,
    "svix": _verify_svix,
    "clerk": _verify_svix,
    "linear": _verify_linear,
    "generic_sha256": _verify_generic,
}


class VerifyWebhook(Action):
    type, phases, fields = "verify-webhook", (REQ,), ("provider", "secret", "enforce")
    needs_body = MAX_WEBHOOK_BODY

    def setup(self, c, phase):
        provider = c.get("provider", str, required=True)
        if provider not in PROVIDERS:
            raise PolicyError(
                c.at("provider"),
                f"provider '{provider[:64]}' is not supported "
                f"by this service; supported: "
                f"{', '.join(sorted(PROVIDERS))}",
            )
        self.verify = PROVIDERS[provider]
        self.secret = c.template("secret", phase, required=True)
        self.enforce = c.get("enforce", bool, default=True)

    def run(self, r):
        req = r.traffic.req
        if req.body is None:
            return Outcome(NEED_BODY, max_body_bytes=self.needs_body)
        error = ("", "")
        if not req.body_complete:
            verified = False
            error = (
                edge_errors.WEBHOOK_REFUSED,
                f"the body is larger than {self.needs_body} bytes",
            )
        else:
            secret = r.render(self.secret).encode()
            verified = bool(self.verify(req, req.body, secret, r.clock()))
            if not verified:
                error = (edge_errors.WEBHOOK_REFUSED, "the webhook signature is not valid")
        r.set_vars(
            "verify_webhook",
            verified=verified,
            **{"error.code": error[0], "error.message": error[1]},
        )
        if verified or not self.enforce:
            return None
        return _respond(403, [])


# ---- JWT --------------------------------------------------------------------------------------


class _Jwks:
    """JWKS documents by URL, fetched on first use and kept 15 minutes (the hosted docs'
    refresh period); a fetch that failed is remembered FAILED_TTL, and its URL not fetched
    again meanwhile (its requests are refused as keys unavailable), so a URL that hangs or
    fails costs the edge one fetch per FAILED_TTL however many requests name it. The edge
    fetches off its event loop: jwt-validation asks for the URLs not known (``missing``) with
    a NEED_KEYS outcome, and the edge runs :meth:`fetch` on a thread of its own. At most
    MAX_URLS documents and failures are kept (a templated URL may render per request), the
    oldest let go first. ``fetcher(url) -> bytes`` may be replaced (tests)."""

    TTL = 900
    FAILED_TTL = 30.0
    MAX_URLS = 1024

    def __init__(self):
        self.cache: Dict[str, Tuple[float, dict]] = {}
        self.failed: Dict[str, float] = {}
        self.lock = threading.Lock()
        self.fetcher: Callable[[str], bytes] = self._fetch

    def _known(self, url: str, now: float) -> Optional[dict]:
        """The document kept for ``url``, {} for a recent failure, None when neither
        (called under the lock)."""
        hit = self.cache.get(url)
        if hit and now - hit[0] < self.TTL:
            return hit[1]
        failed = self.failed.get(url)
        if failed is not None and now - failed < self.FAILED_TTL:
            return {}
        return None

    def missing(self, urls: List[str], now: float) -> List[str]:
        """Those of ``urls`` to fetch before a run can use them."""
        with self.lock:
            return [url for url in dict.fromkeys(urls) if self._known(url, now) is None]

    def fetch(self, url: str, now: float) -> None:
        """Fetch ``url`` (blocking: up to the fetcher's 3 s) and keep what came, or that it
        failed."""
        try:
            document = json.loads(self.fetcher(url))
            if not isinstance(document, dict):
                raise ValueError("a JWKS is a JSON object")
        except Exception:  # whatever failed, the run sees keys unavailable
            document = None
        with self.lock:
            self.cache.pop(url, None)
            self.failed.pop(url, None)
            if document is not None:
                self.cache[url] = (now, document)
            else:
                self.failed[url] = now
            for kept in (self.cache, self.failed):
                while len(kept) > self.MAX_URLS:
                    kept.pop(next(iter(kept)))

    @staticmethod
    def _fetch(url: str) -> bytes:
        import urllib.request

        if not url.startswith(("http://", "https://")):
            raise ValueError("a JWKS URL must be http or https")
        with urllib.request.urlopen(url, timeout=3) as response:  # noqa: S310 (checked above)
            return response.read(1 << 20)

    def get(self, url: str, now: float) -> dict:
        """The document for ``url``, fetched here when the caller did not fetch it first;
        OSError when its fetch failed."""
        with self.lock:
            known = self._known(url, now)
        if known is None:
            self.fetch(url, now)
            with self.lock:
                known = self._known(url, now)
        if not known:
            raise OSError(f"the JWKS at {url} could not be fetched")
        return known


JWKS = _Jwks()
_JWT_ALGORITHMS = (
    "RS256",
    "RS384",
    "RS512",
    "PS256",
    "PS384",
    "PS512",
    "ES256",
    "ES384",
    "ES512",
    "EdDSA",
    "HS256",
    "HS384",
    "HS512",
)
_TOKEN_TYPES = ("id_token", "access_token", "at+jwt", "it+jwt", "plain", "jwt")


class JwtValidation(Action):
    type, phases, fields = "jwt-validation", (REQ,), ("issuer", "audience", "http", "jws")

    def setup(self, c, phase):
        issuer = Config(c.get("issuer", dict, required=True), c.at("issuer"), ("allow_list",))
        self.issuers = self._allow_list(issuer, phase, required=True)
        audience = Config(c.get("audience", dict, default={}), c.at("audience"), ("allow_list",))
        self.audiences = self._allow_list(audience, phase, required=False)
        http = Config(c.get("http", dict, required=True), c.at("http"), ("tokens",))
        tokens = http.get("tokens", list, required=True)
        if not tokens:
            raise PolicyError(http.at("tokens"), "needs at least 1 token")
        self.tokens = []
        for index, token in enumerate(tokens):
            where = f"{http.at('tokens')}[{index}]"
            if not isinstance(token, dict):
                raise PolicyError(where, "must be a mapping")
            t = Config(token, where, ("type", "method", "name", "prefix"))
            kind = t.get("type", str, required=True)
            if kind not in _TOKEN_TYPES:
                raise PolicyError(t.at("type"), f"must be one of {', '.join(_TOKEN_TYPES)}")
            method = t.get("method", str, required=True)
            if method not in ("header", "body"):
                raise PolicyError(t.at("method"), "must be header or body")
            if method == "body":
                self.needs_body = MAX_WEBHOOK_BODY
            self.tokens.append(
                (method, t.template("name", phase, required=True), t.template("prefix", phase))
            )
        jws = Config(
            c.get("jws", dict, required=True), c.at("jws"), ("allowed_algorithms", "keys")
        )
        self.algorithms = jws.strings("allowed_algorithms", required=True)
        for index, name in enumerate(self.algorithms):
            if name not in _JWT_ALGORITHMS:
                raise PolicyError(
                    f"{jws.at('allowed_algorithms')}[{index}]",
                    f"'{name[:32]}' is not supported; accepted: {', '.join(_JWT_ALGORITHMS)}",
                )
        keys = Config(jws.get("keys", dict, required=True), jws.at("keys"), ("sources", "jwks"))
        sources = Config(
            keys.get("sources", dict, default={}), keys.at("sources"), ("additional_jkus",)
        )
        self.jkus = []
        for index, url in enumerate(sources.strings("additional_jkus")):
            where = f"{sources.at('additional_jkus')}[{index}]"
            template = Template(url, phase, where)
            if template.static is not None and not _is_http_url(url):
                raise PolicyError(where, "must be an http or https URL")
            self.jkus.append(template)
        self.inline = keys.get("jwks", dict)
        self._inline_set = None  # the inline JWKS's PyJWT keys, built on first use (edge)
        if self.inline is not None:
            try:  # pure Python: the API compiles policies without PyJWT or cryptography
                jwks.check(self.inline)
            except jwks.JwksError as exc:
                raise PolicyError(keys.at("jwks"), f"is not a usable JWKS ({exc})") from None
        if not self.jkus and self.inline is None:
            raise PolicyError(keys.where, "needs sources.additional_jkus or jwks")

    @staticmethod
    def _allow_list(c: Config, phase: str, required: bool) -> List[Template]:
        entries = c.get("allow_list", list, required=required, default=[])
        if required and not entries:
            raise PolicyError(c.at("allow_list"), "needs at least 1 entry")
        out = []
        for index, entry in enumerate(entries):
            where = f"{c.at('allow_list')}[{index}]"
            if not isinstance(entry, dict):
                raise PolicyError(where, "must be a mapping with 'value'")
            e = Config(entry, where, ("value",))
            value = e.template("value", phase, required=True)
            assert value is not None  # required: a missing value raised PolicyError
            out.append(value)
        return out

    @staticmethod
    def _keyset(document: dict, where: str):
        import jwt

        try:
            return jwt.PyJWKSet.from_dict(document)
        except (jwt.PyJWTError, ValueError, KeyError, TypeError) as exc:
            raise PolicyError(where, f"is not a usable JWKS ({exc})") from None

    def _token(self, r) -> Optional[str]:
        req = r.traffic.req
        for method, name_t, prefix_t in self.tokens:
            name = r.render(name_t)
            prefix = r.render(prefix_t) if prefix_t else ""
            if method == "header":
                values = req.get_header(name)
            else:
                values = _body_field(req, name)
            for value in values:
                if prefix and value[: len(prefix)].lower() == prefix.lower():
                    value = value[len(prefix) :]
                elif prefix:
                    continue
                if value.strip():
                    return value.strip()
        return None

    def run(self, r):
        import jwt

        if (
            self.needs_body
            and r.traffic.req.body is None
            and r.traffic.req.method in ("POST", "PUT", "PATCH")
        ):
            return Outcome(NEED_BODY, max_body_bytes=self.needs_body)
        token = self._token(r)
        error = None
        if token is not None and self.jkus:
            # the keys' documents not known yet are fetched by the edge, off its event loop,
            # and the action run again
            missing = JWKS.missing([r.render(t) for t in self.jkus], r.clock())
            if missing:
                return Outcome(NEED_KEYS, urls=missing)
        if token is None:
            error = (edge_errors.JWT_MISSING, "no JWT was presented")
        else:
            try:
                header = jwt.get_unverified_header(token)
                key = self._key(header, r)
                issuers = [r.render(t) for t in self.issuers]
                audiences = [r.render(t) for t in self.audiences]
                jwt.decode(
                    token,
                    key=key,
                    algorithms=self.algorithms,
                    issuer=issuers,
                    audience=audiences or None,
                    options={"verify_aud": bool(audiences), "require": ["exp"]},
                )
            except _KeysUnavailable:
                error = (edge_errors.JWKS_UNAVAILABLE, "the signing keys could not be fetched")
            except (jwt.PyJWTError, ValueError, KeyError) as exc:
                error = (edge_errors.JWT_INVALID, f"the JWT is not valid ({exc})")
        r.set_vars(
            "jwt_validation",
            **{
                "error.code": error[0] if error else "",
                "error.message": error[1] if error else "",
            },
        )
        if error is None:
            return None
        return _respond(
            401,
            [("www-authenticate", 'Bearer error="invalid_token"'), ("content-type", "text/plain")],
            b"Unauthorized\n",
        )

    def _key(self, header: dict, r):
        kid = header.get("kid")
        sets = []
        if self.inline is not None:
            if self._inline_set is None:
                self._inline_set = self._keyset(self.inline, "jwks")
            sets.append(self._inline_set)
        for template in self.jkus:
            url = r.render(template)
            try:  # what a fetch or parse failed on is not echoed (the URL may be internal)
                sets.append(self._keyset(JWKS.get(url, r.clock()), "jwks"))
            except (OSError, ValueError, PolicyError):
                raise _KeysUnavailable() from None
        for keyset in sets:
            for key in keyset.keys:
                if kid is None or key.key_id == kid:
                    return key
        raise KeyError(f"no key with kid {kid!r}")


class _KeysUnavailable(Exception):
    pass


def _is_http_url(url: str) -> bool:
    from urllib.parse import urlsplit

    try:
        parts = urlsplit(url)
    except ValueError:
        return False
    return parts.scheme in ("http", "https") and bool(parts.netloc)


def _body_field(req, name: str) -> List[str]:
    if not req.body or not req.body_complete:
        return []
    media = (req.get_header("content-type") or [""])[0].split(";")[0].strip().lower()
    text = req.body.decode("utf-8", "replace")
    if media == "application/json":
        try:
            value = json.loads(text).get(name)
        except (ValueError, AttributeError):
            return []
        return [value] if isinstance(value, str) else []
    if media == "application/x-www-form-urlencoded":
        from urllib.parse import parse_qs

        return parse_qs(text).get(name, [])
    return []


# ---- response, variables, logs, forwarding --------------------------------------------------


class CompressResponse(Action):
    type, phases, fields = "compress-response", (RES,), ("algorithms",)
    KNOWN = ("br", "compress", "deflate", "gzip")

    def setup(self, c, phase):
        from chalicelib.core.policy import compress

        names = c.strings("algorithms") or list(self.KNOWN)
        for index, name in enumerate(names):
            if name not in self.KNOWN:
                raise PolicyError(
                    f"{c.at('algorithms')}[{index}]", f"must be one of {', '.join(self.KNOWN)}"
                )
        if len(set(names)) != len(names):
            raise PolicyError(c.at("algorithms"), "each algorithm may appear once")
        self.algorithms = [n for n in names if n in compress.AVAILABLE]

    def run(self, r):
        from chalicelib.core.policy import compress

        req, res = r.traffic.req, r.traffic.res
        already = (
            bool(res.get_header("content-encoding"))
            and res.get_header("content-encoding")[0].lower() != "identity"
        )
        algorithm = (
            ""
            if already
            else compress.negotiate(",".join(req.get_header("accept-encoding")), self.algorithms)
        )
        r.set_vars("compress", already_compressed=already, negotiated_algorithm=algorithm)
        if (
            not algorithm
            or res.status_code in (204, 304)
            or res.status_code < 200
            or req.method == "HEAD"
        ):
            return None
        res.remove_header("content-length")
        res.remove_header("content-encoding")
        res.headers.append(("content-encoding", algorithm))
        vary = res.get_header("vary")
        if not any("accept-encoding" in v.lower() for v in vary):
            res.headers.append(("vary", "Accept-Encoding"))
        r.traffic.invalidate()
        r.outcome.compressor = compress.Compressor(algorithm)
        return None


def _bytes_regex(pattern: str, where: str):
    try:
        return re2.compile(pattern.encode("utf-8"), _RE2_OPTIONS)
    except re2.error as exc:
        reason = exc.args[0].decode() if exc.args and isinstance(exc.args[0], bytes) else str(exc)
        raise PolicyError(where, f"is not a valid regular expression ({reason})") from None


def _bytes_replacement(to: str) -> Callable[[Any], bytes]:
    """go_replacement over bytes: the matched groups are bytes, the template UTF-8."""
    expand = go_replacement(to.encode("utf-8").decode("latin-1"))

    def bytes_expand(match) -> bytes:
        return expand(_Latin1Match(match)).encode("latin-1")

    return bytes_expand


class _Latin1Match:
    """A bytes match whose groups read as latin-1 text (one character a byte), so that
    go_replacement's text expansion round-trips every byte."""

    __slots__ = ("match",)

    def __init__(self, match) -> None:
        self.match = match

    def group(self, ref):
        value = self.match.group(ref)
        return None if value is None else value.decode("latin-1")


class RewriteTooLarge(ValueError):
    """A find-replace rule whose result would pass its bound (a small match replaced by a
    long ``to``, or ``$0`` many times, grows a body without limit otherwise)."""


def bounded_sub(regex, replacement: Callable[[Any], bytes], value: bytes, limit: int) -> bytes:
    """``regex.sub(replacement, value)`` built piece by piece; RewriteTooLarge as soon as
    the result passes ``limit`` bytes (never more than ``limit`` plus one piece is held)."""
    out: List[bytes] = []
    size = 0
    last = 0
    for match in regex.finditer(value):
        piece = replacement(match)
        out.append(value[last : match.start()])
        out.append(piece)
        size += match.start() - last + len(piece)
        last = match.end()
        if size > limit:
            raise RewriteTooLarge(f"the rewritten text would be longer than {limit} bytes")
    out.append(value[last:])
    size += len(value) - last
    if size > limit:
        raise RewriteTooLarge(f"the rewritten text would be longer than {limit} bytes")
    return b"".join(out)


def _replacement_rules(
    c: "Config", phase: str, keys: Tuple[str, ...], before: Optional[Callable[[Any], Any]] = None
) -> List[Tuple[Any, Any, Any, Any]]:
    """The ``replacements`` of a find-replace action (request-/response-body-find-replace,
    sse-find-replace): 1…MAX_REPLACEMENTS mappings of ``keys``, each with a non-empty
    ``from`` (RE2; compiled now when it holds no CEL) and an optional ``to``. Per entry
    ``(before(entry) or None, from, the compiled from or None, to)``: ``before`` checks the
    action's own fields of the entry first (sse-find-replace's ``field``)."""
    entries = c.get("replacements", list, required=True)
    if not entries:
        raise PolicyError(c.at("replacements"), "needs at least 1 replacement")
    if len(entries) > MAX_REPLACEMENTS:
        raise PolicyError(
            c.at("replacements"),
            f"has {len(entries)} replacements; the limit is {MAX_REPLACEMENTS}",
        )
    shape = ", ".join(k for k in keys if k != "from")
    rules = []
    for index, entry in enumerate(entries):
        where = f"{c.at('replacements')}[{index}]"
        if not isinstance(entry, dict):
            raise PolicyError(where, f"must be a mapping with from (and {shape})")
        one = Config(entry, where, keys)
        head = before(one) if before is not None else None
        from_ = one.template("from", phase, required=True)
        assert from_ is not None  # required: a missing one raised
        if from_.static == "":
            raise PolicyError(one.at("from"), "must not be empty")
        static = None if from_.static is None else _bytes_regex(from_.static, one.at("from"))
        rules.append((head, from_, static, one.template("to", phase)))
    return rules


class _BodyFindReplace(Action):
    fields = ("replacements",)

    def setup(self, c, phase):
        self.rules = [
            (from_, static, to)
            for _, from_, static, to in _replacement_rules(c, phase, ("from", "to"))
        ]

    def rewriter(self, r) -> Callable[[bytes], bytes]:
        """The rules with their CEL rendered now: a function of the body."""
        ready = []
        for from_, static, to in self.rules:
            regex = static
            if regex is None:
                try:
                    regex = _bytes_regex(r.render(from_), "from")
                except PolicyError as exc:
                    r.errors.append(f"{self.type}: {exc.message}; rule skipped")
                    continue
            ready.append((regex, _bytes_replacement(r.render(to) if to is not None else "")))

        def rewrite(body: bytes) -> bytes:
            """RewriteTooLarge past MAX_REWRITTEN_BODY (the caller refuses the message)."""
            for regex, replacement in ready:
                body = bounded_sub(regex, replacement, body, MAX_REWRITTEN_BODY)
            return body

        return rewrite


def _duration(c: Config, key: str, default: int, low: int, high: int) -> int:
    text = c.get(key, str)
    if text is None:
        return default
    seconds = parse_duration(text)
    if seconds is None or not low <= seconds <= high:
        raise PolicyError(c.at(key), f"must be a duration from {low}s to {high // 60}m")
    return seconds


class CircuitBreaker(Action):
    """One breaker per (action, endpoint) (chalicelib/core/policy/breaker.py): while tripped,
    503 ERR_NGROK_3202 and the request goes no further; otherwise the request goes on and
    its response's status is counted (the edge records it: ``Outcome.breakers``)."""

    type, phases = "circuit-breaker", (REQ,)
    fields = (
        "error_threshold",
        "volume_threshold",
        "window_duration",
        "tripped_duration",
        "num_buckets",
        "enforce",
    )

    def setup(self, c, phase):
        from chalicelib.core.policy import breaker

        threshold = c.get("error_threshold", (int, float), default=0.5)
        if isinstance(threshold, bool) or not 0.0 <= threshold <= 1.0:
            raise PolicyError(c.at("error_threshold"), "must be a number from 0.0 to 1.0")
        self.threshold = float(threshold)
        self.volume = c.get("volume_threshold", int, default=breaker.VOLUME)
        if not 1 <= self.volume <= 2_000_000_000:
            raise PolicyError(c.at("volume_threshold"), "must be from 1 to 2000000000")
        self.window = _duration(c, "window_duration", int(breaker.WINDOW), 1, 120)
        self.tripped = _duration(c, "tripped_duration", int(breaker.TRIPPED), 1, 120)
        buckets = c.get("num_buckets", int, default=breaker.BUCKETS)
        if buckets != breaker.BUCKETS:
            raise PolicyError(c.at("num_buckets"), f"is fixed at {breaker.BUCKETS}")
        self.enforce = c.get("enforce", bool, default=True)
        self.scope = ""  # set by the policy: its digest and this action's place

    def run(self, r):
        from chalicelib.core.policy import breaker

        found = breaker.BREAKERS.get(
            (self.scope, r.traffic.conn.endpoint.id),
            lambda: breaker.Breaker(self.threshold, self.volume, self.window, self.tripped),
        )
        now = r.clock()
        if self.enforce and not found.allow(now):
            return _respond(
                503,
                [
                    ("content-type", "text/plain; charset=utf-8"),
                    ("ngrok-error-code", edge_errors.CIRCUIT_BREAKER_TRIPPED),
                ],
                b"Circuit breaker tripped: the endpoint's upstream answered too many 5xx "
                b"responses; try again later.\n",
            )
        r.outcome.breakers.append((found, r.clock))
        return None


class RequestBodyFindReplace(_BodyFindReplace):
    type, phases = "request-body-find-replace", (REQ,)
    needs_body = MAX_FIND_REPLACE_BODY

    def run(self, r):
        req = r.traffic.req
        if req.method == "HEAD":
            return None
        if req.body is None:
            return Outcome(NEED_BODY, max_body_bytes=self.needs_body)
        if not req.body_complete:
            body = (
                f"The request body is larger than the {self.needs_body} bytes "
                "request-body-find-replace can rewrite.\n"
            ).encode()
            return _respond(
                413,
                [
                    ("content-type", "text/plain; charset=utf-8"),
                    ("ngrok-error-code", edge_errors.BODY_TOO_LARGE),
                ],
                body,
            )
        try:
            rewritten = self.rewriter(r)(req.body)
        except RewriteTooLarge as exc:
            return _respond(
                413,
                [
                    ("content-type", "text/plain; charset=utf-8"),
                    ("ngrok-error-code", edge_errors.BODY_TOO_LARGE),
                ],
                f"request-body-find-replace: {exc}.\n".encode(),
            )
        if rewritten != req.body:
            req.body = rewritten
            req.body_rewritten = True
            req.remove_header("transfer-encoding")
            req.set_header("content-length", str(len(rewritten)))
            r.traffic.invalidate()
        return None


class ResponseBodyFindReplace(_BodyFindReplace):
    type, phases = "response-body-find-replace", (RES,)

    def run(self, r):
        req, res = r.traffic.req, r.traffic.res
        if req.method == "HEAD" or res.status_code in (204, 304) or res.status_code < 200:
            return None
        r.outcome.rewrites.append(self.rewriter(r))
        return None


class SseFindReplace(Action):
    """Per message of a text/event-stream response (chalicelib/core/policy/sse.py): RE2 rules
    in order on the ``data`` (its lines joined with LF) or ``retry`` field, every match,
    Go's ``$1`` / ``$name`` / ``$$``; the message goes on rewritten as it came, never the
    stream held (a message longer than sse.MAX_EVENT ends the response: never passed on
    unrewritten). ``actions.ngrok.sse_find_replace.replacements`` lists the rules that
    matched (``replacement_index``, ``matched_content``: the first match)."""

    type, phases, fields = "sse-find-replace", (SSE,), ("replacements",)
    FIELDS = ("data", "retry")

    def setup(self, c, phase):
        def field_of(one):
            field = one.template("field", phase)
            if field is not None and field.static is not None and field.static not in self.FIELDS:
                raise PolicyError(one.at("field"), "must be data or retry")
            return field

        self.rules = _replacement_rules(c, phase, ("field", "from", "to"), field_of)

    def run(self, r):
        from chalicelib.core.policy import sse

        message = r.outcome.message
        if message is None:
            return None
        matched = []
        for index, (field_t, from_, static, to) in enumerate(self.rules):
            field = r.render(field_t) if field_t is not None else "data"
            if field not in self.FIELDS:
                r.errors.append(
                    f"{self.type}: field '{field[:32]}' is not data or retry; rule skipped"
                )
                continue
            value = message.field(field.encode())
            if value is None:
                continue
            regex = static
            if regex is None:
                try:
                    regex = _bytes_regex(r.render(from_), "from")
                except PolicyError as exc:
                    r.errors.append(f"{self.type}: {exc.message}; rule skipped")
                    continue
            found = regex.search(value)
            if found is None:
                continue
            matched.append(
                {
                    "replacement_index": index,
                    "matched_content": found.group(0).decode("utf-8", "replace"),
                }
            )
            replacement = _bytes_replacement(r.render(to) if to is not None else "")
            try:
                rewritten = bounded_sub(regex, replacement, value, sse.MAX_EVENT)
            except RewriteTooLarge as exc:  # the stream ends: never passed on unrewritten
                raise sse.TooLarge(f"{self.type}: {exc}") from None
            message.set_field(field.encode(), rewritten)
        r.set_vars("sse_find_replace", replacements=matched)
        return None


class _OwaspCrs(Action):
    """The OWASP Core Rule Set (chalicelib/core/policy/waf.py: engine, rules, settings). A
    score at or above the threshold is ``deny``: with ``on_error: halt`` (the default) a 403
    ERR_NGROK_3700 and nothing goes further; with ``continue`` only the variables say so
    (the hosted "test mode"). An engine that cannot run here is an error: 500 with halt."""

    fields = ("on_error", "process_body", "exclude_rule_ids")
    var = ""
    noun = ""

    def setup(self, c, phase):
        from chalicelib.core.policy import waf

        self.on_error = c.get("on_error", str, default="halt")
        if self.on_error not in ("continue", "halt"):
            raise PolicyError(c.at("on_error"), "must be continue or halt")
        self.process_body = c.get("process_body", bool, default=False)
        ids = c.get("exclude_rule_ids", list, default=[])
        if len(ids) > waf.MAX_EXCLUDED:
            raise PolicyError(
                c.at("exclude_rule_ids"),
                f"has {len(ids)} entries; the limit is {waf.MAX_EXCLUDED}",
            )
        for index, rule_id in enumerate(ids):
            if (
                isinstance(rule_id, bool)
                or not isinstance(rule_id, int)
                or not waf.RULE_ID_MIN <= rule_id <= waf.RULE_ID_MAX
            ):
                raise PolicyError(
                    f"{c.at('exclude_rule_ids')}[{index}]",
                    f"must be a rule id from {waf.RULE_ID_MIN} to {waf.RULE_ID_MAX}",
                )
        self.excluded = tuple(sorted(set(ids)))

    def verdict(self, r, inspect) -> Optional[Outcome]:
        """Run ``inspect`` (a function of nothing returning a waf.Verdict), set the
        variables, and answer when the policy should end here."""
        from chalicelib.core.policy import waf

        try:
            found = inspect()
        except waf.Unavailable as exc:
            r.set_vars(
                self.var,
                **{"error.code": edge_errors.POLICY_FAILED, "error.message": str(exc)},
            )
            r.errors.append(f"{self.type}: {exc}")
            if self.on_error != "halt":
                return None
            return _respond(
                500,
                [
                    ("content-type", "text/plain; charset=utf-8"),
                    ("ngrok-error-code", edge_errors.POLICY_FAILED),
                ],
                f"The {self.noun} could not be inspected: {exc}.\n".encode(),
            )
        r.set_vars(
            self.var,
            decision=found.decision,
            anomaly_score=found.score,
            anomaly_score_threshold=found.threshold,
            matched_rules=found.matched,
        )
        if found.decision == "deny" and self.on_error == "halt":
            return _respond(
                403,
                [
                    ("content-type", "text/plain; charset=utf-8"),
                    ("ngrok-error-code", edge_errors.WAF_BLOCKED),
                ],
                f"The {self.noun} was blocked by the WAF.\n".encode(),
            )
        return None


class OwaspCrsRequest(_OwaspCrs):
    type, phases, var, noun = "owasp-crs-request", (REQ,), "owasp_crs_request", "request"

    def setup(self, c, phase):
        from chalicelib.core.policy import waf

        super().setup(c, phase)
        self.needs_body = waf.BODY_LIMIT if self.process_body else 0

    def run(self, r):
        from chalicelib.core.policy import waf

        req = r.traffic.req
        if self.process_body and req.body is None:
            return Outcome(NEED_BODY, max_body_bytes=self.needs_body)
        body = req.body if self.process_body else None
        return self.verdict(
            r, lambda: waf.inspect_request(r.traffic.conn, req, self.excluded, body)
        )


class OwaspCrsResponse(_OwaspCrs):
    """With ``process_body`` the edge holds the response head until it has the first 4 KiB
    of the body (or all of a shorter one): :meth:`body_check`, run then; the variables of the
    actions after it in the phase see the verdict on the head alone."""

    type, phases, var, noun = "owasp-crs-response", (RES,), "owasp_crs_response", "response"

    def run(self, r):
        from chalicelib.core.policy import waf

        t = r.traffic
        if not self.process_body:
            return self.verdict(
                r, lambda: waf.inspect_response(t.conn, t.req, t.res, self.excluded, None)
            )
        conn, req, res = t.conn, t.req, t.res

        def body_check(body: bytes) -> Optional[Outcome]:
            found = self.verdict(
                r, lambda: waf.inspect_response(conn, req, res, self.excluded, body)
            )
            return found

        r.outcome.body_checks.append(body_check)
        return None


def check_request_url(url: str, where: str) -> Tuple[str, str]:
    """(scheme, host) of an http-request URL: http or https with a host; else PolicyError."""
    from urllib.parse import urlsplit

    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
        parts.port  # noqa: B018 (raises on a bad port)
    except ValueError:
        raise PolicyError(where, f"'{url[:128]}' is not a URL") from None
    if parts.scheme not in ("http", "https") or not host:
        raise PolicyError(where, f"'{url[:128]}' must be an http:// or https:// URL with a host")
    return parts.scheme, host


class HttpRequest(Action):
    """An outbound HTTP request (chalicelib/core/policy/httpcall.py: bounds, destinations,
    variables). ``run`` renders the call and pauses the phase (HTTP_REQUEST); the edge
    makes it, sets ``actions.ngrok.http_request.*`` and resumes after the action. With
    ``on_error: halt`` a failed call ends the phase with :meth:`halted`."""

    type, phases = "http-request", (REQ, RES)
    fields = (
        "url",
        "method",
        "query_params",
        "headers",
        "body",
        "max_redirects",
        "timeout",
        "retry_condition",
        "on_error",
    )

    def setup(self, c, phase):
        from chalicelib.core.policy import celenv, httpcall

        self.url = c.template("url", phase, required=True)
        if self.url.static is not None:
            check_request_url(self.url.static, c.at("url"))
        self.method = c.get("method", str, default="GET")
        if self.method not in httpcall.METHODS:
            raise PolicyError(c.at("method"), f"must be one of {', '.join(httpcall.METHODS)}")
        params = c.get("query_params", list, default=[])
        if len(params) > httpcall.MAX_QUERY_PARAMS:
            raise PolicyError(
                c.at("query_params"),
                f"has {len(params)} entries; the limit is {httpcall.MAX_QUERY_PARAMS}",
            )
        self.query = []
        for index, entry in enumerate(params):
            where = f"{c.at('query_params')}[{index}]"
            if not isinstance(entry, dict):
                raise PolicyError(where, "must be a mapping with key and value")
            one = Config(entry, where, ("key", "value"))
            key = one.get("key", str, required=True)
            if not 1 <= len(key) <= httpcall.MAX_QUERY_KEY:
                raise PolicyError(
                    one.at("key"), f"must be 1 to {httpcall.MAX_QUERY_KEY} characters"
                )
            value = one.get("value", str, default="")
            if len(value) > httpcall.MAX_QUERY_VALUE:
                raise PolicyError(
                    one.at("value"), f"is longer than {httpcall.MAX_QUERY_VALUE} characters"
                )
            self.query.append((key, Template(value, phase, one.at("value"))))
        self.headers = c.headers("headers", phase)
        self.body = c.template("body", phase)
        self.max_redirects = c.get("max_redirects", int, default=0)
        if not 0 <= self.max_redirects <= httpcall.MAX_REDIRECTS:
            raise PolicyError(c.at("max_redirects"), f"must be from 0 to {httpcall.MAX_REDIRECTS}")
        text = c.get("timeout", str)
        self.timeout = httpcall.TIMEOUT_DEFAULT
        if text is not None:
            seconds = parse_duration(text)
            if seconds is None or not httpcall.TIMEOUT_MIN <= seconds <= httpcall.TIMEOUT_MAX:
                raise PolicyError(
                    c.at("timeout"),
                    f"must be a duration from {httpcall.TIMEOUT_MIN}s to {httpcall.TIMEOUT_MAX}s",
                )
            self.timeout = seconds
        retry = c.get("retry_condition", str)
        self.retry = None
        if retry is not None and retry.strip() not in ("", "false"):
            try:
                self.retry = celenv.compile_expression(retry, httpcall.RETRY_PHASE)
            except celenv.CelError as exc:
                raise PolicyError(c.at("retry_condition"), f"bad CEL: {exc}") from None
        self.on_error = c.get("on_error", str, default="continue")
        if self.on_error not in ("continue", "halt"):
            raise PolicyError(c.at("on_error"), "must be continue or halt")

    def run(self, r):
        from urllib.parse import urlencode

        from chalicelib.core.policy import httpcall

        url = r.render(self.url)
        failure = None
        try:
            check_request_url(url, "url")
        except PolicyError as exc:
            failure = exc.message
        if self.query and failure is None:
            pairs = []
            for key, template in self.query:
                value = r.render(template)
                if len(value) > httpcall.MAX_QUERY_VALUE:
                    failure = f"query_params {key}: the value is longer than {httpcall.MAX_QUERY_VALUE} characters"
                    break
                pairs.append((key, value))
            url += ("&" if "?" in url else "?") + urlencode(pairs)
        headers = []
        for name, template in self.headers:
            value = _safe_value(r.render(template), name, r.errors)
            if value is not None:
                headers.append((name, value))
        body = r.render(self.body).encode("utf-8") if self.body is not None else b""
        if len(body) > httpcall.MAX_REQUEST_BODY:
            failure = f"the body is {len(body)} bytes; the limit is {httpcall.MAX_REQUEST_BODY}"
        state = r.state
        if state is not None:
            state.http_requests += 1
            if state.http_requests > httpcall.MAX_PER_REQUEST and failure is None:
                failure = (
                    f"more than {httpcall.MAX_PER_REQUEST} http-request actions for one request"
                )
        req = r.traffic.req
        hops = 0
        for value in req.get_header(httpcall.HOPS_HEADER) if req is not None else []:
            hops = int(value) if value.strip().isdigit() else httpcall.MAX_HOPS
        if hops >= httpcall.MAX_HOPS and failure is None:
            failure = (
                f"the request already came through {hops} http-request calls (loop protection)"
            )
        call = httpcall.Call(
            method=self.method,
            url=url,
            headers=headers,
            body=body,
            timeout=float(self.timeout),
            max_redirects=self.max_redirects,
            on_error=self.on_error,
            retry=self.retry,
            hops=hops + 1,
            client_ip=r.traffic.conn.client_ip if r.traffic.conn is not None else "",
            errors=r.errors,
        )
        if failure is not None:
            values = httpcall.result_vars(
                httpcall.request_record(call, url),
                None,
                [],
                (edge_errors.POLICY_FAILED, failure),
            )
            for key, value in values.items():
                r.set_vars("http_request", **{key: value})
            r.errors.append(f"http-request: {failure}")
            return self.halted(failure) if self.on_error == "halt" else None
        return Outcome(HTTP_REQUEST, call=call)

    @staticmethod
    def halted(message: str) -> Outcome:
        """on_error halt: the phase ends with the hosted "error while processing policy
        action" (502 ERR_NGROK_2300)."""
        return _respond(
            502,
            [
                ("content-type", "text/plain; charset=utf-8"),
                ("ngrok-error-code", edge_errors.POLICY_FAILED),
            ],
            f"The http-request action failed: {message}\n".encode(),
        )


def _value_templates(value: Any, phase: str, where: str) -> Any:
    if isinstance(value, str):
        return Template(value, phase, where)
    if isinstance(value, list):
        return [_value_templates(v, phase, f"{where}[{i}]") for i, v in enumerate(value)]
    if isinstance(value, dict):
        return {k: _value_templates(v, phase, f"{where}.{k}") for k, v in value.items()}
    return value


def _value_render(value: Any, r) -> Any:
    if isinstance(value, Template):
        return value.value(r.traffic, r.errors)
    if isinstance(value, list):
        return [_value_render(v, r) for v in value]
    if isinstance(value, dict):
        return {k: _value_render(v, r) for k, v in value.items()}
    return value


_VAR_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class SetVars(Action):
    type, phases, fields = "set-vars", (TCP, REQ, RES), ("vars",)

    def setup(self, c, phase):
        entries = c.get("vars", list, required=True)
        if not entries:
            raise PolicyError(c.at("vars"), "needs at least 1 variable")
        self.vars = []
        for index, entry in enumerate(entries):
            where = f"{c.at('vars')}[{index}]"
            if not isinstance(entry, dict) or len(entry) != 1:
                raise PolicyError(
                    where, "each entry must be a mapping of exactly one name to its value"
                )
            ((name, value),) = entry.items()
            if not isinstance(name, str) or not _VAR_NAME.match(name):
                raise PolicyError(f"{where}.{name}", "is not a valid variable name")
            self.vars.append((name, _value_templates(value, phase, f"{where}.{name}")))

    def run(self, r):
        for name, value in self.vars:
            r.traffic.vars[name] = _value_render(value, r)
            r.traffic.cache.pop("vars", None)
        return None


class Log(Action):
    type, phases, fields = "log", (TCP, REQ, RES), ("metadata",)

    def setup(self, c, phase):
        metadata = c.get("metadata", dict, required=True)
        self.metadata = _value_templates(metadata, phase, c.at("metadata"))

    def run(self, r):
        rendered = _value_render(self.metadata, r)
        r.logs.append({"metadata": rendered})
        r.set_vars("log", metadata=rendered)
        return None


class ForwardInternal(Action):
    type, phases, fields = "forward-internal", (TCP, REQ), ("url", "on_error", "binding")

    def setup(self, c, phase):
        self.url = c.template("url", phase, required=True)
        if self.url.static is not None:
            check_internal_url(self.url.static, c.at("url"))
        self.on_error = c.get("on_error", str, default="halt")
        if self.on_error not in ("halt", "continue"):
            raise PolicyError(c.at("on_error"), "must be halt or continue")
        binding = c.get("binding", str, default="internal")
        if binding != "internal":
            raise PolicyError(c.at("binding"), "must be internal")

    def run(self, r):
        url = r.render(self.url)
        try:
            check_internal_url(url, "url")
        except PolicyError as exc:
            r.errors.append(f"forward-internal: {exc.message}")
            return None if self.on_error == "continue" else _respond(502, [])
        return Outcome(FORWARD_INTERNAL, url=url, on_error=self.on_error)


class TerminateTls(Action):
    """The edge makes the TLS handshake (a TLS endpoint's or TLS edge's connection, else
    passed through): ``Outcome.terminate_tls`` carries what it asks (edge/passthrough.py
    applies it; a TLS edge's tls_termination and mutual_tls modules become this action).
    Versions 1.2 or 1.3 (min <= max); the server certificate and key as PEM, both or
    neither (neither: the edge's certificate for the name); mutual TLS CAs as PEM or
    certificate authority ids (``ca_…``) of the endpoint's account, at most 10, verified
    with ``require-and-verify`` (the other strategies are refused: not offered)."""

    type, phases = "terminate-tls", (TCP,)
    fields = (
        "min_version",
        "max_version",
        "server_private_key",
        "server_certificate",
        "mutual_tls_certificate_authorities",
        "mutual_tls_verification_strategy",
    )

    def setup(self, c, phase):
        versions = ("1.2", "1.3")
        self.config: Dict[str, Any] = {}
        for key, default in (("min_version", "1.2"), ("max_version", "1.3")):
            value = c.get(key, str, default=default)
            if value not in versions:
                raise PolicyError(c.at(key), "must be 1.2 or 1.3")
            self.config[key] = value
        if self.config["min_version"] > self.config["max_version"]:
            raise PolicyError(c.at("max_version"), "must not be below min_version")
        cert = c.get("server_certificate", str)
        key = c.get("server_private_key", str)
        if bool(cert) != bool(key):
            raise PolicyError(
                c.at("server_certificate" if key else "server_private_key"),
                "is required with the other: send server_certificate and server_private_key "
                "together, or neither (the edge's certificate for the name)",
            )
        for name, value, marker in (
            ("server_certificate", cert, "CERTIFICATE"),
            ("server_private_key", key, "PRIVATE KEY"),
        ):
            if value and marker not in value.split("-----BEGIN", 1)[-1].split("-----", 1)[0]:
                raise PolicyError(c.at(name), f"must be a PEM {marker.lower()}")
        if cert:
            self.config.update(server_certificate=cert, server_private_key=key)
        cas = c.strings("mutual_tls_certificate_authorities", max_items=10)
        for index, entry in enumerate(cas):
            is_id = re.fullmatch(r"ca_[0-9A-Za-z]{27}", entry)
            if not is_id and "-----BEGIN CERTIFICATE-----" not in entry:
                raise PolicyError(
                    f"{c.at('mutual_tls_certificate_authorities')}[{index}]",
                    "must be a PEM certificate or a certificate authority id (ca_…)",
                )
        if cas:
            self.config["mutual_tls_certificate_authorities"] = list(cas)
        strategy = c.get("mutual_tls_verification_strategy", str, default="require-and-verify")
        if strategy != "require-and-verify":
            raise PolicyError(
                c.at("mutual_tls_verification_strategy"),
                "only require-and-verify is offered by this service",
            )

    def run(self, r):
        """The phase pauses here (TERMINATE_TLS): the edge makes the handshake, fills the
        connection's TLS facts (conn.tls.*, conn.tls.client.* of the verified client
        certificate) and calls on_tcp_connect again with the same state, which resumes after
        this action. Once the handshake is made (conn.tls.version set) a later terminate-tls
        of the phase changes nothing."""
        if r.traffic.conn.tls_version:
            return None
        r.outcome.terminate_tls = dict(self.config)
        return Outcome(TERMINATE_TLS, terminate_tls=dict(self.config))


def check_internal_url(url: str, where: str) -> None:
    from urllib.parse import urlsplit

    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
        parts.port  # noqa: B018 (raises on a bad port)
    except ValueError:
        raise PolicyError(where, f"'{url[:128]}' is not a URL") from None
    if parts.scheme not in ("http", "https", "tcp", "tls") or not host.endswith(".internal"):
        raise PolicyError(
            where, "must be the URL of an internal endpoint (scheme://name.internal[:port])"
        )


ACTIONS = {
    cls.type: cls
    for cls in (
        AddHeaders,
        RemoveHeaders,
        CustomResponse,
        Deny,
        CloseConnection,
        Redirect,
        UrlRewrite,
        RestrictIps,
        RateLimit,
        BasicAuth,
        VerifyWebhook,
        JwtValidation,
        CompressResponse,
        CircuitBreaker,
        RequestBodyFindReplace,
        ResponseBodyFindReplace,
        HttpRequest,
        SseFindReplace,
        OwaspCrsRequest,
        OwaspCrsResponse,
        SetVars,
        Log,
        ForwardInternal,
        TerminateTls,
    )
    + identity.build_classes(Action)
}


def build(action: dict, where: str, phase: str) -> Action:
    kind = action["type"]
    cls = ACTIONS.get(kind)
    if cls is None:
        if kind in UNSUPPORTED:
            raise PolicyError(f"{where}.type", f"action '{kind}' is not supported by this service")
        raise PolicyError(
            f"{where}.type",
            f"unknown action type '{kind[:64]}'; supported: {', '.join(sorted(ACTIONS))}",
        )
    if phase not in cls.phases:
        raise PolicyError(
            f"{where}.type",
            f"action '{kind}' cannot run in {phase}; it runs in {', '.join(cls.phases)}",
        )
    return cls(action.get("config"), where, phase)
