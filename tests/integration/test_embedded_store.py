"""The embedded store of `make run` (scripts/embedded_store.py) keeps DynamoDB's promises."""

import concurrent.futures

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
