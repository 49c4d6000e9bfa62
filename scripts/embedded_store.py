"""The embedded DynamoDB-compatible store of `make run`: moto's server, made fit for it.

moto keeps DynamoDB in memory and was written for tests, not for a server that runs for
hours. Three changes make it behave as the service needs (all installed by ``patch_moto()``,
only in the `make run` process; the Lambda and the tests' in-process mock are untouched):

1. **One call at a time.** moto's DynamoDB backend is not thread-safe: TransactWriteItems
   checks its conditions and then writes, so two concurrent creates of one unique value
   (a domain, a bot name) could both succeed. Real DynamoDB isolates transactions; a lock
   around each call gives the embedded store the same guarantee (throughput is not a goal).
2. **Cheap transaction rollback.** moto deep-copies the *whole table* before every
   TransactWriteItems to be able to roll back, which made every write O(table size) and
   let the process grow to many GB under the test suite. With calls serialised, backing up
   only the items the transaction touches is enough.
3. **A change counter** (``generation()``), so the snapshot only reads the table after a write.
"""
import copy
import functools
import threading
from typing import Any, Dict, List, Optional, Tuple

_READ_ACTIONS = {"GetItem", "BatchGetItem", "Query", "Scan", "TransactGetItems",
                 "DescribeTable", "ListTables", "DescribeContinuousBackups",
                 "DescribeTimeToLive", "ListTagsOfResource"}
_lock = threading.RLock()
_generation = [0]
_patched = [False]


def generation() -> int:
    """How many writing calls the store has served (goes up by one per write)."""
    return _generation[0]


class _NoTableCopy:
    """Stands in for the ``copy`` module inside moto's transact_write_items: no table copy."""

    @staticmethod
    def deepcopy(value: Any, memo: Optional[Dict[int, Any]] = None) -> Any:
        from moto.dynamodb.models.table import Table
        if isinstance(value, Table):
            return value
        return copy.deepcopy(value, memo)

    def __getattr__(self, name: str) -> Any:
        return getattr(copy, name)


def _item_key(table: Any, op_type: str, op: Dict[str, Any]) -> Dict[str, Any]:
    if op_type != "Put":
        return op["Key"]
    attrs = op["Item"]
    key = {table.hash_key_attr: attrs[table.hash_key_attr]}
    if table.range_key_attr is not None:
        key[table.range_key_attr] = attrs[table.range_key_attr]
    return key


def patch_moto() -> None:
    """Install the three changes described in the module docstring (idempotent)."""
    if _patched[0]:
        return
    from moto.dynamodb import models as ddb_models
    from moto.dynamodb.models import DynamoDBBackend
    from moto.dynamodb.responses import DynamoHandler

    original_call = DynamoHandler.call_action

    @functools.wraps(original_call)
    def call_action(self: Any) -> Any:
        with _lock:
            result = original_call(self)
            if self._get_action() not in _READ_ACTIONS:
                _generation[0] += 1
            return result

    original_transact = DynamoDBBackend.transact_write_items

    @functools.wraps(original_transact)
    def transact_write_items(self: Any, transact_items: List[Dict[str, Any]]) -> None:
        with _lock:
            backups: List[Tuple[str, Dict[str, Any], Optional[Dict[str, Any]]]] = []
            for entry in transact_items[:100]:
                op_type, op = next(iter(entry.items()))
                name = op.get("TableName")
                if not name or name not in self.tables:
                    continue
                try:
                    key = _item_key(self.tables[name], op_type, op)
                    current = self.get_item(name, key)
                except Exception:  # noqa: BLE001 - moto reports malformed ops itself
                    continue
                backups.append((name, key, copy.deepcopy(current.to_json()["Attributes"])
                                if current is not None else None))
            saved_copy = ddb_models.copy
            ddb_models.copy = _NoTableCopy()
            try:
                return original_transact(self, transact_items)
            except Exception:
                for name, key, attrs in reversed(backups):
                    if attrs is None:
                        if self.get_item(name, key) is not None:
                            self.delete_item(name, key)
                    else:
                        self.put_item(name, attrs)
                raise
            finally:
                ddb_models.copy = saved_copy

    DynamoHandler.call_action = call_action
    DynamoDBBackend.transact_write_items = transact_write_items
    _patched[0] = True
