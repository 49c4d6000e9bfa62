"""Layout 2 migration: a table written by the previous version (data as JSON strings, key
lookups without role/active, no owner index, routes in their own partition) still serves."""

import json

from chalicelib import auth, migrate
from chalicelib.core import store
from chalicelib.core import reservations
from chalicelib.core import routing


def _put_legacy(pk, sk, kind, account_id, data, refs=0):
    store.connection().client.put_item(
        TableName=store.get_settings().table_name,
        Item={
            "pk": {"S": pk},
            "sk": {"S": sk},
            "kind": {"S": kind},
            "account_id": {"S": account_id},
            "data": {"S": json.dumps(data)},
            "refs": {"N": str(refs)},
            "version": {"N": "1"},
        },
    )


def _legacy_account():
    acct = "acct_0000000000000000000000000001"[:32]
    _put_legacy(
        store.account_pk(acct),
        store.ACCOUNT_SK,
        "account",
        acct,
        {"name": "", "abuse_reporter": True, "created_at": "2026-01-01T00:00:00Z"},
    )
    _put_legacy(
        store.collection_pk(acct, "user"),
        "usr_1",
        "user",
        acct,
        {"id": "usr_1", "role": "admin", "name": "a", "created_at": "2026-01-01T00:00:00Z"},
    )
    _put_legacy(
        store.collection_pk(acct, "api_key"),
        "ak_1",
        "api_key",
        acct,
        {
            "description": "",
            "metadata": "",
            "owner_id": "usr_1",
            "owner_kind": "user",
            "digest": "d1",
            "created_at": "2026-01-01T00:00:00Z",
        },
    )
    _put_legacy(
        store.unique_pk(auth.API_KEY_HASH_NAMESPACE, "d1"),
        store.UNIQUE_SK,
        auth.API_KEY_HASH_NAMESPACE,
        acct,
        {
            "digest": "d1",
            "account_id": acct,
            "api_key_id": "ak_1",
            "owner_id": "usr_1",
            "owner_kind": "user",
        },
    )
    _put_legacy(
        store.collection_pk(acct, "https_edge"),
        "edghts_1",
        "https_edge",
        acct,
        {
            "description": "",
            "metadata": "",
            "hostports": None,
            "created_at": "2026-01-01T00:00:00Z",
        },
        refs=1,
    )
    _put_legacy(
        store.collection_pk(acct, "https_edge_route#edghts_1"),
        "edghtsrt_1",
        "https_edge_route",
        acct,
        {
            "edge_id": "edghts_1",
            "match_type": "exact_path",
            "match": "/",
            "created_at": "2026-01-01T00:00:00Z",
        },
    )
    return acct


def test_old_items_are_read_as_they_are(store_env):
    acct = _legacy_account()
    assert store.get(store.collection_pk(acct, "user"), "usr_1").data["role"] == "admin"


def test_migration_rewrites_data_lookups_index_and_routes_once(store_env):
    acct = _legacy_account()
    counts = migrate.run_if_needed()
    assert counts == {
        "data_maps": 6,
        "lookups": 1,
        "owner_index": 1,
        "routes_moved": 1,
        "tls_index": 0,
        "under_index": 0,
    }
    raw = store.connection().client.get_item(
        TableName=store.get_settings().table_name,
        Key={"pk": {"S": store.collection_pk(acct, "user")}, "sk": {"S": "usr_1"}},
    )["Item"]
    assert "M" in raw["data"]
    lookup = store.get(store.unique_pk(auth.API_KEY_HASH_NAMESPACE, "d1"), store.UNIQUE_SK)
    assert lookup.data["role"] == "admin" and lookup.data["active"] is True
    assert lookup.data["abuse_reporter"] is True
    assert [e.sk for e in auth.owned(acct, "usr_1")] == ["ak_1"]
    assert store.get(store.collection_pk(acct, "https_edge"), "edghts_1#edghtsrt_1") is not None
    assert store.get(store.collection_pk(acct, "https_edge_route#edghts_1"), "edghtsrt_1") is None
    assert migrate.run_if_needed() == {}
    assert migrate.current_version() == migrate.LAYOUT_VERSION


def test_a_single_field_update_upgrades_an_old_item_first(store_env):
    acct = _legacy_account()
    item = store.write(store.set_fields(store.collection_pk(acct, "user"), "usr_1", {"name": "b"}))
    assert item.data == {
        "id": "usr_1",
        "role": "admin",
        "name": "b",
        "created_at": "2026-01-01T00:00:00Z",
    }


def test_migration_writes_the_tls_index_of_edges_stored_before_it(store_env):
    acct = "acct_0000000000000000000000000002"[:32]
    _put_legacy(
        store.collection_pk(acct, "https_edge"),
        "edghts_2",
        "https_edge",
        acct,
        {
            "description": "",
            "metadata": "",
            "created_at": "2026-01-01T00:00:00Z",
            "hostports": ["a.example.com:443", "b.example.com:443"],
            "tls_termination": {"enabled": True, "min_version": "1.3"},
        },
    )
    _put_legacy(
        store.collection_pk(acct, "https_edge"),
        "edghts_3",
        "https_edge",
        acct,
        {
            "description": "",
            "metadata": "",
            "created_at": "2026-01-01T00:00:00Z",
            "hostports": ["c.example.com:443"],
            "tls_termination": {"enabled": False, "min_version": "1.3"},
        },
    )
    assert routing.tls_index() == {}
    assert migrate.run_if_needed()["tls_index"] == 2
    assert routing.tls_index() == {
        hp: {"account_id": acct, "edge_id": "edghts_2", "min_version": "1.3"}
        for hp in ("a.example.com:443", "b.example.com:443")
    }


def test_migration_indexes_domains_reserved_before_it_under_their_parents(store_env):
    acct = "acct_0000000000000000000000000003"[:32]
    _put_legacy(
        store.collection_pk(acct, "reserved_domain"),
        "rd_1",
        "reserved_domain",
        acct,
        {"domain": "app.shop.example.com", "created_at": "2026-01-01T00:00:00Z"},
    )
    _put_legacy(
        store.collection_pk(acct, "reserved_domain"),
        "rd_2",
        "reserved_domain",
        acct,
        {"domain": "*.wild.example.net", "created_at": "2026-01-01T00:00:00Z"},
    )
    assert reservations.reserved_under("example.com") == []
    assert migrate.run_if_needed()["under_index"] == 3
    assert reservations.reserved_under("example.com") == [
        {"domain": "app.shop.example.com", "account_id": acct}
    ]
    assert reservations.reserved_under("shop.example.com") == [
        {"domain": "app.shop.example.com", "account_id": acct}
    ]
    assert reservations.reserved_under("example.net") == [
        {"domain": "*.wild.example.net", "account_id": acct}
    ]
