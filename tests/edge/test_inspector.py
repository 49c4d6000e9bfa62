"""The traffic inspector through the running stack: SDK traffic through the edge shows up at
``/endpoints/{id}/captured_requests`` (headers redacted; bodies only once capture is on),
replays through the edge, and is invisible to another account."""

import base64
import socket
import time

from tests.edge.support import metric, settled
from tests.edge.test_edge_sdk import _bound, _credential, _host

WAIT = 60.0


def _wait(predicate, timeout=WAIT):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.25)
    return None


def _core_counts(edge):
    """(requests the compiled core served, connections it handed to Python), once settled."""

    def counts():
        text = edge.metrics()
        return (
            metric(text, "edge_core_http_requests_total"),
            metric(text, "edge_core_http_handed_over_total"),
        )

    return settled(counts)


def _endpoint_id(account, url):
    listed = account.admin.get("/endpoints").json["endpoints"]
    return [e["id"] for e in listed if e["public_url"] == url][0]


def _captured(account, endpoint_id, **match):
    resp = account.admin.get(f"/endpoints/{endpoint_id}/captured_requests")
    assert resp.status == 200, resp
    return [
        r for r in resp.json["captured_requests"] if all(r.get(k) == v for k, v in match.items())
    ]


def test_captured_requests_show_redacted_headers_bodies_when_on_and_replay(
    edge, account, other_account, agents
):
    # an http:// endpoint: the replay goes to the edge's HTTP listener (an https:// one is
    # verified against $DATA_DIR/ca.pem, which this test stack's API does not share)
    url = _bound(
        agents(
            edge,
            _credential(account)["token"],
            [{"proto": "http", "options": {"scheme": ["HTTP"]}}],
        ).start()
    )[0]["url"]
    assert url.startswith("http://")
    host, endpoint_id = _host(url), _endpoint_id(account, url)
    path = f"/endpoints/{endpoint_id}"
    assert account.admin.get(f"{path}/capture").json["capture_bodies"] is False

    # capture off: headers, status and timing, no bodies
    assert (
        edge.http(
            "POST",
            host,
            "/reflect?off=1",
            data=b"first",
            headers={"Authorization": "Bearer s3cret"},
        ).status_code
        == 200
    )
    first = _wait(lambda: _captured(account, endpoint_id, target="/reflect?off=1"))
    assert first, "the request was not captured"
    first = first[0]
    assert first["id"].startswith("req_") and first["uri"].endswith(
        f"{path}/captured_requests/{first['id']}"
    )
    assert (first["method"], first["status_code"], first["host"]) == ("POST", 200, host)
    assert first["client_addr"].startswith("127.0.0.1:") and first["duration_ms"] >= 0
    assert first["request_headers"]["authorization"] == ["[redacted]"]
    assert first["bodies_captured"] is False and first["request_body"] is None
    assert first["request_body_size"] == 5 and first["response_body_size"] > 0
    assert account.admin.get(f"{path}/captured_requests/{first['id']}").json == first

    # capture on (the edge reads the setting within its 10 s cache). The requests go to the
    # upstream's /reflect, which reads the whole body before it answers: an upstream that
    # answers first ends the exchange before the body was read (checked below)
    put = account.admin.put(f"{path}/capture", {"capture_bodies": True})
    assert put.status == 200 and put.json["capture_bodies"] is True

    def captured_with_body():
        edge.http(
            "POST", host, "/reflect?on=1", data=b"hello body", headers={"Cookie": "session=s3cret"}
        )
        return [
            r
            for r in _captured(account, endpoint_id, target="/reflect?on=1")
            if r["bodies_captured"]
        ]

    with_body = _wait(captured_with_body)
    assert with_body, "bodies were never captured after capture was turned on"
    record = with_body[0]
    assert base64.b64decode(record["request_body"]) == b"hello body"
    assert base64.b64decode(record["response_body"]) == b"hello body"
    assert record["request_headers"]["cookie"] == ["[redacted]"]
    assert not record["request_body_truncated"]

    # the compiled core carries the captured endpoint's requests (its route keeps each
    # body's first bytes for the records): one whose body is over the record's 4 KiB
    sent = []

    def carried():
        before = _core_counts(edge)
        sent.append(edge.http("POST", host, "/reflect?core=1", data=b"b" * 5000).status_code)
        after = _core_counts(edge)
        return after[0] > before[0] and after[1] == before[1]

    assert _wait(carried), "the core never carried the captured endpoint's requests"
    big = _wait(
        lambda: (found := _captured(account, endpoint_id, target="/reflect?core=1"))
        and len(found) == len(sent)
        and found
    )
    assert big, "not every request was captured"
    for each in big:  # the core's (the last) as the Python path's
        assert base64.b64decode(each["request_body"]) == b"b" * 4096
        assert base64.b64decode(each["response_body"]) == b"b" * 4096
        assert each["request_body_truncated"] and each["response_body_truncated"]
        assert each["request_body_size"] == 5000

    # replay through the edge: same answer, and the replay is captured too
    replayed = account.admin.post(f"{path}/captured_requests/{record['id']}/replay", {})
    assert replayed.status == 200, replayed
    assert replayed.json["status_code"] == 200
    again = _wait(
        lambda: [
            r
            for r in _captured(account, endpoint_id, target="/reflect?on=1")
            if r["request_headers"].get("ngrok-replay") == [record["id"]]
        ]
    )
    assert again and base64.b64decode(again[0]["request_body"]) == b"hello body"
    assert "cookie" not in again[0]["request_headers"]  # redacted values are not replayed

    # an upstream that answers before the body was all sent (/echo reads none of it): the
    # edge closes the connection, and the record says its body is only the start
    with socket.create_connection(("127.0.0.1", edge.http_port), timeout=30) as sock:
        sock.sendall(
            f"POST /echo?early=1 HTTP/1.1\r\nHost: {host}\r\nContent-Length: 10\r\n\r\nhell".encode()
        )
        answer = b""
        while chunk := sock.recv(65536):  # the edge closes after the answer
            answer += chunk
    assert answer.startswith(b"HTTP/1.1 200 ")
    early = _wait(lambda: _captured(account, endpoint_id, target="/echo?early=1"))
    assert early and early[0]["bodies_captured"] is True
    assert base64.b64decode(early[0]["request_body"]) == b"hell"
    assert early[0]["request_body_truncated"] is True and early[0]["request_body_size"] == 4

    # another account sees none of it
    other = other_account.admin
    assert other.get(f"{path}/captured_requests").status == 404
    assert other.get(f"{path}/captured_requests/{record['id']}").status == 404
    assert other.post(f"{path}/captured_requests/{record['id']}/replay", {}).status == 404
    assert other.put(f"{path}/capture", {"capture_bodies": True}).status == 404
    assert other.get(f"{path}/capture").status == 404


def test_inspector_refuses_bad_input(edge, account):
    admin = account.admin
    assert admin.get("/endpoints/nope/captured_requests").status == 404
    assert admin.get("/endpoints/ep_0ERYqBR5B9RMvMY4cZCztl2IB7s/captured_requests").status == 404
    assert (
        admin.get("/endpoints/ep_0ERYqBR5B9RMvMY4cZCztl2IB7s/captured_requests?limit=0").status
        == 400
    )
    assert (
        admin.get("/endpoints/ep_0ERYqBR5B9RMvMY4cZCztl2IB7s/captured_requests?filter=x").status
        == 400
    )
    resp = admin.put(
        "/endpoints/ep_0ERYqBR5B9RMvMY4cZCztl2IB7s/capture", {"capture_bodies": "yes"}
    )
    assert resp.status in (400, 404)
