"""scripts/embedded_store.py as a process of its own: the write-ahead log (one record per
write call, none for a write that changed nothing), replay, a torn last record, compaction,
and Query reading only the queried partition in DynamoDB's order."""

import os
import secrets
import signal
import subprocess
import sys
import time

import boto3
import pytest
from botocore.exceptions import ClientError

from stacks.paths import PROJECT_DIR
from stacks.ports import free_port

from scripts import embedded_store  # pure functions only: moto is not patched here

TABLE = "t"


class StoreProcess:
    def __init__(self, data_dir, **env):
        self.data_dir, self.port = data_dir, free_port()
        self.key, self.secret = "LOCALTEST", secrets.token_urlsafe(32)
        self.extra_env = env
        self.process = None
        self.output = ""

    def start(self):
        env = {
            **os.environ,
            "AWS_ACCESS_KEY_ID": self.key,
            "AWS_SECRET_ACCESS_KEY": self.secret,
            **self.extra_env,
        }
        self.process = subprocess.Popen(
            [
                sys.executable,
                os.path.join(PROJECT_DIR, "scripts", "embedded_store.py"),
                "--port",
                str(self.port),
                "--data-dir",
                self.data_dir,
            ],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        lines = []
        for line in self.process.stdout:
            lines.append(line)
            if line.startswith("ready "):
                break
        self.output = "".join(lines)
        if self.process.poll() is not None or not lines or not lines[-1].startswith("ready"):
            raise RuntimeError(self.output + (self.process.stdout.read() or ""))
        return self

    def client(self):
        return boto3.client(
            "dynamodb",
            endpoint_url=f"http://127.0.0.1:{self.port}",
            region_name="us-east-1",
            aws_access_key_id=self.key,
            aws_secret_access_key=self.secret,
            aws_session_token=None,
        )

    def stop(self, sig=signal.SIGTERM):
        if self.process and self.process.poll() is None:
            self.process.send_signal(sig)
            self.process.wait(timeout=15)


@pytest.fixture
def data_dir(tmp_path):
    return str(tmp_path)


@pytest.fixture
def running(data_dir):
    proc = StoreProcess(data_dir).start()
    client = proc.client()
    client.create_table(
        TableName=TABLE,
        BillingMode="PAY_PER_REQUEST",
        KeySchema=[
            {"AttributeName": "pk", "KeyType": "HASH"},
            {"AttributeName": "sk", "KeyType": "RANGE"},
        ],
        AttributeDefinitions=[
            {"AttributeName": "pk", "AttributeType": "S"},
            {"AttributeName": "sk", "AttributeType": "S"},
        ],
    )
    yield proc, client
    proc.stop(signal.SIGKILL)


def _key(pk, sk):
    return {"pk": {"S": pk}, "sk": {"S": sk}}


def _log_records(data_dir, seq=1):
    path = embedded_store.wal_path(os.path.join(data_dir, "store"), seq)
    return embedded_store.read_records(path, tail_ok=True)[0]


def test_a_transaction_is_one_log_record_and_a_failed_condition_writes_none(running, data_dir):
    proc, client = running
    before = len(_log_records(data_dir))
    client.transact_write_items(
        TransactItems=[{"Put": {"TableName": TABLE, "Item": _key("P", str(i))}} for i in range(3)]
    )
    records = _log_records(data_dir)
    assert len(records) == before + 1 and len(records[-1]["w"]) == 3
    with pytest.raises(ClientError):
        client.put_item(
            TableName=TABLE, Item=_key("P", "0"), ConditionExpression="attribute_not_exists(pk)"
        )
    assert len(_log_records(data_dir)) == before + 1


def test_kill_9_then_restart_has_every_answered_write(running, data_dir):
    proc, client = running
    for i in range(50):
        client.put_item(TableName=TABLE, Item={**_key("K", f"{i:03d}"), "n": {"N": str(i)}})
    client.delete_item(TableName=TABLE, Key=_key("K", "007"))
    client.update_item(
        TableName=TABLE,
        Key=_key("K", "008"),
        UpdateExpression="SET n = :v",
        ExpressionAttributeValues={":v": {"N": "800"}},
    )
    proc.stop(signal.SIGKILL)
    again = StoreProcess(data_dir).start()
    try:
        c = again.client()
        items = c.query(
            TableName=TABLE,
            KeyConditionExpression="pk = :p",
            ExpressionAttributeValues={":p": {"S": "K"}},
        )["Items"]
        assert len(items) == 49
        got = {i["sk"]["S"]: i["n"]["N"] for i in items}
        assert "007" not in got and got["008"] == "800" and got["049"] == "49"
    finally:
        again.stop(signal.SIGKILL)


def test_a_torn_last_record_is_cut_off_whole_and_the_rest_replayed(running, data_dir):
    proc, client = running
    client.put_item(TableName=TABLE, Item=_key("A", "kept"))
    client.transact_write_items(
        TransactItems=[
            {"Put": {"TableName": TABLE, "Item": _key("A", f"tx{i}")}} for i in range(3)
        ]
    )
    proc.stop(signal.SIGKILL)
    log = embedded_store.wal_path(os.path.join(data_dir, "store"), 1)
    with open(log, "rb") as handle:
        whole = handle.read()
    last = embedded_store.frame(_log_records(data_dir)[-1])
    assert whole.endswith(last)
    # the transaction's record cut at a point in its middle: as if the crash came mid-write
    with open(log, "wb") as handle:
        handle.write(whole[: len(whole) - len(last) // 2])
    again = StoreProcess(data_dir).start()
    try:
        assert "cut off a write" in again.output
        items = again.client().query(
            TableName=TABLE,
            KeyConditionExpression="pk = :p",
            ExpressionAttributeValues={":p": {"S": "A"}},
        )["Items"]
        assert [i["sk"]["S"] for i in items] == ["kept"]  # none of the transaction
    finally:
        again.stop(signal.SIGKILL)


def test_read_records_tells_a_torn_tail_from_damage(tmp_path):
    records = [{"t": "items", "w": [["t", {"pk": {"S": str(i)}}, None]]} for i in range(3)]
    data = b"".join(embedded_store.frame(r) for r in records)
    path = tmp_path / "wal-000001.log"
    last = len(embedded_store.frame(records[-1]))
    for cut in range(1, last):  # every cut inside the last record is a torn tail
        path.write_bytes(data[: len(data) - cut])
        got, good, torn = embedded_store.read_records(str(path), tail_ok=True)
        assert got == records[:2] and good == len(data) - last and torn
    path.write_bytes(data + b"\0" * 100)  # zero-filled tail after a power loss
    assert embedded_store.read_records(str(path), tail_ok=True)[0] == records
    damaged = bytearray(data)
    damaged[10] ^= 1  # the first record, with good ones after it: damage, not a torn tail
    path.write_bytes(bytes(damaged))
    with pytest.raises(embedded_store.DataError, match="damaged at byte 0"):
        embedded_store.read_records(str(path), tail_ok=True)
    path.write_bytes(data[:-1])  # a closed (not the active) log: no tail is torn
    with pytest.raises(embedded_store.DataError):
        embedded_store.read_records(str(path), tail_ok=False)


def test_compaction_keeps_disk_bounded_and_data_whole(data_dir):
    proc = StoreProcess(data_dir, STORE_COMPACT_BYTES="20000").start()
    try:
        client = proc.client()
        client.create_table(
            TableName=TABLE,
            BillingMode="PAY_PER_REQUEST",
            KeySchema=[
                {"AttributeName": "pk", "KeyType": "HASH"},
                {"AttributeName": "sk", "KeyType": "RANGE"},
            ],
            AttributeDefinitions=[
                {"AttributeName": "pk", "AttributeType": "S"},
                {"AttributeName": "sk", "AttributeType": "S"},
            ],
        )
        store_dir = os.path.join(data_dir, "store")
        sizes = []
        for round_ in range(12):  # the same 20 items overwritten again and again
            for i in range(20):
                client.put_item(
                    TableName=TABLE,
                    Item={
                        **_key("C", f"{i:02d}"),
                        "round": {"N": str(round_)},
                        "pad": {"S": "p" * 200},
                    },
                )
            time.sleep(0.3)  # let a compaction child finish
            sizes.append(
                sum(os.path.getsize(os.path.join(store_dir, f)) for f in os.listdir(store_dir))
            )
        snaps, wals = embedded_store.list_files(store_dir)
        assert max(snaps) > 0 and len(snaps) <= 2  # compacted, previous snapshot kept as backup
        assert max(sizes[6:]) < 3 * 20000 + 20 * 400 * 2  # bounded, not growing with writes
    finally:
        proc.stop()
    again = StoreProcess(data_dir).start()
    try:
        items = again.client().query(
            TableName=TABLE,
            KeyConditionExpression="pk = :p",
            ExpressionAttributeValues={":p": {"S": "C"}},
        )["Items"]
        assert len(items) == 20 and {i["round"]["N"] for i in items} == {"11"}
    finally:
        again.stop(signal.SIGKILL)


@pytest.fixture
def sorted_partition(running):
    proc, client = running
    values = ["a", "b", "b0", "ba", "c", "d", "é", "z", "\U0001f600"]
    for v in values:
        client.put_item(TableName=TABLE, Item=_key("Q", v))
    for other in ("P", "R", "Q0"):  # neighbouring partitions must not leak in
        client.put_item(TableName=TABLE, Item=_key(other, "b"))
    return client, sorted(values, key=lambda s: s.encode("utf-8"))


@pytest.mark.parametrize(
    "condition,values,expected",
    [
        ("sk < :a", {":a": "c"}, lambda v: [x for x in v if x < "c"]),
        ("sk <= :a", {":a": "c"}, lambda v: [x for x in v if x <= "c"]),
        ("sk > :a", {":a": "b"}, lambda v: [x for x in v if x > "b"]),
        ("sk >= :a", {":a": "b"}, lambda v: [x for x in v if x >= "b"]),
        ("sk = :a", {":a": "ba"}, lambda v: ["ba"]),
        (
            "sk BETWEEN :a AND :b",
            {":a": "b", ":b": "d"},
            lambda v: [x for x in v if "b" <= x <= "d"],
        ),
        ("begins_with(sk, :a)", {":a": "b"}, lambda v: [x for x in v if x.startswith("b")]),
        (None, {}, lambda v: v),
    ],
)
@pytest.mark.parametrize("forward", [True, False])
@pytest.mark.parametrize("limit", [None, 1, 2, 100])
def test_query_reads_one_partition_in_dynamodb_order_page_by_page(
    sorted_partition, condition, values, expected, forward, limit
):
    client, ordered = sorted_partition
    want = expected(ordered)
    if not forward:
        want = want[::-1]
    expression = "pk = :p" + (f" AND {condition}" if condition else "")
    attrs = {":p": {"S": "Q"}, **{k: {"S": v} for k, v in values.items()}}
    got, start = [], None
    for _ in range(20):
        kwargs = {
            "TableName": TABLE,
            "KeyConditionExpression": expression,
            "ExpressionAttributeValues": attrs,
            "ScanIndexForward": forward,
        }
        if limit:
            kwargs["Limit"] = limit
        if start:
            kwargs["ExclusiveStartKey"] = start
        page = client.query(**kwargs)
        assert limit is None or len(page["Items"]) <= limit
        got += [i["sk"]["S"] for i in page["Items"]]
        start = page.get("LastEvaluatedKey")
        if not start:
            break
    assert got == want


def test_a_deleted_item_leaves_the_query_index(running):
    proc, client = running
    for v in ("1", "2", "3"):
        client.put_item(TableName=TABLE, Item=_key("D", v))
    client.query(
        TableName=TABLE,
        KeyConditionExpression="pk = :p",
        ExpressionAttributeValues={":p": {"S": "D"}},
    )  # builds the index
    client.delete_item(TableName=TABLE, Key=_key("D", "2"))
    client.put_item(TableName=TABLE, Item=_key("D", "0"))
    items = client.query(
        TableName=TABLE,
        KeyConditionExpression="pk = :p",
        ExpressionAttributeValues={":p": {"S": "D"}},
    )["Items"]
    assert [i["sk"]["S"] for i in items] == ["0", "1", "3"]
