"""`make bench`: the cost table a serverless API is judged by.

Prints one table and writes it as JSON (``bench/results.json``, ``BENCH_OUT`` to change):

1. **store calls per route**: one ordinary request to every route, in-process (chalice.test
   client, the authorizer runs, moto's in-process DynamoDB), botocore calls counted on the
   client, the authorizer's apart from the view's (stacks/costs.py; the unit test
   tests/unit/test_store_calls.py pins the same numbers);
2. **cold import**: ``import app`` in a fresh interpreter vs importing its bare dependencies
   (chalice, pynamodb, botocore, re2), median of alternating runs;
3. **warm handler vs bare store call**: an API Gateway proxy event for ``GET /api_keys/{id}``
   into the Lambda handler (authorizer context in the event, as API Gateway passes it) vs
   the one GetItem that view makes, both against the in-process store; and the authorizer's
   TOKEN event vs its one GetItem;
4. **list page at 100 vs 20,000 items** (``GET /api_keys?limit=100``): the handler
   in-process, the store a moto server process: total time, and the time spent outside the
   store calls (moto's Query filters the whole partition in Python, O(n); DynamoDB's is
   O(log n + page), so the app's share is what this code controls);
5. **HTTP load against `make run`** (started as documented: ``make run`` with PORT,
   STORE_PORT, DATA_DIR in a temporary directory): mixed, get, list, and a route that
   touches no store (``/openapi.json``) as the ceiling; req/s, p50, p99, unexpected statuses;
6. **deployment package**: ``make package``'s deployment.zip (chalice package, then slimmed
   by ``scripts/deploy_stack.py slim_package``: without what the Lambda Python runtime
   provides or the service never loads, shared objects stripped, bytecode added), its size
   zipped (what Lambda's limits and the goal count) and unzipped, what makes it up, and cold
   ``import app`` from the unpacked package (read-only, as in Lambda) with its bytecode vs
   without (what the bytecode's extra megabyte buys).

Numbers are for this machine and the local stores; they compare the app with itself and with
its store calls, they do not predict Lambda + DynamoDB latencies. Sizes: BENCH_SECONDS
(default 5) per HTTP load kind, BENCH_CONCURRENCY (8), BENCH_SAMPLES (300). BENCH_ONLY
(comma-separated section names: store_calls, cold_import, warm_handler, list_scaling,
http_load, package) runs only those and updates them in the JSON, keeping the others' last
results (``sections_run`` then says which run each section comes from).
"""

import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import zipfile
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Dict, List

from chalicelib.core import keys
from stacks.paths import PROJECT_DIR
from stacks.ports import free_port, wait_port

for _name, _value in {
    "AWS_ACCESS_KEY_ID": "bench",
    "AWS_SECRET_ACCESS_KEY": "bench",
    "AWS_DEFAULT_REGION": "us-east-1",
    "AWS_REGION": "us-east-1",
    "TABLE_NAME": "tunnel-service",
}.items():
    os.environ.setdefault(_name, _value)
os.environ.pop("DYNAMODB_ENDPOINT_URL", None)

SECONDS = float(os.environ.get("BENCH_SECONDS", "5"))
CONCURRENCY = int(os.environ.get("BENCH_CONCURRENCY", "8"))
SAMPLES = int(os.environ.get("BENCH_SAMPLES", "300"))
OUT = os.environ.get("BENCH_OUT", os.path.join(PROJECT_DIR, "bench", "results.json"))
PY = sys.executable


def pct(values: List[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(p / 100 * (len(ordered) - 1))))]


def timed(func: Callable[[], Any], n: int) -> List[float]:
    out = []
    for _ in range(n):
        start = time.perf_counter()
        func()
        out.append((time.perf_counter() - start) * 1000)
    return out


# ---- in-process fixtures -----------------------------------------------------------------------
class InProcess:
    """The app and a chalice test client in this process; the store is moto's in-process
    DynamoDB, or with ``external=True`` a moto server process (so the store's items do not
    share this process's heap: its garbage collector would charge the app for them)."""

    def __init__(self, external: bool = False) -> None:
        self.external = external
        self._server = None
        self._mock = None

    def __enter__(self) -> "InProcess":
        if self.external:
            port = free_port()
            moto = os.path.join(os.path.dirname(PY), "moto_server")
            self._server = subprocess.Popen(
                [moto, "-H", "127.0.0.1", "-p", str(port)],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            os.environ["DYNAMODB_ENDPOINT_URL"] = f"http://127.0.0.1:{port}"
            wait_port(port, timeout=30)
        else:
            from moto import mock_aws

            self._mock = mock_aws()
            self._mock.start()
        from chalicelib.core import config, store

        config.reset_settings()
        store.reset()
        store.create_table()
        from chalice.test import Client

        from app import app
        from chalicelib.gateway import ContractGateway
        from stacks.inprocess import InProcessApi

        self.app = app
        self._client = Client(app, stage_name="dev", project_dir=PROJECT_DIR)
        self._client.__enter__()
        self._client.http._local_gateway = ContractGateway(app, self._client.http._config)
        self.api = InProcessApi(self._client)
        return self

    def __exit__(self, *exc: Any) -> None:
        self._client.__exit__(*exc)
        if self._mock is not None:
            self._mock.stop()
        if self._server is not None:
            self._server.terminate()
            self._server.wait()
            os.environ.pop("DYNAMODB_ENDPOINT_URL", None)
        from chalicelib.core import config, store

        config.reset_settings()
        store.reset()


# ---- 1. store calls per route ------------------------------------------------------------------
def store_calls() -> Dict[str, Any]:
    from stacks.costs import measure_routes

    with InProcess() as env:
        rows = measure_routes(env.api, env.api.new_account(reporter=True))
    auth = [r["authorizer"] for r in rows.values()]
    view = [r["view"] for r in rows.values()]
    ops: Counter = Counter()
    for r in rows.values():
        ops.update(r["view_ops"])
        ops.update(r["authorizer_ops"])
    over = {route: r["view"] for route, r in sorted(rows.items()) if r["view"] > 1}
    return {
        "routes": len(rows),
        "authorizer_calls_max": max(auth),
        "authorizer_calls_mean": statistics.mean(auth),
        "view_calls_mean": statistics.mean(view),
        "calls_per_request_mean": statistics.mean(a + v for a, v in zip(auth, view)),
        "routes_with_one_view_call": sum(1 for v in view if v == 1),
        "routes_over_one_view_call": over,
        "scans": ops.get("Scan", 0),
        "transactions": ops.get("TransactWriteItems", 0),
        "ops": dict(ops),
        "per_route": rows,
    }


# ---- 2. cold import ----------------------------------------------------------------------------
_IMPORT = "import time; t = time.perf_counter(); {stmt}; print((time.perf_counter() - t) * 1000)"
_BARE = "import chalice, chalice.app, pynamodb.models, pynamodb.connection, botocore.session, re2"


def cold_import(runs: int = 11) -> Dict[str, Any]:
    def once(stmt: str) -> float:
        out = subprocess.run(
            [PY, "-c", _IMPORT.format(stmt=stmt)],  # from PROJECT_DIR: the project's app.py
            cwd=PROJECT_DIR,
            capture_output=True,
            text=True,
            check=True,
        )
        return float(out.stdout.strip().splitlines()[-1])

    app_ms, bare_ms = [], []
    for _ in range(runs):
        bare_ms.append(once(_BARE))
        app_ms.append(once("import app"))
    app_p50, bare_p50 = statistics.median(app_ms), statistics.median(bare_ms)
    return {"app_ms": app_p50, "bare_deps_ms": bare_p50, "ratio": app_p50 / bare_p50, "runs": runs}


# ---- 3. warm handler vs bare store call --------------------------------------------------------
class _Context:
    function_name = "tunnel-service-bench"
    aws_request_id = "bench"

    @staticmethod
    def get_remaining_time_in_millis() -> int:
        return 30000


def proxy_event(
    method: str,
    resource: str,
    path: str,
    params: Dict[str, str],
    principal: Any,
    query: Dict[str, str] = None,
) -> Dict[str, Any]:
    """An API Gateway REST proxy event, with the authorizer's context as API Gateway sends it."""
    context = {
        "account_id": principal.account_id,
        "principal_id": principal.id,
        "principal_kind": principal.kind,
        "role": principal.role,
        "api_key_id": principal.api_key_id,
        **principal.extra_context(),
    }
    headers = {
        "Host": "bench.example.test",
        "Service-Version": "2",
        "X-Forwarded-Proto": "https",
        "Authorization": "Bearer x",
    }
    return {
        "resource": resource,
        "path": path,
        "httpMethod": method,
        "headers": headers,
        "multiValueHeaders": {k: [v] for k, v in headers.items()},
        "queryStringParameters": query or None,
        "multiValueQueryStringParameters": {k: [v] for k, v in (query or {}).items()} or None,
        "pathParameters": params or None,
        "stageVariables": None,
        "requestContext": {
            "resourcePath": resource,
            "httpMethod": method,
            "path": f"/api{path}",
            "stage": "api",
            "authorizer": context,
            "requestId": "bench",
        },
        "body": None,
        "isBase64Encoded": False,
    }


def warm_handler() -> Dict[str, Any]:
    from chalicelib import auth
    from chalicelib.core import store

    with InProcess() as env:
        account = env.api.new_account()
        token = account.admin.token
        principal = auth.resolve(f"Bearer {token}")
        key_id = account.admin.api_key_id
        event = proxy_event(
            "GET", "/api_keys/{key_id}", f"/api_keys/{key_id}", {"key_id": key_id}, principal
        )
        ctx = _Context()
        first = env.app(event, ctx)
        assert first["statusCode"] == 200, first
        pk = store.collection_pk(account.id, "api_key")
        client = store.connection().client
        table = store.get_settings().table_name
        auth_event = {
            "type": "TOKEN",
            "authorizationToken": f"Bearer {token}",
            "methodArn": "arn:aws:execute-api:us-east-1:123456789012:abc/api/GET/api_keys",
        }
        import app as app_module

        authorize = app_module.api_key_authorizer
        assert authorize(auth_event, ctx)["principalId"] == principal.id
        lookup = (
            store.unique_pk(auth.API_KEY_HASH_NAMESPACE, keys.digest(token)),
            store.UNIQUE_SK,
        )
        for _ in range(30):  # warm every path
            env.app(event, ctx), store.get(pk, key_id)
        handler, bare, raw, authorizer, auth_bare = [], [], [], [], []
        for _ in range(SAMPLES):  # interleaved, so drift affects all alike
            handler += timed(lambda: env.app(event, ctx), 1)
            bare += timed(lambda: store.get(pk, key_id), 1)
            raw += timed(
                lambda: client.get_item(
                    TableName=table,
                    ConsistentRead=True,
                    Key={"pk": {"S": pk}, "sk": {"S": key_id}},
                ),
                1,
            )
            authorizer += timed(lambda: authorize(auth_event, ctx), 1)
            auth_bare += timed(lambda: store.get(*lookup), 1)
    h, b = statistics.median(handler), statistics.median(bare)
    a, ab = statistics.median(authorizer), statistics.median(auth_bare)
    return {
        "route": "GET /api_keys/{key_id}",
        "handler_ms": h,
        "bare_get_item_ms": b,
        "raw_botocore_get_item_ms": statistics.median(raw),
        "ratio": h / b,
        "authorizer_ms": a,
        "authorizer_bare_get_item_ms": ab,
        "authorizer_ratio": a / ab,
        "samples": SAMPLES,
    }


# ---- 4. list page vs collection size -----------------------------------------------------------
def _fill_keys(account_id: str, owner_id: str, count: int) -> None:
    """``count`` API key items written straight into the collection (25 per BatchWriteItem)."""
    from chalicelib.core import ids, store

    client = store.connection().client
    table = store.get_settings().table_name
    pk = store.collection_pk(account_id, "api_key")
    batch = []
    for i in range(count):
        key_id = ids.new_id(ids.PREFIXES["api_key"])
        data = {
            "description": f"bench {i}",
            "metadata": "",
            "owner_id": owner_id,
            "owner_kind": "user",
            "digest": f"{i:064x}",
            "created_at": "2026-01-01T00:00:00Z",
        }
        batch.append(
            {
                "PutRequest": {
                    "Item": {
                        "pk": {"S": pk},
                        "sk": {"S": key_id},
                        "kind": {"S": "api_key"},
                        "account_id": {"S": account_id},
                        "data": store.to_av(data),
                        "refs": {"N": "0"},
                        "version": {"N": "1"},
                    }
                }
            }
        )
        if len(batch) == 25 or i == count - 1:
            pending = {table: batch}
            while pending:
                pending = client.batch_write_item(RequestItems=pending)["UnprocessedItems"]
            batch = []


def list_scaling(small: int = 100, large: int = 20000, samples: int = 30) -> Dict[str, Any]:
    """Both accounts filled first, then their pages timed alternately (so the machine's
    drift affects both alike); the store's share is timed around each botocore call."""
    from botocore.client import BaseClient

    from chalicelib import auth
    from stacks.costs import StoreCalls

    events = {}
    with InProcess(external=True) as env:
        ctx = _Context()
        for size in (small, large):
            account = env.api.new_account()  # holds 2 keys already (admin, member)
            _fill_keys(account.id, account.admin.id, size - 2)
            principal = auth.resolve(f"Bearer {account.admin.token}")
            events[size] = proxy_event(
                "GET", "/api_keys", "/api_keys", {}, principal, {"limit": "100"}
            )
            body = json.loads(env.app(events[size], ctx)["body"])
            assert len(body["keys"]) == 100 and (body["next_page_uri"] is None) == (size == 100)
        calls = {}
        for size in (small, large):
            counter = StoreCalls()
            with counter.active():
                env.app(events[size], ctx)
            calls[size] = sum(counter.view.values())
        in_store: List[float] = []
        original = BaseClient._make_api_call

        def timed_call(client: Any, operation: str, params: Any) -> Any:
            start = time.perf_counter()
            try:
                return original(client, operation, params)
            finally:
                in_store.append((time.perf_counter() - start) * 1000)

        totals: Dict[int, List[float]] = {small: [], large: []}
        outside: Dict[int, List[float]] = {small: [], large: []}
        BaseClient._make_api_call = timed_call
        try:
            for _ in range(samples):
                for size in (small, large):
                    in_store.clear()
                    total = timed(lambda: env.app(events[size], ctx), 1)[0]
                    totals[size].append(total)
                    outside[size].append(total - sum(in_store))
        finally:
            BaseClient._make_api_call = original
    results = {
        size: {
            "total_ms": statistics.median(totals[size]),
            "outside_store_ms": statistics.median(outside[size]),
            "store_calls": calls[size],
        }
        for size in (small, large)
    }
    s, l = results[small], results[large]
    return {
        "items_small": small,
        "items_large": large,
        "small": s,
        "large": l,
        "total_ratio": l["total_ms"] / s["total_ms"],
        "outside_store_ratio": l["outside_store_ms"] / s["outside_store_ms"],
        "samples": samples,
    }


# ---- 5. HTTP load against `make run` -----------------------------------------------------------
def http_load() -> Dict[str, Any]:
    import requests

    port, store_port = free_port(), free_port()
    with tempfile.TemporaryDirectory(prefix="bench-run-") as data_dir:
        env = {
            **os.environ,
            "PORT": str(port),
            "STORE_PORT": str(store_port),
            "DATA_DIR": data_dir,
            "PYTHONUNBUFFERED": "1",
        }
        # make run may also start the edge: its listeners on free ports too
        tcp = free_port()
        env.update(
            EDGE_AGENT_PORT=str(free_port()),
            EDGE_HTTP_PORT=str(free_port()),
            EDGE_HTTPS_PORT=str(free_port()),
            EDGE_SSH_PORT=str(free_port()),
            EDGE_TCP_PORTS=f"{tcp}-{tcp}",
        )
        for name in ("DYNAMODB_ENDPOINT_URL", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
            env.pop(name, None)  # make run's own store, with its own secret
        proc = subprocess.Popen(
            ["make", "--no-print-directory", "run"],
            cwd=PROJECT_DIR,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        lines: List[str] = []
        reader = threading.Thread(
            target=lambda: lines.extend(iter(proc.stdout.readline, "")), daemon=True
        )
        reader.start()
        try:
            base = f"http://127.0.0.1:{port}"
            token = _wait_for_key(lines, proc)
            deadline = time.time() + 60
            while time.time() < deadline:
                try:
                    if requests.get(base + "/openapi.json", timeout=2).status_code == 200:
                        break
                except requests.RequestException:
                    time.sleep(0.2)
            return _load(base, token)
        finally:
            os.killpg(proc.pid, signal.SIGINT)
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()


def _wait_for_key(lines: List[str], proc: subprocess.Popen) -> str:
    deadline = time.time() + 180
    while time.time() < deadline:
        for index, line in enumerate(lines):
            if "admin API key" in line and index + 1 < len(lines):
                return lines[index + 1].strip()
        if proc.poll() is not None:
            raise SystemExit("make run exited:\n" + "".join(lines))
        time.sleep(0.1)
    raise SystemExit("make run printed no admin API key:\n" + "".join(lines))


def _load(base: str, token: str) -> Dict[str, Any]:
    import requests

    headers = {"Authorization": f"Bearer {token}", "Service-Version": "2"}
    sessions = threading.local()

    def session() -> Any:
        if not hasattr(sessions, "s"):
            sessions.s = requests.Session()
        return sessions.s

    def call(method: str, path: str, body: Any = None) -> int:
        kwargs = {"json": body} if body is not None else {}
        return (
            session()
            .request(method, base + path, headers=headers, timeout=30, **kwargs)
            .status_code
        )

    ids = [
        requests.post(
            base + "/backends/http_response", json={"body": f"b{i}"}, headers=headers, timeout=30
        ).json()["id"]
        for i in range(20)
    ]
    counter = iter(range(10**9))

    def mixed() -> tuple:
        i = next(counter)
        kind = i % 4
        if kind == 0:
            return call("POST", "/backends/http_response", {"body": "x"}), 201
        if kind == 1:
            return call("GET", f"/backends/http_response/{ids[i % 20]}"), 200
        if kind == 2:
            return call("GET", "/backends/http_response?limit=20"), 200
        return call(
            "PATCH", f"/backends/http_response/{ids[i % 20]}", {"description": f"d{i}"}
        ), 200

    kinds = {
        "mixed (create/get/list/patch)": mixed,
        "get": lambda: (call("GET", f"/backends/http_response/{ids[next(counter) % 20]}"), 200),
        "list (limit 20)": lambda: (call("GET", "/backends/http_response?limit=20"), 200),
        "ceiling: /openapi.json (no store)": lambda: (
            session().get(base + "/openapi.json", timeout=30).status_code,
            200,
        ),
    }
    results = {}
    for name, one in kinds.items():
        latencies: List[float] = []
        unexpected = Counter()
        stop_at = time.perf_counter() + SECONDS

        def worker() -> None:
            while time.perf_counter() < stop_at:
                start = time.perf_counter()
                status, wanted = one()
                latencies.append((time.perf_counter() - start) * 1000)
                if status != wanted:
                    unexpected[status] += 1

        start = time.perf_counter()
        with ThreadPoolExecutor(CONCURRENCY) as pool:
            for _ in range(CONCURRENCY):
                pool.submit(worker)
        wall = time.perf_counter() - start
        results[name] = {
            "requests": len(latencies),
            "rps": len(latencies) / wall,
            "p50_ms": pct(latencies, 50),
            "p99_ms": pct(latencies, 99),
            "unexpected": dict(unexpected),
        }
    return {"concurrency": CONCURRENCY, "seconds": SECONDS, "kinds": results}


# ---- 6. deployment package ---------------------------------------------------------------------
_PACKAGED_IMPORT = (
    "import time; t = time.perf_counter(); import app; print((time.perf_counter() - t) * 1000)"
)


def _part(name: str) -> str:
    """What a zip member counts under: its top folder or file; bytecode apart."""
    if name.endswith(".pyc"):
        return "bytecode (.pyc)"
    top = name.split("/")[0]
    return re.sub(r"(-[\d.]+(\.post\d+)?\.dist-info)$", " (dist-info)", top)


def _runtime_dir(root: str) -> str:
    """A folder holding what the Lambda Python runtime provides (botocore and its
    dependencies, from this venv), as the function sees it next to /var/task."""
    from scripts import deploy_stack

    runtime = os.path.join(root, "runtime")
    os.mkdir(runtime)
    packages = os.path.dirname(os.path.dirname(__import__("botocore").__file__))
    for name in deploy_stack.RUNTIME_PROVIDED:
        if os.path.exists(os.path.join(packages, name)):
            os.symlink(os.path.join(packages, name), os.path.join(runtime, name))
    return runtime


def packaged_cold_import(task: str, runtime: str, runs: int = 9) -> Dict[str, Any]:
    """``import app`` from the unpacked package in a fresh interpreter that cannot write
    bytecode (the Lambda's code folder is read-only), with the package's bytecode vs the
    same package without it (every module compiled at each cold start), alternating runs."""
    bare = task + "-without-bytecode"
    shutil.copytree(task, bare, symlinks=True, ignore=shutil.ignore_patterns("__pycache__"))

    def once(folder: str) -> float:
        env = {
            "PATH": os.environ.get("PATH", ""),
            "AWS_DEFAULT_REGION": "us-east-1",
            "TABLE_NAME": "tunnel-service-prod",
            "STAGE": "prod",
            "PYTHONPATH": os.pathsep.join([folder, runtime]),  # all its path, with -P -S
        }
        out = subprocess.run(
            [PY, "-P", "-S", "-B", "-c", _PACKAGED_IMPORT],
            capture_output=True,
            text=True,
            check=True,
            env=env,
        )
        return float(out.stdout.strip().splitlines()[-1])

    with_pyc, without = [], []
    for _ in range(runs):
        with_pyc.append(once(task))
        without.append(once(bare))
    return {
        "with_bytecode_ms": statistics.median(with_pyc),
        "without_bytecode_ms": statistics.median(without),
        "runs": runs,
    }


def package() -> Dict[str, Any]:
    from scripts import deploy_stack

    with tempfile.TemporaryDirectory(prefix="bench-package-") as out:
        deploy_stack.package("prod", out)
        path = os.path.join(out, "deployment.zip")
        size = os.path.getsize(path)
        parts: Counter = Counter()
        unzipped: Counter = Counter()
        with zipfile.ZipFile(path) as archive:
            for info in archive.infolist():
                parts[_part(info.filename)] += info.compress_size
                unzipped[_part(info.filename)] += info.file_size
            task = os.path.join(out, "task")
            started = time.perf_counter()
            archive.extractall(task)
            unzip_ms = (time.perf_counter() - started) * 1000
            bare_zip = os.path.join(out, "without-bytecode.zip")  # the same, no .pyc
            with zipfile.ZipFile(bare_zip, "w", zipfile.ZIP_DEFLATED) as bare:
                for info in archive.infolist():
                    if not info.filename.endswith(".pyc"):
                        bare.writestr(
                            info, archive.read(info.filename), compresslevel=deploy_stack.ZIP_LEVEL
                        )
            bare_size = os.path.getsize(bare_zip)
        slim = dict(deploy_stack.LAST_SLIM)
        cold = packaged_cold_import(task, _runtime_dir(out))
    return {
        "bytes": size,
        "mb": size / 1e6,
        "without_bytecode_mb": bare_size / 1e6,
        "unzipped_bytes": sum(unzipped.values()),
        "unzipped_mb": sum(unzipped.values()) / 1e6,
        "unzip_ms": unzip_ms,
        "parts": dict(parts.most_common(10)),
        "parts_unzipped": {k: unzipped[k] for k, _ in parts.most_common(10)},
        "removed_runtime_packages": slim["removed_runtime_packages"],
        "left_out": slim["left_out"],
        "stripped": slim["strip"],
        "stripped_bytes_uncompressed": slim["stripped_bytes_uncompressed"],
        "bytecode_bytes": slim["bytecode_bytes"],
        "cold_import": cold,
    }


# ---- the table ---------------------------------------------------------------------------------
def main() -> int:
    started = time.time()
    sections = [
        ("store_calls", store_calls),
        ("cold_import", cold_import),
        ("warm_handler", warm_handler),
        ("list_scaling", list_scaling),
        ("http_load", http_load),
        ("package", package),
    ]
    only = set(filter(None, os.environ.get("BENCH_ONLY", "").split(",")))
    result: Dict[str, Any] = {}
    for name, run in sections:
        if only and name not in only:
            continue
        print(f"... {name}", file=sys.stderr, flush=True)
        result[name] = run()
    result["machine"] = {
        "python": sys.version.split()[0],
        "cpus": os.cpu_count(),
        "seconds": round(time.time() - started, 1),
        "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    if only and os.path.exists(OUT):
        # BENCH_ONLY re-runs some sections: the others keep their last results.
        with open(OUT) as handle:
            previous = json.load(handle)
        runs = previous.pop("sections_run", {})
        machine = previous.pop("machine", {})
        for name, _ in sections:
            if name in previous and name not in result:
                runs.setdefault(name, machine)
        runs.update({name: result["machine"] for name in result if name != "machine"})
        result = {**previous, **result, "sections_run": runs}
    with open(OUT, "w") as handle:
        json.dump(result, handle, indent=2, sort_keys=True, default=str)
    print(render(result))
    print(f"\n(JSON: {os.path.relpath(OUT, PROJECT_DIR)})")
    return 0


def render(r: Dict[str, Any]) -> str:
    rows = [("measure", "value", "goal")]
    if "store_calls" in r:
        s = r["store_calls"]
        rows += [
            ("routes measured", f"{s['routes']}", "every route"),
            ("authorizer store calls / request", f"{s['authorizer_calls_max']} (max)", "1"),
            ("view store calls / request (mean)", f"{s['view_calls_mean']:.2f}", ""),
            (
                "all store calls / request (mean)",
                f"{s['calls_per_request_mean']:.2f}",
                "(3.91 before)",
            ),
            (
                "routes at 1 view call",
                f"{s['routes_with_one_view_call']}/{s['routes']}",
                "single-item ops",
            ),
            ("Scans", f"{s['scans']}", "0"),
            (
                "routes over 1 view call",
                f"{len(s['routes_over_one_view_call'])} (below)",
                "documented",
            ),
        ]
    if "cold_import" in r:
        c = r["cold_import"]
        rows.append(
            (
                "cold import app / bare deps",
                f"{c['ratio']:.2f}x ({c['app_ms']:.0f} / {c['bare_deps_ms']:.0f} ms)",
                "",
            )
        )
    if "warm_handler" in r:
        w = r["warm_handler"]
        rows.append(
            (
                "warm handler / its GetItem",
                f"{w['ratio']:.2f}x ({w['handler_ms']:.2f} / {w['bare_get_item_ms']:.2f} ms)",
                "<= 1.3x",
            )
        )
        rows.append(
            (
                "warm authorizer / its GetItem",
                f"{w['authorizer_ratio']:.2f}x "
                f"({w['authorizer_ms']:.2f} / {w['authorizer_bare_get_item_ms']:.2f} ms)",
                "<= 1.3x",
            )
        )
    if "list_scaling" in r:
        ls = r["list_scaling"]
        rows.append(
            (
                f"list page, {ls['items_large']} vs {ls['items_small']} items",
                f"{ls['total_ratio']:.2f}x total ({ls['large']['total_ms']:.1f} / "
                f"{ls['small']['total_ms']:.1f} ms)",
                "<= 1.2x",
            )
        )
        rows.append(
            (
                "  same, outside the store",
                f"{ls['outside_store_ratio']:.2f}x ({ls['large']['outside_store_ms']:.2f}"
                f" / {ls['small']['outside_store_ms']:.2f} ms); "
                f"{ls['large']['store_calls']} call",
                "<= 1.2x",
            )
        )
    if "http_load" in r:
        h = r["http_load"]
        for name, k in h["kinds"].items():
            rows.append(
                (
                    f"HTTP {name}",
                    f"{k['rps']:.0f} req/s p50 {k['p50_ms']:.1f} ms "
                    f"p99 {k['p99_ms']:.1f} ms unexpected {sum(k['unexpected'].values())}",
                    f"c={h['concurrency']}",
                )
            )
    if "package" in r:
        p = r["package"]
        parts = sorted(p["parts"].items(), key=lambda kv: -kv[1])[:5]
        top = ", ".join(
            f"{k.split('.')[0] if not k.startswith('bytecode') else k} {v / 1e6:.2f}"
            for k, v in parts
        )
        rows.append(("deployment package (zipped)", f"{p['mb']:.2f} MB ({top} MB)", "<= 5 MB"))
        if "without_bytecode_mb" in p:
            rows.append(
                ("  same, without its bytecode", f"{p['without_bytecode_mb']:.2f} MB", "<= 5 MB")
            )
        rows.append(
            ("  same, unzipped", f"{p['unzipped_mb']:.1f} MB (unzip {p['unzip_ms']:.0f} ms)", "")
        )
        c = p.get("cold_import")
        if c:
            rows.append(
                (
                    "  cold import from it, bytecode / none",
                    f"{c['with_bytecode_ms'] / c['without_bytecode_ms']:.2f}x "
                    f"({c['with_bytecode_ms']:.0f} / {c['without_bytecode_ms']:.0f} ms; "
                    f"bytecode {p['bytecode_bytes'] / 1e6:.2f} MB)",
                    "bigger if faster",
                )
            )
    width = [max(len(row[i]) for row in rows) for i in range(3)]
    lines = []
    for index, row in enumerate(rows):
        lines.append("| " + " | ".join(cell.ljust(width[i]) for i, cell in enumerate(row)) + " |")
        if index == 0:
            lines.append("|" + "|".join("-" * (w + 2) for w in width) + "|")
    if "store_calls" in r and r["store_calls"]["routes_over_one_view_call"]:
        lines.append(
            "\nroutes over 1 view call (why: each module's docstring): "
            + "; ".join(
                f"{k} {v}" for k, v in r["store_calls"]["routes_over_one_view_call"].items()
            )
        )
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
