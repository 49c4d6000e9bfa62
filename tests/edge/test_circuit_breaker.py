"""The circuit breaker (chalicelib/core/policy/breaker.py), as the agent option (edge/breaker.py)
and as the ``circuit-breaker`` action: the Python SDK as a process trips it with 5xx answers;
then the edge answers 503 ERR_NGROK_3202 without forwarding. The window, the volume and the
recovery: tests/unit/test_policy_breaker.py, with a clock of the test's."""

import pytest

from chalicelib.core import binding
from chalicelib.core.policy import breaker as shared
from edge import breaker
from tests.edge.test_edge_sdk import _bound, _credential, _host, _refusal


def test_the_sdk_circuit_breaker_trips_on_5xx(edge, account, agents):
    agent = agents(
        edge,
        _credential(account)["token"],
        [{"proto": "http", "options": {"circuit_breaker": [0.5]}}],
    )
    host = _host(_bound(agent.start())[0]["url"])
    for _ in range(shared.VOLUME - 1):
        assert edge.http("GET", host, "/status/500").status_code == 500
    assert edge.http("GET", host, "/echo").status_code == 200  # 9 errors of 10: trips
    refused = edge.http("GET", host, "/echo")
    assert refused.status_code == 503 and "ERR_NGROK_3202" in refused.text


def test_an_invalid_threshold_is_refused(edge, account, agents):
    agent = agents(
        edge,
        _credential(account)["token"],
        [{"proto": "http", "options": {"circuit_breaker": [1.5]}}],
    )
    assert "ERR_NGROK_361" in _refusal(agent.start(), "bind")


def test_threshold_bounds():
    assert breaker.of_option(None) is None
    assert breaker.of_option({"error_threshold": 0}).threshold == 0.0
    assert breaker.of_option({"error_threshold": 1}).threshold == 1.0
    for bad in (
        {"error_threshold": -0.1},
        {"error_threshold": 1.01},
        {},
        {"error_threshold": True},
        "x",
    ):
        with pytest.raises(binding.Refused) as exc:
            breaker.of_option(bad)
        assert exc.value.code == "ERR_NGROK_361"


def test_the_circuit_breaker_action_trips_on_5xx_and_counts_each_endpoint_apart(
    edge, account, agents
):
    """The action in a policy the SDK sends: 4 answers with 2 errors trip it (volume 4, 50%);
    the endpoint is then answered 503 ERR_NGROK_3202 by the edge, while a second endpoint
    with the same policy text keeps its own, closed breaker."""
    import json

    policy = {
        "on_http_request": [
            {
                "actions": [
                    {
                        "type": "circuit-breaker",
                        "config": {"volume_threshold": 4, "error_threshold": 0.5},
                    }
                ]
            }
        ]
    }
    binds = [
        {"proto": "http", "options": {"traffic_policy": [json.dumps(policy)]}} for _ in range(2)
    ]
    agent = agents(edge, _credential(account)["token"], binds)
    tripped, other = (_host(b["url"]) for b in _bound(agent.start()))
    for path, status in (("/status/500", 500), ("/echo", 200), ("/status/502", 502)):
        assert edge.http("GET", tripped, path).status_code == status
    assert edge.http("GET", tripped, "/echo").status_code == 200  # the 4th: 2 of 4, trips
    refused = edge.http("GET", tripped, "/echo")
    assert refused.status_code == 503
    assert refused.headers["ngrok-error-code"] == "ERR_NGROK_3202"
    assert edge.http("GET", other, "/echo").status_code == 200
