"""The embedded store answers only requests signed with the stack's secret: a forged request
(no signature, another secret, a replayed signature over another body) is refused and
changes nothing; moto's admin and reset paths do not exist; no CORS."""

import hashlib
import json

import boto3
import pytest
import requests
from botocore.exceptions import ClientError

from tests.support.raw_http import RawConnection, request_bytes

TABLE = "tunnel-service"


@pytest.fixture
def store(api_process):
    return api_process.store_client()


def _forged_client(api_process, key_id=None, secret="not-the-secret-" + "x" * 30):
    env = api_process.store_env()
    return boto3.client(
        "dynamodb",
        endpoint_url=env["DYNAMODB_ENDPOINT_URL"],
        region_name="us-east-1",
        aws_access_key_id=key_id or env["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=secret,
        aws_session_token=None,
    )


def _admin_key_item(token):
    """The lookup item an attacker would forge: the digest of a token they chose."""
    digest = hashlib.sha256(token.encode()).hexdigest()
    return {
        "pk": {"S": f"U#api_key_hash#{digest}"},
        "sk": {"S": "U"},
        "version": {"N": "1"},
        "refs": {"N": "0"},
    }


def test_the_right_secret_is_served(store):
    assert TABLE in store.list_tables()["TableNames"]


@pytest.mark.parametrize("who", ["right key id, wrong secret", "wrong key id", "x/x"])
def test_a_request_signed_with_another_secret_is_refused_and_writes_nothing(
    api_process, store, who
):
    client = {
        "right key id, wrong secret": lambda: _forged_client(api_process),
        "wrong key id": lambda: _forged_client(api_process, key_id="AKIDFORGED"),
        "x/x": lambda: _forged_client(api_process, key_id="x", secret="x"),
    }[who]()
    item = _admin_key_item("forged-token-" + who)
    with pytest.raises(ClientError) as info:
        client.put_item(TableName=TABLE, Item=item)
    assert info.value.response["Error"]["Code"] in (
        "InvalidSignatureException",
        "UnrecognizedClientException",
    )
    assert "Item" not in store.get_item(TableName=TABLE, Key={"pk": item["pk"], "sk": item["sk"]})


def test_an_unsigned_request_is_refused(api_process):
    body = json.dumps({"TableName": TABLE, "Item": _admin_key_item("unsigned")}).encode()
    resp = requests.post(
        api_process.store_url,
        data=body,
        timeout=10,
        headers={
            "X-Amz-Target": "DynamoDB_20120810.PutItem",
            "Content-Type": "application/x-amz-json-1.0",
            "Authorization": "AWS4-HMAC-SHA256 Credential=x/20200101/us-east-1/dynamodb/"
            "aws4_request, SignedHeaders=host;x-amz-date, Signature=" + "0" * 64,
            "X-Amz-Date": "20200101T000000Z",
        },
    )
    assert resp.status_code in (400, 403)
    resp = requests.post(
        api_process.store_url,
        data=body,
        timeout=10,
        headers={"X-Amz-Target": "DynamoDB_20120810.PutItem"},
    )
    assert resp.status_code == 403
    assert "MissingAuthenticationToken" in resp.json()["__type"]


def test_a_signature_replayed_over_another_body_is_refused(api_process, store):
    """Capture a correctly signed request, then send its headers with a forged body."""
    captured = {}

    def capture(request, **kwargs):
        captured["headers"] = dict(request.headers)

    store.meta.events.register("before-send.dynamodb.GetItem", capture)
    store.get_item(TableName=TABLE, Key={"pk": {"S": "x"}, "sk": {"S": "y"}})
    headers = {
        k: (v.decode() if isinstance(v, bytes) else v) for k, v in captured["headers"].items()
    }
    headers["X-Amz-Target"] = "DynamoDB_20120810.PutItem"
    forged = json.dumps({"TableName": TABLE, "Item": _admin_key_item("replayed")}).encode()
    headers["Content-Length"] = str(len(forged))
    resp = requests.post(api_process.store_url, data=forged, headers=headers, timeout=10)
    assert resp.status_code == 400 and "InvalidSignature" in resp.json()["__type"]
    item = _admin_key_item("replayed")
    assert "Item" not in store.get_item(TableName=TABLE, Key={"pk": item["pk"], "sk": item["sk"]})


@pytest.mark.parametrize(
    "method,path",
    [
        ("POST", "/moto-api/reset"),
        ("GET", "/moto-api/"),
        ("GET", "/moto-api/data.json"),
        ("POST", "/moto-api/seed?a=42"),
    ],
)
def test_motos_admin_and_reset_paths_are_unreachable(api_process, store, method, path):
    resp = requests.request(method, api_process.store_url + path, timeout=10)
    assert resp.status_code in (400, 403, 404)
    assert TABLE in store.list_tables()["TableNames"]  # nothing was reset


def test_no_cors_headers_even_for_a_preflight(api_process):
    for method in ("OPTIONS", "POST"):
        resp = requests.request(
            method,
            api_process.store_url + "/",
            timeout=10,
            headers={"Origin": "https://evil.example", "Access-Control-Request-Method": "POST"},
        )
        assert resp.status_code in (400, 403, 404)
        assert not [h for h in resp.headers if h.lower().startswith("access-control-")]


def test_the_store_listens_on_loopback_only(api_process):
    with open("/proc/net/tcp") as handle:
        rows = [line.split() for line in handle.read().splitlines()[1:]]
    port_hex = f"{api_process.store_port:04X}"
    listening = [r[1] for r in rows if r[1].endswith(":" + port_hex) and r[3] == "0A"]
    assert listening == ["0100007F:" + port_hex]


def test_the_secret_changes_at_each_start_and_its_file_is_private(api_process):
    import os
    import stat

    mode = os.stat(os.path.join(api_process.data_dir, "store.env")).st_mode
    assert stat.S_IMODE(mode) == 0o600
    assert len(api_process.store_env()["AWS_SECRET_ACCESS_KEY"]) >= 32


def test_a_malformed_request_to_the_store_gets_a_clean_error(api_process):
    with RawConnection(api_process.store_port) as conn:
        conn.send(request_bytes("POST", "/", {"Content-Length": "abc"}))
        resp = conn.read_response()
        assert resp.status == 400 and conn.is_closed()


def test_a_signed_request_to_motos_reset_path_is_404_and_resets_nothing(api_process, store):
    from botocore.auth import SigV4Auth
    from botocore.awsrequest import AWSRequest
    from botocore.credentials import Credentials

    env = api_process.store_env()
    request = AWSRequest(method="POST", url=api_process.store_url + "/moto-api/reset", data=b"")
    SigV4Auth(
        Credentials(env["AWS_ACCESS_KEY_ID"], env["AWS_SECRET_ACCESS_KEY"]),
        "dynamodb",
        "us-east-1",
    ).add_auth(request)
    resp = requests.post(
        api_process.store_url + "/moto-api/reset",
        data=b"",
        headers=dict(request.headers),
        timeout=10,
    )
    assert resp.status_code == 404
    assert TABLE in store.list_tables()["TableNames"]
