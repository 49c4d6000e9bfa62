"""/service_users: the hosted service's newer name of /bot_users, the same resource."""

from chalicelib.core import errors, ids
from tests.functional.test_api_keys import assert_contract_error


def test_service_users_and_bot_users_are_one_resource(account):
    admin = account.admin
    created = admin.post("/service_users", {"name": "ci"})
    assert created.status == 201, created
    bot = created.json
    assert ids.is_valid(bot["id"], "bot") and bot["active"] is True
    assert bot["uri"].endswith(f"/service_users/{bot['id']}")
    as_bot = admin.get(f"/bot_users/{bot['id']}").json
    assert as_bot["uri"].endswith(f"/bot_users/{bot['id']}")
    assert {k: v for k, v in as_bot.items() if k != "uri"} == {
        k: v for k, v in bot.items() if k != "uri"
    }
    listed = admin.get("/service_users").json
    assert set(listed) == {"service_users", "uri", "next_page_uri"}
    assert [u["id"] for u in listed["service_users"]] == [bot["id"]]
    assert listed["uri"].endswith("/service_users")
    updated = admin.patch(f"/service_users/{bot['id']}", {"active": False})
    assert updated.status == 200 and updated.json["active"] is False
    assert admin.get(f"/bot_users/{bot['id']}").json["active"] is False
    # the name is unique across both paths
    assert_contract_error(admin.post("/bot_users", {"name": "ci"}), 409, errors.CONFLICT)
    assert admin.delete(f"/service_users/{bot['id']}").status == 204
    assert_contract_error(admin.get(f"/bot_users/{bot['id']}"), 404, errors.NOT_FOUND)


def test_service_users_follow_the_bot_user_rules(account):
    member = account.member
    assert_contract_error(member.post("/service_users", {"name": "x"}), 403, errors.FORBIDDEN)
    assert_contract_error(account.admin.post("/service_users", {}), 400, errors.MISSING_FIELD)
    bot = account.admin.post("/bot_users", {"name": "shared"}).json
    assert member.get(f"/service_users/{bot['id']}").status == 200
    assert_contract_error(member.delete(f"/service_users/{bot['id']}"), 403, errors.FORBIDDEN)


def test_service_users_list_pages_and_filters(account):
    admin = account.admin
    made = [admin.post("/service_users", {"name": f"b{i}"}).json["id"] for i in range(3)]
    first = admin.get("/service_users?limit=2").json
    assert [u["id"] for u in first["service_users"]] == made[::-1][:2]
    assert "/service_users?" in first["next_page_uri"]
    rest = admin.get(first["next_page_uri"]).json
    assert [u["id"] for u in rest["service_users"]] == [made[0]] and rest["next_page_uri"] is None
    hit = admin.get("/service_users?filter=obj.name%20%3D%3D%20%22b1%22").json["service_users"]
    assert [u["id"] for u in hit] == [made[1]]


def test_other_accounts_service_users_are_404(account, other_account):
    bot = account.admin.post("/service_users", {"name": "mine"}).json
    assert_contract_error(
        other_account.admin.get(f"/service_users/{bot['id']}"), 404, errors.NOT_FOUND
    )
