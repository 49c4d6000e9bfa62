"""Where things are: the repository and the interpreters that run its processes."""

import os
from pathlib import Path

PROJECT_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
AGENT_DIR = Path(PROJECT_DIR) / "agent"  # the device agent (its package: tunnel_agent)

# The service's virtualenv (the API, the store, the edge) for a caller that runs in another
# one: the device agent's tests run with .venv-agent and start the service with this.
SERVICE_PYTHON = os.path.abspath(
    os.environ.get("SERVICE_PYTHON") or os.path.join(PROJECT_DIR, ".venv", "bin", "python")
)

# The device agent's virtualenv, where the official ngrok SDK is installed: the SDK and the
# ``ngrok-api`` client share the ``ngrok`` package name, so they cannot share a venv.
SDK_PYTHON = os.environ.get("SDK_PYTHON") or os.path.join(
    PROJECT_DIR, ".venv-agent", "bin", "python"
)

# The wildcard domain the stacks started here serve tunnels under (*.localhost: the loopback).
BASE_DOMAIN = "tunnels.localhost"
