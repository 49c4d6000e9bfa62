"""Every time and size bound of sign-in at the edge (docs/IDENTITY.md), measured with a fake
clock and stand-ins for the store: the pending login's lifetime, one pending login per
browser and provider, the session's maximum lifetime and idle timeout, the revocation
cache, the secrets cache, the provider answer size."""

import asyncio
import http.server
import json
import threading
import urllib.parse
from types import SimpleNamespace

import pytest

from chalicelib.core.policy import Conn, Endpoint, Request, compile_policy
from chalicelib.core.policy.outcome import IDENTITY, RESPOND
from edge import identity
from edge import secrets as edge_secrets

T0 = 1_800_000_000.0


@pytest.fixture(autouse=True)
def _key(monkeypatch):
    monkeypatch.setenv("EDGE_IDENTITY_KEY", "33" * 32)
    monkeypatch.setattr(identity, "_root", None)
    identity._revocations.clear()
    monkeypatch.setattr(identity.app_sessions, "is_live", lambda account, sid: True)


def _action(**extra):
    config = {
        "provider": "oauth2",
        "client_id": "c",
        "client_secret": "s",
        "authorization_url": "https://idp.test/authorize",
        "token_url": "https://idp.test/token",
        "userinfo_url": "https://idp.test/me",
        **extra,
    }
    policy = compile_policy(
        json.dumps({"on_http_request": [{"actions": [{"type": "oauth", "config": config}]}]})
    )
    return policy


def _run(policy, target, cookies=None, clock=T0):
    headers = [("host", "app.test:8080")]
    if cookies:
        headers.append(("cookie", "; ".join(f"{k}={v}" for k, v in cookies.items())))
    req = Request.from_target("GET", "http", "app.test", target, headers)
    conn = Conn(
        "10.0.0.1",
        5000,
        endpoint=Endpoint(
            id="ep_1", url="http://app.test:8080", host="app.test", account_id="acct_1"
        ),
    )
    state = policy.new_state()
    traffic = SimpleNamespace(req=req, conn=conn, state=state)
    out = policy.on_http_request(conn, req, state)
    assert out.kind == IDENTITY
    answer = asyncio.run(identity.handle(traffic, out, clock=lambda: clock))
    return answer, traffic


def _set_cookies(answer):
    out = {}
    for name, value in answer.headers:
        if name == "set-cookie":
            pair = value.split(";", 1)[0]
            key, _, val = pair.partition("=")
            out[key] = val
    return out


def _login(policy, clock=T0):
    answer, _ = _run(policy, "/page", clock=clock)
    assert answer.status_code == 302
    state = urllib.parse.parse_qs(urllib.parse.urlsplit(dict(answer.headers)["location"]).query)[
        "state"
    ][0]
    return _set_cookies(answer)["ngrok_login_oauth"], state


def test_a_pending_login_lasts_state_lifetime():
    policy = _action()
    login, state = _login(policy)
    cookies = {"ngrok_login_oauth": login}
    late, _ = _run(
        policy,
        f"/ngrok/callback?code=x&state={state}",
        cookies,
        clock=T0 + identity.STATE_LIFETIME + 1,
    )
    assert late.status_code == 400 and ("ngrok-error-code", "ERR_NGROK_3120") in late.headers
    # within the lifetime the state is accepted (then the wrong state is what is refused)
    early, _ = _run(
        policy,
        f"/ngrok/callback?code=x&state={state}x",
        cookies,
        clock=T0 + identity.STATE_LIFETIME - 1,
    )
    assert ("ngrok-error-code", "ERR_NGROK_3124") in early.headers
    assert (
        f"Max-Age={int(identity.STATE_LIFETIME)}"
        in dict(_run(policy, "/p")[0].headers)["set-cookie"]
    )


def test_one_pending_login_per_browser_and_provider_costs_the_edge_nothing():
    """The pending login lives in the browser's cookie (nothing is kept at the edge): a
    second login started in the same browser replaces the first, whose callback is then
    refused."""
    policy = _action()
    first_cookie, first_state = _login(policy)
    second_cookie, second_state = _login(policy)
    assert first_state != second_state
    answer, _ = _run(
        policy, f"/ngrok/callback?code=x&state={first_state}", {"ngrok_login_oauth": second_cookie}
    )
    assert ("ngrok-error-code", "ERR_NGROK_3124") in answer.headers


def _session(policy, iat, seen, exp):
    binding = identity._binding(
        Endpoint(url="http://app.test:8080", account_id="acct_1"), "oauth", ""
    )
    return identity.seal(
        binding,
        "session",
        {
            "sid": "appses_" + "a" * 27,
            "iat": iat,
            "seen": seen,
            "exp": exp,
            "sub": "u1",
            "em": "a@x.test",
            "nm": "A",
        },
    )


def test_the_session_ends_at_max_session_duration():
    policy = _action(max_session_duration="2h")
    action = policy.phases["on_http_request"][0].actions[0]
    assert action.max_session == 7200
    cookie = _session(policy, T0, T0, T0 + 7200)
    ok, traffic = _run(policy, "/page", {"ngrok_session_oauth": cookie}, clock=T0 + 7199)
    assert ok is None
    assert (
        traffic.state.action_vars["on_http_request"]["actions.ngrok.oauth.identity.email"]
        == "a@x.test"
    )
    ended, _ = _run(policy, "/page", {"ngrok_session_oauth": cookie}, clock=T0 + 7200)
    assert ended.status_code == 302


def test_the_idle_timeout_ends_an_unused_session_and_use_moves_it_on():
    policy = _action(idle_session_duration="10m")
    cookie = _session(policy, T0, T0, T0 + 86400)
    ended, _ = _run(policy, "/page", {"ngrok_session_oauth": cookie}, clock=T0 + 601)
    assert ended.status_code == 302
    # used at T0+300: the refreshed cookie's last-seen is T0+300, good until T0+900
    ok, traffic = _run(policy, "/page", {"ngrok_session_oauth": cookie}, clock=T0 + 300)
    assert ok is None and traffic.set_cookies
    fresh = traffic.set_cookies[0].split(";", 1)[0].partition("=")[2]
    later, _ = _run(policy, "/page", {"ngrok_session_oauth": fresh}, clock=T0 + 850)
    assert later is None


def test_the_cookie_is_rewritten_at_most_once_per_refresh_interval():
    policy = _action()
    cookie = _session(policy, T0, T0, T0 + 86400)
    _, traffic = _run(
        policy, "/page", {"ngrok_session_oauth": cookie}, clock=T0 + identity.REFRESH_EVERY - 1
    )
    assert not getattr(traffic, "set_cookies", None)
    _, traffic = _run(
        policy, "/page", {"ngrok_session_oauth": cookie}, clock=T0 + identity.REFRESH_EVERY
    )
    assert len(traffic.set_cookies) == 1


def test_revocation_is_read_at_most_once_per_bound(monkeypatch):
    reads = []
    live = {"value": True}

    def is_live(account, sid):
        reads.append(sid)
        return live["value"]

    monkeypatch.setattr(identity.app_sessions, "is_live", is_live)
    now = {"t": 100.0}

    def check():
        return asyncio.run(identity.not_revoked("acct_1", "appses_x", clock=lambda: now["t"]))

    assert check() and check() and len(reads) == 1
    live["value"] = False  # revoked through the API
    now["t"] += identity.REVOCATION_SECONDS - 0.01
    assert check() is True and len(reads) == 1  # cached, within the bound
    now["t"] += 0.02
    assert check() is False and len(reads) == 2  # past the bound: read again, refused


def test_the_revocation_cache_is_bounded(monkeypatch):
    monkeypatch.setattr(identity, "REVOCATION_ENTRIES", 10)
    for index in range(25):
        asyncio.run(identity.not_revoked("acct_1", f"appses_{index}", clock=lambda: 1.0))
    assert len(identity._revocations) == 10


def test_secrets_are_cached_for_the_bound_and_read_again_after(monkeypatch):
    reads = []
    values = {"v": "one"}

    def read(account, vault, name):
        reads.append(name)
        return values["v"]

    monkeypatch.setattr(edge_secrets, "_read", read)
    edge_secrets._cache.clear()

    async def call(func, *args):
        return func(*args)

    edge = SimpleNamespace(call=call)
    now = {"t": 50.0}

    def get():
        return asyncio.run(
            edge_secrets.value(edge, "acct_1", "vault", "name", clock=lambda: now["t"])
        )

    assert get() == "one" and get() == "one" and len(reads) == 1
    values["v"] = "two"
    now["t"] += edge_secrets.CACHE_SECONDS - 0.01
    assert get() == "one"
    now["t"] += 0.02
    assert get() == "two" and len(reads) == 2


class _Big(http.server.BaseHTTPRequestHandler):
    def do_GET(self):  # noqa: N802 (http.server's name)
        size = int(self.path.strip("/"))
        body = b"{" + b" " * (size - 2) + b"}"
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def test_a_provider_answer_is_read_up_to_its_bound():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Big)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        base = f"http://127.0.0.1:{server.server_address[1]}"
        status, body, _ = identity._http(f"{base}/{identity.MAX_PROVIDER_BYTES}")
        assert status == 200 and len(body) == identity.MAX_PROVIDER_BYTES
        with pytest.raises(identity.SigninError, match="too large"):
            identity._http(f"{base}/{identity.MAX_PROVIDER_BYTES + 1}")
    finally:
        server.shutdown()


def test_identity_headers_sent_by_the_visitor_are_replaced():
    policy = _action()
    cookie = _session(policy, T0, T0, T0 + 86400)
    headers = [
        ("host", "app.test:8080"),
        ("cookie", f"ngrok_session_oauth={cookie}"),
        ("ngrok-auth-user-email", "mallory@evil.test"),
    ]
    req = Request.from_target("GET", "http", "app.test", "/", headers)
    conn = Conn(
        "10.0.0.1", 5000, endpoint=Endpoint(url="http://app.test:8080", account_id="acct_1")
    )
    state = policy.new_state()
    out = policy.on_http_request(conn, req, state)
    traffic = SimpleNamespace(req=req, conn=conn, state=state)
    assert asyncio.run(identity.handle(traffic, out, clock=lambda: T0)) is None
    assert req.get_header("ngrok-auth-user-email") == ["a@x.test"]
    assert policy.on_http_request(conn, req, state).kind != RESPOND  # resumes after it


def test_cors_preflight_passes_only_when_allowed():
    for allowed, expected in ((True, "continue"), (False, IDENTITY)):
        policy = _action(allow_cors_preflight=allowed)
        req = Request.from_target(
            "OPTIONS",
            "http",
            "app.test",
            "/api",
            [("host", "app.test"), ("access-control-request-method", "POST")],
        )
        conn = Conn("10.0.0.1", 1, endpoint=Endpoint(url="http://app.test", account_id="acct_1"))
        assert policy.on_http_request(conn, req, policy.new_state()).kind == expected


def test_auth_id_scopes_the_cookies_and_the_special_paths(monkeypatch):
    ended = []
    monkeypatch.setattr(identity.app_sessions, "end", lambda a, s: ended.append(s))
    policy = _action(auth_id="corp")
    answer, _ = _run(policy, "/page")
    assert "ngrok_login_oauth_corp" in _set_cookies(answer)
    cookie = identity.seal(
        identity._binding(
            Endpoint(url="http://app.test:8080", account_id="acct_1"), "oauth", "corp"
        ),
        "session",
        {
            "sid": "appses_" + "b" * 27,
            "iat": T0,
            "seen": T0,
            "exp": T0 + 600,
            "sub": "u",
            "em": "",
            "nm": "",
        },
    )
    # a logout for another provider is not this action's: the session stays
    other, _ = _run(policy, "/ngrok/logout?auth_id=other", {"ngrok_session_oauth_corp": cookie})
    assert other is None
    mine, _ = _run(policy, "/ngrok/logout?auth_id=corp", {"ngrok_session_oauth_corp": cookie})
    assert mine.status_code == 200
    assert "ngrok_session_oauth_corp=;" in dict(mine.headers)["set-cookie"]
    assert ended == ["appses_" + "b" * 27]  # and the session ended in the store


def test_logout_clears_the_cookie_even_when_the_store_fails(monkeypatch):
    def broken(account, sid):
        raise OSError("store down")

    monkeypatch.setattr(identity.app_sessions, "end", broken)
    policy = _action()
    cookie = _session(policy, T0, T0, T0 + 600)
    out, _ = _run(policy, "/ngrok/logout", {"ngrok_session_oauth": cookie})
    assert out.status_code == 200 and "Max-Age=0" in dict(out.headers)["set-cookie"]
    # this instance refuses the session at once, whatever the store says
    assert asyncio.run(identity.not_revoked("acct_1", "appses_" + "a" * 27)) is False


def test_the_derived_cipher_cache_is_bounded(monkeypatch):
    monkeypatch.setattr(identity, "CIPHER_ENTRIES", 5)
    identity._ciphers.clear()
    for index in range(12):
        binding = identity._binding(
            Endpoint(url=f"http://e{index}.test", account_id="a"), "oidc", ""
        )
        sealed = identity.seal(binding, "session", {"n": index})
        assert identity.unseal(binding, "session", sealed) == {"n": index}
    assert len(identity._ciphers) == 5
