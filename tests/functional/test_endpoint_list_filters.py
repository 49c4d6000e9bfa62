"""``GET /endpoints?id=…&url=…``: the filters the official API clients send (repeated
parameters), at both levels and through the ngrok-api client; their bounds."""

import json

import ngrok

from chalicelib import list_filters
from chalicelib.core import errors, ids
from tests.support.contract import assert_error

POLICY = json.dumps(
    {
        "on_http_request": [
            {
                "actions": [
                    {"type": "custom-response", "config": {"status_code": 200, "body": "hi"}}
                ]
            }
        ]
    }
)


def _create(caller, n):
    url = f"https://lf{ids.new_id('x')[-10:].lower()}-{n}.tunnels.localhost"
    resp = caller.post("/endpoints", {"url": url, "type": "cloud", "traffic_policy": POLICY})
    assert resp.status == 201, resp
    return resp.json


def _ids(resp):
    assert resp.status == 200, resp
    return sorted(e["id"] for e in resp.json["endpoints"])


def test_id_and_url_filters(api, account):
    made = [_create(account.admin, n) for n in range(3)]
    a, b, c = made
    assert _ids(account.admin.get(f"/endpoints?id={a['id']}")) == [a["id"]]
    assert _ids(account.admin.get(f"/endpoints?id={a['id']}&id={b['id']}")) == sorted(
        [a["id"], b["id"]]
    )
    assert _ids(account.admin.get(f"/endpoints?url={c['url']}")) == [c["id"]]
    assert _ids(account.admin.get(f"/endpoints?url={c['url']}/")) == [c["id"]]
    # different parameters must all hold
    assert _ids(account.admin.get(f"/endpoints?id={a['id']}&url={c['url']}")) == []
    # with filter as well
    assert _ids(
        account.admin.get(f'/endpoints?id={a["id"]}&id={b["id"]}&filter=obj.id == "{b["id"]}"')
    ) == [b["id"]]
    assert _ids(account.admin.get("/endpoints?id=ep_nosuch")) == []
    # still unknown: other parameters
    assert_error(account.admin.get("/endpoints?name=x"), errors.UnknownQuery)


def test_bounds(api, account):
    many = "&".join(f"id=ep_{i}" for i in range(list_filters.MAX_VALUES + 1))
    assert_error(account.admin.get(f"/endpoints?{many}"), errors.InvalidQuery)
    long = "x" * (list_filters.MAX_VALUE_LENGTH + 1)
    assert_error(account.admin.get(f"/endpoints?url={long}"), errors.InvalidQuery)
    ok = "&".join(f"id=ep_{i}" for i in range(list_filters.MAX_VALUES))
    assert account.admin.get(f"/endpoints?{ok}").status == 200


def test_the_ngrok_api_client_sends_them(http_api):
    account = http_api.new_account()
    a, b, _ = [_create(account.admin, n) for n in range(3)]
    client = ngrok.Client(account.admin.token, base_url=http_api.base_url)
    assert sorted(e.id for e in client.endpoints.list(id=[a["id"], b["id"]])) == sorted(
        [a["id"], b["id"]]
    )
    assert [e.id for e in client.endpoints.list(url=[b["url"]])] == [b["id"]]
