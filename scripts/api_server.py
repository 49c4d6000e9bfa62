"""The API process of `make run`: the Chalice app behind scripts/http_server.py.

Each request becomes the same API Gateway event (and runs the same authorizer) as under
``chalice local`` and ``chalice.test.Client``: chalicelib.gateway.ContractGateway, which also
answers API Gateway's own errors in the contract's body. Its ``identity.sourceIp`` is the
connection's peer, as API Gateway's is (the account's IP restrictions read it; no
``X-Forwarded-For`` is believed). What API Gateway answers before any
route, this server answers, in the contract's error body with an ``Operation-Id`` header:
methods API Gateway does not route (TRACE, PROPFIND, …: 405), framing errors (400, 408, 413,
414, 431, 501, 505; see scripts/http_server.py). Bodies are refused at the contract's limit
(chalicelib.web.MAX_BODY_BYTES) while they are read.

Environment: the store and stage settings of chalicelib.core.config (DYNAMODB_ENDPOINT_URL,
AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, TABLE_NAME, …), set by scripts/serve.py.
SIGTERM: stop accepting, finish in-flight requests (at most --drain seconds), exit 0.
"""

import argparse
import base64
import json
import logging
import os
import signal
import sys
import threading
from typing import Dict, List, Tuple

from scripts import dashboard_static, http_server

PROJECT_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# The methods API Gateway (REST) routes; anything else never reaches a view.
GATEWAY_METHODS = {"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"}
log = logging.getLogger("api_server")


def error_response(status: int, msg: str) -> http_server.Response:
    from chalicelib.core import errors, ids

    cls = errors.HTTP_ERRORS.get(status, errors.Internal)
    operation_id = ids.new_id("op")
    body = errors.error_body(cls.status_code, cls.error_code, msg, operation_id)
    return http_server.Response(
        cls.status_code,
        [("Content-Type", "application/json"), ("Operation-Id", operation_id)],
        json.dumps(body).encode(),
    )


def _headers(req: http_server.Request) -> Dict[str, str]:
    merged: Dict[str, str] = {}
    lower: Dict[str, str] = {}
    for name, value in req.headers:
        key = lower.setdefault(name.lower(), name)
        merged[key] = f"{merged[key]}, {value}" if key in merged else value
    return merged


def make_app(project_dir: str, stage: str):
    from chalicelib.gateway import ContractGateway, load_local_app

    app_obj, config = load_local_app(project_dir, stage)
    local = threading.local()

    def app(req: http_server.Request) -> http_server.Response:
        static = dashboard_static.handle(req.method, req.target)  # /dashboard/: its files
        if static is not None:
            return http_server.Response(*static)
        if req.method not in GATEWAY_METHODS:
            return error_response(405, f"The method {req.method} is not supported")
        gateway = getattr(local, "gateway", None)
        if gateway is None:
            gateway = local.gateway = ContractGateway(app_obj, config)
        path = req.target
        if not path.startswith("/"):  # absolute-form (a proxy's request): keep the path
            path = "/" + path.split("://", 1)[-1].partition("/")[2]
        result = gateway.handle_request(
            req.method, path, _headers(req), req.body or None, source_ip=req.client[0] or None
        )
        headers: List[Tuple[str, str]] = []
        for name, value in {**result["headers"], **result.get("multiValueHeaders", {})}.items():
            for one in value if isinstance(value, list) else [value]:
                headers.append((name, str(one)))
        if not any(name.lower() == "content-type" for name, _ in headers):
            headers.append(("Content-Type", "application/json"))
        body = result.get("body")
        if result.get("isBase64Encoded"):
            body = base64.b64decode(body)
        elif body is None:
            body = b""
        elif not isinstance(body, bytes):
            body = body.encode("utf-8")
        return http_server.Response(int(result["statusCode"]), headers, body)

    return app


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--stage", default="dev")
    parser.add_argument("--drain", type=float, default=5.0)
    parser.add_argument(
        "--gated",
        action="store_true",
        help="after loading the app, wait for a line on stdin before listening "
        "(serve.py loads the API while the store starts)",
    )
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING, format="api: %(levelname)s %(message)s")
    from chalicelib import web

    app = make_app(PROJECT_DIR, args.stage)

    def log_exception(req: http_server.Request) -> None:
        log.exception("unexpected error serving %s %s", req.method, req.target)

    if args.gated and not sys.stdin.readline():
        return 0  # serve.py went away before the stack was ready
    metrics_port = os.environ.get("API_METRICS_PORT", "").strip()  # scripts/api_metrics.py
    if metrics_port:
        from scripts import api_metrics

        app = api_metrics.timed(app)
    server = http_server.HttpServer(
        args.host,
        args.port,
        app,
        error_response,
        max_body=web.MAX_BODY_BYTES,
        log_exception=log_exception,
    )
    try:
        server.start()
    except OSError as exc:
        print(
            f"error: the API cannot listen on {args.host}:{args.port} ({exc.strerror}); "
            f"set PORT to a free port",
            flush=True,
        )
        return 4
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # serve.py decides when the API stops
    if metrics_port:
        try:
            admin = api_metrics.start(int(metrics_port), http_server, error_response)
            print(f"api metrics: http://127.0.0.1:{admin.port}/metrics", flush=True)
        except OSError as exc:  # the API serves on without its metrics
            print(
                f"api metrics: cannot listen on 127.0.0.1:{metrics_port} ({exc.strerror}); "
                "set API_METRICS_PORT to a free port",
                flush=True,
            )
    print(f"ready http://{args.host}:{server.port}", flush=True)
    while not stop.wait(0.5):
        pass
    server.stop(drain=args.drain)
    sys.stdout.flush()
    os._exit(0)  # nothing left to flush; skip the interpreter's slow teardown


if __name__ == "__main__":
    sys.exit(main())
