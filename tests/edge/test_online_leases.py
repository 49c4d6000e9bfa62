"""The edge writes an agent session's online items on transitions only: while the session runs,
the instance's lease (its registry item, chalicelib.core.leases) is renewed and the session's
own items are not written again (docs/CLUSTER.md "The online state: leases"). Played with the
session's edge process (EDGE_CHECK_SECONDS=1, one instance without a cluster, as `make run`)
and an official SDK agent; the items are read from the store directly."""

import time

from chalicelib.core import store
from tests.edge.support import bound as _bound, credential as _credential, wait as _wait


def _get(client, table, pk, sk):
    item = client.get_item(
        TableName=table, Key={"pk": {"S": pk}, "sk": {"S": sk}}, ConsistentRead=True
    ).get("Item")
    assert item is not None, (pk, sk)
    return item


def test_a_running_session_is_not_written_again_while_its_instances_lease_is(
    stack, edge, account, agents
):
    cred = _credential(account)
    agent = agents(edge, cred["token"], [{"proto": "http"}])
    url = _bound(agent.start())[0]["url"]
    sessions = _wait(
        lambda: [
            s
            for s in account.admin.get("/tunnel_sessions").json["tunnel_sessions"]
            if s["credential"]["id"] == cred["id"]
        ]
    )
    sid = sessions[0]["id"]
    tunnel = [t for t in account.admin.get("/tunnels").json["tunnels"] if t["public_url"] == url]
    endpoint = [
        e for e in account.admin.get("/endpoints").json["endpoints"] if e["public_url"] == url
    ]
    client, table = stack.store_client(), stack.env()["TABLE_NAME"]
    keys = [
        (store.collection_pk(account.id, "tunnel_session"), sid),
        (store.collection_pk(account.id, "tunnel"), tunnel[0]["id"]),
        (store.collection_pk(account.id, "endpoint"), endpoint[0]["id"]),
    ]
    before = [_get(client, table, pk, sk) for pk, sk in keys]
    instance_id = before[0]["instance_id"]["S"]
    lease = _get(client, table, "EDGE_INSTANCE", instance_id)
    renewals, last = 0, lease["heartbeat_at"]["N"]
    deadline = time.monotonic() + 120  # two renewals (5 s apart) = 10+ checks of 1 s
    while renewals < 2 and time.monotonic() < deadline:
        time.sleep(0.5)
        now = _get(client, table, "EDGE_INSTANCE", instance_id)["heartbeat_at"]["N"]
        if now != last:
            renewals, last = renewals + 1, now
    assert renewals == 2, "the instance's lease was not renewed"
    after = [_get(client, table, pk, sk) for pk, sk in keys]
    for old, new in zip(before, after):  # not a byte of the session's items rewritten
        assert old == new
    listed = account.admin.get("/tunnel_sessions").json["tunnel_sessions"]
    assert sid in [s["id"] for s in listed]  # online all the same
    assert edge.http("GET", url.split("://")[1], "/echo").status_code == 200
