"""/ssh_credentials at both levels (in-process and over HTTP), and through the official Python
client: fields, the public key's checks and the hosted codes (611, 612, 609, 610), ownership,
paging, and the lookup the edge's SSH gateway authenticates with."""

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa

from chalicelib.core import errors, ids

FIELDS = {"id", "uri", "created_at", "description", "metadata", "public_key", "acl", "owner_id"}


def public_line(kind="ed25519", comment="me@host"):
    if kind == "ed25519":
        key = ed25519.Ed25519PrivateKey.generate()
    elif kind == "ecdsa":
        key = ec.generate_private_key(ec.SECP256R1())
    else:
        key = rsa.generate_private_key(public_exponent=65537, key_size=int(kind[3:]))
    raw = key.public_key().public_bytes(
        serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH
    )
    return raw.decode() + (f" {comment}" if comment else "")


def test_create_get_list_update_delete(account):
    admin = account.admin
    line = public_line()
    created = admin.post(
        "/ssh_credentials",
        {
            "public_key": f"  {line}\n",
            "description": "laptop",
            "metadata": '{"k": 1}',
            "acl": ["bind:*.Example.com"],
        },
    )
    assert created.status == 201, created
    body = created.json
    assert set(body) == FIELDS
    assert ids.is_valid(body["id"], "sshcr") and body["uri"].endswith(
        f"/ssh_credentials/{body['id']}"
    )
    assert body["public_key"] == line  # canonical: trimmed
    assert body["acl"] == ["bind:*.example.com"] and body["owner_id"] == admin.id
    assert body["description"] == "laptop" and body["metadata"] == '{"k": 1}'
    assert admin.get(f"/ssh_credentials/{body['id']}").json == body
    assert admin.get("/ssh_credentials").json["ssh_credentials"] == [body]
    updated = admin.patch(
        f"/ssh_credentials/{body['id']}", {"description": "d", "acl": [], "metadata": "m"}
    )
    assert updated.status == 200
    assert updated.json == {**body, "description": "d", "acl": [], "metadata": "m"}
    assert admin.patch(f"/ssh_credentials/{body['id']}", {}).json == updated.json
    deleted = admin.delete(f"/ssh_credentials/{body['id']}")
    assert deleted.status == 204 and deleted.text == ""
    assert admin.get(f"/ssh_credentials/{body['id']}").status == 404
    assert admin.delete(f"/ssh_credentials/{body['id']}").status == 404
    # its key is free again
    assert admin.post("/ssh_credentials", {"public_key": line}).status == 201


def test_defaults_are_what_the_reference_client_reads(account):
    sent = account.member.post(
        "/ssh_credentials",
        {"public_key": public_line(comment=""), "description": "", "metadata": "", "acl": []},
    )
    assert sent.status == 201, sent
    assert (
        sent.json["acl"] == [] and sent.json["description"] == "" and sent.json["metadata"] == ""
    )
    assert sent.json["owner_id"] == account.member.id


@pytest.mark.parametrize("kind", ["ed25519", "ecdsa", "rsa2048", "rsa4096"])
def test_each_accepted_key_type(account, kind):
    line = public_line(kind)
    created = account.admin.post("/ssh_credentials", {"public_key": line})
    assert created.status == 201, created
    assert created.json["public_key"] == line


@pytest.mark.parametrize(
    "body", [{}, {"public_key": None}, {"public_key": ""}, {"public_key": " \n"}]
)
def test_a_missing_or_empty_key_is_611(account, body):
    resp = account.admin.post("/ssh_credentials", body)
    assert resp.status == 400 and resp.json["error_code"] == errors.SSH_KEY_MISSING
    assert resp.json["msg"] == "Public key is missing or empty."
    assert resp.json["details"]["field"] == "public_key"


@pytest.mark.parametrize(
    "line, why",
    [
        ("ssh-ed25519", "expected '<type> <base64 key> [comment]'"),
        ("ssh-dss AAAAB3NzaC1kc3MAAACBAP", "is not an accepted key type"),
        ("no-pty ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIA", "authorized_keys options"),
        ("ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIA==", "the key data ends early"),
        ("ssh-ed25519 !!!!", "the key is not base64"),
        ("ssh-rsa AAAAC3NzaC1lZDI1NTE5AAAAIA==", "the key data is not a ssh-rsa key"),
    ],
)
def test_an_invalid_key_is_612_saying_why(account, line, why):
    resp = account.admin.post("/ssh_credentials", {"public_key": line})
    assert resp.status == 400 and resp.json["error_code"] == errors.SSH_KEY_INVALID, resp
    assert resp.json["msg"].startswith("Invalid public key '") and why in resp.json["msg"]
    assert resp.json["details"]["field"] == "public_key"
    assert account.admin.get("/ssh_credentials").json["ssh_credentials"] == []


def test_a_small_rsa_key_is_refused(account):
    resp = account.admin.post("/ssh_credentials", {"public_key": public_line("rsa1024")})
    assert resp.status == 400 and resp.json["error_code"] == errors.SSH_KEY_INVALID
    assert "an RSA key of 1024 bits; 2048 to 8192 bits are accepted" in resp.json["msg"]


def test_one_key_one_credential_service_wide(account, other_account):
    line = public_line()
    first = account.admin.post("/ssh_credentials", {"public_key": line})
    assert first.status == 201
    # the same key, another comment: the same key
    again = account.member.post("/ssh_credentials", {"public_key": line.rsplit(" ", 1)[0] + " x"})
    assert again.status == 409 and again.json["error_code"] == errors.SSH_KEY_EXISTS
    assert again.json["msg"].endswith("already exists on your account.")
    theirs = other_account.admin.post("/ssh_credentials", {"public_key": line})
    assert theirs.status == 409 and theirs.json["error_code"] == errors.SSH_KEY_OF_ANOTHER_ACCOUNT
    assert "is already used in a different account" in theirs.json["msg"]
    assert other_account.admin.get("/ssh_credentials").json["ssh_credentials"] == []
    assert account.admin.delete(f"/ssh_credentials/{first.json['id']}").status == 204
    assert other_account.admin.post("/ssh_credentials", {"public_key": line}).status == 201


@pytest.mark.parametrize(
    "body, field",
    [
        ({"description": "x" * 256}, "description"),
        ({"metadata": "m" * 4097}, "metadata"),
        ({"acl": ["allow:x"]}, "acl"),
        ({"acl": ["*"] * 101}, "acl"),
        ({"owner_id": 5}, "owner_id"),
        ({"token": "x"}, "token"),
    ],
)
def test_field_limits(account, body, field):
    resp = account.admin.post("/ssh_credentials", {"public_key": public_line(), **body})
    assert resp.status == 400 and resp.json["details"]["field"] == field, resp


def test_field_limits_pass_at_the_boundary(account):
    resp = account.admin.post(
        "/ssh_credentials",
        {
            "public_key": public_line(),
            "description": "x" * 255,
            "metadata": "m" * 4096,
            "acl": ["*"] * 100,
        },
    )
    assert resp.status == 201, resp


def test_update_accepts_description_metadata_acl_only(account):
    cred = account.admin.post("/ssh_credentials", {"public_key": public_line()}).json
    for field in ("public_key", "owner_id"):
        resp = account.admin.patch(f"/ssh_credentials/{cred['id']}", {field: "x"})
        assert resp.status == 400 and resp.json["error_code"] == errors.UNKNOWN_FIELD
        assert "accepted fields: acl, description, metadata" in resp.json["msg"]
    bad = account.admin.patch(f"/ssh_credentials/{cred['id']}", {"acl": ["nope"]})
    assert bad.status == 400 and "nope" in bad.json["msg"]


def test_owners_members_and_bots(account):
    admin, member = account.admin, account.member
    bot = admin.post("/bot_users", {"name": "ssh-bot"}).json
    for owner in (bot["id"], member.id):
        made = admin.post("/ssh_credentials", {"public_key": public_line(), "owner_id": owner})
        assert made.status == 201 and made.json["owner_id"] == owner
    resp = member.post("/ssh_credentials", {"public_key": public_line(), "owner_id": admin.id})
    assert resp.status == 403 and resp.json["error_code"] == errors.FORBIDDEN
    nobody = admin.post(
        "/ssh_credentials",
        {"public_key": public_line(), "owner_id": "usr_0ERYqBR5B9RMvMY4cZCztl2IB7s"},
    )
    assert nobody.status == 400 and nobody.json["details"]["field"] == "owner_id"
    admins = admin.post("/ssh_credentials", {"public_key": public_line()}).json
    assert member.get(f"/ssh_credentials/{admins['id']}").status == 200
    assert member.patch(f"/ssh_credentials/{admins['id']}", {"metadata": "x"}).status == 403
    assert member.delete(f"/ssh_credentials/{admins['id']}").status == 403
    own = member.post("/ssh_credentials", {"public_key": public_line()}).json
    assert member.patch(f"/ssh_credentials/{own['id']}", {"metadata": "x"}).status == 200
    assert admin.patch(f"/ssh_credentials/{own['id']}", {"metadata": "y"}).status == 200
    assert member.delete(f"/ssh_credentials/{own['id']}").status == 204


def test_deleting_a_bot_deletes_its_ssh_credentials_and_frees_their_keys(account):
    admin = account.admin
    bot = admin.post("/bot_users", {"name": "gone"}).json
    line = public_line()
    made = admin.post("/ssh_credentials", {"public_key": line, "owner_id": bot["id"]}).json
    assert admin.delete(f"/bot_users/{bot['id']}").status == 204
    assert admin.get(f"/ssh_credentials/{made['id']}").status == 404
    assert admin.post("/ssh_credentials", {"public_key": line}).status == 201


def test_other_accounts_and_malformed_ids_are_404(account, other_account):
    cred = account.admin.post("/ssh_credentials", {"public_key": public_line()}).json
    other = other_account.admin
    assert other.get(f"/ssh_credentials/{cred['id']}").status == 404
    assert other.patch(f"/ssh_credentials/{cred['id']}", {"metadata": "x"}).status == 404
    assert other.delete(f"/ssh_credentials/{cred['id']}").status == 404
    assert other.get("/ssh_credentials").json["ssh_credentials"] == []
    for bad in ("sshcr_x", "cr_0ERYqBR5B9RMvMY4cZCztl2IB7s", "sshcr_0ERYqBR5B9RMvMY4cZCztl2IB7s"):
        assert account.admin.get(f"/ssh_credentials/{bad}").status == 404
        assert account.admin.patch(f"/ssh_credentials/{bad}", {}).status == 404
        assert account.admin.delete(f"/ssh_credentials/{bad}").status == 404


def test_list_pages_newest_first(account):
    made = [
        account.admin.post("/ssh_credentials", {"public_key": public_line()}).json["id"]
        for _ in range(5)
    ]
    seen, url = [], "/ssh_credentials?limit=2"
    while url:
        page = account.admin.get(url).json
        assert len(page["ssh_credentials"]) <= 2
        seen += [c["id"] for c in page["ssh_credentials"]]
        url = page["next_page_uri"]
    assert seen == list(reversed(made))
    hit = account.admin.get(f'/ssh_credentials?filter=obj.id == "{made[0]}"').json
    assert [c["id"] for c in hit["ssh_credentials"]] == [made[0]]


# ---- what the edge's SSH gateway reads (in-process: the test shares the store) -------------
@pytest.fixture
def inproc_account(inprocess_api):
    return inprocess_api.new_account()


def test_the_gateway_finds_the_credential_by_the_keys_blob(inproc_account):
    import base64

    from chalicelib.core import binding, edge_errors

    admin = inproc_account.admin
    bot = admin.post("/bot_users", {"name": "agent"}).json
    line = public_line()
    blob = base64.b64decode(line.split()[1])
    cred = admin.post(
        "/ssh_credentials", {"public_key": line, "owner_id": bot["id"], "acl": ["bind:a.x.com"]}
    ).json
    grant = binding.authenticate_ssh_key(blob)
    assert grant.credential_id == cred["id"] and grant.account_id == inproc_account.id
    assert grant.owner_id == bot["id"] and grant.acl == ["bind:a.x.com"]
    admin.patch(f"/ssh_credentials/{cred['id']}", {"acl": []})
    assert binding.recheck(grant.account_id, cred["id"], bot["id"], "bot").acl == []
    admin.patch(f"/bot_users/{bot['id']}", {"active": False})
    with pytest.raises(binding.Refused) as refused:
        binding.authenticate_ssh_key(blob)
    assert refused.value.code == edge_errors.AUTHTOKEN_INVALID
    assert f"The SSH credential {cred['id']} cannot be used" in refused.value.message
    admin.patch(f"/bot_users/{bot['id']}", {"active": True})
    admin.delete(f"/ssh_credentials/{cred['id']}")
    with pytest.raises(binding.Refused) as unknown:
        binding.authenticate_ssh_key(blob)
    assert unknown.value.code == edge_errors.SSH_KEY_UNKNOWN
    with pytest.raises(binding.Refused) as deleted:
        binding.recheck(grant.account_id, cred["id"], bot["id"], "bot")
    assert deleted.value.message == (
        f"The SSH credential {cred['id']} has been deleted and is no longer valid."
    )


# ---- the official client (ngrok-api 0.19.0) ----------------------------------------------------
def test_the_official_client_end_to_end(http_api):
    import ngrok

    account = http_api.new_account()
    client = ngrok.Client(account.admin.token, base_url=http_api.base_url)
    line = public_line()
    made = client.ssh_credentials.create(public_key=line, description="d", acl=["bind:*"])
    assert made.id.startswith("sshcr_") and made.public_key == line and made.acl == ["bind:*"]
    assert client.ssh_credentials.get(made.id).owner_id == account.admin.id
    assert [c.id for c in client.ssh_credentials.list()] == [made.id]
    assert client.ssh_credentials.update(made.id, metadata="m").metadata == "m"
    with pytest.raises(ngrok.Error) as dup:
        client.ssh_credentials.create(public_key=line)
    assert dup.value.error_code == errors.SSH_KEY_EXISTS and dup.value.http_status_code == 409
    client.ssh_credentials.delete(made.id)
    with pytest.raises(ngrok.NotFoundError):
        client.ssh_credentials.get(made.id)
