"""/abuse_reports at both levels, and the operator command that sets hostname statuses."""

import json
import os
import subprocess
import sys

import pytest

from chalicelib.core import errors, ids
from stacks.paths import PROJECT_DIR
from chalicelib.core import abuse

REPORT_FIELDS = {"id", "uri", "created_at", "urls", "metadata", "status", "hostnames"}


@pytest.fixture
def reporter(api):
    return api.new_account(reporter=True)


def set_status(api, account_id, report_id, hostname, status):
    """The operator command, in this process (in-process level) or as a process (HTTP)."""
    argv = [
        "set-hostname-status",
        "--account",
        account_id,
        "--report",
        report_id,
        "--hostname",
        hostname,
        "--status",
        status,
    ]
    if api.level == "http":
        env = api.stack.store_env()
        done = subprocess.run(
            [sys.executable, "-m", "chalicelib.admin", *argv],
            cwd=PROJECT_DIR,
            env=env,
            capture_output=True,
            text=True,
        )
        return done.returncode, done.stdout, done.stderr
    from chalicelib import admin

    rc = admin.main(argv)
    return rc, "", ""


def test_create_report_returns_201_with_pending_hostnames(reporter):
    urls = [
        "https://Bad.Example.com/phish?x=1",
        "http://bad.example.com:8080/other",
        "https://10.0.0.1/x",
        "http://[2001:db8::1]:80/y",
        "https://other.example.org",
    ]
    created = reporter.member.post("/abuse_reports", {"urls": urls, "metadata": "ticket 1"})
    assert created.status == 201, created
    body = created.json
    assert set(body) == REPORT_FIELDS
    assert ids.is_valid(body["id"], "abrp") and body["uri"].endswith(
        f"/abuse_reports/{body['id']}"
    )
    assert body["urls"] == urls and body["metadata"] == "ticket 1" and body["status"] == "PENDING"
    assert body["hostnames"] == [
        {"hostname": h, "status": "PENDING"}
        for h in ["bad.example.com", "10.0.0.1", "2001:db8::1", "other.example.org"]
    ]
    assert reporter.admin.get(f"/abuse_reports/{body['id']}").json == body


def test_metadata_defaults_to_empty(reporter):
    created = reporter.admin.post("/abuse_reports", {"urls": ["http://a.example.com"]})
    assert created.status == 201 and created.json["metadata"] == ""


@pytest.mark.parametrize(
    "url",
    [
        "ftp://a.example.com/x",
        "a.example.com/x",
        "/relative",
        "https://",
        "http:///path",
        "https://exa mple.com/",
        "https://a..example.com/",
        "https://a.example.com:99999/",
        "https://a.example.com:abc/",
        "https://[nope]/",
        "mailto:x@example.com",
        "",
        "https://a_b.example.com/",
        "https://a.example.com:/",
        "https://a.example.com/" + "x" * 2048,
    ],
)
def test_bad_url_returns_400_naming_it(reporter, url):
    resp = reporter.admin.post("/abuse_reports", {"urls": ["https://ok.example.com", url]})
    assert resp.status == 400, resp
    assert resp.json["details"]["field"].startswith("urls")
    assert url[:40] in resp.json["msg"] or "limit" in resp.json["msg"]


@pytest.mark.parametrize(
    "body",
    [
        {},
        {"urls": []},
        {"urls": "https://a.example.com"},
        {"urls": [5]},
        {"urls": ["https://a.example.com"] * 101},
        {"urls": ["https://a.example.com"], "metadata": "x" * 4097},
        {"urls": ["https://a.example.com"], "status": "PROCESSED"},
    ],
)
def test_bad_body_returns_400(reporter, body):
    assert reporter.admin.post("/abuse_reports", body).status == 400


def test_limits_are_inclusive(reporter):
    urls = [f"https://h{i}.example.com/" for i in range(100)]
    urls[0] = "https://a.example.com/" + "x" * (2048 - len("https://a.example.com/"))
    created = reporter.admin.post("/abuse_reports", {"urls": urls, "metadata": "m" * 4096})
    assert created.status == 201 and len(created.json["hostnames"]) == 100


def test_non_reporter_account_gets_403(account, reporter):
    report = reporter.admin.post("/abuse_reports", {"urls": ["https://a.example.com"]}).json
    for caller in (account.admin, account.member):
        resp = caller.post("/abuse_reports", {"urls": ["https://a.example.com"]})
        assert resp.status == 403 and resp.json["error_code"] == errors.NOT_ABUSE_REPORTER
        assert resp.json["msg"] == (
            f"This is a valid API key, but the account {account.id} "
            "is not authorized to submit or view abuse reports."
        )
        assert caller.post("/abuse_reports", {"bad": 1}).status == 403  # before the body
        assert caller.get(f"/abuse_reports/{report['id']}").status == 403
        assert caller.get("/abuse_reports/abrp_x").status == 403


def test_other_reporters_reports_are_not_found(api, reporter):
    other = api.new_account(reporter=True)
    report = reporter.admin.post("/abuse_reports", {"urls": ["https://a.example.com"]}).json
    assert other.admin.get(f"/abuse_reports/{report['id']}").status == 404


@pytest.mark.parametrize(
    "report_id",
    ["abrp_x", "nope", "cr_0ERYqBR5B9RMvMY4cZCztl2IB7s", "abrp_0ERYqBR5B9RMvMY4cZCztl2IB7s"],
)
def test_malformed_or_unknown_id_returns_404(reporter, report_id):
    assert reporter.admin.get(f"/abuse_reports/{report_id}").status == 404


def test_only_create_and_get_exist(reporter):
    report = reporter.admin.post("/abuse_reports", {"urls": ["https://a.example.com"]}).json
    assert reporter.admin.get("/abuse_reports").status == 405
    assert reporter.admin.delete(f"/abuse_reports/{report['id']}").status == 405
    assert reporter.admin.patch(f"/abuse_reports/{report['id']}", {}).status == 405


def test_operator_sets_hostname_status_and_report_status_follows(api, reporter):
    report = reporter.admin.post(
        "/abuse_reports", {"urls": ["https://a.example.com/1", "https://b.example.com/2"]}
    ).json
    path = f"/abuse_reports/{report['id']}"

    def statuses():
        body = reporter.admin.get(path).json
        return body["status"], [h["status"] for h in body["hostnames"]]

    rc, out, err = set_status(api, reporter.id, report["id"], "A.example.com", "BANNED")
    assert rc == 0, err
    if out:
        assert json.loads(out)["status"] == "PARTIALLY_PROCESSED"
    assert statuses() == ("PARTIALLY_PROCESSED", ["BANNED", "PENDING"])
    assert set_status(api, reporter.id, report["id"], "b.example.com", "ignore")[0] == 0
    assert statuses() == ("PROCESSED", ["BANNED", "IGNORE"])
    assert set_status(api, reporter.id, report["id"], "a.example.com", "UNBANNED")[0] == 0
    assert statuses() == ("PROCESSED", ["UNBANNED", "IGNORE"])
    assert set_status(api, reporter.id, report["id"], "a.example.com", "PENDING")[0] == 0
    assert set_status(api, reporter.id, report["id"], "b.example.com", "PENDING")[0] == 0
    assert statuses() == ("PENDING", ["PENDING", "PENDING"])
    # unknown hostname or report, or another account: an error, nothing changes
    assert set_status(api, reporter.id, report["id"], "c.example.com", "BANNED")[0] == 1
    assert (
        set_status(
            api, reporter.id, "abrp_0ERYqBR5B9RMvMY4cZCztl2IB7s", "a.example.com", "BANNED"
        )[0]
        == 1
    )
    assert statuses() == ("PENDING", ["PENDING", "PENDING"])


def _banned(api):
    """The ban index as the edge reads it."""
    if api.level == "http":
        with api.service_store():
            return sorted(abuse.banned_hosts())
    return sorted(abuse.banned_hosts())


def test_a_hostname_is_banned_while_any_report_bans_it(api, reporter):
    host = f"ban-{os.urandom(4).hex()}.example.com"
    first = reporter.admin.post("/abuse_reports", {"urls": [f"https://{host}/a"]}).json
    second = reporter.admin.post("/abuse_reports", {"urls": [f"https://{host}/b"]}).json
    assert host not in _banned(api)
    assert set_status(api, reporter.id, first["id"], host, "BANNED")[0] == 0
    assert host in _banned(api)
    assert set_status(api, reporter.id, second["id"], host, "BANNED")[0] == 0
    assert set_status(api, reporter.id, first["id"], host, "UNBANNED")[0] == 0
    assert host in _banned(api)  # the second report still bans it
    assert set_status(api, reporter.id, second["id"], host, "IGNORE")[0] == 0
    assert host not in _banned(api)
    assert set_status(api, reporter.id, second["id"], host, "BANNED")[0] == 0
    assert set_status(api, reporter.id, second["id"], host, "PENDING")[0] == 0
    assert host not in _banned(api)
