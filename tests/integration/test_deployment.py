"""Whether this run also covers a deployment (LocalStack or AWS): see conftest.py."""

import os

import pytest


def test_suite_runs_against_a_deployment_when_configured():
    if not os.environ.get("INTEGRATION_BASE_URL"):
        pytest.skip("INTEGRATION_BASE_URL not set: no LocalStack/AWS deployment to test")
    assert os.environ.get("INTEGRATION_API_KEY"), "INTEGRATION_API_KEY (an admin key) is needed"
