"""The embedded store of `make run` (scripts/embedded_store.py) keeps DynamoDB's promises."""

import concurrent.futures
import json

import pytest
from botocore.exceptions import ClientError

TABLE = "tunnel-service"


@pytest.fixture
def ddb(api_process):
    return api_process.store_client()


def _key(pk, sk="S"):
    return {"pk": {"S": pk}, "sk": {"S": sk}}


def test_a_cancelled_transaction_rolls_back_every_write(ddb):
    ddb.put_item(TableName=TABLE, Item={**_key("T#existing"), "n": {"N": "1"}})
    with pytest.raises(ClientError) as info:
        ddb.transact_write_items(
            TransactItems=[
                {"Put": {"TableName": TABLE, "Item": {**_key("T#new"), "n": {"N": "1"}}}},
                {
                    "Update": {
                        "TableName": TABLE,
                        "Key": _key("T#existing"),
                        "UpdateExpression": "SET n = :two",
                        "ExpressionAttributeValues": {":two": {"N": "2"}},
                    }
                },
                {"Delete": {"TableName": TABLE, "Key": _key("T#other")}},
                {
                    "ConditionCheck": {
                        "TableName": TABLE,
                        "Key": _key("T#missing"),
                        "ConditionExpression": "attribute_exists(pk)",
                    }
                },
            ]
        )
    assert info.value.response["Error"]["Code"] == "TransactionCanceledException"
    assert "Item" not in ddb.get_item(TableName=TABLE, Key=_key("T#new"))
    assert ddb.get_item(TableName=TABLE, Key=_key("T#existing"))["Item"]["n"] == {"N": "1"}


def test_concurrent_conditional_creates_of_one_key_succeed_once(ddb):
    def create(n):
        try:
            ddb.transact_write_items(
                TransactItems=[
                    {
                        "Put": {
                            "TableName": TABLE,
                            "Item": {**_key("T#unique"), "n": {"N": str(n)}},
                            "ConditionExpression": "attribute_not_exists(pk)",
                        }
                    },
                    {
                        "Put": {
                            "TableName": TABLE,
                            "Item": {**_key(f"T#owner{n}"), "n": {"N": "0"}},
                            "ConditionExpression": "attribute_not_exists(pk)",
                        }
                    },
                ]
            )
            return True
        except ClientError:
            return False

    with concurrent.futures.ThreadPoolExecutor(max_workers=10) as pool:
        results = list(pool.map(create, range(20)))
    assert results.count(True) == 1
    winner = int(ddb.get_item(TableName=TABLE, Key=_key("T#unique"))["Item"]["n"]["N"])
    owners = [
        n for n in range(20) if "Item" in ddb.get_item(TableName=TABLE, Key=_key(f"T#owner{n}"))
    ]
    assert owners == [winner]  # the losers' other writes were rolled back


def test_answers_are_the_ones_moto_writes_for_every_item_call(ddb):
    """The store writes its answers' JSON itself (embedded_store._encode: moto's generic
    serializer was 69 % of a Query's CPU); each item call's answer, as a client reads it, is
    the one moto's own serializer gives for the same calls (moto in this process): blobs in
    base64, members outside the output shape left out, doubles as doubles, nothing missing.
    No Scan: the session's store is shared, so a Scan's page would hold other tests' items
    (and could end before this test's); it writes its answers through the same walk."""
    import boto3
    from moto import mock_aws

    item = {
        **_key("T#same", "1"),
        "s": {"S": "x"},
        "n": {"N": "1.5"},
        "b": {"B": b"\x00bytes\xff"},
        "bs": {"BS": [b"a", b"b"]},
        "ss": {"SS": ["x", "y"]},
        "ns": {"NS": ["1", "2"]},
        "l": {"L": [{"NULL": True}, {"BOOL": False}, {"M": {"k": {"S": "v"}}}]},
    }
    calls = [
        ("put_item", {"Item": item}),
        ("put_item", {"Item": {**_key("T#same", "2"), "n": {"N": "2"}}}),
        ("get_item", {"Key": _key("T#same", "1")}),
        ("get_item", {"Key": _key("T#same", "9")}),
        ("get_item", {"Key": _key("T#same", "1"), "ReturnConsumedCapacity": "TOTAL"}),
        ("query", {"KeyConditionExpression": "pk = :p", **_values(":p", "T#same")}),
        (
            "query",
            {
                "KeyConditionExpression": "pk = :p",
                "Limit": 1,
                "ScanIndexForward": False,
                **_values(":p", "T#same"),
            },
        ),
        (
            "update_item",
            {
                "Key": _key("T#same", "2"),
                "UpdateExpression": "ADD c :one",
                "ExpressionAttributeValues": {":one": {"N": "1"}},
                "ReturnValues": "ALL_NEW",
            },
        ),
        ("delete_item", {"Key": _key("T#same", "2"), "ReturnValues": "ALL_OLD"}),
    ]

    def answers(client, table):
        out = []
        for name, args in calls:
            answer = getattr(client, name)(TableName=table, **args)
            answer.pop("ResponseMetadata")
            out.append((name, answer))
        out.append(
            (
                "batch_get_item",
                {
                    k: v
                    for k, v in client.batch_get_item(
                        RequestItems={table: {"Keys": [_key("T#same", "1")]}}
                    ).items()
                    if k != "ResponseMetadata"
                },
            )
        )
        return out

    try:
        mine = answers(ddb, TABLE)
    finally:  # the session's store is shared: no item of this test outlives it (another test
        # reads every stored item back)
        for sk in ("1", "2"):
            ddb.delete_item(TableName=TABLE, Key=_key("T#same", sk))
    with mock_aws():
        moto = boto3.client("dynamodb", region_name="us-east-1")
        moto.create_table(
            TableName="same",
            KeySchema=[
                {"AttributeName": "pk", "KeyType": "HASH"},
                {"AttributeName": "sk", "KeyType": "RANGE"},
            ],
            AttributeDefinitions=[
                {"AttributeName": "pk", "AttributeType": "S"},
                {"AttributeName": "sk", "AttributeType": "S"},
            ],
            BillingMode="PAY_PER_REQUEST",
        )
        theirs = answers(moto, "same")
    for (name, a), (_, b) in zip(mine, theirs):
        a, b = (
            json.loads(json.dumps(a, default=repr).replace(TABLE, "same")),
            json.loads(json.dumps(b, default=repr)),
        )
        assert a == b, name


def _values(name, value):
    return {"ExpressionAttributeValues": {name: {"S": value}}}


def test_concurrent_counter_adds_lose_no_increment(ddb):
    """store.increment's UpdateItem (AttributeUpdates: ADD refs, PUT expires_at) is atomic in
    the embedded store: 40 concurrent adds answer 1 … 40, each once."""

    def add(_):
        answer = ddb.update_item(
            TableName=TABLE,
            Key=_key("U#ctr#concurrent"),
            AttributeUpdates={
                "refs": {"Action": "ADD", "Value": {"N": "1"}},
                "expires_at": {"Action": "PUT", "Value": {"N": "4000000000"}},
            },
            ReturnValues="UPDATED_NEW",
        )
        return int(answer["Attributes"]["refs"]["N"])

    with concurrent.futures.ThreadPoolExecutor(max_workers=10) as pool:
        counts = sorted(pool.map(add, range(40)))
    assert counts == list(range(1, 41))
    item = ddb.get_item(TableName=TABLE, Key=_key("U#ctr#concurrent"))["Item"]
    assert item["refs"] == {"N": "40"} and item["expires_at"] == {"N": "4000000000"}
