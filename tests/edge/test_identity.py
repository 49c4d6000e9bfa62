"""Sign-in at the edge (edge/identity.py, docs/IDENTITY.md) with a real identity provider as
a process (tests/edge/oidc_provider.py: authlib's authorization server), the official Python
SDK serving the endpoint, and a browser-like client (cookies per host, redirects followed)."""

import base64
import json
import time
import urllib.parse

import pytest
import requests

from tests.edge import support
from tests.edge.conftest import BASE_DOMAIN, CLIENT_ID, CLIENT_SECRET
from tests.edge.test_edge_sdk import _bound, _credential, _host


class Browser:
    """Cookies per host name, redirects followed; names under BASE_DOMAIN go to the edge."""

    def __init__(self, edge):
        self.edge = edge
        self.jar = {}
        self.visited = []

    def request(self, method, url, data=None, follow=True, headers=None):
        for _ in range(10):
            parts = urllib.parse.urlsplit(url)
            host = parts.hostname
            target = urllib.parse.urlunsplit(("", "", parts.path or "/", parts.query, ""))
            sent = dict(headers or {})
            if host.endswith(BASE_DOMAIN):
                wire = f"http://127.0.0.1:{self.edge.http_port}{target}"
                sent["Host"] = parts.netloc
            else:
                wire = url
            cookies = self.jar.get(host, {})
            if cookies:
                sent["Cookie"] = "; ".join(f"{k}={v}" for k, v in cookies.items())
            try:
                resp = requests.request(
                    method, wire, data=data, headers=sent, allow_redirects=False, timeout=30
                )
            except requests.ConnectionError as exc:
                raise AssertionError(
                    f"{exc} after {self.visited}; edge log: {self.edge.log()[-3000:]}"
                ) from None
            self.visited.append((method, url, resp.status_code))
            for line in resp.raw.headers.getlist("Set-Cookie"):
                pair, _, attrs = line.partition(";")
                name, _, value = pair.strip().partition("=")
                if "max-age=0" in attrs.lower().replace(" ", ""):
                    self.jar.setdefault(host, {}).pop(name, None)
                else:
                    self.jar.setdefault(host, {})[name] = value
            if not follow or resp.status_code not in (301, 302, 303, 307, 308):
                return resp
            url = urllib.parse.urljoin(url, resp.headers["location"])
            method, data = "GET", None
        raise AssertionError(f"too many redirects: {self.visited}")

    def sign_in(self, url, email):
        """Open ``url``; at the provider's form, sign in as ``email``; the final answer."""
        form = self.request("GET", url)
        assert "<form" in form.text, (
            form.status_code,
            form.text[:500],
            self.visited,
            self.edge.log()[-2500:],
        )
        action = form.text.split('action="', 1)[1].split('"', 1)[0].replace("&amp;", "&")
        authorize = urllib.parse.urljoin(self.visited[-1][1], action)
        return self.request("POST", authorize, data={"email": email})


def _policy(idp, extra_rules=(), **config):
    action = {
        "type": "openid-connect",
        "config": {
            "issuer_url": idp,
            "client_id": CLIENT_ID,
            "client_secret": CLIENT_SECRET,
            **config,
        },
    }
    return {
        "on_http_request": [
            {"actions": [action]},
            *extra_rules,
            {
                "actions": [
                    {
                        "type": "add-headers",
                        "config": {"headers": {"x-who": "${actions.ngrok.oidc.identity.email}"}},
                    }
                ]
            },
        ]
    }


def _endpoint(edge, account, agents, options):
    agent = agents(edge, _credential(account)["token"], [{"proto": "http", "options": options}])
    return _host(_bound(agent.start())[0]["url"])


def _origin(edge, host):
    return f"http://{host}:{edge.http_port}"


def _headers(resp):
    return {k.lower(): v for k, v in resp.json()["headers"].items()}


def test_sign_in_through_the_edge_reaches_the_upstream_with_the_identity(
    edge, account, agents, idp
):
    host = _endpoint(edge, account, agents, {"traffic_policy": [json.dumps(_policy(idp))]})
    browser = Browser(edge)
    resp = browser.sign_in(_origin(edge, host) + "/echo?x=1", "alice@example.com")
    assert resp.status_code == 200, (resp.text, browser.visited)
    seen = _headers(resp)
    assert seen["ngrok-auth-user-email"] == "alice@example.com"
    assert seen["ngrok-auth-user-id"] == "u-alice"
    assert seen["ngrok-auth-user-name"] == "Alice"
    assert seen["x-who"] == "alice@example.com"  # a later rule saw the variable
    assert resp.json()["path"].startswith("/echo") if "path" in resp.json() else True
    # went: endpoint -> provider -> callback -> back to the page asked for, query included
    assert browser.visited[-1][1].endswith("/echo?x=1")
    # the authorization request carried state, nonce and PKCE (S256)
    authorize = [u for _, u, _ in browser.visited if "/authorize?" in u][0]
    query = urllib.parse.parse_qs(urllib.parse.urlsplit(authorize).query)
    assert query["code_challenge_method"] == ["S256"] and len(query["code_challenge"][0]) == 43
    assert query["state"][0] and query["nonce"][0]
    assert query["redirect_uri"] == [_origin(edge, host) + "/ngrok/callback"]
    # signed in: the next request goes straight through, no provider involved
    before = len(browser.visited)
    again = browser.request("GET", _origin(edge, host) + "/echo")
    assert again.status_code == 200 and len(browser.visited) == before + 1
    # a visitor's own identity headers never reach the upstream
    spoof = browser.request(
        "GET",
        _origin(edge, host) + "/echo",
        headers={"ngrok-auth-user-email": "mallory@evil.test"},
    )
    assert _headers(spoof)["ngrok-auth-user-email"] == "alice@example.com"


def test_the_core_carries_a_sign_in_endpoints_requests_python_deciding_each(
    edge, account, agents, idp
):
    """A sign-in policy's route is decided (edge/decided.py): the compiled core carries every
    request, the sign-in's steps (the provider's redirect, the callback's token exchange, the
    session's check) run in Python for each, none of the connections handed to Python."""
    host = _endpoint(edge, account, agents, {"traffic_policy": [json.dumps(_policy(idp))]})

    def core(name):
        return support.metric(edge.metrics(), name)

    def redirected_by_the_core():  # the route is pushed a moment after the bind
        before = core("edge_core_http_requests_total")
        first = Browser(edge).request("GET", _origin(edge, host) + "/echo", follow=False)
        assert first.status_code in (302, 303, 307), first.status_code
        time.sleep(0.2)
        return core("edge_core_http_requests_total") > before

    assert support.wait(redirected_by_the_core)
    served, handed = (
        core("edge_core_http_requests_total"),
        core("edge_core_http_handed_over_total"),
    )
    browser = Browser(edge)
    resp = browser.sign_in(_origin(edge, host) + "/echo", "alice@example.com")
    assert resp.status_code == 200 and _headers(resp)["x-who"] == "alice@example.com"
    for _ in range(3):
        again = browser.request("GET", _origin(edge, host) + "/echo")
        assert _headers(again)["ngrok-auth-user-email"] == "alice@example.com"
    time.sleep(0.5)  # the core counts an exchange just after answering it
    # the first visit (to the provider), the callback, the page, and three more: the core's
    assert core("edge_core_http_requests_total") - served >= 6
    assert core("edge_core_http_handed_over_total") == handed


def test_not_signed_in_is_sent_to_the_provider_and_the_upstream_never_sees_it(
    edge, account, agents, idp
):
    host = _endpoint(edge, account, agents, {"traffic_policy": [json.dumps(_policy(idp))]})
    resp = edge.http("GET", host, "/echo", allow_redirects=False)
    assert resp.status_code == 302
    assert resp.headers["location"].startswith(idp + "/authorize?")
    assert "ngrok_login_oidc=" in resp.headers["set-cookie"]
    assert (
        "HttpOnly" in resp.headers["set-cookie"] and "SameSite=Lax" in resp.headers["set-cookie"]
    )


def test_wrong_email_domain_is_denied_by_an_expression(edge, account, agents, idp):
    deny = {
        "expressions": ["!actions.ngrok.oidc.identity.email.endsWith('@example.com')"],
        "actions": [{"type": "deny", "config": {"status_code": 403}}],
    }
    host = _endpoint(edge, account, agents, {"traffic_policy": [json.dumps(_policy(idp, [deny]))]})
    assert (
        Browser(edge).sign_in(_origin(edge, host) + "/echo", "eve@other.test").status_code == 403
    )
    assert (
        Browser(edge).sign_in(_origin(edge, host) + "/echo", "bob@example.com").status_code == 200
    )


def test_sdk_oidc_option_becomes_the_same_rules_with_allowed_domains(edge, account, agents, idp):
    host = _endpoint(
        edge, account, agents, {"oidc": [idp, CLIENT_ID, CLIENT_SECRET, None, ["example.com"]]}
    )
    ok = Browser(edge).sign_in(_origin(edge, host) + "/echo", "carol@example.com")
    assert ok.status_code == 200 and _headers(ok)["ngrok-auth-user-email"] == "carol@example.com"
    assert (
        Browser(edge).sign_in(_origin(edge, host) + "/echo", "dave@elsewhere.test").status_code
        == 403
    )


def _session_cookie(browser, host):
    return browser.jar[host]["ngrok_session_oidc"]


def test_a_tampered_session_cookie_is_refused(edge, account, agents, idp):
    host = _endpoint(edge, account, agents, {"traffic_policy": [json.dumps(_policy(idp))]})
    browser = Browser(edge)
    assert browser.sign_in(_origin(edge, host) + "/echo", "alice@example.com").status_code == 200
    good = _session_cookie(browser, host)
    raw = bytearray(base64.urlsafe_b64decode(good + "=" * (-len(good) % 4)))
    for index in (0, 13, len(raw) // 2, len(raw) - 1):  # nonce, ciphertext, tag
        changed = bytearray(raw)
        changed[index] ^= 0x01
        bad = base64.urlsafe_b64encode(bytes(changed)).decode().rstrip("=")
        resp = edge.http(
            "GET",
            host,
            "/echo",
            allow_redirects=False,
            headers={"Cookie": f"ngrok_session_oidc={bad}"},
        )
        assert resp.status_code == 302 and resp.headers["location"].startswith(idp)
    resp = edge.http("GET", host, "/echo", headers={"Cookie": f"ngrok_session_oidc={good}"})
    assert resp.status_code == 200


def test_a_session_of_one_endpoint_does_not_open_another(edge, account, agents, idp):
    first = _endpoint(edge, account, agents, {"traffic_policy": [json.dumps(_policy(idp))]})
    second = _endpoint(edge, account, agents, {"traffic_policy": [json.dumps(_policy(idp))]})
    browser = Browser(edge)
    assert browser.sign_in(_origin(edge, first) + "/echo", "alice@example.com").status_code == 200
    cookie = _session_cookie(browser, first)
    resp = edge.http(
        "GET",
        second,
        "/echo",
        allow_redirects=False,
        headers={"Cookie": f"ngrok_session_oidc={cookie}"},
    )
    assert resp.status_code == 302


def test_logout_clears_the_session(edge, account, agents, idp):
    host = _endpoint(edge, account, agents, {"traffic_policy": [json.dumps(_policy(idp))]})
    browser = Browser(edge)
    assert browser.sign_in(_origin(edge, host) + "/echo", "alice@example.com").status_code == 200
    stolen = _session_cookie(browser, host)
    out = browser.request("GET", _origin(edge, host) + "/ngrok/logout")
    assert out.status_code == 200 and "signed out" in out.text
    assert "ngrok_session_oidc" not in browser.jar[host]
    resp = browser.request("GET", _origin(edge, host) + "/echo", follow=False)
    assert resp.status_code == 302 and resp.headers["location"].startswith(idp)
    # the session ended in the store too: its cookie, replayed, serves no more
    replay = edge.http(
        "GET",
        host,
        "/echo",
        allow_redirects=False,
        headers={"Cookie": f"ngrok_session_oidc={stolen}"},
    )
    assert replay.status_code == 302


def _start_login(edge, host):
    resp = edge.http("GET", host, "/echo", allow_redirects=False)
    login = resp.headers["set-cookie"].split(";", 1)[0]
    query = urllib.parse.parse_qs(urllib.parse.urlsplit(resp.headers["location"]).query)
    return login, query["state"][0]


def test_a_callback_whose_state_does_not_match_is_refused(edge, account, agents, idp):
    host = _endpoint(edge, account, agents, {"traffic_policy": [json.dumps(_policy(idp))]})
    login, state = _start_login(edge, host)
    redeemed = requests.get(idp + "/codes", timeout=10).json()["redeemed"]
    wrong = edge.http(
        "GET", host, f"/ngrok/callback?code=abc&state={state}x", headers={"Cookie": login}
    )
    assert wrong.status_code == 400 and wrong.headers["ngrok-error-code"] == "ERR_NGROK_3124"
    missing = edge.http("GET", host, f"/ngrok/callback?code=abc&state={state}")
    assert missing.status_code == 400 and missing.headers["ngrok-error-code"] == "ERR_NGROK_3120"
    # a forged code with the right state goes to the provider, which refuses it
    forged = edge.http(
        "GET", host, f"/ngrok/callback?code=forged&state={state}", headers={"Cookie": login}
    )
    assert forged.status_code == 403 and forged.headers["ngrok-error-code"] == "ERR_NGROK_3300"
    assert requests.get(idp + "/codes", timeout=10).json()["redeemed"] == redeemed


@pytest.mark.parametrize(
    "back", ["//evil.test/x", "https://evil.test/", "/\\evil.test", "http:evil.test"]
)
def test_no_open_redirect_after_sign_in(edge, account, agents, idp, back):
    host = _endpoint(edge, account, agents, {"traffic_policy": [json.dumps(_policy(idp))]})
    browser = Browser(edge)
    resp = browser.sign_in(
        _origin(edge, host) + "/ngrok/login?redirect_path=" + urllib.parse.quote(back, safe=""),
        "alice@example.com",
    )
    assert resp.status_code == 200
    assert browser.visited[-1][1] == _origin(edge, host) + "/"


def test_login_path_forces_reauthentication_and_goes_back_to_the_path(edge, account, agents, idp):
    host = _endpoint(edge, account, agents, {"traffic_policy": [json.dumps(_policy(idp))]})
    resp = edge.http("GET", host, "/ngrok/login?redirect_path=/echo/here", allow_redirects=False)
    assert resp.status_code == 302
    assert "prompt=login" in resp.headers["location"]
    browser = Browser(edge)
    final = browser.sign_in(
        _origin(edge, host) + "/ngrok/login?redirect_path=/echo/here", "alice@example.com"
    )
    assert final.status_code == 200 and browser.visited[-1][1].endswith("/echo/here")


def test_oauth_action_against_the_provider_as_an_oauth2_server(edge, account, agents, idp):
    action = {
        "type": "oauth",
        "config": {
            "provider": "oauth2",
            "client_id": CLIENT_ID,
            "client_secret": CLIENT_SECRET,
            "authorization_url": idp + "/authorize",
            "token_url": idp + "/token",
            "userinfo_url": idp + "/userinfo",
            "scopes": ["email", "profile"],
        },
    }
    policy = {
        "on_http_request": [
            {"actions": [action]},
            {
                "expressions": ["actions.ngrok.oauth.identity.email != 'alice@example.com'"],
                "actions": [{"type": "deny", "config": {"status_code": 403}}],
            },
        ]
    }
    host = _endpoint(edge, account, agents, {"traffic_policy": [json.dumps(policy)]})
    ok = Browser(edge).sign_in(_origin(edge, host) + "/echo", "alice@example.com")
    assert ok.status_code == 200
    assert _headers(ok)["ngrok-auth-user-email"] == "alice@example.com"
    assert (
        Browser(edge).sign_in(_origin(edge, host) + "/echo", "bob@example.com").status_code == 403
    )


def _vault_secret(account, vault, name, value):
    assert account.admin.post("/vaults", {"name": vault}).status == 201
    vault_id = account.admin.get("/vaults").json["vaults"][0]["id"]
    resp = account.admin.post(
        "/vault_secrets", {"name": name, "value": value, "vault_id": vault_id}
    )
    assert resp.status == 201, resp.json
    return resp.json["id"]


def test_the_client_secret_comes_from_a_vault(edge, account, agents, idp):
    _vault_secret(account, "oidc", "client-secret", CLIENT_SECRET)
    policy = _policy(idp, client_secret="${secrets.get('oidc', 'client-secret')}")
    host = _endpoint(edge, account, agents, {"traffic_policy": [json.dumps(policy)]})
    resp = Browser(edge).sign_in(_origin(edge, host) + "/echo", "alice@example.com")
    assert resp.status_code == 200, resp.text
    assert _headers(resp)["ngrok-auth-user-email"] == "alice@example.com"


def test_a_policy_naming_a_missing_secret_refuses_the_bind(edge, account, agents, idp):
    from tests.edge.test_edge_sdk import _refusal

    policy = _policy(idp, client_secret="${secrets.get('nowhere', 'client-secret')}")
    agent = agents(
        edge,
        _credential(account)["token"],
        [{"proto": "http", "options": {"traffic_policy": [json.dumps(policy)]}}],
    )
    message = _refusal(agent.start(), "bind")
    assert "ERR_NGROK_2201" in message and "client-secret" in message


def _client(api, account):
    import ngrok  # the official API client (ngrok-api)

    return ngrok.Client(account.admin.token, base_url=api.base_url)


def test_sessions_and_users_are_listed_and_revoking_signs_out_at_the_edge(
    edge, account, agents, idp, api
):
    from edge.identity import REVOCATION_SECONDS

    host = _endpoint(edge, account, agents, {"traffic_policy": [json.dumps(_policy(idp))]})
    browser, other = Browser(edge), Browser(edge)
    assert browser.sign_in(_origin(edge, host) + "/echo", "alice@example.com").status_code == 200
    assert other.sign_in(_origin(edge, host) + "/echo", "bob@example.com").status_code == 200
    client = _client(api, account)
    sessions = client.application_sessions.list().application_sessions
    assert len(sessions) == 2
    users = {u.email: u for u in client.application_users.list().application_users}
    assert set(users) == {"alice@example.com", "bob@example.com"}
    alice = users["alice@example.com"]
    assert alice.provider_user_id == "u-alice" and alice.identity_provider.url == idp
    mine = [s for s in sessions if s.application_user.id == alice.id][0]
    assert mine.public_url == _origin(edge, host)
    assert client.application_sessions.get(mine.id).id == mine.id
    # revoke alice's session: she is signed out at the edge within the bound; bob is not
    client.application_sessions.delete(mine.id)
    deadline = time.time() + REVOCATION_SECONDS + 20  # the bound, plus a loaded machine
    while time.time() < deadline:
        resp = browser.request("GET", _origin(edge, host) + "/echo", follow=False)
        if resp.status_code == 302:
            break
        time.sleep(0.5)
    assert resp.status_code == 302 and resp.headers["location"].startswith(idp)
    assert other.request("GET", _origin(edge, host) + "/echo").status_code == 200
    # deleting a user deletes its sessions
    client.application_users.delete(users["bob@example.com"].id)
    assert client.application_sessions.list().application_sessions == []
    deadline = time.time() + REVOCATION_SECONDS + 20
    while time.time() < deadline:
        resp = other.request("GET", _origin(edge, host) + "/echo", follow=False)
        if resp.status_code == 302:
            break
        time.sleep(0.5)
    assert resp.status_code == 302


def test_sessions_of_one_account_are_not_another_accounts(edge, account, agents, idp, api):
    import ngrok

    host = _endpoint(edge, account, agents, {"traffic_policy": [json.dumps(_policy(idp))]})
    assert (
        Browser(edge).sign_in(_origin(edge, host) + "/echo", "alice@example.com").status_code
        == 200
    )
    session = _client(api, account).application_sessions.list().application_sessions[0]
    stranger = _client(api, api.new_account())
    assert stranger.application_sessions.list().application_sessions == []
    with pytest.raises(ngrok.Error) as info:
        stranger.application_sessions.delete(session.id)
    assert info.value.http_status_code == 404


def test_over_https_and_http2_the_same_session_serves(edge, account, agents, idp):
    """HTTP/2 streams run the same request path (edge.h2front): not signed in is the
    redirect, the session cookie signed in over HTTP/1.1 serves there too."""
    host = _endpoint(edge, account, agents, {"traffic_policy": [json.dumps(_policy(idp))]})
    done = edge.curl_https(host, "/echo", "--http2", "-o", "/dev/null", "-D", "-")
    assert done.returncode == 0, done.stderr
    assert "HTTP/2 302" in done.stdout and f"location: {idp}/authorize?" in done.stdout
    browser = Browser(edge)
    assert browser.sign_in(_origin(edge, host) + "/echo", "alice@example.com").status_code == 200
    cookie = _session_cookie(browser, host)
    done = edge.curl_https(host, "/echo", "--http2", "-H", f"Cookie: ngrok_session_oidc={cookie}")
    body, code = done.stdout.rsplit("\n", 1)
    assert code == "200", done.stdout[-500:]
    assert (
        json.loads(body)["headers"].get(
            "Ngrok-Auth-User-Email", json.loads(body)["headers"].get("ngrok-auth-user-email")
        )
        == "alice@example.com"
    )


def test_javascript_sdk_oidc_option_signs_in_through_the_edge(node_agents, edge, account, idp):
    """The official JavaScript SDK's forward() with oidc_* options (what a user walks
    through in a browser)."""
    agent = node_agents(
        edge,
        _credential(account)["token"],
        options={
            "oidc_issuer_url": idp,
            "oidc_client_id": CLIENT_ID,
            "oidc_client_secret": CLIENT_SECRET,
            "oidc_allow_domains": ["example.com"],
        },
    )
    assert "url" in agent.out, agent.out
    host = _host(agent.out["url"])
    ok = Browser(edge).sign_in(_origin(edge, host) + "/from-node", "erin@example.com")
    assert ok.status_code == 200 and ok.json()["sdk"] == "node"
    assert ok.json()["headers"]["ngrok-auth-user-email"] == "erin@example.com"
    assert Browser(edge).sign_in(_origin(edge, host) + "/", "frank@other.test").status_code == 403


def test_a_cloud_endpoint_with_openid_connect_and_a_vault_secret(edge, account, agents, idp, api):
    """Made with the official API client: the vault, the secret, a cloud endpoint whose
    policy signs in with the vault-held client secret, then forwards to an agent's internal
    endpoint with the identity."""
    import uuid

    client = _client(api, account)
    vault = client.vaults.create(name="idp")
    client.secrets.create(name="oidc-secret", value=CLIENT_SECRET, vault_id=vault.id)
    internal = f"svc-{uuid.uuid4().hex[:8]}.internal"
    agent = agents(edge, _credential(account)["token"], [{"proto": "http", "domain": internal}])
    _bound(agent.start())
    policy = {
        "on_http_request": [
            {
                "actions": [
                    {
                        "type": "openid-connect",
                        "config": {
                            "issuer_url": idp,
                            "client_id": CLIENT_ID,
                            "client_secret": "${secrets.get('idp', 'oidc-secret')}",
                        },
                    }
                ]
            },
            {
                "expressions": ["!actions.ngrok.oidc.identity.email.endsWith('@example.com')"],
                "actions": [{"type": "deny", "config": {"status_code": 403}}],
            },
            {"actions": [{"type": "forward-internal", "config": {"url": f"https://{internal}"}}]},
        ]
    }
    host = f"cloud-{uuid.uuid4().hex[:8]}.{BASE_DOMAIN}"
    client.endpoints.create(url=f"https://{host}", type="cloud", traffic_policy=json.dumps(policy))
    deadline = time.time() + 30
    while edge.http("GET", host, "/").status_code == 404 and time.time() < deadline:
        time.sleep(0.5)  # the edge's routing cache
    ok = Browser(edge).sign_in(_origin(edge, host) + "/via-cloud", "gina@example.com")
    assert ok.status_code == 200, ok.text
    assert _headers(ok)["ngrok-auth-user-email"] == "gina@example.com"
    assert Browser(edge).sign_in(_origin(edge, host) + "/", "hank@other.test").status_code == 403
