"""`make run` and `make api-key` as a user runs them: real processes, real HTTP."""

import json
import os
import subprocess

import ngrok
import pytest
import requests

from stacks.api import ApiProcess
from stacks.paths import PROJECT_DIR

HEADERS = {"Service-Version": "2"}


def _auth(token):
    return {**HEADERS, "Authorization": f"Bearer {token}"}


@pytest.fixture
def fresh_stack(tmp_path):
    stack = ApiProcess(data_dir=str(tmp_path)).start(bootstrap=True)
    yield stack
    stack.stop()


def _local_admin_token(stack):
    with open(os.path.join(stack.data_dir, "local-admin.json")) as handle:
        return json.load(handle)["token"]


def test_first_start_bootstraps_and_prints_an_admin_key(fresh_stack):
    token = _local_admin_token(fresh_stack)
    assert token in fresh_stack.log()
    resp = requests.get(fresh_stack.base_url + "/api_keys", headers=_auth(token), timeout=10)
    assert resp.status_code == 200 and len(resp.json()["keys"]) == 1


def test_data_survives_a_restart_and_holds_no_plaintext_secret(tmp_path):
    stack = ApiProcess(data_dir=str(tmp_path)).start(bootstrap=True)
    try:
        token = _local_admin_token(stack)
        created = requests.post(
            stack.base_url + "/api_keys",
            headers=_auth(token),
            json={"description": "survivor"},
            timeout=10,
        ).json()
    finally:
        stack.stop()  # SIGINT, as Ctrl-C
    assert stack.process.returncode == 0, stack.log()
    on_disk = b"".join(p.read_bytes() for p in (tmp_path / "store").iterdir()).decode(
        "utf-8", "replace"
    )
    assert created["id"] in on_disk
    assert created["token"] not in on_disk and token not in on_disk

    again = ApiProcess(data_dir=str(tmp_path)).start(bootstrap=True)
    try:
        listed = requests.get(
            again.base_url + "/api_keys", headers=_auth(token), timeout=10
        ).json()["keys"]
        assert created["id"] in [k["id"] for k in listed]
        new_key = requests.get(
            again.base_url + "/api_keys", headers=_auth(created["token"]), timeout=10
        )
        assert new_key.status_code == 200
        assert "bootstrapped" not in again.log()  # the same account, not a new one
    finally:
        again.stop()


def test_make_api_key_prints_a_working_key_as_last_line(api_process):
    env = {**os.environ, "TABLE_NAME": "tunnel-service"}
    for name in ("DYNAMODB_ENDPOINT_URL", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        env.pop(name, None)
    out = subprocess.run(
        ["make", "-s", "api-key", f"DATA_DIR={api_process.data_dir}"],
        cwd=PROJECT_DIR,
        env=env,
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    token = out.strip().splitlines()[-1]
    resp = requests.get(api_process.base_url + "/api_keys", headers=_auth(token), timeout=10)
    assert resp.status_code == 200, resp.text
    keys = resp.json()["keys"]
    assert len(keys) == 1 and keys[0]["description"] == "bootstrap admin key"


def test_stored_items_hold_no_plaintext_secret(http_api, api_process):
    account = http_api.new_account()
    created = account.admin.post("/api_keys", {"description": "secret check"}).json
    client = api_process.store_client()
    pages = client.get_paginator("scan").paginate(TableName="tunnel-service")  # > 1 MB by now
    dump = json.dumps([item for page in pages for item in page["Items"]])
    assert created["id"] in dump
    for token in (created["token"], account.admin.token, account.member.token):
        assert token not in dump


def test_pagination_across_250_keys_following_next_page_uri_verbatim(http_api):
    account = http_api.new_account()
    session = requests.Session()
    url = http_api.base_url + "/api_keys"
    created = [
        session.post(url, headers=_auth(account.admin.token), json={}, timeout=10).json()["id"]
        for _ in range(248)
    ]
    expected = sorted(
        created + [account.admin.api_key_id, account.member.api_key_id], reverse=True
    )
    seen, next_url, pages = [], url + "?limit=100", 0
    while next_url:
        page = session.get(next_url, headers=_auth(account.admin.token), timeout=10).json()
        seen += [k["id"] for k in page["keys"]]
        next_url = page["next_page_uri"]
        pages += 1
    assert seen == expected and pages == 3

    # the reference client follows next_page_uri by itself
    client = ngrok.Client(account.admin.token, base_url=http_api.base_url)
    assert [k.id for k in client.api_keys.list(limit="30")] == expected


def test_reference_client_manages_api_keys(http_api):
    account = http_api.new_account()
    client = ngrok.Client(account.admin.token, base_url=http_api.base_url)
    key = client.api_keys.create(description="from sdk", metadata='{"x": 1}')
    assert key.token and key.owner_id == account.admin.id
    fetched = client.api_keys.get(key.id)
    assert fetched.token is None and fetched.description == "from sdk"
    updated = client.api_keys.update(key.id, metadata="m2")
    assert updated.metadata == "m2" and updated.description == "from sdk"
    for_member = client.api_keys.create(owner_id=account.member.id)
    assert for_member.owner_id == account.member.id
    client.api_keys.delete(key.id)
    with pytest.raises(ngrok.NotFoundError):
        client.api_keys.get(key.id)
    member_client = ngrok.Client(account.member.token, base_url=http_api.base_url)
    with pytest.raises(ngrok.Error) as info:
        member_client.api_keys.create(owner_id=account.admin.id)
    assert info.value.http_status_code == 403
