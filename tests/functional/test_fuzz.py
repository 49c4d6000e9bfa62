"""Schemathesis against the local stack (real HTTP to serve.py): for every operation of the
OpenAPI document, generated requests (valid ones, then invalid ones) must never get a 5xx,
and every response must be documented: status code, content type and body schema.

Bounded and deterministic: Hypothesis derandomized, no example database, no shrinking phase,
MAX_EXAMPLES valid + NEGATIVE_EXAMPLES invalid requests per operation (~600 requests for
~60 operations; well under a minute on 2 cores). FUZZ_EXAMPLES raises the bound for a
longer local run.

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

MAX_EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES", "6"))
NEGATIVE_EXAMPLES = max(2, MAX_EXAMPLES * 2 // 3)
CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
]
DOCUMENT = openapi.build(app)
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
def fuzz_target(http_api):
    account = http_api.new_account()
    served = requests.get(http_api.base_url + "/openapi.json", timeout=30).json()
    schema = schemathesis.openapi.from_dict(_without_version_parameter(served))
    session = requests.Session()
    yield schema, http_api.base_url, account.admin.token, session
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


def _run(schema, base_url, token, session, label, mode, examples):
    operation = schema.find_operation_by_label(label)
    assert operation is not None, label
    headers = {"Authorization": f"Bearer {token}", "Service-Version": "2"}
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

    fuzz()


@pytest.mark.slow
@pytest.mark.parametrize("label", LABELS)
def test_valid_requests_get_documented_answers(fuzz_target, label):
    _run(*fuzz_target, label, GenerationMode.POSITIVE, MAX_EXAMPLES)


@pytest.mark.slow
@pytest.mark.parametrize("label", LABELS)
def test_invalid_requests_get_documented_4xx(fuzz_target, label):
    if label == "GET /openapi.json":
        pytest.skip("no parameters or body to make invalid")
    _run(*fuzz_target, label, GenerationMode.NEGATIVE, NEGATIVE_EXAMPLES)


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
