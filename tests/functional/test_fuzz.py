"""Schemathesis against the local stack (real HTTP to serve.py): for every operation of the
OpenAPI document, generated requests (valid ones, then invalid ones) must never get a 5xx,
and every response must be documented: status code, content type and body schema.

Bounded and deterministic: Hypothesis derandomized, no example database, no shrinking phase,
MAX_EXAMPLES valid + NEGATIVE_EXAMPLES invalid requests per operation (~600 requests for
~60 operations; well under a minute on 2 cores). FUZZ_EXAMPLES raises the bound for a
longer local run.
"""
import os

import pytest
import requests
from hypothesis import HealthCheck, Phase, given, settings

import schemathesis
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (content_type_conformance,
                                               response_schema_conformance,
                                               status_code_conformance)

from app import app
from chalicelib import openapi

MAX_EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES", "6"))
NEGATIVE_EXAMPLES = max(2, MAX_EXAMPLES * 2 // 3)
CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance,
          response_schema_conformance]
DOCUMENT = openapi.build(app)
LABELS = sorted(f"{method.upper()} {path}" for path, item in DOCUMENT["paths"].items()
                for method in item)
STATS = {"requests": 0, "by_status": {}}


@pytest.fixture(scope="module")
def fuzz_target(http_api):
    account = http_api.new_account()
    served = requests.get(http_api.base_url + "/openapi.json", timeout=30).json()
    schema = schemathesis.openapi.from_dict(served)
    session = requests.Session()
    yield schema, http_api.base_url, account.admin.token, session
    print(f"\nfuzz: {STATS['requests']} requests, by status {sorted(STATS['by_status'].items())}")


def _run(schema, base_url, token, session, label, mode, examples):
    operation = schema.find_operation_by_label(label)
    assert operation is not None, label
    headers = {"Authorization": f"Bearer {token}"}
    if mode is GenerationMode.POSITIVE:
        headers["Service-Version"] = "2"
    strategy = operation.as_strategy(generation_mode=mode, headers=headers)

    @settings(max_examples=examples, derandomize=True, database=None, deadline=None,
              phases=[Phase.explicit, Phase.generate], print_blob=False,
              suppress_health_check=list(HealthCheck))
    @given(case=strategy)
    def fuzz(case):
        response = case.call(base_url=base_url, session=session, timeout=30)
        STATS["requests"] += 1
        STATS["by_status"][response.status_code] = \
            STATS["by_status"].get(response.status_code, 0) + 1
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
