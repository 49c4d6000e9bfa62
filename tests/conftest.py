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

from scripts.embedded_store import patch_moto  # noqa: E402
from stacks.paths import PROJECT_DIR  # noqa: E402

# The in-process level's moto is the one `make run`'s store runs (scripts/embedded_store.py,
# point 5): the same answers, and a transaction no longer copies the whole table (moto's own
# rollback made each write cost more as a test's table grew: 300 writes took 67 s).
patch_moto()
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


@pytest.fixture(scope="module")
def inprocess_mock():
    """moto's in-process mock, started once for a whole test module (the in-process level's
    store; tests/conftest.py ``inprocess_api`` gives each test an empty table in it)."""
    from moto import mock_aws

    from chalicelib.core import config, store

    with mock_aws():
        config.reset_settings()
        store.reset()
        yield store
        store.reset()


@pytest.fixture
def inprocess_api(inprocess_mock):
    """The app through chalice.test.Client on an empty table of its own, in the module's mock.

    Measured on the functional tests: a mock, a store client and a table made anew for each
    test cost 0.41 s a test (a quarter of their time); one table shared by a module's tests
    made each request slower as the table grew (moto scans a whole table for an index's
    query: test_api_keys.py 79 s -> 129 s); the table deleted and made again in a mock and a
    store client kept for the module costs under 0.1 s (docs/TESTING.md "Time")."""
    from chalice.test import Client

    from app import app
    from chalicelib.core import config
    from chalicelib.gateway import ContractGateway

    config.reset_settings()  # a test may have changed the settings' environment
    store = inprocess_mock
    if store.model().exists():
        store.model().delete_table()
    store.create_table()
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


# ---- `make test-fast`: the tests that start no process ---------------------------------------
# Fixtures that start the stack as processes (scripts/serve.py and what is built on it). A test
# that uses one of them, or the `api` fixture at its "http" level, or lives in a folder whose
# tests all run against processes, or is marked `processes` (a tool run as a process: chalice
# package, cfn-lint, a relay), is left out by --in-process.
_PROCESS_FIXTURES = frozenset({"api_process", "http_api"})
_PROCESS_FOLDERS = ("edge", "dashboard", "integration")


def pytest_addoption(parser):
    parser.addoption(
        "--in-process",
        action="store_true",
        help="run only the tests that start no process (make test-fast)",
    )


def starts_processes(item) -> bool:
    """Whether a collected test starts the stack (or anything else) as a process."""
    parts = item.path.relative_to(PROJECT_DIR).parts
    if len(parts) > 1 and parts[0] == "tests" and parts[1] in _PROCESS_FOLDERS:
        return True
    if _PROCESS_FIXTURES.intersection(item.fixturenames):
        return True
    if item.get_closest_marker("processes") is not None:
        return True
    callspec = getattr(item, "callspec", None)
    return callspec is not None and callspec.params.get("api") == "http"


# The files that take longest (docs/TESTING.md "Time"), longest first, run before all others:
# `make test` gives whole files to parallel workers (pytest -n, --dist loadfile) in collection
# order, and a long file handed out last would run alone at the end while the others idle.
LONGEST_FIRST = (  # measured: the per-file sums of test-output/service-junit.xml, 7eed583
    "tests/functional/test_fuzz.py",
    "tests/dashboard/test_dashboard.py",
    "tests/integration/test_store_log.py",
    "tests/edge/test_acme_pebble.py",
    "tests/edge/test_cluster.py",
    "tests/edge/test_hostile_agents.py",
    "tests/dashboard/test_resource_pages.py",
    "tests/functional/test_packaging.py",
    "tests/edge/test_edge_streams.py",
    "tests/dashboard/test_ssh_and_ingress_pages.py",
    "tests/dashboard/test_ssh_credentials_and_ip_restrictions.py",
    "tests/edge/test_edge_image.py",
    "tests/functional/test_online_views.py",
    "tests/integration/test_durability.py",
)


def _longest_first(item) -> int:
    path = item.path.relative_to(PROJECT_DIR).as_posix()
    return LONGEST_FIRST.index(path) if path in LONGEST_FIRST else len(LONGEST_FIRST)


def pytest_collection_modifyitems(config, items):
    items.sort(key=_longest_first)  # stable: each file's tests keep their order
    if not config.getoption("--in-process"):
        return
    kept = [item for item in items if not starts_processes(item)]
    deselected = [item for item in items if starts_processes(item)]
    if deselected:
        config.hook.pytest_deselected(items=deselected)
        items[:] = kept
