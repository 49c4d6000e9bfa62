"""The ``openid-connect`` and ``oauth`` actions: their configs, checked when a policy is
compiled (pure Python: the API validates documents without ``cryptography``), and what they
tell the edge when they run.

The sign-in itself needs I/O (the provider's discovery document, its token endpoint, its
keys), which the engine never does: running the action renders its CEL-interpolated fields
(``client_id``, ``client_secret``, which may read ``${secrets.get('vault', 'name')}``) and
ends the phase with an ``IDENTITY`` outcome carrying them. The edge (``edge/identity.py``)
then answers (a redirect to the provider, the callback, the logout page) or, for a visitor
with a valid session, sets the identity variables and calls the phase again with the same
state: it resumes after this action, so later rules see ``actions.ngrok.oidc.identity.*``
(``actions.ngrok.oauth.identity.*``) and may deny by email domain.

Durations are Go durations (``"24h"``, ``"1h30m"``, ``"90s"``), as the hosted docs write
them. Bounds (docs/IDENTITY.md): a session lasts at most MAX_SESSION (30 days); the idle
timeout is at least MIN_IDLE (1 minute); at most MAX_SCOPES scopes and MAX_AUTHZ_PARAMS extra
authorization URL parameters; ``auth_id`` is 1-64 characters of ``[A-Za-z0-9_-]``.
"""

import re
from typing import Dict, List, Optional, Tuple

from chalicelib.core.policy.document import PolicyError
from chalicelib.core.policy.outcome import IDENTITY, Outcome

REQ = "on_http_request"
DEFAULT_MAX_SESSION = 24 * 3600.0  # hosted default for max_session_duration
DEFAULT_IDLE = 0.0  # 0: no idle timeout unless configured
MAX_SESSION = 30 * 24 * 3600.0
MIN_IDLE = 60.0
MAX_SCOPES = 32
MAX_AUTHZ_PARAMS = 16
_AUTH_ID = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ns|us|µs|ms|s|m|h)")
_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
_RESERVED_PARAMS = (
    "client_id",
    "redirect_uri",
    "response_type",
    "state",
    "nonce",
    "code_challenge",
    "code_challenge_method",
    "scope",
)

# OAuth 2.0 providers by their endpoints: (authorization, token, user info, default scopes).
# ``oauth`` with one of these names and the operator's own client id and secret.
PROVIDERS: Dict[str, Tuple[str, str, str, Tuple[str, ...]]] = {
    "github": (
        "https://github.com/login/oauth/authorize",
        "https://github.com/login/oauth/access_token",
        "https://api.github.com/user",
        ("read:user", "user:email"),
    ),
    "google": (
        "https://accounts.google.com/o/oauth2/v2/auth",
        "https://oauth2.googleapis.com/token",
        "https://openidconnect.googleapis.com/v1/userinfo",
        ("openid", "email", "profile"),
    ),
    "microsoft": (
        "https://login.microsoftonline.com/common/oauth2/v2.0/authorize",
        "https://login.microsoftonline.com/common/oauth2/v2.0/token",
        "https://graph.microsoft.com/oidc/userinfo",
        ("openid", "email", "profile"),
    ),
    "gitlab": (
        "https://gitlab.com/oauth/authorize",
        "https://gitlab.com/oauth/token",
        "https://gitlab.com/oauth/userinfo",
        ("openid", "email", "profile"),
    ),
    "linkedin": (
        "https://www.linkedin.com/oauth/v2/authorization",
        "https://www.linkedin.com/oauth/v2/accessToken",
        "https://api.linkedin.com/v2/userinfo",
        ("openid", "email", "profile"),
    ),
    "twitch": (
        "https://id.twitch.tv/oauth2/authorize",
        "https://id.twitch.tv/oauth2/token",
        "https://id.twitch.tv/oauth2/userinfo",
        ("openid", "user:read:email"),
    ),
}


def parse_duration(text: str) -> float:
    """Seconds of a Go duration string; ValueError when it is not one."""
    if not isinstance(text, str) or not text:
        raise ValueError("empty")
    pos, total = 0, 0.0
    for match in _DURATION.finditer(text):
        if match.start() != pos:
            raise ValueError(text)
        total += float(match.group(1)) * _UNITS[match.group(2)]
        pos = match.end()
    if pos != len(text):
        raise ValueError(text)
    return total


def _is_url(text: str) -> bool:
    from urllib.parse import urlsplit

    try:
        parts = urlsplit(text)
    except ValueError:
        return False
    return parts.scheme in ("http", "https") and bool(parts.netloc) and not parts.fragment


class _Identity:
    """What ``openid-connect`` and ``oauth`` share (mixed into an ``actions.Action``)."""

    kind = ""  # "oidc" or "oauth": the variables' and cookies' prefix
    phases = (REQ,)
    common = (
        "auth_id",
        "client_id",
        "client_secret",
        "scopes",
        "authz_url_params",
        "max_session_duration",
        "idle_session_duration",
        "userinfo_refresh_interval",
        "allow_cors_preflight",
    )

    def _common(self, c, phase: str) -> None:
        self.auth_id = c.get("auth_id", str, default="") or ""
        if self.auth_id and not _AUTH_ID.match(self.auth_id):
            raise PolicyError(c.at("auth_id"), "must be 1 to 64 letters, digits, '-' or '_'")
        self.client_id = c.template("client_id", phase)
        self.client_secret = c.template("client_secret", phase)
        self.scopes = c.strings("scopes", max_items=MAX_SCOPES)
        for index, scope in enumerate(self.scopes):
            if not scope or any(ch.isspace() for ch in scope) or len(scope) > 256:
                raise PolicyError(
                    f"{c.at('scopes')}[{index}]", "must be a non-empty scope without spaces"
                )
        params = c.get("authz_url_params", dict, default={})
        if len(params) > MAX_AUTHZ_PARAMS:
            raise PolicyError(
                c.at("authz_url_params"),
                f"has {len(params)} entries; the limit is {MAX_AUTHZ_PARAMS}",
            )
        self.authz_url_params: List[Tuple[str, str]] = []
        for name, value in params.items():
            if not isinstance(value, str):
                raise PolicyError(f"{c.at('authz_url_params')}.{name}", "must be a string")
            if name in _RESERVED_PARAMS:
                raise PolicyError(
                    f"{c.at('authz_url_params')}.{name}", "is set by the sign-in flow itself"
                )
            self.authz_url_params.append((str(name), value))
        self.max_session = self._duration(
            c, "max_session_duration", DEFAULT_MAX_SESSION, MIN_IDLE, MAX_SESSION
        )
        self.idle_session = self._duration(
            c, "idle_session_duration", DEFAULT_IDLE, MIN_IDLE, MAX_SESSION
        )
        self.userinfo_refresh = self._duration(
            c, "userinfo_refresh_interval", 0.0, MIN_IDLE, MAX_SESSION
        )
        self.allow_cors_preflight = c.get("allow_cors_preflight", bool, default=False)

    @staticmethod
    def _duration(c, key: str, default: float, low: float, high: float) -> float:
        text = c.get(key, str)
        if text is None:
            return default
        try:
            seconds = parse_duration(text)
        except ValueError:
            raise PolicyError(
                c.at(key), "must be a duration such as '24h', '30m' or '1h30m'"
            ) from None
        if not low <= seconds <= high:
            raise PolicyError(c.at(key), f"must be from {int(low)}s to {int(high)}s")
        return seconds

    def run(self, r) -> Optional[Outcome]:
        req = r.traffic.req
        if (
            self.allow_cors_preflight
            and req.method == "OPTIONS"
            and req.get_header("access-control-request-method")
        ):
            return None
        rendered = {
            "client_id": r.render(self.client_id) if self.client_id else "",
            "client_secret": r.render(self.client_secret) if self.client_secret else "",
        }
        return Outcome(IDENTITY, identity=(self, rendered))


def build_classes(action_base):
    """The two action classes, built on the engine's Action base (no import cycle)."""

    class OpenIdConnect(_Identity, action_base):
        type, kind = "openid-connect", "oidc"
        fields = ("issuer_url",) + _Identity.common

        def setup(self, c, phase):
            self.issuer_url = c.get("issuer_url", str, required=True).rstrip("/")
            if not _is_url(self.issuer_url):
                raise PolicyError(c.at("issuer_url"), "must be an http or https URL")
            self._common(c, phase)
            if self.client_id is None:
                raise PolicyError(
                    c.at("client_id"),
                    "is required (this service has no managed OpenID Connect application)",
                )

    class OAuth(_Identity, action_base):
        type, kind = "oauth", "oauth"
        # authorization_url, token_url, userinfo_url: an extension, a provider by its OAuth
        # 2.0 endpoints (provider "oauth2", or overriding a known provider's)
        fields = ("provider", "authorization_url", "token_url", "userinfo_url") + _Identity.common

        def setup(self, c, phase):
            self.provider = c.get("provider", str, required=True)
            known = PROVIDERS.get(self.provider)
            if known is None and self.provider != "oauth2":
                raise PolicyError(
                    c.at("provider"),
                    "must be one of "
                    f"{', '.join(sorted(PROVIDERS))} or oauth2 (with "
                    "authorization_url, token_url and userinfo_url)",
                )
            defaults = known or ("", "", "", ())
            self.endpoints = []
            for index, key in enumerate(("authorization_url", "token_url", "userinfo_url")):
                value = c.get(key, str, default=defaults[index])
                if not value:
                    raise PolicyError(c.at(key), "is required for provider oauth2")
                if not _is_url(value):
                    raise PolicyError(c.at(key), "must be an http or https URL")
                self.endpoints.append(value)
            self._common(c, phase)
            if not self.scopes:
                self.scopes = list(defaults[3])
            if self.client_id is None or self.client_secret is None:
                raise PolicyError(
                    c.at("client_id"),
                    "client_id and client_secret are "
                    "required (this service has no managed OAuth applications)",
                )

    return OpenIdConnect, OAuth
