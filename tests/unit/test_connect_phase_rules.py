"""An HTTP endpoint's ``on_tcp_connect`` phase (docs/CONTRACT.md, "Traffic policy"): a
forward-internal in it is refused for http and https endpoints (their requests forward, in
on_http_request) and kept for tcp and tls ones; an internal HTTP endpoint's policy with the
phase is refused at bind with ERR_NGROK_2262, a public one's is not; the edge runs the phase
once per connection and endpoint (tests/edge/test_connect_phase.py)."""

import json

import pytest

from chalicelib.core import binding, edge_errors
from chalicelib.core.policy import PolicyError, compile_policy
from edge import enforce

FORWARD = {
    "on_tcp_connect": [
        {"actions": [{"type": "forward-internal", "config": {"url": "tcp://a.internal:1"}}]}
    ]
}
LOG = {"on_tcp_connect": [{"actions": [{"type": "log", "config": {"metadata": {}}}]}]}


@pytest.mark.parametrize("protocol", ["http", "https"])
def test_a_forward_internal_on_connect_is_refused_for_http_endpoints(protocol):
    with pytest.raises(PolicyError) as raised:
        compile_policy(json.dumps(FORWARD)).check_protocol(protocol)
    assert raised.value.path == "on_tcp_connect[0].actions[0].type"
    assert "on_http_request" in raised.value.message


@pytest.mark.parametrize("protocol", ["tcp", "tls"])
def test_a_forward_internal_on_connect_stays_for_tcp_and_tls_endpoints(protocol):
    policy = compile_policy(json.dumps(FORWARD))
    assert policy.check_protocol(protocol) is policy


def test_an_http_binds_forward_internal_on_connect_is_refused_and_a_tcp_binds_is_not():
    with pytest.raises(binding.Refused) as raised:
        enforce.http_options({"TrafficPolicy": json.dumps(FORWARD)})
    assert raised.value.code == edge_errors.INVALID_TRAFFIC_POLICY
    assert enforce.tcp_options({"TrafficPolicy": json.dumps(FORWARD)}).policy is not None
    assert enforce.http_options({"TrafficPolicy": json.dumps(LOG)}).policy is not None


@pytest.mark.parametrize("proto", ["http", "https"])
def test_an_internal_http_endpoint_with_the_phase_is_refused_with_2262(proto):
    with pytest.raises(binding.Refused) as raised:
        enforce.check_internal(proto, enforce.http_options({"TrafficPolicy": json.dumps(LOG)}))
    assert raised.value.code == edge_errors.INTERNAL_TCP_CONNECT == "ERR_NGROK_2262"
    request_only = {"on_http_request": [{"actions": [{"type": "deny"}]}]}
    enforce.check_internal(
        proto, enforce.http_options({"TrafficPolicy": json.dumps(request_only)})
    )
    enforce.check_internal(proto, enforce.http_options({}))


def test_an_internal_tcp_endpoint_keeps_its_phase():
    enforce.check_internal("tcp", enforce.tcp_options({"TrafficPolicy": json.dumps(LOG)}))
