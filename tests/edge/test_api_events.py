"""The API's resource-change events and event sources' filter and fields, end to end: the
reference client (``ngrok-api``) makes a destination (a Kinesis stream of moto's server, a
process) and subscriptions, makes API changes, and boto3 reads back exactly the expected
events; another account's subscription sees none of them; a filter drops what it should and
``fields`` trims, on API events and on traffic events from the official SDK through the edge.
Hostile filters are refused with a 400 naming the field."""

import pytest
import requests

from tests.edge.support import bound as _bound, credential as _credential, host as _host
from tests.edge import test_events
from tests.edge.test_events import KEYS, Raw, client_of, kinesis_events, kinesis_stream, wait_for

# moto's server and an edge delivering to it, as processes: test_events' fixtures, started
# once for this module
moto_url = test_events.moto_url
events_edge = test_events.events_edge


def _kinesis(moto_url, name):
    return {"kinesis": {"stream_arn": kinesis_stream(moto_url, name), "auth": {"creds": KEYS}}}


def _subscribe(client, sources, target):
    destination = client.event_destinations.create(description="api events", target=Raw(target))
    return client.event_subscriptions.create(
        sources=[Raw(s) for s in sources], destination_ids=[destination.id]
    )


def _settled(moto_url, stream, count, edge):
    """The stream's events once it holds ``count`` (then a moment more: nothing else comes).
    When they do not come, the message says what the edge's delivery counted (sent, retried,
    given up), so a lost event is told from a slow one."""
    found = wait_for(lambda: len(kinesis_events(moto_url, stream)) >= count or None)
    assert found, (
        [e["event_type"] for e in kinesis_events(moto_url, stream)],
        [
            line
            for line in edge.metrics().splitlines()
            if line.startswith(("edge_events_sent", "edge_events_retried", "edge_events_dropped"))
        ],
    )
    wait_for(lambda: None, timeout=3.0)  # an extra event would arrive within a few polls
    return kinesis_events(moto_url, stream)


def test_api_changes_arrive_as_their_hosted_events_filtered_trimmed_and_account_scoped(
    events_edge, moto_url, api
):
    a, b = api.new_account(), api.new_account()
    client_a, client_b = client_of(a, api), client_of(b, api)
    stream_a, stream_b = f"api-a-{a.id[-8:]}", f"api-b-{b.id[-8:]}"
    sub = _subscribe(
        client_a,
        [
            {"type": "ip_policy_created.v0"},
            {
                "type": "ip_policy_updated.v0",
                "filter": 'object.description.startsWith("keep")',
                "fields": ["id", "description"],
            },
            {"type": "ip_policy_deleted.v0"},
            {"type": "api_key_created.v0"},
            {"type": "tunnel_credential_created.v0"},
            {"type": "event_subscription_updated.v0", "fields": ["id", "sources"]},
        ],
        _kinesis(moto_url, stream_a),
    )
    shown = {s.type: s._props for s in sub.sources}
    assert shown["ip_policy_updated.v0"]["filter"] == 'object.description.startsWith("keep")'
    assert shown["ip_policy_updated.v0"]["fields"] == ["id", "description"]
    assert "filter" not in shown["ip_policy_created.v0"]
    _subscribe(client_b, [{"type": "ip_policy_created.v0"}], _kinesis(moto_url, stream_b))

    policy = client_a.ip_policies.create(description="keep-1", metadata="m")
    client_a.ip_policies.update(policy.id, description="keep-2")  # passes the filter
    client_a.ip_policies.update(policy.id, description="drop")  # refused by it
    client_a.ip_policies.delete(policy.id)
    key = client_a.api_keys.create(description="ci")
    assert key.token  # the API answer has it once; the event never does
    credential = client_a.credentials.create(description="agent")
    client_a.reserved_addrs.create(description="not subscribed")
    other = client_b.ip_policies.create(description="b's")
    client_a.event_sources.create(sub.id, type="domain_created.v0")  # a source: an update

    events = _settled(moto_url, stream_a, 6, events_edge)
    assert [e["event_type"] for e in events] == [
        "ip_policy_created.v0",
        "ip_policy_updated.v0",
        "ip_policy_deleted.v0",
        "api_key_created.v0",
        "tunnel_credential_created.v0",
        "event_subscription_updated.v0",
    ], events
    for event in events:
        assert event["event_id"].startswith("ev_") and event["event_timestamp"].endswith("Z")
        assert event["account_id"] == a.id
        assert event["principal"]["id"].startswith(("usr_", "bot_"))
    created, updated, deleted, key_event, credential_event, sub_event = (
        e["object"] for e in events
    )
    assert sub_event["id"] == sub.id and set(sub_event) == {"id", "sources"}
    assert sub_event["sources"][-1]["type"] == "domain_created.v0"
    assert {k: created[k] for k in ("id", "uri", "created_at", "description", "metadata")} == {
        "id": policy.id,
        "uri": policy.uri,
        "created_at": policy.created_at,
        "description": "keep-1",
        "metadata": "m",
    }
    assert created["description"] == "keep-1" and created["uri"].endswith(policy.id)
    assert updated == {"id": policy.id, "description": "keep-2"}  # fields: only these
    assert deleted["id"] == policy.id and deleted["description"] == "drop"
    assert key_event["id"] == key.id and key_event["token"] is None
    assert credential_event["id"] == credential.id and credential_event["token"] is None
    assert key.token not in str(events) and credential.token not in str(events)
    assert len({e["event_id"] for e in events}) == len(events)

    # account B's subscription sees only B's own change
    events_b = _settled(moto_url, stream_b, 1, events_edge)
    assert [(e["event_type"], e["object"]["id"]) for e in events_b] == [
        ("ip_policy_created.v0", other.id)
    ]
    assert all(e["account_id"] == b.id for e in events_b)


def test_a_source_filter_and_fields_apply_to_traffic_events(events_edge, moto_url, api, agents):
    account = api.new_account()
    client = client_of(account, api)
    stream = f"traffic-{account.id[-8:]}"
    _subscribe(
        client,
        [
            {
                "type": "http_request_complete.v0",
                "filter": "http.response.status_code >= 400",
                "fields": ["http.response.status_code", "conn.client_ip", "endpoint.url"],
            }
        ],
        _kinesis(moto_url, stream),
    )
    url = _bound(agents(events_edge, _credential(account)["token"], [{"proto": "http"}]).start())[
        0
    ]["url"]
    host = _host(url)
    for _ in range(3):
        assert events_edge.http("GET", host, "/echo").status_code == 200
    assert events_edge.http("GET", host, "/status/404").status_code == 404

    events = _settled(moto_url, stream, 1, events_edge)
    assert len(events) == 1, events
    assert events[0]["event_type"] == "http_request_complete.v0"
    assert events[0]["object"] == {
        "http": {"response": {"status_code": 404}},
        "conn": {"client_ip": "127.0.0.1"},
        "endpoint": {"url": url},
    }


def _source_error(api, account, source):
    response = requests.post(
        api.base_url + "/event_subscriptions",
        json={"sources": [source]},
        headers={"Authorization": f"Bearer {account.admin.token}", "Ngrok-Version": "2"},
        timeout=30,
    )
    return response.status_code, response.json()


@pytest.mark.parametrize(
    "source, field, why",
    [
        (
            {"type": "http_request_complete.v0", "filter": "conn.client_ip == 'x' || " * 60},
            "sources[0].filter",
            "longer than 1024 bytes",
        ),
        (
            {"type": "http_request_complete.v0", "filter": "(" * 17 + "true" + ")" * 17},
            "sources[0].filter",
            "nests 17 deep",
        ),
        (
            {
                "type": "http_request_complete.v0",
                "filter": "[1,2,3].all(a, [1,2,3].all(b, [1,2,3].all(c, a+b+c > 0)))",
            },
            "sources[0].filter",
            "macro 'all'",
        ),
        (
            {"type": "ip_policy_created.v0", "filter": "nosuch == 1"},
            "sources[0].filter",
            "undeclared reference to 'nosuch'",
        ),
        (
            {"type": "http_request_complete.v0", "fields": ["conn.nope"]},
            "sources[0].fields[0]",
            "is not a field of http_request_complete.v0",
        ),
        (
            {"type": "ip_policy_created.v0", "fields": ["Bad-Name"]},
            "sources[0].fields[0]",
            "dotted field name",
        ),
    ],
)
def test_hostile_or_wrong_filters_and_fields_are_a_400_naming_the_field(api, source, field, why):
    account = api.new_account()
    status, body = _source_error(api, account, source)
    assert status == 400, body
    assert body["details"]["field"] == field
    assert why in body["msg"]
    # and nothing was made
    listed = requests.get(
        api.base_url + "/event_subscriptions",
        headers={"Authorization": f"Bearer {account.admin.token}", "Ngrok-Version": "2"},
        timeout=30,
    ).json()
    assert listed["event_subscriptions"] == []


def test_a_sources_filter_and_fields_are_set_and_replaced_through_its_routes(api):
    account = api.new_account()
    client = client_of(account, api)
    sub = client.event_subscriptions.create()
    headers = {"Authorization": f"Bearer {account.admin.token}", "Ngrok-Version": "2"}
    base = f"{api.base_url}/event_subscriptions/{sub.id}/sources"
    made = requests.post(
        base,
        json={"type": "domain_created.v0", "filter": 'object.domain.endsWith(".example")'},
        headers=headers,
        timeout=30,
    )
    assert made.status_code == 201, made.text
    assert made.json()["filter"] == 'object.domain.endsWith(".example")'
    changed = requests.patch(
        f"{base}/domain_created.v0", json={"fields": ["id", "domain"]}, headers=headers, timeout=30
    ).json()
    assert changed["filter"] == 'object.domain.endsWith(".example")'
    assert changed["fields"] == ["id", "domain"]
    bad = requests.patch(
        f"{base}/domain_created.v0", json={"filter": "1 +"}, headers=headers, timeout=30
    )
    assert bad.status_code == 400 and bad.json()["details"]["field"] == "filter"
    # the reference client's update sends no filter: unchanged
    assert client.event_sources.update(sub.id, "domain_created.v0").type == "domain_created.v0"
    again = client.event_sources.get(sub.id, "domain_created.v0")._props
    assert again["fields"] == ["id", "domain"] and again["filter"].startswith("object.domain")
