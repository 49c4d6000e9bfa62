"""How `make run` serves the dashboard's files (scripts/dashboard_static.py): under
/dashboard/ only, with a strict Content-Security-Policy, nothing outside the folder."""

import os
import re

import requests


from scripts import dashboard_static


def _get(stack, path, method="GET"):
    return requests.request(method, stack.api_url + path, allow_redirects=False, timeout=10)


def test_index_and_files_with_the_strict_policy(stack):
    assert stack.dashboard_url == stack.api_url + "/dashboard/"
    for path, kind in (
        ("/dashboard/", "text/html"),
        ("/dashboard/js/main.js", "text/javascript"),
        ("/dashboard/app.css", "text/css"),
        ("/dashboard/favicon.svg", "image/svg+xml"),
    ):
        resp = _get(stack, path)
        assert resp.status_code == 200, path
        assert resp.headers["Content-Type"].startswith(kind)
        csp = resp.headers["Content-Security-Policy"]
        assert csp == dashboard_static.CSP
        assert "default-src 'none'" in csp and "script-src 'self'" in csp
        assert "unsafe-inline" not in csp and "unsafe-eval" not in csp
        assert "frame-ancestors 'none'" in csp
        assert resp.headers["X-Content-Type-Options"] == "nosniff"
        assert resp.headers["Referrer-Policy"] == "no-referrer"


def test_redirect_and_refusals(stack):
    resp = _get(stack, "/dashboard")
    assert resp.status_code == 308 and resp.headers["Location"] == "/dashboard/"
    for path in (
        "/dashboard/../app.py",
        "/dashboard/%2e%2e/app.py",
        "/dashboard/js/../../app.py",
        "/dashboard/.hidden",
        "/dashboard/nope.html",
        "/dashboard/js/",
        "/dashboard/%00",
        "/dashboard//etc/passwd",
    ):
        assert _get(stack, path).status_code == 404, path
    post = _get(stack, "/dashboard/", method="POST")
    assert post.status_code == 405 and post.headers["Allow"] == "GET, HEAD"


def test_the_api_is_unchanged_beside_it(stack):
    resp = requests.get(stack.api_url + "/credentials", timeout=10)
    assert resp.status_code == 401 and resp.json()["error_code"]
    assert "Content-Security-Policy" not in resp.headers


def test_no_file_names_another_origin():
    """No CDN, no runtime fetch elsewhere: every file is the folder's own."""
    for folder, _, names in os.walk(dashboard_static.ROOT):
        for name in names:
            text = open(os.path.join(folder, name), encoding="utf-8").read()
            # the SVG namespace, example.com placeholders and a URL built from the account's
            # own names (`https://${host}`) name no server
            assert not re.search(
                r"https?://(?!www\.w3\.org/2000/svg|[a-z0-9.-]*example\.com|\$\{)", text
            ), name
