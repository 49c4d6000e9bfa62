"""The reference `ngrok-api` client against the real HTTP server: credentials, bot users,
reserved domains and abuse reports, as a user of that client would call them."""

import ngrok
import pytest

from chalicelib.core import acme_orders, ids


@pytest.fixture
def client_for(http_api):
    def make(caller):
        return ngrok.Client(caller.token, base_url=http_api.base_url)

    return make


def test_credentials_with_the_reference_client(http_api, client_for):
    account = http_api.new_account()
    client = client_for(account.admin)
    cred = client.credentials.create(description="agent", acl=["bind:*.example.com"])
    assert cred.token and cred.owner_id == account.admin.id and cred.acl == ["bind:*.example.com"]
    assert cred.description == "agent" and cred.metadata == "" and cred.created_at
    fetched = client.credentials.get(cred.id)
    assert fetched.token is None and fetched.acl == cred.acl and fetched.uri == cred.uri
    updated = client.credentials.update(cred.id, metadata="m", acl=["bind:env=prod"])
    assert updated.token is None and updated.acl == ["bind:env=prod"]
    assert updated.description == "agent" and updated.metadata == "m"
    for _ in range(3):
        client.credentials.create()
    listed = list(client.credentials.list(limit="2"))  # follows next_page_uri verbatim
    assert len(listed) == 4 and all(c.token is None for c in listed)
    with pytest.raises(ngrok.Error) as exc:
        client.credentials.create(acl=["bind:bad rule"])
    assert exc.value.http_status_code == 400
    member = client_for(account.member)
    with pytest.raises(ngrok.Error) as exc:
        member.credentials.create(owner_id=account.admin.id)
    assert exc.value.http_status_code == 403
    client.credentials.delete(cred.id)
    with pytest.raises(ngrok.NotFoundError):
        client.credentials.get(cred.id)


def test_bot_users_with_the_reference_client(http_api, client_for):
    account = http_api.new_account()
    client = client_for(account.admin)
    bot = client.bot_users.create(name="agent")
    assert ids.is_valid(bot.id, "bot") and bot.active is True and bot.name == "agent"
    assert client.bot_users.get(bot.id).name == "agent"
    cred = client.credentials.create(owner_id=bot.id, acl=["bind:a.example.com"])
    assert cred.owner_id == bot.id and cred.token
    key = client.api_keys.create(owner_id=bot.id)
    bot_client = ngrok.Client(key.token, base_url=http_api.base_url)
    assert [b.id for b in bot_client.bot_users.list()] == [bot.id]
    assert client.bot_users.update(bot.id, active=False).active is False
    with pytest.raises(ngrok.Error) as exc:
        bot_client.bot_users.list()
    assert exc.value.http_status_code == 401
    renamed = client.bot_users.update(bot.id, name="agent-2", active=True)
    assert renamed.name == "agent-2" and renamed.active is True
    assert [b.id for b in bot_client.bot_users.list()] == [bot.id]
    with pytest.raises(ngrok.Error) as exc:
        client.bot_users.create(name="agent-2")
    assert exc.value.http_status_code == 409
    others = [client.bot_users.create(name=f"b{i}").id for i in range(3)]
    assert [b.id for b in client.bot_users.list(limit="2")] == list(reversed(others)) + [bot.id]
    client.bot_users.delete(bot.id)
    with pytest.raises(ngrok.NotFoundError):
        client.credentials.get(cred.id)
    with pytest.raises(ngrok.NotFoundError):
        client.api_keys.get(key.id)


def test_reserved_domains_with_the_reference_client(http_api, client_for):
    account = http_api.new_account()
    client = client_for(account.admin)
    domain = f"*.{ids.new_id('x')[2:].lower()}.example.com"
    rd = client.reserved_domains.create(domain=domain, region="", description="site")
    assert rd.domain == domain and rd.region == "" and rd.description == "site"
    assert rd.cname_target.endswith(".cname.example.test")
    assert rd.acme_challenge_cname_target.endswith(".acme-challenge.cname.example.test")
    assert rd.certificate is None and rd.resolves_to == []
    assert rd.certificate_management_policy.authority == "letsencrypt"
    assert rd.certificate_management_policy.private_key_type == "ecdsa"
    job = rd.certificate_management_status.provisioning_job
    # the API here has no ACME directory: the job says so, and what the edge serves instead
    assert job.msg == acme_orders.NO_ACME_FALLBACK_MSG and job.started_at
    assert job.error_code is None and job.retries_at is None
    assert rd.certificate_management_status.renews_at is None
    policy = ngrok.datatypes.ReservedDomainCertPolicy(
        None, {"authority": "letsencrypt", "private_key_type": "rsa"}
    )
    updated = client.reserved_domains.update(
        rd.id, metadata="m", certificate_management_policy=policy
    )
    assert updated.metadata == "m" and updated.description == "site"
    assert updated.certificate_management_policy.private_key_type == "rsa"
    assert client.reserved_domains.get(rd.id).cname_target == rd.cname_target
    assert [d.id for d in client.reserved_domains.list()] == [rd.id]
    other = client_for(http_api.new_account().admin)
    with pytest.raises(ngrok.Error) as exc:
        other.reserved_domains.create(domain=domain)
    assert exc.value.http_status_code == 409
    with pytest.raises(ngrok.NotFoundError):
        other.reserved_domains.get(rd.id)
    client.reserved_domains.delete(rd.id)
    assert other.reserved_domains.create(domain=domain).domain == domain


def test_abuse_reports_with_the_reference_client(http_api, client_for):
    reporter = http_api.new_account(reporter=True)
    client = client_for(reporter.admin)
    report = client.abuse_reports.create(
        urls=["https://Evil.example.com/x", "http://evil.example.com:81/y"], metadata="case 7"
    )
    assert report.status == "PENDING" and report.metadata == "case 7"
    assert [(h.hostname, h.status) for h in report.hostnames] == [("evil.example.com", "PENDING")]
    fetched = client.abuse_reports.get(report.id)
    assert fetched.urls == report.urls and fetched.created_at == report.created_at
    plain = client_for(http_api.new_account().admin)
    with pytest.raises(ngrok.Error) as exc:
        plain.abuse_reports.create(urls=["https://evil.example.com"])
    assert exc.value.http_status_code == 403
