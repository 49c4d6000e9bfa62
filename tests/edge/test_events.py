"""Traffic events end to end: destinations and subscriptions made with the reference client
(``ngrok-api``), traffic from the official Python SDK through the edge, events read back with
boto3 from moto's server (a process) as Kinesis records, CloudWatch Logs events and Firehose
objects; a destination that refuses does not change a request's status; /metrics parses and
moves with traffic."""

import json
import time

import boto3
import ngrok
import pytest
from ngrok.datatypes import EventSourceReplace
from prometheus_client.parser import text_string_to_metric_families

from tests.edge.conftest import BASE_DOMAIN, tcp_round_trip
from tests.edge.support import metric
from tests.edge.test_edge_sdk import _bound, _credential, _host

REGION = "us-east-1"
AWS_ACCOUNT = "123456789012"
KEYS = {
    "aws_access_key_id": "AKIAIOSFODNN7EXAMPLE",
    "aws_secret_access_key": "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
}
WAIT = 60.0  # generous: the machine is shared; the edge flushes every 0.2 s here


@pytest.fixture(scope="module")
def moto_url(moto_server):
    """moto's server (Kinesis, Firehose, CloudWatch Logs, S3, STS)."""
    return moto_server.url


@pytest.fixture(scope="module")
def events_edge(another_edge, moto_url):
    return another_edge(
        {
            "EVENTS_AWS_ENDPOINT_URL": moto_url,
            "EDGE_EVENTS_FLUSH_SECONDS": "0.2",
            "EDGE_EVENTS_BACKOFF_SECONDS": "0.05",
            "EDGE_EVENTS_ATTEMPTS": "6",  # a slow moto (a loaded machine) costs no event
            "EDGE_EVENTS_CACHE_SECONDS": "1",
        }
    )


def aws(service, moto_url):
    return boto3.client(
        service,
        region_name=REGION,
        endpoint_url=moto_url,
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    )


class Raw:
    """A body part for ngrok-api 0.19.0, which sends ``target._props`` as it is."""

    def __init__(self, props):
        self._props = props


def kinesis_stream(moto_url, name):
    client = aws("kinesis", moto_url)
    client.create_stream(StreamName=name, ShardCount=1)
    for _ in range(100):
        if (
            client.describe_stream(StreamName=name)["StreamDescription"]["StreamStatus"]
            == "ACTIVE"
        ):
            break
        time.sleep(0.1)
    return f"arn:aws:kinesis:{REGION}:{AWS_ACCOUNT}:stream/{name}"


def kinesis_events(moto_url, name):
    client = aws("kinesis", moto_url)
    shard = client.describe_stream(StreamName=name)["StreamDescription"]["Shards"][0]
    iterator = client.get_shard_iterator(
        StreamName=name, ShardId=shard["ShardId"], ShardIteratorType="TRIM_HORIZON"
    )["ShardIterator"]
    found = []
    while iterator:
        answer = client.get_records(ShardIterator=iterator, Limit=1000)
        found += [json.loads(r["Data"]) for r in answer["Records"]]
        if not answer["Records"]:
            break
        iterator = answer.get("NextShardIterator")
    return found


def log_group(moto_url, name):
    aws("logs", moto_url).create_log_group(logGroupName=name)
    return f"arn:aws:logs:{REGION}:{AWS_ACCOUNT}:log-group:{name}"


def log_events(moto_url, name):
    answer = aws("logs", moto_url).filter_log_events(logGroupName=name)
    return [json.loads(e["message"]) for e in answer["events"]]


def wait_for(predicate, timeout=WAIT):
    deadline = time.monotonic() + timeout
    value = None
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.2)
    return value


def client_of(account, api):
    return ngrok.Client(account.admin.token, base_url=api.base_url)


def subscribe(client, types, *targets):
    destinations = [
        client.event_destinations.create(description="test", target=Raw(t)).id for t in targets
    ]
    return client.event_subscriptions.create(
        sources=[EventSourceReplace(None, {"type": t}) for t in types],
        destination_ids=destinations,
    )


def test_http_requests_arrive_in_kinesis_and_cloudwatch_logs_with_the_documented_fields(
    events_edge, moto_url, account, api, agents
):
    stream, group = f"events-{account.id[-8:]}", f"/tunnel/{account.id[-8:]}"
    stream_arn, group_arn = kinesis_stream(moto_url, stream), log_group(moto_url, group)
    client = client_of(account, api)
    subscribe(
        client,
        ["http_request_complete.v0"],
        {"kinesis": {"stream_arn": stream_arn, "auth": {"creds": KEYS}}},
        {"cloudwatch_logs": {"log_group_arn": group_arn, "auth": {"creds": KEYS}}},
    )
    url = _bound(agents(events_edge, _credential(account)["token"], [{"proto": "http"}]).start())[
        0
    ]["url"]
    host = _host(url)
    endpoint = [e for e in client.endpoints.list() if e.public_url == url][0]
    sent = 5
    for index in range(sent):
        resp = events_edge.http(
            "GET",
            host,
            f"/echo?n={index}",
            headers={
                "Authorization": "Bearer secret",
                "Cookie": "session=secret",
                "User-Agent": "events/1",
            },
        )
        assert resp.status_code == 200
    assert events_edge.http("GET", host, "/status/404").status_code == 404

    found = wait_for(
        lambda: [
            e
            for e in kinesis_events(moto_url, stream)
            if e["object"]["http"]["request"]["url"]["path"] == "/echo"
        ]
        if len(kinesis_events(moto_url, stream)) >= sent + 1
        else None
    )
    assert found and len(found) == sent, kinesis_events(moto_url, stream)
    event = found[0]
    assert event["event_type"] == "http_request_complete.v0"
    assert event["event_id"].startswith("ev_") and event["event_timestamp"].endswith("Z")
    assert event["account_id"] == account.id
    assert len({e["event_id"] for e in found}) == sent
    obj = event["object"]
    assert obj["conn"]["client_ip"] == "127.0.0.1" and obj["conn"]["client_port"] > 0
    assert obj["conn"]["server_port"] == events_edge.http_port
    assert obj["conn"]["server_name"] == host
    assert obj["conn"]["start_ts"] <= obj["conn"]["end_ts"]
    assert obj["endpoint"] == {
        "id": endpoint.id,
        "url": url,
        "host": host,
        "proto": "http",
        "kind": "agent",
    }
    request = obj["http"]["request"]
    assert request["method"] == "GET" and request["url"]["query"].startswith("n=")
    assert request["url"]["raw"].startswith(f"http://{host}/echo?n=")
    assert request["headers"]["authorization"] == ["[redacted]"]
    assert request["headers"]["cookie"] == ["[redacted]"]
    assert request["user_agent"] == "events/1"
    response = obj["http"]["response"]
    assert response["status_code"] == 200 and response["body_size"] > 0
    assert "content-type" in response["headers"]
    assert obj["http"]["duration_ms"] >= 0
    assert obj["traffic_policy"] == {"logs": [], "decisions": []}
    statuses = sorted(
        e["object"]["http"]["response"]["status_code"] for e in kinesis_events(moto_url, stream)
    )
    assert statuses == [200] * sent + [404]

    logged = wait_for(
        lambda: [
            e for e in log_events(moto_url, group) if e["event_type"] == "http_request_complete.v0"
        ]
        if len(log_events(moto_url, group)) >= sent + 1
        else None
    )
    assert logged and len(logged) == sent + 1
    assert {e["event_id"] for e in logged} == {
        e["event_id"] for e in kinesis_events(moto_url, stream)
    }


def test_tcp_connections_arrive_through_an_assumed_role_and_policy_logs_are_in_events(
    events_edge, moto_url, account, api, agents
):
    stream = f"tcp-{account.id[-8:]}"
    stream_arn = kinesis_stream(moto_url, stream)
    client = client_of(account, api)
    role = f"arn:aws:iam::{AWS_ACCOUNT}:role/tunnel-events"
    subscribe(
        client,
        ["tcp_connection_closed.v0"],
        {"kinesis": {"stream_arn": stream_arn, "auth": {"role": {"role_arn": role}}}},
    )
    policy = json.dumps(
        {
            "on_tcp_connect": [
                {"actions": [{"type": "log", "config": {"metadata": {"message": "connected"}}}]}
            ]
        }
    )
    url = _bound(
        agents(
            events_edge,
            _credential(account)["token"],
            [{"proto": "tcp", "upstream": "tcp", "options": {"traffic_policy": [policy]}}],
        ).start()
    )[0]["url"]
    port = int(url.rsplit(":", 1)[1])
    assert tcp_round_trip(port, b"hello") == b"hello"
    found = wait_for(lambda: kinesis_events(moto_url, stream))
    assert found and len(found) == 1
    event = found[0]
    assert event["event_type"] == "tcp_connection_closed.v0"
    conn = event["object"]["conn"]
    assert conn["bytes_in"] == 5 and conn["bytes_out"] == 5
    assert conn["server_port"] == port and conn["client_ip"] == "127.0.0.1"
    assert event["object"]["endpoint"]["url"] == url
    assert event["object"]["traffic_policy"]["logs"] == [{"metadata": {"message": "connected"}}]


def test_firehose_delivery(events_edge, moto_url, account, api, agents):
    name = f"fh-{account.id[-8:]}"
    bucket = f"bucket-{account.id[-8:].lower()}"
    aws("s3", moto_url).create_bucket(Bucket=bucket)
    aws("firehose", moto_url).create_delivery_stream(
        DeliveryStreamName=name,
        ExtendedS3DestinationConfiguration={
            "RoleARN": f"arn:aws:iam::{AWS_ACCOUNT}:role/firehose",
            "BucketARN": f"arn:aws:s3:::{bucket}",
        },
    )
    client = client_of(account, api)
    subscribe(
        client,
        ["http_request_complete.v0"],
        {
            "firehose": {
                "delivery_stream_arn": f"arn:aws:firehose:{REGION}:{AWS_ACCOUNT}:deliverystream/{name}",
                "auth": {"creds": KEYS},
            }
        },
    )
    host = _host(
        _bound(agents(events_edge, _credential(account)["token"], [{"proto": "http"}]).start())[0][
            "url"
        ]
    )
    assert events_edge.http("POST", host, "/reflect", data=b"x" * 10).status_code == 200

    def delivered():
        s3 = aws("s3", moto_url)
        lines = []
        for obj in s3.list_objects_v2(Bucket=bucket).get("Contents", []):
            body = s3.get_object(Bucket=bucket, Key=obj["Key"])["Body"].read().decode()
            lines += [json.loads(line) for line in body.splitlines() if line.strip()]
        return lines

    lines = wait_for(delivered)
    assert lines and lines[0]["event_type"] == "http_request_complete.v0"
    assert lines[0]["object"]["http"]["request"]["method"] == "POST"
    assert lines[0]["object"]["http"]["request"]["body_size"] == 10


def test_a_refusing_destination_changes_no_status_and_its_events_are_counted_dropped(
    events_edge, moto_url, account, api, agents
):
    before = events_edge.metrics()
    client = client_of(account, api)
    missing = f"arn:aws:kinesis:{REGION}:{AWS_ACCOUNT}:stream/no-such-stream"
    subscribe(
        client,
        ["http_request_complete.v0"],
        {"kinesis": {"stream_arn": missing, "auth": {"creds": KEYS}}},
    )
    host = _host(
        _bound(agents(events_edge, _credential(account)["token"], [{"proto": "http"}]).start())[0][
            "url"
        ]
    )
    for _ in range(3):
        assert events_edge.http("GET", host, "/echo").status_code == 200
    dropped = wait_for(
        lambda: metric(events_edge.metrics(), "edge_events_dropped_total", reason="attempts")
        - metric(before, "edge_events_dropped_total", reason="attempts")
        >= 3
    )
    assert dropped
    after = events_edge.metrics()
    assert (
        metric(after, "edge_events_retried_total", target="kinesis")
        - metric(before, "edge_events_retried_total", target="kinesis")
        >= 3
    )


def test_metrics_parse_and_move_with_traffic(events_edge, account, agents):
    host = _host(
        _bound(agents(events_edge, _credential(account)["token"], [{"proto": "http"}]).start())[0][
            "url"
        ]
    )
    before = events_edge.metrics()
    for _ in range(4):
        assert events_edge.http("GET", host, "/echo").status_code == 200
    assert events_edge.http("GET", host, "/status/503").status_code == 503
    assert events_edge.http("GET", "nobody." + BASE_DOMAIN, "/").status_code == 404

    def moved():
        # every one of the five counted: the compiled core's records (the requests it served
        # itself) and the Python path's reach the metrics in batches of their own, so the 503
        # may be counted after the four 200s
        text = events_edge.metrics()
        ok = all(
            metric(text, "edge_http_requests_total", status_class=c, endpoint_kind="agent")
            - metric(before, "edge_http_requests_total", status_class=c, endpoint_kind="agent")
            >= n
            for c, n in (("2xx", 4), ("5xx", 1))
        )
        return text if ok else None

    text = wait_for(moved)
    assert text, events_edge.metrics()
    names = {f.name for f in text_string_to_metric_families(text)}
    assert {
        "edge_http_requests",
        "edge_http_request_duration_seconds",
        "edge_http_bytes",
        "edge_events_sent",
        "edge_events_dropped",
        "store_call_duration_seconds",
        "edge_agent_sessions",
        "edge_events_queued",
    } <= names
    assert (
        metric(text, "edge_http_requests_total", status_class="5xx", endpoint_kind="agent")
        - metric(before, "edge_http_requests_total", status_class="5xx", endpoint_kind="agent")
        >= 1
    )
    assert (
        metric(text, "edge_http_request_duration_seconds_count", endpoint_kind="agent")
        - metric(before, "edge_http_request_duration_seconds_count", endpoint_kind="agent")
        >= 5
    )
    assert metric(text, "edge_http_bytes_total", direction="out") > metric(
        before, "edge_http_bytes_total", direction="out"
    )
    assert metric(text, "store_call_duration_seconds_count") > 0
