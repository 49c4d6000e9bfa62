"""Sign-in at the edge: the ``openid-connect`` and ``oauth`` traffic policy actions.

The engine (``chalicelib.core.policy.identity``) ends the request phase with an ``IDENTITY``
outcome; :func:`handle` (called by ``edge.http_policy.request_phase``) then either
answers (a redirect to the provider, the callback, the logout page, an error) or finds a
valid session, sets the identity variables and the identity headers, and lets the phase
resume after the action. docs/IDENTITY.md describes the flows, the cookies and every bound.

Stateless across edge instances: the pending login (state, nonce, PKCE verifier, where to go
back) and the session live in cookies sealed with AES-256-GCM under a key derived from the
edge's identity key (:func:`root_key`) for the endpoint (its URL and account), the action
kind and ``auth_id``: a cookie of another endpoint, another provider or another kind does
not open. Nothing is kept per pending login at the edge, so pending logins cost no memory.
"""

import asyncio
import base64
import hashlib
import hmac
import json
import logging
import os
import secrets
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections import OrderedDict
from typing import Any, Dict, List, Optional, Tuple

from chalicelib.core import app_sessions, edge_errors
from chalicelib.core.policy import outcome as tpo

LOGIN_PATH = "/ngrok/login"
LOGOUT_PATH = "/ngrok/logout"
CALLBACK_PATH = "/ngrok/callback"
STATE_LIFETIME = 600.0  # seconds a pending login (its cookie) is good for
MAX_COOKIE_BYTES = 3800  # a sealed cookie value, under browsers' 4096 per cookie
MAX_CLAIM_BYTES = 256  # email, name, subject each cut to this (UTF-8 bytes)
MAX_PROVIDER_BYTES = 1 << 20  # a discovery document, JWKS, token or user info answer
FETCH_TIMEOUT = 10.0  # seconds for one call to the provider
DOC_TTL = 3600.0  # discovery documents and JWKS are cached this long
CACHE_ENTRIES = 256  # provider documents cached (oldest dropped first)
REFRESH_EVERY = 60.0  # a session cookie's last-seen time is rewritten this often
REVOCATION_SECONDS = 5.0  # a revoked session is refused by every instance within this
REVOCATION_ENTRIES = 65536  # sessions whose liveness an instance remembers (LRU)
IDENTITY_HEADERS = ("ngrok-auth-user-email", "ngrok-auth-user-id", "ngrok-auth-user-name")
ASYMMETRIC = (
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
)

log = logging.getLogger(__name__)
_root: Optional[bytes] = None
_root_lock = threading.Lock()


class SigninError(Exception):
    """The sign-in could not finish (the message is shown to the visitor, without secrets)."""


# ---- keys and sealed cookies -------------------------------------------------------------
def root_key() -> bytes:
    """The edge's identity key: ``EDGE_IDENTITY_KEY`` (64 hex digits; every instance of a
    deployment sets the same), else derived from the local master key file of
    ``chalicelib.core.keywrap`` (``TLS_KEY_FILE``, default ``$DATA_DIR/tls-keys.secret``,
    created on first use), which the instances of one host share."""
    global _root
    with _root_lock:
        if _root is None:
            explicit = (os.environ.get("EDGE_IDENTITY_KEY") or "").strip()
            if explicit:
                master = bytes.fromhex(explicit)
                if len(master) != 32:
                    raise ValueError("EDGE_IDENTITY_KEY must be 64 hex digits")
            else:
                from chalicelib.core import keywrap

                master = keywrap.master_key(create=True)
            _root = hmac.new(master, b"edge identity cookies v1", hashlib.sha256).digest()
        return _root


def _binding(endpoint: Any, kind: str, auth_id: str) -> bytes:
    return "\0".join((endpoint.account_id, endpoint.url or endpoint.host, kind, auth_id)).encode(
        "utf-8"
    )


_ciphers: "OrderedDict[Tuple[bytes, bytes, str], Any]" = OrderedDict()
CIPHER_ENTRIES = 4096  # derived keys kept (per endpoint, provider and purpose; LRU)


def _cipher(binding: bytes, purpose: str) -> Any:
    """The AES-GCM cipher of one binding and purpose (its key derived once, then kept)."""
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

    root = root_key()
    cache_key = (root, binding, purpose)
    cipher = _ciphers.get(cache_key)
    if cipher is None:
        key = hmac.new(root, purpose.encode() + b"\0" + binding, hashlib.sha256).digest()
        cipher = _ciphers[cache_key] = AESGCM(key)
        while len(_ciphers) > CIPHER_ENTRIES:
            _ciphers.popitem(last=False)
    return cipher


def seal(binding: bytes, purpose: str, payload: Dict[str, Any]) -> str:
    nonce = secrets.token_bytes(12)
    data = json.dumps(payload, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    box = _cipher(binding, purpose).encrypt(nonce, data, purpose.encode())
    return base64.urlsafe_b64encode(nonce + box).decode("ascii").rstrip("=")


def unseal(binding: bytes, purpose: str, text: str) -> Optional[Dict[str, Any]]:
    """The payload of a cookie :func:`seal` made for this binding and purpose; None for
    anything else (changed, another endpoint or provider, too long, not ours)."""
    from cryptography.exceptions import InvalidTag

    if not text or len(text) > MAX_COOKIE_BYTES:
        return None
    try:
        raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except ValueError:
        return None
    if len(raw) < 12 + 16:
        return None
    try:
        data = _cipher(binding, purpose).decrypt(raw[:12], raw[12:], purpose.encode())
        payload = json.loads(data)
    except (InvalidTag, ValueError):
        return None
    return payload if isinstance(payload, dict) else None


def cookie_names(kind: str, auth_id: str) -> Tuple[str, str]:
    suffix = f"{kind}_{auth_id}" if auth_id else kind
    return f"ngrok_session_{suffix}", f"ngrok_login_{suffix}"


def _cookie(name: str, value: str, secure: bool, max_age: Optional[int]) -> str:
    parts = [f"{name}={value}", "Path=/", "HttpOnly", "SameSite=Lax"]
    if secure:
        parts.append("Secure")
    if max_age is not None:
        parts.append(f"Max-Age={max_age}")
    return "; ".join(parts)


# ---- the provider ------------------------------------------------------------------------
_cache: Dict[str, Tuple[float, Any]] = {}
_cache_lock = threading.Lock()


def _http(
    url: str, data: Optional[bytes] = None, headers: Optional[Dict[str, str]] = None
) -> Tuple[int, bytes, str]:
    request = urllib.request.Request(url, data=data, headers=dict(headers or {}))
    request.add_header("Accept", "application/json")
    request.add_header("User-Agent", "tunnel-edge-identity")
    try:
        with urllib.request.urlopen(request, timeout=FETCH_TIMEOUT) as answer:  # noqa: S310
            body = answer.read(MAX_PROVIDER_BYTES + 1)
            status, media = answer.status, answer.headers.get("content-type", "")
    except urllib.error.HTTPError as exc:
        body, status, media = (
            exc.read(MAX_PROVIDER_BYTES + 1),
            exc.code,
            exc.headers.get("content-type", ""),
        )
    except (OSError, ValueError) as exc:
        raise SigninError(
            f"the identity provider could not be reached ({type(exc).__name__})"
        ) from None
    if len(body) > MAX_PROVIDER_BYTES:
        raise SigninError("the identity provider's answer is too large")
    return status, body, media


def _json(status: int, body: bytes, what: str) -> Dict[str, Any]:
    try:
        doc = json.loads(body)
    except ValueError:
        doc = None
    if status != 200 or not isinstance(doc, dict):
        raise SigninError(f"the identity provider's {what} answered {status}")
    return doc


def _cached(url: str, now: float, what: str, refresh: bool = False) -> Dict[str, Any]:
    with _cache_lock:
        hit = _cache.get(url)
        if hit is not None and hit[0] > now and not refresh:
            return hit[1]
    status, body, _ = _http(url)
    doc = _json(status, body, what)
    with _cache_lock:
        _cache[url] = (now + DOC_TTL, doc)
        while len(_cache) > CACHE_ENTRIES:
            _cache.pop(next(iter(_cache)))
    return doc


def discovery(issuer: str, now: float) -> Dict[str, Any]:
    doc = _cached(f"{issuer}/.well-known/openid-configuration", now, "discovery document")
    if str(doc.get("issuer", "")).rstrip("/") != issuer:
        raise SigninError("the discovery document names another issuer")
    for key in ("authorization_endpoint", "token_endpoint", "jwks_uri"):
        if not isinstance(doc.get(key), str):
            raise SigninError(f"the discovery document has no {key}")
    return doc


def verify_id_token(
    token: str, doc: Dict[str, Any], client_id: str, nonce: str, now: float
) -> Dict[str, Any]:
    """The claims of an ID token signed by a key of the provider's JWKS, for this client,
    of this issuer, not expired, with this login's nonce; SigninError otherwise."""
    import jwt

    try:
        header = jwt.get_unverified_header(token)
    except jwt.PyJWTError:
        raise SigninError("the ID token is not a JWT") from None
    alg = header.get("alg")
    allowed = [
        a for a in doc.get("id_token_signing_alg_values_supported") or ["RS256"] if a in ASYMMETRIC
    ]
    if alg not in allowed:
        raise SigninError(f"the ID token's algorithm {str(alg)[:16]!r} is not accepted")
    key = None
    for refresh in (False, True):  # a key not found: the provider rotated, fetch once more
        keys = jwt.PyJWKSet.from_dict(_cached(doc["jwks_uri"], now, "JWKS", refresh))
        for candidate in keys.keys:
            if header.get("kid") in (None, candidate.key_id):
                key = candidate
                break
        if key is not None:
            break
    if key is None:
        raise SigninError("no key of the provider's JWKS signed the ID token")
    try:
        claims = jwt.decode(
            token,
            key=key,
            algorithms=[str(alg)],
            audience=client_id,
            issuer=doc["issuer"],
            leeway=60,
            options={"require": ["exp", "iat", "sub"]},
        )
    except jwt.PyJWTError as exc:
        raise SigninError(f"the ID token is not valid ({exc})") from None
    if not hmac.compare_digest(str(claims.get("nonce", "")), nonce):
        raise SigninError("the ID token's nonce is not this login's")
    return claims


def exchange(
    token_url: str, client_id: str, client_secret: str, code: str, redirect_uri: str, verifier: str
) -> Dict[str, Any]:
    form = {
        "grant_type": "authorization_code",
        "code": code,
        "redirect_uri": redirect_uri,
        "code_verifier": verifier,
        "client_id": client_id,
    }
    basic = base64.b64encode(
        f"{urllib.parse.quote(client_id, safe='')}:"
        f"{urllib.parse.quote(client_secret, safe='')}".encode()
    ).decode()
    status, body, media = _http(
        token_url,
        urllib.parse.urlencode(form).encode(),
        {"Content-Type": "application/x-www-form-urlencoded", "Authorization": f"Basic {basic}"},
    )
    if "json" not in media and status == 200:  # GitHub without Accept: form-encoded
        return {k: v[0] for k, v in urllib.parse.parse_qs(body.decode("utf-8", "replace")).items()}
    doc = _json(status, body, "token endpoint")
    if doc.get("error"):
        raise SigninError(f"the token endpoint refused the code ({str(doc['error'])[:64]})")
    return doc


def userinfo(url: str, access_token: str) -> Dict[str, Any]:
    status, body, _ = _http(url, headers={"Authorization": f"Bearer {access_token}"})
    return _json(status, body, "user info")


# ---- one request ---------------------------------------------------------------------------
def _answer(status: int, headers: List[Tuple[str, str]], body: bytes = b"") -> tpo.Outcome:
    return tpo.Outcome(
        tpo.RESPOND,
        status_code=status,
        headers=headers + [("content-length", str(len(body)))],
        body=body,
    )


def _error(status: int, code: str, message: str, clear: List[str]) -> tpo.Outcome:
    body = json.dumps({"error_code": code, "status_code": status, "msg": message}).encode()
    return _answer(
        status,
        [
            ("content-type", "application/json"),
            ("ngrok-error-code", code),
            ("cache-control", "no-store"),
        ]
        + [("set-cookie", c) for c in clear],
        body,
    )


def safe_path(value: str) -> str:
    """A path on this endpoint to go back to: a relative reference starting with one '/',
    no backslash and no control characters; anything else is '/' (no open redirect)."""
    if (
        not value
        or not value.startswith("/")
        or value.startswith("//")
        or "\\" in value
        or any(ord(ch) < 0x20 or ord(ch) == 0x7F for ch in value)
        or len(value) > 2048
    ):
        return "/"
    parts = urllib.parse.urlsplit(value)
    if parts.scheme or parts.netloc:
        return "/"
    return value


def _cookie_value(req: Any, name: str) -> str:
    for entry in (req.cookies().get(name) or [])[:1]:
        return str(entry.get("value", ""))
    return ""


class _Ctx:
    def __init__(self, traffic: Any, action: Any, rendered: Dict[str, str]) -> None:
        self.req = traffic.req
        self.action = action
        self.kind = action.kind
        self.auth_id = action.auth_id
        self.client_id = rendered.get("client_id", "")
        self.client_secret = rendered.get("client_secret", "")
        parts = urllib.parse.urlsplit(self.req.url)
        # the Host header as sent (with its port): the name routed here, on this listener
        netloc = (self.req.get_header("host") or [parts.netloc])[0].strip()
        self.origin = f"{parts.scheme}://{netloc}"
        self.secure = parts.scheme == "https"
        self.path = parts.path or "/"
        self.params = urllib.parse.parse_qs(parts.query, keep_blank_values=True)
        self.binding = _binding(traffic.conn.endpoint, self.kind, self.auth_id)
        self.session_name, self.login_name = cookie_names(self.kind, self.auth_id)

    def param(self, name: str) -> str:
        values = self.params.get(name) or [""]
        return values[0]

    def targets_us(self) -> bool:
        asked = self.param("auth_id")
        return not asked or asked == self.auth_id

    def clear(self, name: str) -> str:
        return _cookie(name, "", self.secure, 0)


async def handle(traffic: Any, out: tpo.Outcome, clock=time.time) -> Optional[tpo.Outcome]:
    """What the edge does for an ``IDENTITY`` outcome: an Outcome to answer with, or None
    when the visitor is signed in (the phase then resumes after the action). A failure of
    its own is a 502 (never a pass)."""
    try:
        return await _handle(traffic, out, clock)
    except Exception:  # noqa: BLE001 (fail closed, and say so in the log)
        log.exception("sign-in action failed")
        return _error(502, edge_errors.SIGNIN_FAILED, "Sign-in failed at the edge.", [])


async def _handle(traffic: Any, out: tpo.Outcome, clock) -> Optional[tpo.Outcome]:
    if out.identity is None:  # an IDENTITY outcome always carries (action, fields)
        raise SigninError("an identity outcome without its action")
    action, rendered = out.identity
    ctx = _Ctx(traffic, action, rendered)
    now = clock()
    if (
        ctx.path == CALLBACK_PATH
        and ctx.targets_us()
        and (ctx.param("state") or _cookie_value(ctx.req, ctx.login_name))
    ):
        return await _callback(traffic, ctx, now)
    if ctx.path == LOGOUT_PATH and ctx.targets_us():
        ending = unseal(ctx.binding, "session", _cookie_value(ctx.req, ctx.session_name))
        if ending is not None and ending.get("sid"):  # the session ends everywhere, too
            account_id, sid = traffic.conn.endpoint.account_id, str(ending["sid"])
            _revocations[(account_id, sid)] = (time.monotonic() + REVOCATION_SECONDS, False)
            try:
                await asyncio.to_thread(app_sessions.end, account_id, sid)
            except Exception:  # noqa: BLE001 (the cookie is cleared all the same)
                log.warning(
                    "logout: session %s of %s not deleted from the store",
                    sid,
                    account_id,
                    exc_info=True,
                )
        body = b"<!doctype html><title>Signed out</title><p>You have been signed out.</p>\n"
        return _answer(
            200,
            [
                ("content-type", "text/html; charset=utf-8"),
                ("cache-control", "no-store"),
                ("set-cookie", ctx.clear(ctx.session_name)),
            ],
            body,
        )
    if ctx.path == LOGIN_PATH and ctx.targets_us():
        return await _start(ctx, now, safe_path(ctx.param("redirect_path")), force=True)
    session = unseal(ctx.binding, "session", _cookie_value(ctx.req, ctx.session_name))
    account_id = traffic.conn.endpoint.account_id
    if (
        session is not None
        and _live(session, action, now)
        and await not_revoked(account_id, str(session.get("sid", "")))
    ):
        _signed_in(traffic, ctx, session)
        if now - float(session.get("seen", 0)) >= REFRESH_EVERY:
            session["seen"] = int(now)  # idle timeout: the cookie's last-seen moves on
            traffic.set_cookies = getattr(traffic, "set_cookies", None) or []
            traffic.set_cookies.append(
                _cookie(
                    ctx.session_name,
                    seal(ctx.binding, "session", session),
                    ctx.secure,
                    int(session["exp"] - now),
                )
            )
            asyncio.get_running_loop().run_in_executor(  # last_active, best effort
                None, app_sessions.touch, account_id, str(session["sid"]), now
            )
        return None
    return await _start(ctx, now, safe_path(ctx.req.target), force=False)


_revocations: "OrderedDict[Tuple[str, str], Tuple[float, bool]]" = OrderedDict()


async def not_revoked(account_id: str, sid: str, clock=time.monotonic) -> bool:
    """The session still exists in the store (not deleted through /app/sessions or
    /app/users): one GetItem per session per REVOCATION_SECONDS at most, per instance."""
    key = (account_id, sid)
    now = clock()
    hit = _revocations.get(key)
    if hit is not None and hit[0] > now:
        return hit[1]
    live = await asyncio.to_thread(app_sessions.is_live, account_id, sid)
    _revocations[key] = (now + REVOCATION_SECONDS, live)
    _revocations.move_to_end(key)
    while len(_revocations) > REVOCATION_ENTRIES:
        _revocations.popitem(last=False)
    return live


def _live(session: Dict[str, Any], action: Any, now: float) -> bool:
    try:
        if now >= float(session["exp"]):
            return False
        if action.idle_session and now - float(session["seen"]) > action.idle_session:
            return False
    except (KeyError, TypeError, ValueError):
        return False
    return True


def _signed_in(traffic: Any, ctx: _Ctx, session: Dict[str, Any]) -> None:
    values = {
        "identity.email": str(session.get("em", "")),
        "identity.name": str(session.get("nm", "")),
        "identity.provider_user_id": str(session.get("sub", "")),
        "identity.session_id": str(session.get("sid", "")),
    }
    action_vars = traffic.state.action_vars["on_http_request"]
    for key, value in values.items():
        action_vars[f"actions.ngrok.{ctx.kind}.{key}"] = value
    req = ctx.req
    if any(n.lower().startswith("ngrok-auth-user-") for n, _ in req.headers):
        for name in IDENTITY_HEADERS:  # a visitor's own copies never reach the upstream
            req.remove_header(name)
    for name, key in zip(
        IDENTITY_HEADERS, ("identity.email", "identity.provider_user_id", "identity.name")
    ):
        value = "".join(ch for ch in values[key] if ch >= " " and ch != "\x7f")
        req.add_header(name, value)


async def _start(ctx: _Ctx, now: float, back: str, force: bool) -> tpo.Outcome:
    action = ctx.action
    try:
        if ctx.kind == "oidc":
            doc = await asyncio.to_thread(discovery, action.issuer_url, now)
            authorize = doc["authorization_endpoint"]
            scopes = ["openid", "email", "profile"] + [
                s for s in action.scopes if s not in ("openid", "email", "profile")
            ]
        else:
            authorize = action.endpoints[0]
            scopes = list(action.scopes)
    except SigninError as exc:
        return _error(502, edge_errors.SIGNIN_FAILED, str(exc), [])
    state, nonce = secrets.token_urlsafe(24), secrets.token_urlsafe(24)
    verifier = secrets.token_urlsafe(48)
    challenge = (
        base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).decode().rstrip("=")
    )
    query = [
        ("response_type", "code"),
        ("client_id", ctx.client_id),
        ("redirect_uri", ctx.origin + CALLBACK_PATH),
        ("scope", " ".join(scopes)),
        ("state", state),
        ("code_challenge", challenge),
        ("code_challenge_method", "S256"),
    ]
    if ctx.kind == "oidc":
        query.append(("nonce", nonce))
    if force:
        query.append(("prompt", "login"))
    query.extend(action.authz_url_params)
    sep = "&" if "?" in authorize else "?"
    location = authorize + sep + urllib.parse.urlencode(query)
    pending = seal(
        ctx.binding,
        "login",
        {"st": state, "no": nonce, "pk": verifier, "bk": back, "exp": int(now + STATE_LIFETIME)},
    )
    return _answer(
        302,
        [
            ("location", location),
            ("cache-control", "no-store"),
            ("set-cookie", _cookie(ctx.login_name, pending, ctx.secure, int(STATE_LIFETIME))),
        ],
    )


async def _callback(traffic: Any, ctx: _Ctx, now: float) -> tpo.Outcome:
    clear = [ctx.clear(ctx.login_name)]
    pending = unseal(ctx.binding, "login", _cookie_value(ctx.req, ctx.login_name))
    if pending is None or now >= float(pending.get("exp", 0)):
        return _error(
            400,
            edge_errors.SIGNIN_STATE_MISSING,
            "The state parameter required "
            "to finish authorization is missing or expired. Start over to try "
            "again.",
            clear,
        )
    if not hmac.compare_digest(ctx.param("state"), str(pending.get("st", ""))):
        return _error(
            400,
            edge_errors.SIGNIN_STATE_MISMATCH,
            "The state parameter required "
            "to finish authorization does not match this host. Try again.",
            clear,
        )
    if ctx.param("error") or not ctx.param("code"):
        return _error(
            403,
            edge_errors.SIGNIN_FAILED,
            f"The identity provider did not sign you in ({ctx.param('error')[:64] or 'no code'}).",
            clear,
        )
    try:
        identity = await asyncio.to_thread(_finish, ctx, pending, now)
    except SigninError as exc:
        return _error(
            502 if "reached" in str(exc) else 403,
            edge_errors.SIGNIN_FAILED,
            f"Sign-in failed: {exc}.",
            clear,
        )
    action = ctx.action
    endpoint = traffic.conn.endpoint
    provider = (
        (urllib.parse.urlsplit(action.issuer_url).hostname or "", action.issuer_url)
        if ctx.kind == "oidc"
        else (action.provider, action.endpoints[0])
    )
    sid, _ = await asyncio.to_thread(  # /app/sessions, /app/users (the API revokes there)
        app_sessions.record_signin,
        endpoint.account_id,
        endpoint.id,
        ctx.origin,
        provider,
        identity,
        (ctx.req.get_header("user-agent") or [""])[0],
        traffic.conn.client_ip,
        now,
        now + action.max_session,
    )
    session = {
        "sid": sid,
        "iat": int(now),
        "seen": int(now),
        "exp": int(now + action.max_session),
        **identity,
    }
    value = seal(ctx.binding, "session", session)
    if len(value) > MAX_COOKIE_BYTES:  # cannot happen with claims cut to MAX_CLAIM_BYTES
        return _error(502, edge_errors.SIGNIN_FAILED, "The session is too large.", clear)
    return _answer(
        302,
        [
            ("location", safe_path(str(pending.get("bk", "/")))),
            ("cache-control", "no-store"),
            ("set-cookie", _cookie(ctx.session_name, value, ctx.secure, int(action.max_session))),
        ]
        + [("set-cookie", c) for c in clear],
    )


def _cut(value: Any) -> str:
    """A claim as kept in the session: control characters dropped, at most MAX_CLAIM_BYTES
    bytes of UTF-8 (never half a character)."""
    text = "".join(ch for ch in str(value or "") if ch >= " " and ch != "\x7f")
    return text.encode("utf-8")[:MAX_CLAIM_BYTES].decode("utf-8", "ignore")


def _finish(ctx: _Ctx, pending: Dict[str, Any], now: float) -> Dict[str, str]:
    """Exchange the code and learn who signed in (in a thread: blocking I/O)."""
    action = ctx.action
    redirect_uri = ctx.origin + CALLBACK_PATH
    if ctx.kind == "oidc":
        doc = discovery(action.issuer_url, now)
        tokens = exchange(
            doc["token_endpoint"],
            ctx.client_id,
            ctx.client_secret,
            ctx.param("code"),
            redirect_uri,
            str(pending.get("pk", "")),
        )
        id_token = tokens.get("id_token")
        if not isinstance(id_token, str):
            raise SigninError("the token endpoint returned no ID token")
        claims = verify_id_token(id_token, doc, ctx.client_id, str(pending.get("no", "")), now)
        if (
            not claims.get("email")
            and isinstance(doc.get("userinfo_endpoint"), str)
            and isinstance(tokens.get("access_token"), str)
        ):
            info = userinfo(doc["userinfo_endpoint"], tokens["access_token"])
            if str(info.get("sub")) == str(claims["sub"]):
                claims.update({k: info[k] for k in ("email", "name") if k in info})
        return {
            "sub": _cut(claims["sub"]),
            "em": _cut(claims.get("email")),
            "nm": _cut(claims.get("name") or claims.get("preferred_username")),
        }
    tokens = exchange(
        action.endpoints[1],
        ctx.client_id,
        ctx.client_secret,
        ctx.param("code"),
        redirect_uri,
        str(pending.get("pk", "")),
    )
    access = tokens.get("access_token")
    if not isinstance(access, str) or not access:
        raise SigninError("the token endpoint returned no access token")
    info = userinfo(action.endpoints[2], access)
    subject = info.get("sub") or info.get("id")
    if subject in (None, ""):
        raise SigninError("the user info names no user")
    return {
        "sub": _cut(subject),
        "em": _cut(info.get("email")),
        "nm": _cut(info.get("name") or info.get("login") or info.get("preferred_username")),
    }


def with_cookies(event: Any, traffic: Any) -> Any:
    """The upstream's response head with the refreshed session cookie added (idle timeout:
    the cookie's last-seen time moves on)."""
    from edge import http1

    cookies, traffic.set_cookies = traffic.set_cookies, None
    return http1.Response(
        status_code=event.status_code,
        reason=event.reason,
        headers=list(event.headers) + [(b"set-cookie", c.encode("latin-1")) for c in cookies],
        checked=True,
    )
