"""The agent's REST API against the real stack (store + API + edge as processes, the agent as
a process on the official SDK): tunnels are endpoints on the edge, traffic goes through the
edge's public listener, and the edge's refusals come back as the agent's errors."""

from __future__ import annotations

import json
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from stacks.paths import BASE_DOMAIN


def _name() -> str:
    return f"t{time.time_ns() % 10**12}"


def test_list_is_empty_at_first(agents, credential):
    agent = agents(credential["token"])
    resp = agent.call("GET", "/tunnels")
    assert resp.status == 200 and resp.json == []


def test_create_without_domain_gets_the_edges_generated_url_and_carries_traffic(
    stack, agents, credential, upstream
):
    agent = agents(credential["token"])
    resp = agent.call("POST", "/tunnels", {"forwards_to": upstream})
    assert resp.status == 200, resp
    body = resp.json
    assert set(body) == {"url", "protocol", "forwards_to", "domain", "policy"}
    assert body["url"] == f"https://{body['domain']}:{stack.https_port}"
    assert body["domain"].endswith("." + BASE_DOMAIN)
    assert (body["protocol"], body["forwards_to"], body["policy"]) == ("http", upstream, None)
    through = stack.public("GET", body["url"], "/hello?x=1")
    assert through.status == 200, through
    assert through.json["path"] == "/hello?x=1" and through.headers["x-upstream"] == "yes"


def test_create_with_a_domain_under_the_base_domain_serves_it_over_https_and_http(
    stack, agents, credential, upstream
):
    agent = agents(credential["token"])
    domain = f"{_name()}.{BASE_DOMAIN}"
    resp = agent.call(
        "POST", "/tunnels", {"protocol": "http", "forwards_to": upstream, "domain": domain.upper()}
    )
    assert resp.status == 200, resp
    assert resp.json["domain"] == domain
    assert resp.json["url"] == f"https://{domain}:{stack.https_port}"
    assert stack.public("GET", resp.json["url"], "/a").json["path"] == "/a"
    assert stack.public("GET", f"http://{domain}:{stack.http_port}", "/b").json["path"] == "/b"


def test_create_with_a_domain_reserved_by_the_account_is_served(
    stack, agents, credential, upstream
):
    domain = f"{_name()}.example.com"
    reserved = stack.call("POST", "/reserved_domains", {"domain": domain, "region": "us"})
    assert reserved.status == 201, reserved
    agent = agents(credential["token"])
    resp = agent.call("POST", "/tunnels", {"forwards_to": upstream, "domain": domain})
    assert resp.status == 200, resp
    assert stack.public("GET", resp.json["url"], "/r").json["path"] == "/r"


def test_list_shows_the_tunnel_with_its_effective_policy_as_a_json_string(
    agents, credential, upstream
):
    agent = agents(credential["token"])
    created = agent.call("POST", "/tunnels", {"forwards_to": upstream}).json
    listed = agent.call("GET", "/tunnels").json
    assert len(listed) == 1
    item = listed[0]
    assert {k: item[k] for k in created} == created
    assert item["error"] is None
    assert isinstance(item["traffic_policy"], str)
    assert json.loads(item["traffic_policy"]) == {"on_http_request": [], "on_http_response": []}


def test_domain_outside_the_credentials_acl_is_refused_403_with_the_edge_code_and_not_saved(
    stack, agents, upstream
):
    cred = stack.bot_credential(acl=[f"bind:allowed-{_name()}.{BASE_DOMAIN}"])
    agent = agents(cred["token"])
    resp = agent.call(
        "POST", "/tunnels", {"forwards_to": upstream, "domain": f"other-{_name()}.{BASE_DOMAIN}"}
    )
    assert resp.status == 403, resp
    assert resp.json["error_code"] == "ERR_NGROK_399"
    assert resp.json["status_code"] == 403 and "ACL" in resp.json["msg"]
    assert agent.call("GET", "/tunnels").json == []
    assert (
        not agent.tunnels_file.exists()
        or json.loads(agent.tunnels_file.read_text())["tunnels"] == []
    )


def test_domain_inside_the_credentials_wildcard_acl_is_allowed(stack, agents, upstream):
    # A name of two labels under the base domain needs the account's wildcard reservation
    # (a free name there is one label); the credential's ACL then narrows what it binds.
    zone = f"{_name()}.{BASE_DOMAIN}"
    reserved = stack.call("POST", "/reserved_domains", {"domain": f"*.{zone}"})
    assert reserved.status == 201, reserved
    cred = stack.bot_credential(acl=[f"bind:*.{zone}"])
    agent = agents(cred["token"])
    assert (
        agent.call("POST", "/tunnels", {"forwards_to": upstream, "domain": f"app.{zone}"}).status
        == 200
    )
    assert (
        agent.call(
            "POST", "/tunnels", {"forwards_to": upstream, "domain": f"app.other{zone}"}
        ).status
        == 403
    )


def test_custom_domain_nobody_reserved_is_refused_403(agents, credential, upstream):
    agent = agents(credential["token"])
    resp = agent.call(
        "POST", "/tunnels", {"forwards_to": upstream, "domain": f"{_name()}.example.org"}
    )
    assert resp.status == 403 and resp.json["error_code"] == "ERR_NGROK_7117", resp
    assert agent.call("GET", "/tunnels").json == []


def test_domain_served_by_another_agent_is_409_with_the_edge_code(stack, agents, upstream):
    domain = f"{_name()}.{BASE_DOMAIN}"
    first = agents(stack.bot_credential()["token"], name="first")
    second = agents(stack.bot_credential()["token"], name="second")
    assert (
        first.call("POST", "/tunnels", {"forwards_to": upstream, "domain": domain}).status == 200
    )
    resp = second.call("POST", "/tunnels", {"forwards_to": upstream, "domain": domain})
    assert resp.status == 409 and resp.json["error_code"] == "ERR_NGROK_334", resp
    assert second.call("GET", "/tunnels").json == []


def test_domain_already_served_by_this_agent_is_409(agents, credential, upstream):
    agent = agents(credential["token"])
    domain = f"{_name()}.{BASE_DOMAIN}"
    assert (
        agent.call("POST", "/tunnels", {"forwards_to": upstream, "domain": domain}).status == 200
    )
    resp = agent.call("POST", "/tunnels", {"forwards_to": upstream, "domain": domain})
    assert resp.status == 409 and resp.json["error_code"] == "ERR_CONFLICT"
    assert len(agent.call("GET", "/tunnels").json) == 1


@pytest.mark.parametrize(
    "body, field",
    [
        ({}, "forwards_to"),
        ({"forwards_to": None}, "forwards_to"),
        ({"forwards_to": "127.0.0.1"}, "forwards_to"),
        ({"forwards_to": "127.0.0.1:0"}, "forwards_to"),
        ({"forwards_to": "127.0.0.1:65536"}, "forwards_to"),
        ({"forwards_to": "127.0.0.1:\u0669\u0665\u0660\u0661"}, "forwards_to"),
        ({"forwards_to": "http://127.0.0.1:80"}, "forwards_to"),
        ({"forwards_to": 8080}, "forwards_to"),
        ({"forwards_to": "h:1", "protocol": "ftp"}, "protocol"),
        ({"forwards_to": "h:1", "domain": "bad domain"}, "domain"),
        ({"forwards_to": "h:1", "domain": "1.2.3.4"}, "domain"),
        ({"forwards_to": "h:1", "policy": []}, "policy"),
        ({"forwards_to": "h:1", "policy": {"inbound": []}}, "policy"),
        ({"forwards_to": "h:1", "url": "x"}, "url"),
    ],
)
def test_create_with_invalid_input_returns_400_naming_the_field_and_changes_nothing(
    agents, credential, body, field
):
    agent = agents(credential["token"])
    resp = agent.call("POST", "/tunnels", body)
    assert resp.status == 400, resp
    assert resp.json["error_code"] == "ERR_INVALID_REQUEST"
    assert resp.json["details"]["field"] == field
    assert agent.call("GET", "/tunnels").json == []


def test_port_65535_is_accepted(agents, credential):
    agent = agents(credential["token"])
    assert agent.call("POST", "/tunnels", {"forwards_to": "127.0.0.1:65535"}).status == 200


@pytest.mark.parametrize(
    "raw",
    [b"[1, 2]", b'"x"', b"{bad", b"", b"[" * 100000, b'{"policy": ' * 20000],
    ids=["array", "string", "broken", "empty", "deep-array", "deep-object"],
)
def test_body_that_is_not_a_json_object_or_nested_too_deeply_returns_400(agents, credential, raw):
    agent = agents(credential["token"])
    resp = agent.call("POST", "/tunnels", data=raw, headers={"Content-Type": "application/json"})
    assert resp.status == 400, resp
    assert resp.json["error_code"] == "ERR_INVALID_REQUEST"
    assert "Traceback" not in agent.log()


def test_body_of_256_kib_is_read_and_one_byte_more_is_413(agents, credential):
    agent = agents(credential["token"])
    head, tail = b'{"forwards_to": "127.0.0.1:9"', b"}"
    exact = head + b" " * (256 * 1024 - len(head) - len(tail)) + tail
    assert len(exact) == 256 * 1024
    ok = agent.call("POST", "/tunnels", data=exact, headers={"Content-Type": "application/json"})
    assert ok.status == 200, ok
    over = agent.call(
        "POST", "/tunnels", data=exact[:-1] + b" }", headers={"Content-Type": "application/json"}
    )
    assert over.status == 413 and over.json["error_code"] == "ERR_PAYLOAD_TOO_LARGE"


def test_delete_stops_the_endpoint_at_once(stack, agents, credential, upstream):
    agent = agents(credential["token"])
    created = agent.call("POST", "/tunnels", {"forwards_to": upstream}).json
    assert stack.public("GET", created["url"]).status == 200
    resp = agent.call("DELETE", "/tunnels/" + created["domain"])
    assert resp.status == 204 and resp.body == b""
    gone = stack.public("GET", created["url"])
    assert gone.status == 404 and gone.json["error_code"] == "ERR_NGROK_3200", gone
    assert agent.call("GET", "/tunnels").json == []
    assert json.loads(agent.tunnels_file.read_text())["tunnels"] == []


@pytest.mark.parametrize("how", ["host", "label", "url", "upper"])
def test_delete_by_full_host_label_or_url(agents, credential, upstream, how):
    agent = agents(credential["token"])
    created = agent.call("POST", "/tunnels", {"forwards_to": upstream}).json
    part = {
        "host": created["domain"],
        "label": created["domain"].split(".")[0],
        "url": created["url"].replace("://", "%3A%2F%2F").replace(":", "%3A"),
        "upper": created["domain"].upper(),
    }[how]
    assert agent.call("DELETE", "/tunnels/" + part).status == 204
    assert agent.call("GET", "/tunnels").json == []


def test_delete_never_matches_a_substring_and_unknown_is_404(agents, credential, upstream):
    agent = agents(credential["token"])
    created = agent.call("POST", "/tunnels", {"forwards_to": upstream}).json
    for part in (created["domain"][:-1], created["domain"][:4], "nothing"):
        resp = agent.call("DELETE", "/tunnels/" + part)
        assert resp.status == 404 and resp.json["error_code"] == "ERR_TUNNEL_NOT_FOUND", part
    assert len(agent.call("GET", "/tunnels").json) == 1


def test_delete_by_a_label_two_tunnels_share_is_409_and_deletes_nothing(
    stack, agents, credential, upstream
):
    domain = f"{_name()}.example.com"
    assert stack.call("POST", "/reserved_domains", {"domain": domain}).status == 201
    label = _name()
    agent = agents(credential["token"])
    # two tunnels whose first label is the same: <label>.tunnels.localhost and
    # <label>.<reserved> (a wildcard reservation covers the second)
    assert stack.call("POST", "/reserved_domains", {"domain": f"*.{domain}"}).status == 201
    assert (
        agent.call(
            "POST", "/tunnels", {"forwards_to": upstream, "domain": f"{label}.{BASE_DOMAIN}"}
        ).status
        == 200
    )
    second = agent.call(
        "POST", "/tunnels", {"forwards_to": upstream, "domain": f"{label}.{domain}"}
    )
    assert second.status == 200, second
    resp = agent.call("DELETE", "/tunnels/" + label)
    assert resp.status == 409 and resp.json["error_code"] == "ERR_CONFLICT"
    assert len(agent.call("GET", "/tunnels").json) == 2


def test_unknown_path_is_404_and_wrong_method_405_in_the_error_shape(agents, credential):
    agent = agents(credential["token"])
    resp = agent.call("GET", "/nope")
    assert resp.status == 404 and set(resp.json) == {"error_code", "status_code", "msg", "details"}
    resp = agent.call("PUT", "/tunnels", {})
    assert resp.status == 405 and resp.json["error_code"] == "ERR_METHOD_NOT_ALLOWED"
    assert "GET" in resp.headers["allow"] and "POST" in resp.headers["allow"]


def test_with_an_api_token_calls_need_the_bearer(agents, credential):
    agent = agents(credential["token"], AGENT_API_TOKEN="s3cret")
    assert agent.call("GET", "/tunnels").status == 401
    assert agent.call("GET", "/tunnels", headers={"Authorization": "Bearer wrong"}).status == 401
    assert agent.call("GET", "/tunnels", headers={"Authorization": "Bearer s3cret"}).status == 200
    assert agent.call("GET", "/healthz").status == 200


def test_the_api_listens_on_loopback_only_by_default(agents, credential):
    agent = agents(credential["token"])
    addresses = {
        info[4][0]
        for info in socket.getaddrinfo(socket.gethostname(), None)
        if info[0] == socket.AF_INET
    } - {"127.0.0.1"}
    for address in addresses:
        with socket.socket() as sock:
            sock.settimeout(2)
            assert sock.connect_ex((address, agent.port)) != 0
    assert agent.call("GET", "/healthz").json["session"] == {"connected": True, "error": None}


def test_an_upstream_that_is_down_gets_the_edges_error_without_internal_addresses(
    stack, agents, credential
):
    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        dead = sock.getsockname()[1]
    agent = agents(credential["token"])
    created = agent.call("POST", "/tunnels", {"forwards_to": f"127.0.0.1:{dead}"}).json
    resp = stack.public("GET", created["url"])
    assert resp.status == 502, resp
    assert str(dead) not in resp.text and "127.0.0.1" not in resp.text
    assert stack.server_addr not in resp.text


def test_an_upstream_answering_garbage_gets_the_edges_502_without_the_upstream_bytes(
    stack, agents, credential
):
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(4)
    port = server.getsockname()[1]

    def serve():
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            with conn:
                conn.recv(65536)
                conn.sendall(b"SECRET-UPSTREAM-BYTES 10.1.2.3:5432\r\n\r\n")

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        agent = agents(credential["token"])
        created = agent.call("POST", "/tunnels", {"forwards_to": f"127.0.0.1:{port}"}).json
        resp = stack.public("GET", created["url"])
        assert resp.status == 502, resp
        assert b"SECRET" not in resp.body and b"10.1.2.3" not in resp.body
        assert str(port).encode() not in resp.body
    finally:
        server.close()


def test_twenty_concurrent_creates_lose_no_tunnel(stack, agents, credential, upstream):
    agent = agents(credential["token"])
    with ThreadPoolExecutor(max_workers=20) as pool:
        results = list(
            pool.map(
                lambda _: agent.call("POST", "/tunnels", {"forwards_to": upstream}), range(20)
            )
        )
    assert [r.status for r in results] == [200] * 20
    urls = {r.json["url"] for r in results}
    assert len(urls) == 20
    assert {t["url"] for t in agent.call("GET", "/tunnels").json} == urls
    saved = json.loads(agent.tunnels_file.read_text())["tunnels"]
    assert {t["url"] for t in saved} == urls
