"""One owner per name, whatever its form (chalicelib.reserved_domains, "one owner per name"):
two accounts, the API over HTTP and the official SDK as a process. Each case of a hostname
takeover across accounts is refused with the hosted code, and the owner keeps serving."""

import os

from chalicelib.core import errors
from tests.edge.conftest import BASE_DOMAIN
from tests.edge.test_edge_sdk import _bound, _credential, _host, _refusal


def _name(suffix="example.net"):
    return f"own{os.urandom(4).hex()}.{suffix}"


def _reserve(account, domain):
    return account.admin.post("/reserved_domains", {"domain": domain})


def _refused(resp, code):
    assert resp.status == 409 and resp.json["error_code"] == code, resp
    return True


def test_a_name_inside_another_accounts_wildcard(api, account):
    other = api.new_account()
    parent = _name()
    assert _reserve(account, f"*.{parent}").status == 201
    assert _refused(_reserve(other, f"x.{parent}"), errors.DOMAIN_RESERVED_BY_OTHER)
    assert _refused(_reserve(other, f"*.x.{parent}"), errors.WILDCARD_CONFLICT)


def test_a_wildcard_over_another_accounts_name(api, account):
    other = api.new_account()
    parent = _name("example.com")
    assert _reserve(account, f"app.{parent}").status == 201
    assert _refused(_reserve(other, f"*.{parent}"), errors.WILDCARD_CONFLICT)
    assert _reserve(account, f"*.{parent}").status == 201  # its own account may


def test_names_under_another_accounts_name(api, account):
    other = api.new_account()
    name = _name()
    assert _reserve(account, name).status == 201
    assert _refused(_reserve(other, f"sub.{name}"), errors.DOMAIN_RESERVED_BY_OTHER)
    assert _refused(_reserve(other, f"*.{name}"), errors.WILDCARD_CONFLICT)
    base_name = _name(BASE_DOMAIN)
    assert _reserve(account, base_name).status == 201
    assert _refused(_reserve(other, f"*.{base_name}"), errors.WILDCARD_CONFLICT)


def test_a_name_another_account_serves_cannot_be_reserved(api, account, edge, agents):
    agent = agents(edge, _credential(account)["token"], [{"proto": "http"}])
    host = _host(_bound(agent.start())[0]["url"])
    other = api.new_account()
    refused = _reserve(other, host)
    assert _refused(refused, errors.DOMAIN_IN_USE)
    assert refused.json["msg"] == (
        f"Another account is running an active endpoint on the "
        f"domain {host}. You may not reserve domains that are "
        "actively in use."
    )
    assert _refused(_reserve(other, f"sub.{host}"), errors.DOMAIN_IN_USE)
    assert edge.http("GET", host, "/echo").status_code == 200  # still the owner's


def test_binds_of_names_that_are_another_accounts(api, account, edge, agents):
    """The SDK of another account is refused ERR_NGROK_320 for a name under the owner's
    reservation and for a name above one of the owner's; a free name is one label under the
    base domain (deeper: ERR_NGROK_7117)."""
    owned = _name(BASE_DOMAIN)
    assert _reserve(account, owned).status == 201
    assert _reserve(account, f"deep.{_name('example.org')}").status == 201
    intruder = _credential(api.new_account())["token"]
    for domain, code in (
        (f"x.{owned}", "ERR_NGROK_320"),
        (owned, "ERR_NGROK_320"),
        (f"two.labels{os.urandom(2).hex()}.{BASE_DOMAIN}", "ERR_NGROK_7117"),
    ):
        agent = agents(edge, intruder, [{"proto": "http", "domain": domain}])
        assert code in _refusal(agent.start(), "bind"), domain
    owner = agents(edge, _credential(account)["token"], [{"proto": "http", "domain": owned}])
    assert _bound(owner.start())
