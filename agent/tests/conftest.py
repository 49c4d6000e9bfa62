"""Make ``python -m pytest agent/tests`` work from the repo root as well as from agent/, and
provide the real stack (tests/stack.py) once per session.

agent/ goes on sys.path (for the ``tunnel_agent`` package) and so does this directory (for
``stack``). Test modules are named ``test_agent_*`` so they never clash with test modules of
the same name elsewhere in the repo.
"""

import http.server
import json
import sys
import threading
from pathlib import Path

import pytest

_HERE = Path(__file__).resolve().parent
for _path in (_HERE.parent, _HERE):
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))

from stack import Agent, Stack, new_data_dir  # noqa: E402


@pytest.fixture(scope="session")
def stack():
    """Store + API + edge as processes for the whole session."""
    data_dir = new_data_dir("agent-stack-")
    running = Stack(data_dir)
    try:
        running.start()
        yield running
    finally:
        running.stop()


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
def agents(stack, tmp_path):
    """``agents(token, **env)``: an agent process against the stack; stopped after the test."""
    started = []

    def start(token, name="agent", launch_only=False, **env):
        agent = Agent(stack, token, tmp_path / name, **env)
        started.append(agent)
        if launch_only:
            agent.launch()
            return agent
        return agent.start()

    yield start
    for agent in started:
        agent.stop()


@pytest.fixture
def credential(stack):
    """A bot-owned credential without ACL rules (may bind anything its account may)."""
    return stack.bot_credential()
