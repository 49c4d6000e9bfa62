"""/vaults and /vault_secrets through the official Python client (ngrok-api 0.19.0) against
the running stack: the value is write-only and stored sealed, names are unique, accounts
are apart, and a traffic policy naming a missing secret is a 400."""

import json
import uuid

import ngrok
import pytest

from chalicelib.core import keywrap, store
from chalicelib.core import vault_secrets as vs
from chalicelib.vaults import MAX_SECRETS_PER_VAULT, MAX_VALUE_BYTES


@pytest.fixture
def client(http_api):
    account = http_api.new_account()
    return ngrok.Client(account.admin.token, base_url=http_api.base_url), account


def _name():
    return "v-" + uuid.uuid4().hex[:10]


def test_vault_and_secret_round_trip_through_the_client(client, http_api):
    c, account = client
    vault = c.vaults.create(name=_name(), description="d", metadata="m")
    assert vault.id.startswith("vault_") and vault.description == "d"
    secret = c.secrets.create(
        name="client-secret", value="s3cr3t-value", vault_id=vault.id, description="oidc"
    )
    assert secret.id.startswith("secret_") and secret.vault.id == vault.id
    assert secret.vault_name == vault.name
    # write-only: no response carries the value
    for answer in (
        account.admin.get(f"/vault_secrets/{secret.id}"),
        account.admin.get("/vault_secrets"),
        account.admin.get(f"/vaults/{vault.id}/secrets"),
    ):
        assert answer.status == 200 and "s3cr3t-value" not in json.dumps(answer.json)
        assert "value" not in json.dumps(answer.json).replace("vault", "")
    assert [s.id for s in c.vaults.get_secrets_by_vault(vault.id).secrets] == [secret.id]
    assert c.secrets.get(secret.id).name == "client-secret"
    assert secret.id in [s.id for s in c.secrets.list().secrets]
    assert vault.id in [v.id for v in c.vaults.list().vaults]
    by_name = c.secrets.create(name="other", value="x", vault_name=vault.name)
    assert by_name.vault.id == vault.id
    updated = c.secrets.update(secret.id, value="new-value", description="changed")
    assert updated.description == "changed"
    assert c.vaults.update(vault.id, description="d2").description == "d2"
    c.secrets.delete(by_name.id)
    c.secrets.delete(secret.id)
    c.vaults.delete(vault.id)
    with pytest.raises(ngrok.Error) as info:
        c.vaults.get(vault.id)
    assert info.value.http_status_code == 404


def test_the_value_is_stored_sealed_and_opens_only_for_its_account_and_id(
    client, http_api, api_process
):
    c, account = client
    vault = c.vaults.create(name=_name())
    secret = c.secrets.create(name="s", value="plain-text-value", vault_id=vault.id)
    raw = api_process.store_client().get_item(
        TableName="tunnel-service",
        Key={"pk": {"S": store.collection_pk(account.id, vs.SECRETS)}, "sk": {"S": secret.id}},
    )
    dumped = json.dumps(raw["Item"])
    assert "plain-text-value" not in dumped and "sealed" in dumped
    sealed = store.from_av(raw["Item"]["data"])["sealed"]
    assert (
        keywrap.open_sealed(sealed, vs.seal_context(account.id, secret.id)) == b"plain-text-value"
    )
    with pytest.raises(keywrap.SealError):
        keywrap.open_sealed(sealed, vs.seal_context("acct_other", secret.id))


def test_names_are_unique_and_checked(client):
    c, _ = client
    name = _name()
    vault = c.vaults.create(name=name)
    with pytest.raises(ngrok.Error) as info:
        c.vaults.create(name=name)
    assert info.value.http_status_code == 409
    c.secrets.create(name="a", value="1", vault_id=vault.id)
    with pytest.raises(ngrok.Error) as info:
        c.secrets.create(name="a", value="2", vault_id=vault.id)
    assert info.value.http_status_code == 409
    for bad in ("", "has space", "x" * 65, "semi;colon"):
        with pytest.raises(ngrok.Error) as info:
            c.secrets.create(name=bad, value="v", vault_id=vault.id)
        assert info.value.http_status_code == 400
    with pytest.raises(ngrok.Error) as info:
        c.secrets.create(name="b", value="", vault_id=vault.id)
    assert info.value.http_status_code == 400
    with pytest.raises(ngrok.Error) as info:
        c.secrets.create(name="b", value="x" * (MAX_VALUE_BYTES + 1), vault_id=vault.id)
    assert info.value.http_status_code == 400
    assert c.secrets.create(name="b", value="x" * MAX_VALUE_BYTES, vault_id=vault.id)
    # a vault holding secrets is not deleted
    with pytest.raises(ngrok.Error) as info:
        c.vaults.delete(vault.id)
    assert info.value.http_status_code == 409


def test_a_vault_holds_at_most_the_limit_of_secrets(client):
    c, _ = client
    vault = c.vaults.create(name=_name())
    for index in range(MAX_SECRETS_PER_VAULT):
        c.secrets.create(name=f"s{index}", value="v", vault_id=vault.id)
    with pytest.raises(ngrok.Error) as info:
        c.secrets.create(name="one-more", value="v", vault_id=vault.id)
    assert info.value.http_status_code == 400


def test_accounts_are_apart(client, http_api):
    c, _ = client
    vault = c.vaults.create(name=_name())
    secret = c.secrets.create(name="s", value="v", vault_id=vault.id)
    other = ngrok.Client(http_api.new_account().admin.token, base_url=http_api.base_url)
    for call in (
        lambda: other.vaults.get(vault.id),
        lambda: other.secrets.get(secret.id),
        lambda: other.secrets.delete(secret.id),
        lambda: other.vaults.get_secrets_by_vault(vault.id),
    ):
        with pytest.raises(ngrok.Error) as info:
            call()
        assert info.value.http_status_code == 404
    with pytest.raises(ngrok.Error) as info:
        other.secrets.create(name="s2", value="v", vault_id=vault.id)
    assert info.value.http_status_code == 400
    with pytest.raises(ngrok.Error) as info:  # the name means nothing in another account
        other.secrets.create(name="s2", value="v", vault_name=vault.name)
    assert info.value.http_status_code == 400


def test_a_policy_naming_a_missing_secret_is_a_400(client):
    c, account = client
    vault = c.vaults.create(name=_name())
    c.secrets.create(name="present", value="v", vault_id=vault.id)

    def policy(name):
        return json.dumps(
            {
                "on_http_request": [
                    {
                        "actions": [
                            {
                                "type": "add-headers",
                                "config": {
                                    "headers": {
                                        "x-s": f"${{secrets.get('{vault.name}', '{name}')}}"
                                    }
                                },
                            }
                        ]
                    }
                ]
            }
        )

    host = f"{uuid.uuid4().hex[:10]}.tunnels.localhost"
    bad = account.admin.post(
        "/endpoints", {"url": f"https://{host}", "traffic_policy": policy("absent")}
    )
    assert bad.status == 400 and "absent" in bad.json["msg"]
    assert "on_http_request[0].actions[0].config.headers.x-s" in bad.json["msg"]
    good = account.admin.post(
        "/endpoints", {"url": f"https://{host}", "traffic_policy": policy("present")}
    )
    assert good.status == 201, good.json
