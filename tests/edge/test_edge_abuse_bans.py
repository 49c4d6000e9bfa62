"""An abuse report's BANNED hostname stops serving at the edge within seconds (403
ERR_NGROK_3208), a bind of it is refused, and lifting the ban serves it again."""

import time

from chalicelib import abuse_reports
from tests.edge.test_edge_sdk import _bound, _credential, _host, _refusal, _wait


def test_a_banned_hostname_stops_serving_and_cannot_be_bound_until_unbanned(
    edge, api, account, agents
):
    reporter = api.new_account(reporter=True)
    agent = agents(edge, _credential(account)["token"], [{"proto": "http"}])
    url = _bound(agent.start())[0]["url"]
    host = _host(url)
    assert edge.http("GET", host, "/echo").status_code == 200
    report = reporter.admin.post("/abuse_reports", {"urls": [url]}).json
    with api.service_store():
        abuse_reports.set_hostname_status(reporter.id, report["id"], host, "BANNED")
    banned_at = time.monotonic()
    assert _wait(lambda: edge.http("GET", host, "/echo").status_code == 403, timeout=10, step=0.1)
    took = time.monotonic() - banned_at
    assert took < 5, took  # the edge reads the ban index every 2 s
    assert edge.http("GET", host, "/echo").json()["error_code"] == "ERR_NGROK_3208"
    other = agents(
        edge, _credential(api.new_account())["token"], [{"proto": "http", "domain": host}]
    )
    assert "ERR_NGROK_3208" in _refusal(other.start(), "bind")
    with api.service_store():
        abuse_reports.set_hostname_status(reporter.id, report["id"], host, "UNBANNED")
    assert _wait(lambda: edge.http("GET", host, "/echo").status_code == 200, timeout=10)
