"""Fixtures shared by every test level (those that start processes: tests/support/fixtures.py).

The environment is set here, before anything imports the app: PynamoDB reads host and
region when a model's connection is first built.
"""

import os
import tempfile

for _name, _value in {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_SECURITY_TOKEN": "testing",
    "AWS_SESSION_TOKEN": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
    "AWS_REGION": "us-east-1",
    "TABLE_NAME": "tunnel-service",
    # Reserved TCP addresses are never freed by most tests: a wide range,
    # inherited by the local stack process, so a session never runs out.
    "EDGE_TCP_PORTS": "10000-59999",
}.items():
    os.environ[_name] = _value
os.environ.pop("DYNAMODB_ENDPOINT_URL", None)
# Private keys of TLS certificates are sealed with a master key in this file (chalicelib.core.keywrap)
# for the whole session: the in-process app, the stack processes and the edge share it.
os.environ["TLS_KEY_FILE"] = os.path.join(
    tempfile.mkdtemp(prefix="tunnel-tls-keys-"), "tls-keys.secret"
)
os.environ.pop("TLS_KMS_KEY_ID", None)
os.environ.pop("PUBLIC_BASE_URL", None)

import pytest  # noqa: E402

from stacks.paths import PROJECT_DIR  # noqa: E402
from tests.support.api import HttpApi, InProcessApi  # noqa: E402
from tests.support.fixtures import api_process  # noqa: E402, F401 (a fixture)


@pytest.fixture
def store_env():
    """An empty table in moto's in-process mock, with the store configured for it."""
    from moto import mock_aws

    from chalicelib.core import config, store

    with mock_aws():
        config.reset_settings()
        store.reset()
        store.create_table()
        yield store
        store.reset()


@pytest.fixture
def inprocess_api(store_env):
    from chalice.test import Client

    from app import app
    from chalicelib.gateway import ContractGateway

    with Client(app, stage_name="dev", project_dir=PROJECT_DIR) as client:
        # The same gateway behaviour as `make run` and the deployed gateway responses.
        client.http._local_gateway = ContractGateway(app, client.http._config)
        yield InProcessApi(client)


@pytest.fixture(scope="session")
def http_api(api_process):  # noqa: F811
    return HttpApi(api_process)


@pytest.fixture(params=["inprocess", "http"])
def api(request):
    """The service at both levels: the same test runs in-process and over real HTTP."""
    if request.param == "inprocess":
        return request.getfixturevalue("inprocess_api")
    return request.getfixturevalue("http_api")


@pytest.fixture
def account(api):
    return api.new_account()


@pytest.fixture
def other_account(api):
    return api.new_account()


@pytest.fixture(scope="module")
def module_api():
    """One in-process service (moto table + chalice.test.Client) for a whole test module.

    For modules whose tests each make their own resources in their own accounts: one
    table and one client instead of one per test (see tests/functional/test_every_resource.py).
    """
    from chalice.test import Client
    from moto import mock_aws

    from app import app
    from chalicelib.core import config, store
    from chalicelib.gateway import ContractGateway

    with mock_aws():
        config.reset_settings()
        store.reset()
        store.create_table()
        with Client(app, stage_name="dev", project_dir=PROJECT_DIR) as client:
            client.http._local_gateway = ContractGateway(app, client.http._config)
            yield InProcessApi(client)
        store.reset()
