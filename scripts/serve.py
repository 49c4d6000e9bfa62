"""`make run`: the service on this machine, with no cloud account and no Docker.

1. Starts an embedded DynamoDB-compatible store, moto's server, on 127.0.0.1:STORE_PORT
   (default 8001), unless DYNAMODB_ENDPOINT_URL points at another store (LocalStack,
   DynamoDB Local), which is then used as it is.
2. Restores the embedded store from DATA_DIR/dynamodb.json (default .data/) and, while
   running, writes every change back to that file (atomically, within a second of the
   change, and once more on Ctrl-C). Delete DATA_DIR (`make reset`) to start afresh.
3. Creates the table if missing, and on first start bootstraps a local account. Its admin key
   is kept in DATA_DIR/local-admin.json (a developer convenience, outside the store, which
   holds only key digests) and printed at every start.
4. Serves the Chalice app like `chalice local` (stage `dev`) on 127.0.0.1:PORT (default
   8000), with API Gateway's own errors in the contract's error body (chalicelib.gateway).
5. With ``--edge`` (what `make run` passes) runs the edge beside it on the same store and data
   directory (scripts/edge_process.py; ports from EDGE_* settings, edge/config.py).
"""
import argparse
import json
import os
import signal
import sys
import tempfile
import threading

PROJECT_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import edge_process  # noqa: E402  (scripts/edge_process.py)
import embedded_store  # noqa: E402  (scripts/embedded_store.py)


def _atomic_write(path: str, data: bytes) -> None:
    directory = os.path.dirname(path)
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=".tmp-", suffix=".json")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


class Snapshotter:
    """Keeps DATA_DIR/dynamodb.json equal to the embedded store's table.

    moto keeps its data in memory only; this dumps the table (low-level, typed items) when
    it changed, so data survives a restart. It reads the table only after a write (the
    embedded store counts them), at most once a second, outside any request path.
    """

    def __init__(self, client, table: str, path: str) -> None:
        self.client, self.table, self.path = client, table, path
        self._last = None
        self._saved_generation = -1
        self._stop = threading.Event()
        self._lock = threading.Lock()

    def restore(self) -> int:
        if not os.path.exists(self.path):
            return 0
        with open(self.path, "rb") as handle:
            items = json.load(handle)["items"]
        for start in range(0, len(items), 25):
            batch = [{"PutRequest": {"Item": item}} for item in items[start:start + 25]]
            pending = {self.table: batch}
            while pending:
                pending = self.client.batch_write_item(RequestItems=pending)["UnprocessedItems"]
        self._last = self._dump_bytes(items)
        return len(items)

    def _items(self):
        items, kwargs = [], {"TableName": self.table, "ConsistentRead": True}
        while True:
            page = self.client.scan(**kwargs)
            items.extend(page["Items"])
            if "LastEvaluatedKey" not in page:
                return items
            kwargs["ExclusiveStartKey"] = page["LastEvaluatedKey"]

    @staticmethod
    def _dump_bytes(items) -> bytes:
        items = sorted(items, key=lambda i: (i["pk"]["S"], i["sk"]["S"]))
        return json.dumps({"items": items}, sort_keys=True).encode()

    def save(self, force: bool = False) -> None:
        with self._lock:
            seen = embedded_store.generation()
            if not force and seen == self._saved_generation:
                return
            data = self._dump_bytes(self._items())
            self._saved_generation = seen
            if data != self._last:
                _atomic_write(self.path, data)
                self._last = data

    def run(self) -> None:
        while not self._stop.wait(1.0):
            try:
                self.save()
            except Exception as exc:  # noqa: BLE001 - keep serving; say why saving failed
                print(f"warning: could not save the store to {self.path}: {exc}",
                      file=sys.stderr)

    def stop(self) -> None:
        self._stop.set()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=int(os.environ.get("PORT", "8000")))
    parser.add_argument("--store-port", type=int,
                        default=int(os.environ.get("STORE_PORT", "8001")))
    parser.add_argument("--data-dir", default=os.environ.get(
        "DATA_DIR", os.path.join(PROJECT_DIR, ".data")))
    parser.add_argument("--stage", default=os.environ.get("STAGE", "dev"))
    parser.add_argument("--no-bootstrap", action="store_true",
                        help="do not create the local account on first start")
    parser.add_argument("--edge", action="store_true",
                        help="also run the edge (python -m edge) on the same store (make run)")
    args = parser.parse_args()

    os.environ.setdefault("AWS_ACCESS_KEY_ID", "local")
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "local")
    os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")
    os.makedirs(args.data_dir, exist_ok=True)

    moto_server = None
    if not os.environ.get("DYNAMODB_ENDPOINT_URL"):
        import logging
        from moto.server import ThreadedMotoServer
        logging.getLogger("werkzeug").setLevel(logging.ERROR)  # one line per store call is noise
        embedded_store.patch_moto()
        moto_server = ThreadedMotoServer(ip_address="127.0.0.1", port=args.store_port,
                                         verbose=False)
        moto_server.start()
        os.environ["DYNAMODB_ENDPOINT_URL"] = f"http://127.0.0.1:{args.store_port}"
        print(f"store: embedded moto server on {os.environ['DYNAMODB_ENDPOINT_URL']}, "
              f"data in {os.path.join(args.data_dir, 'dynamodb.json')}", flush=True)
    else:
        print(f"store: {os.environ['DYNAMODB_ENDPOINT_URL']}", flush=True)

    sys.path.insert(0, PROJECT_DIR)
    from chalicelib.gateway import local_server
    # Loading the stage's config first applies its environment variables, as chalice local does.
    server = local_server(PROJECT_DIR, args.stage, args.host, args.port)
    from chalicelib import accounts, store
    from chalicelib.config import get_settings

    snapshotter = None
    if moto_server is not None:
        snapshotter = Snapshotter(store.connection().client, get_settings().table_name,
                                  os.path.join(args.data_dir, "dynamodb.json"))
    store.create_table()
    if snapshotter is not None:
        restored = snapshotter.restore()
        if restored:
            print(f"store: restored {restored} items", flush=True)
    from chalicelib import migrate
    changed = migrate.run_if_needed()
    if any(changed.values()):
        print(f"store: migrated to layout {migrate.LAYOUT_VERSION}: {changed}", flush=True)

    key_file = os.path.join(args.data_dir, "local-admin.json")
    if not args.no_bootstrap:
        if not os.path.exists(key_file):
            result = accounts.bootstrap("local", abuse_reporter=True)
            _atomic_write(key_file, json.dumps(result, indent=2).encode())
            print("bootstrapped a local account (abuse reporter) with an admin user",
                  flush=True)
        with open(key_file) as handle:
            local_admin = json.load(handle)
        print(f"local account {local_admin['account_id']}; admin API key:\n"
              f"{local_admin['token']}", flush=True)

    edge = edge_process.start(args.data_dir) if args.edge else None

    stopping = threading.Event()

    def stop(signum, frame):  # noqa: ARG001
        if not stopping.is_set():
            stopping.set()
            threading.Thread(target=server.shutdown, daemon=True).start()

    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGTERM, stop)
    saver = None
    if snapshotter is not None:
        saver = threading.Thread(target=snapshotter.run, daemon=True)
        saver.start()
    print(f"serving on http://{args.host}:{args.port}", flush=True)
    try:
        server.serve_forever()
    finally:
        edge_process.stop(edge)
        if snapshotter is not None:
            snapshotter.stop()
            snapshotter.save(force=True)
            print("store: saved", flush=True)
        if moto_server is not None:
            moto_server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
