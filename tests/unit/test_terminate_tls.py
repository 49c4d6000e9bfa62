"""The terminate-tls action's configuration (chalicelib.core.policy.actions.TerminateTls): what
the edge's handshake must be; the edge applies it (tests/edge/test_tls_edges_on_the_wire.py)."""

import json

import pytest

from chalicelib.core.policy import PolicyError, compile_policy
from tests.support.policy import conn

CERT = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"
KEY = "-----BEGIN PRIVATE KEY-----\nMIIE\n-----END PRIVATE KEY-----\n"
CA_ID = "ca_0ERYqBR5B9RMvMY4cZCztl2IB7s"


def policy(config):
    doc = {"on_tcp_connect": [{"actions": [{"type": "terminate-tls", "config": config}]}]}
    return compile_policy(json.dumps(doc))


def asked(config):
    p = policy(config)
    return p.on_tcp_connect(conn(), p.new_state()).terminate_tls


def test_config_is_carried_to_the_edge():
    assert asked({}) == {"min_version": "1.2", "max_version": "1.3"}
    assert asked(
        {
            "min_version": "1.3",
            "server_certificate": CERT,
            "server_private_key": KEY,
            "mutual_tls_certificate_authorities": [CA_ID, CERT],
            "mutual_tls_verification_strategy": "require-and-verify",
        }
    ) == {
        "min_version": "1.3",
        "max_version": "1.3",
        "server_certificate": CERT,
        "server_private_key": KEY,
        "mutual_tls_certificate_authorities": [CA_ID, CERT],
    }


@pytest.mark.parametrize(
    "config, field, words",
    [
        ({"min_version": "1.1"}, "min_version", "1.2 or 1.3"),
        ({"max_version": "1.4"}, "max_version", "1.2 or 1.3"),
        ({"min_version": "1.3", "max_version": "1.2"}, "max_version", "below"),
        ({"server_certificate": CERT}, "server_private_key", "together"),
        ({"server_private_key": KEY}, "server_certificate", "together"),
        ({"server_certificate": KEY, "server_private_key": KEY}, "server_certificate", "PEM"),
        (
            {"mutual_tls_certificate_authorities": ["nope"]},
            "mutual_tls_certificate_authorities[0]",
            "PEM",
        ),
        (
            {"mutual_tls_certificate_authorities": [CA_ID] * 11},
            "mutual_tls_certificate_authorities",
            "limit",
        ),
        (
            {"mutual_tls_verification_strategy": "request"},
            "mutual_tls_verification_strategy",
            "only",
        ),
        ({"sni": "x"}, "sni", "unknown field"),
    ],
)
def test_bad_config_is_refused_naming_the_field(config, field, words):
    with pytest.raises(PolicyError) as raised:
        policy(config)
    assert raised.value.path == f"on_tcp_connect[0].actions[0].config.{field}"
    assert words in raised.value.message


def test_it_runs_only_on_tcp_connect_and_not_on_tcp_endpoints():
    doc = {"on_http_request": [{"actions": [{"type": "terminate-tls"}]}]}
    with pytest.raises(PolicyError, match="cannot run in on_http_request"):
        compile_policy(json.dumps(doc))
    for protocol in ("tcp", "http", "https"):
        with pytest.raises(PolicyError, match=f"not on {protocol} ones"):
            policy({}).check_protocol(protocol)
    assert policy({}).check_protocol("tls")


def test_only_tls_endpoints_may_ask_for_it_at_bind():
    from chalicelib.core import binding
    from edge import enforce, passthrough

    option = {
        "TrafficPolicy": json.dumps({"on_tcp_connect": [{"actions": [{"type": "terminate-tls"}]}]})
    }
    assert passthrough.options(option).policy is not None  # a TLS endpoint's
    for build in (enforce.tcp_options, enforce.http_options):
        with pytest.raises(binding.Refused, match="terminate-tls runs on TLS endpoints"):
            build(option)
