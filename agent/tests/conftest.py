"""The device agent's tests: the real stack (store + API + edge, run with the service's
virtualenv) once per session and the agent itself as processes, from tests/support/fixtures.py
(the project is installed in the agent's virtualenv too: `make install`). Test modules are
named ``test_agent_*`` so they never clash with test modules of the same name elsewhere in the
repo.
"""

import http.server
import json
import threading

import pytest

from tests.support.fixtures import device_agent_stack, device_agents  # noqa: F401 (fixtures)


@pytest.fixture(scope="session")
def stack(device_agent_stack):  # noqa: F811
    """Store + API + edge as processes for the whole session, with one account's admin key."""
    return device_agent_stack


class _Echo(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def _answer(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        payload = json.dumps(
            {
                "method": self.command,
                "path": self.path,
                "headers": {k.lower(): v for k, v in self.headers.items()},
                "body": body.decode("utf-8", "replace"),
            }
        ).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.send_header("X-Upstream", "yes")
        self.end_headers()
        self.wfile.write(payload)

    do_GET = do_POST = do_PUT = do_DELETE = _answer

    def log_message(self, *args) -> None:  # quiet
        pass


@pytest.fixture(scope="session")
def upstream():
    """A local HTTP server the tunnels forward to: echoes the request it got as JSON."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Echo)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"127.0.0.1:{server.server_address[1]}"
    server.shutdown()


@pytest.fixture
def agents(stack, tmp_path, device_agents):  # noqa: F811
    """``agents(token, **env)``: an agent process against the stack; stopped after the test."""

    def start(token, name="agent", launch_only=False, **env):
        agent = device_agents(stack, token, tmp_path / name, **env)
        if launch_only:
            agent.launch()
            return agent
        return agent.start()

    return start


@pytest.fixture
def credential(stack):
    """A bot-owned credential without ACL rules (may bind anything its account may)."""
    return stack.bot_credential()
