"""Schemathesis against the local stack (real HTTP to serve.py): for every operation of the
OpenAPI document, and OPTIONS on every path, generated requests (valid ones, then invalid
ones) must never get a 5xx, and every response must be documented: status code, content type
and body schema.

Twice: against the session's stack, where no dashboard origin is set (no CORS: OPTIONS is a
405 as any unrouted method), and against a stack of its own with DASHBOARD_ORIGIN set, where
every request carries an ``Origin`` header (the dashboard's or another) and a preflight of
the dashboard's origin is a 204 (chalicelib/cors.py). The OPTIONS operations are not in the
served document (no client calls them); the fuzzer's copy adds them (``_with_options``).

Bounded and deterministic: Hypothesis derandomized, no example database, no shrinking phase,
MAX_EXAMPLES valid + NEGATIVE_EXAMPLES invalid requests per operation without an origin and
ORIGIN_EXAMPLES of each with one (332 operations with OPTIONS: at most 332 x 10 + 332 x 2 = 3,984
requests). Measured on the shared 2-core machine under other sessions' load, -n 2: 9 min
(1,311 tests; 13 min with 6 + 4 in both configurations), no 5xx. FUZZ_EXAMPLES raises the
bound for a longer local run.

Invalid requests must reach validation: the version and auth headers are sent valid (the
version header is taken out of the schema the fuzzer mutates; its own rules are tested in
test_contract_rules.py), so the generated negatives are bad paths, queries and bodies, and
test_invalid_requests_reach_validation fails when they stop at the header checks again.
"""

import json
import os

import pytest
import requests
from hypothesis import HealthCheck, Phase, given, settings

import schemathesis
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from app import app
from chalicelib import openapi
from chalicelib.core import errors
from stacks.api import ApiProcess
from tests.support.api import HttpApi

MAX_EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES", "6"))
NEGATIVE_EXAMPLES = max(2, MAX_EXAMPLES * 2 // 3)
ORIGIN_EXAMPLES = max(1, MAX_EXAMPLES // 6)  # with DASHBOARD_ORIGIN set: each mode (what
# changes there is CORS on every answer, not the validation the pass without an origin probes)
CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
]
DASHBOARD_ORIGIN = "https://dashboard.example.com"
OTHER_ORIGIN = "https://elsewhere.example.com"
SERVER_BOUNDS = {408, 413, 414, 431}  # answered by the HTTP server itself (docs/RUNNING.md)
PREFLIGHT_METHODS = ["GET", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"]


def _with_options(document):
    """The document with an OPTIONS operation on every path: its path parameters, an optional
    ``Origin`` and ``Access-Control-Request-Method``, and what it may answer (204 a preflight
    of the dashboard's origin, 405 any other OPTIONS, 400/404 as any request)."""
    document = json.loads(json.dumps(document))
    error = document["components"]["responses"]["E400"]
    for path, item in document["paths"].items():
        path_parameters = {}
        for op in item.values():
            for p in op.get("parameters", []):
                if p.get("in") == "path":
                    path_parameters[p["name"]] = p
        item["options"] = {
            "operationId": "options_" + "".join(c if c.isalnum() else "_" for c in path),
            "parameters": list(path_parameters.values())
            + [
                {
                    "name": "Origin",
                    "in": "header",
                    "required": False,
                    "schema": {"type": "string", "enum": [DASHBOARD_ORIGIN, OTHER_ORIGIN]},
                },
                {
                    "name": "Access-Control-Request-Method",
                    "in": "header",
                    "required": False,
                    "schema": {"type": "string", "enum": PREFLIGHT_METHODS},
                },
            ],
            "responses": {
                "204": {"description": "a preflight of the dashboard's origin"},
                "400": {"$ref": "#/components/responses/E400"},
                "404": {"$ref": "#/components/responses/E404"},
                "405": {"description": "method not allowed", "content": error["content"]},
            },
        }
    return document


DOCUMENT = _with_options(openapi.build(app))
LABELS = sorted(
    f"{method.upper()} {path}" for path, item in DOCUMENT["paths"].items() for method in item
)
STATS = {"requests": 0, "by_status": {}}
# label -> error codes the invalid requests got (for test_invalid_requests_reach_validation)
NEGATIVE_CODES = {}
HEADER_ERRORS = {
    errors.MissingVersion.error_code,
    errors.UnsupportedVersion.error_code,
    errors.Unauthorized.error_code,
}


def _without_version_parameter(document):
    """The served document with the Service-Version header parameter removed, so the fuzzer
    neither drops nor garbles it (it is sent valid on every request instead)."""
    document = json.loads(json.dumps(document))
    for item in document["paths"].values():
        for op in item.values():
            op["parameters"] = [
                p
                for p in op.get("parameters", [])
                if p.get("$ref") != "#/components/parameters/ServiceVersion"
                and p.get("name") != "Service-Version"
            ]
    return document


@pytest.fixture(scope="module")
def dashboard_origin_api(tmp_path_factory):
    """A stack of its own with DASHBOARD_ORIGIN set (the session's has none)."""
    stack = ApiProcess(
        data_dir=str(tmp_path_factory.mktemp("fuzz-cors")),
        extra_env={"DASHBOARD_ORIGIN": DASHBOARD_ORIGIN},
    ).start()
    try:
        yield HttpApi(stack)
    finally:
        stack.stop()


@pytest.fixture(scope="module", params=["no-origin", "dashboard-origin"])
def fuzz_target(request):
    if request.param == "no-origin":
        api, origin = request.getfixturevalue("http_api"), None
    else:
        api, origin = request.getfixturevalue("dashboard_origin_api"), DASHBOARD_ORIGIN
    account = api.new_account()
    served = requests.get(api.base_url + "/openapi.json", timeout=30).json()
    schema = schemathesis.openapi.from_dict(_with_options(_without_version_parameter(served)))
    session = requests.Session()
    yield schema, api.base_url, account.admin.token, session, origin
    stopped = sum(1 for codes in NEGATIVE_CODES.values() for c in codes if c in HEADER_ERRORS)
    negatives = sum(len(codes) for codes in NEGATIVE_CODES.values())
    validated = sum(
        1
        for codes in NEGATIVE_CODES.values()
        if any(errors.CATALOG.get(c) == 400 for c in codes if c not in HEADER_ERRORS)
    )
    print(
        f"\nfuzz: {STATS['requests']} requests, by status {sorted(STATS['by_status'].items())}; "
        f"{stopped} of {negatives} invalid requests stopped at the version/auth check; "
        f"{validated} of {len(NEGATIVE_CODES)} operations answered an invalid request with a 400"
    )


def _run(schema, base_url, token, session, origin, label, mode, examples):
    operation = schema.find_operation_by_label(label)
    assert operation is not None, label
    headers = {"Authorization": f"Bearer {token}", "Service-Version": "2"}
    if origin and not label.startswith("OPTIONS "):
        headers["Origin"] = origin  # OPTIONS operations choose theirs
    strategy = operation.as_strategy(generation_mode=mode, headers=headers)

    @settings(
        max_examples=examples,
        derandomize=True,
        database=None,
        deadline=None,
        phases=[Phase.explicit, Phase.generate],
        print_blob=False,
        suppress_health_check=list(HealthCheck),
    )
    @given(case=strategy)
    def fuzz(case):
        response = case.call(base_url=base_url, session=session, timeout=30)
        STATS["requests"] += 1
        STATS["by_status"][response.status_code] = (
            STATS["by_status"].get(response.status_code, 0) + 1
        )
        if mode is GenerationMode.NEGATIVE:
            code = None
            if response.status_code >= 400:
                code = response.json().get("error_code")
            NEGATIVE_CODES.setdefault(label, []).append(code)
        case.validate_response(response, checks=CHECKS)
        allowed = response.headers.get("access-control-allow-origin")  # lower case, a list
        if response.status_code in SERVER_BOUNDS:
            # refused by scripts/http_server.py's bounds before the request reached the app
            # (whose middleware adds CORS): no CORS, but never another origin's
            assert allowed is None, response.headers
        elif origin and case.headers.get("Origin") == origin:
            assert allowed == [origin], response.headers
        else:
            assert allowed is None, response.headers

    fuzz()


@pytest.mark.slow
@pytest.mark.parametrize("label", LABELS)
def test_valid_requests_get_documented_answers(fuzz_target, label):
    examples = ORIGIN_EXAMPLES if fuzz_target[-1] else MAX_EXAMPLES
    _run(*fuzz_target, label, GenerationMode.POSITIVE, examples)


@pytest.mark.slow
@pytest.mark.parametrize("label", LABELS)
def test_invalid_requests_get_documented_4xx(fuzz_target, label):
    if label == "GET /openapi.json":
        pytest.skip("no parameters or body to make invalid")
    examples = ORIGIN_EXAMPLES if fuzz_target[-1] else NEGATIVE_EXAMPLES
    _run(*fuzz_target, label, GenerationMode.NEGATIVE, examples)


@pytest.mark.slow
def test_invalid_requests_reach_validation():
    """Runs after the invalid-request tests (file order): none of their requests may have
    stopped at the version or auth check, and every operation got some invalid request
    through to its own validation."""
    if not NEGATIVE_CODES:
        pytest.skip("the invalid-request tests did not run")
    stopped = {
        label: codes
        for label, codes in NEGATIVE_CODES.items()
        if any(code in HEADER_ERRORS for code in codes)
    }
    assert not stopped, stopped
