"""/event_destinations, /event_subscriptions and their sources: through the reference client
(``ngrok-api``) over HTTP, and the rules at both levels."""

import ngrok
import pytest
from ngrok.datatypes import EventSourceReplace

from chalicelib.core import errors, ids, store

STREAM = "arn:aws:kinesis:us-east-1:123456789012:stream/events"
LOG_GROUP = "arn:aws:logs:eu-west-1:123456789012:log-group:tunnel-events"
ROLE = "arn:aws:iam::123456789012:role/ngrok-events"
KEY_ID, SECRET = "AKIAIOSFODNN7EXAMPLE", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"


@pytest.fixture
def client(http_api):
    account = http_api.new_account()
    return ngrok.Client(account.admin.token, base_url=http_api.base_url)


class Raw:
    """A target for the reference client: ngrok-api 0.19.0 sends ``target._props`` as it is,
    and its EventTarget wraps nested dicts in objects json cannot encode, so a caller hands
    the body's plain dict (the shape its datatypes document)."""

    def __init__(self, props):
        self._props = props


def kinesis_target(creds=True):
    auth = (
        {"creds": {"aws_access_key_id": KEY_ID, "aws_secret_access_key": SECRET}}
        if creds
        else {"role": {"role_arn": ROLE}}
    )
    return Raw({"kinesis": {"stream_arn": STREAM, "auth": auth}})


def test_destinations_subscriptions_and_sources_with_the_reference_client(client):
    dest = client.event_destinations.create(
        description="stream", format="json", target=kinesis_target()
    )
    assert ids.is_valid(dest.id, "ed") and dest.format == "json"
    assert dest.target.kinesis.stream_arn == STREAM
    assert dest.target.kinesis.auth.creds.aws_access_key_id == KEY_ID
    assert dest.target.kinesis.auth.creds.aws_secret_access_key is None  # never returned
    assert dest.target.firehose is None and dest.target.cloudwatch_logs is None
    logs = client.event_destinations.create(
        target=Raw(
            {"cloudwatch_logs": {"log_group_arn": LOG_GROUP, "auth": {"role": {"role_arn": ROLE}}}}
        )
    )
    assert logs.target.cloudwatch_logs.auth.role.role_arn == ROLE
    assert [d.id for d in client.event_destinations.list()] == [logs.id, dest.id]
    assert client.event_destinations.update(dest.id, metadata="m").metadata == "m"
    assert client.event_destinations.get(dest.id).description == "stream"

    sub = client.event_subscriptions.create(
        description="traffic",
        sources=[EventSourceReplace(None, {"type": "http_request_complete.v0"})],
        destination_ids=[dest.id],
    )
    assert ids.is_valid(sub.id, "esb")
    assert [s.type for s in sub.sources] == ["http_request_complete.v0"]
    assert sub.sources[0].uri.endswith(
        f"/event_subscriptions/{sub.id}/sources/http_request_complete.v0"
    )
    assert [d.id for d in sub.destinations] == [dest.id]
    assert sub.destinations[0].uri == dest.uri

    # a destination in use cannot be deleted
    with pytest.raises(ngrok.Error) as refused:
        client.event_destinations.delete(dest.id)
    assert refused.value.http_status_code == 409

    # sources
    added = client.event_sources.create(sub.id, type="tcp_connection_closed.v0")
    assert added.type == "tcp_connection_closed.v0"
    listed = client.event_sources.list(sub.id)
    assert [s.type for s in listed.sources] == [
        "http_request_complete.v0",
        "tcp_connection_closed.v0",
    ]
    assert (
        client.event_sources.get(sub.id, "tcp_connection_closed.v0").type
        == "tcp_connection_closed.v0"
    )
    assert (
        client.event_sources.update(sub.id, "tcp_connection_closed.v0").type
        == "tcp_connection_closed.v0"
    )
    with pytest.raises(ngrok.Error) as again:
        client.event_sources.create(sub.id, type="tcp_connection_closed.v0")
    assert again.value.http_status_code == 409
    client.event_sources.delete(sub.id, "tcp_connection_closed.v0")
    with pytest.raises(ngrok.NotFoundError):
        client.event_sources.get(sub.id, "tcp_connection_closed.v0")

    # update: new destinations move the references; sources [] (always sent) is unchanged
    moved = client.event_subscriptions.update(sub.id, destination_ids=[logs.id], metadata="x")
    assert [d.id for d in moved.destinations] == [logs.id] and moved.metadata == "x"
    assert [s.type for s in moved.sources] == ["http_request_complete.v0"]
    client.event_destinations.delete(dest.id)  # no longer used
    assert [s.id for s in client.event_subscriptions.list()] == [sub.id]
    client.event_subscriptions.delete(sub.id)
    client.event_destinations.delete(logs.id)  # freed by the subscription's delete
    assert list(client.event_destinations.list()) == []
    with pytest.raises(ngrok.NotFoundError):
        client.event_subscriptions.get(sub.id)


def test_another_account_sees_nothing(client, http_api):
    dest = client.event_destinations.create(target=kinesis_target(creds=False))
    sub = client.event_subscriptions.create(destination_ids=[dest.id])
    other = ngrok.Client(http_api.new_account().admin.token, base_url=http_api.base_url)
    with pytest.raises(ngrok.NotFoundError):
        other.event_destinations.get(dest.id)
    with pytest.raises(ngrok.NotFoundError):
        other.event_subscriptions.get(sub.id)
    with pytest.raises(ngrok.NotFoundError):
        other.event_sources.list(sub.id)
    assert list(other.event_destinations.list()) == []
    # another account's destination cannot be named
    with pytest.raises(ngrok.Error) as refused:
        other.event_subscriptions.create(destination_ids=[dest.id])
    assert refused.value.http_status_code == 400


def test_secret_kept_sealed_and_kept_on_update_without_it(inprocess_api):
    account = inprocess_api.new_account()  # in process: the test reads the store itself
    admin = account.admin
    body = {
        "target": {
            "kinesis": {
                "stream_arn": STREAM,
                "auth": {"creds": {"aws_access_key_id": KEY_ID, "aws_secret_access_key": SECRET}},
            }
        }
    }
    dest = admin.post("/event_destinations", body).json
    # what a client read and sends back (the secret null): the stored one is kept
    resp = admin.patch(
        f"/event_destinations/{dest['id']}",
        {
            "target": {
                "kinesis": {
                    "stream_arn": STREAM,
                    "auth": {
                        "creds": {"aws_access_key_id": KEY_ID, "aws_secret_access_key": None}
                    },
                }
            }
        },
    )
    assert resp.status == 200, resp
    from chalicelib import event_destinations

    item = store.get(store.collection_pk(account.id, "event_destination"), dest["id"])
    stored = item.data["target"]["kinesis"]["auth"]["creds"]
    assert SECRET not in repr(stored)  # sealed at rest
    opened = event_destinations.open_target(account.id, dest["id"], item.data["target"])
    assert opened["kinesis"]["auth"]["creds"]["aws_secret_access_key"] == SECRET
    # another key id needs its secret
    resp = admin.patch(
        f"/event_destinations/{dest['id']}",
        {
            "target": {
                "kinesis": {
                    "stream_arn": STREAM,
                    "auth": {"creds": {"aws_access_key_id": "AKIAOTHERKEY00000000"}},
                }
            }
        },
    )
    assert resp.status == 400 and resp.json["details"]["field"].endswith("aws_secret_access_key")


CREDS = {"creds": {"aws_access_key_id": KEY_ID, "aws_secret_access_key": SECRET}}


@pytest.mark.parametrize(
    "target, field",
    [
        ({}, "target"),
        (
            {
                "kinesis": {"stream_arn": STREAM, "auth": CREDS},
                "firehose": {"delivery_stream_arn": "x", "auth": CREDS},
            },
            "target",
        ),
        (
            {"kinesis": {"stream_arn": "arn:aws:kinesis:us-east-1:1:stream/x", "auth": CREDS}},
            "target.kinesis.stream_arn",
        ),
        ({"kinesis": {"stream_arn": LOG_GROUP, "auth": CREDS}}, "target.kinesis.stream_arn"),
        (
            {"firehose": {"delivery_stream_arn": STREAM, "auth": CREDS}},
            "target.firehose.delivery_stream_arn",
        ),
        ({"kinesis": {"stream_arn": STREAM}}, "target.kinesis.auth"),
        ({"kinesis": {"stream_arn": STREAM, "auth": {}}}, "target.kinesis.auth"),
        (
            {"kinesis": {"stream_arn": STREAM, "auth": {**CREDS, "role": {"role_arn": ROLE}}}},
            "target.kinesis.auth",
        ),
        (
            {"kinesis": {"stream_arn": STREAM, "auth": {"role": {"role_arn": "admin"}}}},
            "target.kinesis.auth.role.role_arn",
        ),
        (
            {"kinesis": {"stream_arn": STREAM, "auth": {"creds": {"aws_access_key_id": "k"}}}},
            "target.kinesis.auth.creds.aws_access_key_id",
        ),
        ({"datadog": {"api_key": "x"}}, "target.datadog"),
        ({"s3": {"bucket_arn": "x"}}, "target.s3"),
        ({"kafka": {}}, "target.kafka"),
        ("kinesis", "target"),
    ],
)
def test_bad_targets_are_400_naming_the_field(account, target, field):
    resp = account.admin.post("/event_destinations", {"target": target})
    assert resp.status == 400, resp
    assert resp.json["details"]["field"] == field
    assert account.admin.get("/event_destinations").json["event_destinations"] == []


def test_bad_format_and_missing_target(account):
    resp = account.admin.post(
        "/event_destinations",
        {"format": "xml", "target": {"kinesis": {"stream_arn": STREAM, "auth": CREDS}}},
    )
    assert resp.status == 400 and resp.json["details"]["field"] == "format"
    resp = account.admin.post("/event_destinations", {"description": "d"})
    assert resp.status == 400 and resp.json["error_code"] == errors.MISSING_FIELD
    ok = account.admin.post(
        "/event_destinations",
        {"format": "JSON", "target": {"kinesis": {"stream_arn": STREAM, "auth": CREDS}}},
    )
    assert ok.status == 201 and ok.json["format"] == "json"


@pytest.mark.parametrize(
    "body, field",
    [
        ({"sources": [{"type": "nope.v0"}]}, "sources[0].type"),
        (
            {
                "sources": [
                    {"type": "http_request_complete.v0"},
                    {"type": "http_request_complete.v0"},
                ]
            },
            "sources[1]",
        ),
        ({"sources": [{"type": "http_request_complete.v0", "filter": "x"}]}, "sources[0].filter"),
        (  # a loop behind a comment whose quote the bounds' scan once read as a string
            {
                "sources": [
                    {
                        "type": "ip_policy_created.v0",
                        "filter": "true // '\\\n && [1,2].all(a, [1,2].all(b, true)) // '",
                    }
                ]
            },
            "sources[0].filter",
        ),
        ({"sources": "http_request_complete.v0"}, "sources"),
        ({"destination_ids": ["ed_0ERYqBR5B9RMvMY4cZCztl2IB7s"]}, "destination_ids"),
        ({"destination_ids": ["nope"]}, "destination_ids"),
        ({"destination_ids": ["ed_0ERYqBR5B9RMvMY4cZCztl2IB7s"] * 2}, "destination_ids"),
        ({"destination_ids": [f"ed_{i:027d}" for i in range(11)]}, "destination_ids"),
    ],
)
def test_bad_subscriptions_are_400_naming_the_field(account, body, field):
    resp = account.admin.post("/event_subscriptions", body)
    assert resp.status == 400, resp
    assert resp.json["details"]["field"] == field
    assert account.admin.get("/event_subscriptions").json["event_subscriptions"] == []


def test_source_routes_refuse_unknown_types_and_subscriptions(account):
    admin = account.admin
    sub = admin.post("/event_subscriptions", {}).json
    assert sub["sources"] == [] and sub["destinations"] == []
    resp = admin.post(f"/event_subscriptions/{sub['id']}/sources", {"type": "x.v0"})
    assert resp.status == 400 and resp.json["details"]["field"] == "type"
    assert admin.get(f"/event_subscriptions/{sub['id']}/sources/x.v0").status == 404
    assert (
        admin.delete(f"/event_subscriptions/{sub['id']}/sources/http_request_complete.v0").status
        == 404
    )
    missing = "esb_0ERYqBR5B9RMvMY4cZCztl2IB7s"
    assert admin.get(f"/event_subscriptions/{missing}/sources").status == 404
    assert (
        admin.post(
            f"/event_subscriptions/{missing}/sources", {"type": "http_request_complete.v0"}
        ).status
        == 404
    )
