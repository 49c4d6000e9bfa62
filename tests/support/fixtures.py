"""The fixtures that start things, for tests/ and agent/tests/ alike: each one a process (or a
set of processes) of stacks/, started once for its scope and stopped after it. A conftest.py
imports the ones its tests use.

- ``api_process`` (session): the API and its embedded store (scripts/serve.py).
- ``edge_stack`` (session): the API, its store and one edge (``.api``, ``.edge``).
- ``another_edge`` (module): ``another_edge(env)`` starts one more edge on the edge stack's
  store with ``env`` added (limits, timeouts, an events endpoint); stopped after the module.
- ``cluster`` (module): three edges behind HAProxy beside their own API and store.
- ``make_run`` (function): ``make_run(**kw)`` gives `make run` (scripts/serve.py --edge) in a
  new data directory, started by ``with``; stopped after the test.
- ``session_make_run`` (session): the same, for a stack a session's tests share.
- ``sdk_agents`` (function): ``sdk_agents(edge, token, binds)`` starts the official Python
  SDK (tests/edge/sdk_agent.py) against ``edge``; stopped after the test.
- ``cli_agents`` (function): ``cli_agents(edge, token, args, **kw)`` starts the official agent
  CLI (skips the test where the CLI cannot run); stopped after the test.
- ``go_agents`` (function): ``go_agents(edge, token, endpoints, **options)`` starts the
  official Go SDK (tests/edge/go; skips the test where Go cannot build it); stopped after the
  test.
- ``node_agents`` (function): ``node_agents(edge, token, **options)`` starts the official
  JavaScript SDK (tests/edge/node/agent.js; skips the test without Node.js); stopped after the
  test.
- ``device_agents`` (function): ``device_agents(edge, token, workdir, **env)`` makes the
  device agent (agent/) as a process, started by its ``start``; stopped after the test.
- ``ssh_agents`` (function): ``ssh_agents(edge, key_path, forward, command, **kw)`` starts
  OpenSSH's ``ssh -R`` against the edge's SSH gateway (stacks.ssh.SshAgent; skips the test
  where there is no ``ssh``); stopped after the test.
- ``moto_server`` (module): moto's server (AWS services on 127.0.0.1).
- ``device_agent_stack`` (session): the edge stack as the device agent's tests run it (the
  service's virtualenv, one account with its admin key: see :func:`device_agent_stack_in`).

This module imports only the standard library, pytest and stacks' standard-library modules:
the device agent's virtualenv (no ``requests``, no boto3) imports it too.
"""

import contextlib
import os
import shutil
import tempfile
from typing import Any, Callable, Dict, Iterator, List, Optional

import pytest

from stacks.agents import (
    NODE_DIR,
    NODE_SDK,
    CliAgent,
    DeviceAgent,
    GoAgent,
    NodeAgent,
    SdkAgent,
    cli_binary,
    go_binary,
    node_install,
)
from stacks.api import ApiProcess
from stacks.cluster import Cluster
from stacks.edge import EdgeProcess, EdgeStack
from stacks.make_run import MakeRun
from stacks.moto import MotoServer
from stacks.paths import BASE_DOMAIN, SDK_PYTHON, SERVICE_PYTHON
from stacks.ssh import SshAgent, ssh_binary

# The cluster's settings the cluster tests rely on (tests/edge/test_cluster.py).
CLUSTER_SECRET = "test-cluster-secret-" + os.urandom(8).hex()
CLUSTER_STALE = 8  # its ONLINE_STALE_SECONDS (the default 45 would make the tests slow)


def require_sdk_python() -> None:
    """Fail (not skip) when the agent virtualenv with the official SDK is missing."""
    if not os.path.exists(SDK_PYTHON):
        pytest.fail(
            f"{SDK_PYTHON} missing: `make install` makes the agent virtualenv "
            "(with the official ngrok SDK)"
        )


@pytest.fixture(scope="session")
def api_process():
    """scripts/serve.py (the API and the embedded store) as processes, for the whole session."""
    with tempfile.TemporaryDirectory(prefix="tunnel-service-test-") as data_dir:
        process = ApiProcess(data_dir=data_dir).start()
        try:
            yield process
        finally:
            process.stop()


@pytest.fixture(scope="session")
def edge_stack():
    """The API with its store and the edge, as processes, for the whole session. The API's
    own events go to the event tests' edges (EDGE_EVENTS_API=0 here)."""
    require_sdk_python()
    with tempfile.TemporaryDirectory(prefix="tunnel-edge-test-") as data_dir:
        with EdgeStack(data_dir, edge_env={"EDGE_EVENTS_API": "0"}) as running:
            yield running


@pytest.fixture(scope="module")
def another_edge(edge_stack, tmp_path_factory):
    """``another_edge(env=None, *, python=None, cwd=None)``: one more edge on the edge stack's
    store, started with ``env`` added to its environment; every one stopped after the module
    (a test may stop its own first)."""
    started: List[EdgeProcess] = []

    def start(
        env: Optional[Dict[str, str]] = None,
        *,
        python: Optional[str] = None,
        cwd: Optional[str] = None,
    ) -> EdgeProcess:
        edge = EdgeProcess(
            data_dir=str(tmp_path_factory.mktemp("another-edge")),
            store_url=edge_stack.api.store_url,
        )
        if python:
            edge.python = python
        if cwd:
            edge.cwd = cwd
        started.append(edge)
        edge.start({**edge_stack.api.store_env(), "BASE_DOMAIN": BASE_DOMAIN, **(env or {})})
        return edge

    yield start
    for edge in started:
        edge.stop()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """Three edge instances behind HAProxy beside their own API and store, for the module."""
    require_sdk_python()
    running = Cluster(
        str(tmp_path_factory.mktemp("cluster")),
        instances=3,
        secret=CLUSTER_SECRET,
        env={"ONLINE_STALE_SECONDS": str(CLUSTER_STALE)},
    )
    with running:
        yield running


@contextlib.contextmanager
def _make_runs(prefix: str) -> Iterator[Callable[..., MakeRun]]:
    made: List[MakeRun] = []
    with tempfile.TemporaryDirectory(prefix=prefix) as root:

        def make(**kw: Any) -> MakeRun:
            run = MakeRun(os.path.join(root, f"data-{len(made)}"), **kw)
            made.append(run)
            return run

        try:
            yield make
        finally:
            for run in made:
                run.stop()


@pytest.fixture
def make_run():
    """``make_run(**kw)``: `make run` (stacks.make_run.MakeRun, ``kw`` its options) in a new
    data directory; ``with make_run() as run`` (or its ``start``) starts it. Stopped after the
    test."""
    with _make_runs("make-run-") as make:
        yield make


@pytest.fixture(scope="session")
def session_make_run():
    """``make_run`` for the whole session (a stack its tests share: the dashboard's)."""
    with _make_runs("make-run-session-") as make:
        yield make


@pytest.fixture
def sdk_agents():
    """``sdk_agents(edge, token, binds, **handlers)``: the official Python SDK as a process
    against ``edge`` (call its ``start``); all stopped after the test."""
    require_sdk_python()
    started: List[SdkAgent] = []

    def start(edge: Any, token: str, binds: List[Dict[str, Any]], **handlers: str) -> SdkAgent:
        agent = SdkAgent(edge, token, binds, **handlers)
        started.append(agent)
        return agent

    yield start
    for agent in started:
        agent.stop()


@pytest.fixture
def cli_agents():
    """``cli_agents(edge, token, args, **kw)``: the official agent CLI as a process
    (stacks.agents.CliAgent); the test is skipped where the CLI cannot run. All stopped
    after the test."""
    if not cli_binary():
        pytest.skip("the agent CLI 2.x is not available on this platform")
    started: List[CliAgent] = []

    def start(edge: Any, token: str, args: List[str], **kw: Any) -> CliAgent:
        agent = CliAgent(edge, token, args, **kw)
        started.append(agent)
        return agent

    yield start
    for agent in started:
        agent.stop()


@pytest.fixture
def go_agents():
    """``go_agents(edge, token, endpoints, **options)``: the official Go SDK as a process
    (stacks.agents.GoAgent; call its ``start``); the test is skipped where it cannot be built
    (no Go toolchain). All stopped after the test."""
    if not go_binary():
        pytest.skip("the Go SDK agent cannot be built here (no Go toolchain: `make test-deps`)")
    started: List[GoAgent] = []

    def start(edge: Any, token: str, endpoints: List[Dict[str, Any]], **options: Any) -> GoAgent:
        agent = GoAgent(edge, token, endpoints, **options)
        started.append(agent)
        return agent

    yield start
    for agent in started:
        agent.stop()


@pytest.fixture
def node_agents():
    """``node_agents(edge, token, **options)``: the official JavaScript SDK as a process
    (stacks.agents.NodeAgent, started: its ``out`` is its URL or error); the test is skipped
    where Node.js or npm is missing. All stopped after the test."""
    if not shutil.which("node") or not shutil.which("npm"):
        pytest.skip("Node.js/npm not installed: the JavaScript SDK cannot run here")
    problem = node_install(NODE_DIR, NODE_SDK)
    if problem:
        pytest.fail(f"the JavaScript SDK could not be installed: {problem}")
    started: List[NodeAgent] = []

    def start(edge: Any, token: str, **options: Any) -> NodeAgent:
        agent = NodeAgent(edge, token, **options)
        started.append(agent)
        return agent

    yield start
    for agent in started:
        agent.stop()


@pytest.fixture
def device_agents():
    """``device_agents(edge, token, workdir, **env)``: the device agent (agent/) as a process
    with this interpreter, not started (``start`` or ``launch``); all stopped after the test."""
    made: List[DeviceAgent] = []

    def make(edge: Any, token: str, workdir: Any, **env: str) -> DeviceAgent:
        agent = DeviceAgent(edge, token, workdir, **env)
        made.append(agent)
        return agent

    yield make
    for agent in made:
        agent.stop()


@pytest.fixture
def ssh_agents():
    """``ssh_agents(edge, key_path, forward, command, **kw)``: OpenSSH's client as a process
    against the edge's SSH gateway (stacks.ssh.SshAgent); the test is skipped without
    ``ssh``. All stopped after the test."""
    if not ssh_binary():
        pytest.skip("no ssh client here (apt-get install openssh-client)")
    started: List[SshAgent] = []

    def start(edge: Any, key_path: str, forward: Optional[str], command: List[str], **kw: Any):
        agent = SshAgent(edge, key_path, forward, command, **kw)
        started.append(agent)
        return agent

    yield start
    for agent in started:
        agent.stop()


@pytest.fixture(scope="module")
def moto_server(tmp_path_factory):
    """moto's server as a process for the module."""
    try:
        server = MotoServer(str(tmp_path_factory.mktemp("moto"))).start()
    except RuntimeError as exc:
        pytest.fail(str(exc))
    yield server
    server.stop()


def device_agent_stack_in(data_dir: str) -> EdgeStack:
    """The edge stack of the device agent's tests (not started): run with the service's
    virtualenv (SERVICE_PYTHON: they run in the agent's), without the environment's own
    agent and edge settings, local AWS credentials, a 3-port TCP range, and one account made
    at start (``admin``)."""
    if not os.path.exists(SERVICE_PYTHON):
        raise RuntimeError(
            f"{SERVICE_PYTHON} is missing: run `make install` (or set "
            "SERVICE_PYTHON to the service's virtualenv python)"
        )
    return EdgeStack(
        data_dir,
        api_env={
            "AWS_ACCESS_KEY_ID": "local",
            "AWS_SECRET_ACCESS_KEY": "local",
            "AWS_DEFAULT_REGION": "us-east-1",
        },
        drop_prefixes=("AGENT_", "NGROK_", "EDGE_", "VIRTUAL_ENV"),
        tcp_ports=3,
        python=SERVICE_PYTHON,
        api_timeout=90,
        admin_name="agent-tests",
    )


@pytest.fixture(scope="session")
def device_agent_stack():
    """The device agent's edge stack (:func:`device_agent_stack_in`) for the whole session."""
    with tempfile.TemporaryDirectory(prefix="agent-stack-") as data_dir:
        with device_agent_stack_in(data_dir) as running:
            yield running
