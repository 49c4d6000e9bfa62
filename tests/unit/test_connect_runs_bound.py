"""What the Python path keeps per client connection for HTTP endpoints' on_tcp_connect rules
(edge/http_policy.py ``first_connect``, docs/SECURITY.md): at most MAX_CONNS (16) entries,
policy views and runs together, whatever the number of endpoints and documents a hostile
client cycles through on one connection; past it all is forgotten, so the rules run again,
never fewer."""

import json

from chalicelib.core.policy import compile_policy
from edge import http_policy
from edge.edges import Hop


def _policy(n):
    log = {"type": "log", "config": {"metadata": {"n": n}}}
    return compile_policy(json.dumps({"on_tcp_connect": [{"actions": [log]}]}))


def _hop(n):
    return Hop(f"ep_{n}", f"https://h{n}.example", f"h{n}.example", "ac_1")


def test_the_runs_a_connection_keeps_stay_within_16_entries():
    conns = {}
    for n in range(200):  # 200 endpoints, each with a document of its own
        hop = _hop(n)
        conn = conns.get(hop)
        if conn is None:  # (as http_policy.run makes an endpoint's view)
            if len(conns) >= 16:
                conns.clear()
            conn = conns[hop] = object()
        assert http_policy.first_connect(conns, hop, conn, _policy(n), 0)
        assert len(conns) <= 16, len(conns)


def test_a_run_is_remembered_per_endpoint_and_document_and_never_on_a_hop():
    conns, hop, conn = {}, _hop(1), object()
    conns[hop] = conn
    assert http_policy.first_connect(conns, hop, conn, _policy(1), 0)
    assert not http_policy.first_connect(conns, hop, conn, _policy(1), 0)  # the same: once
    assert http_policy.first_connect(conns, hop, conn, _policy(2), 0)  # another document
    assert http_policy.first_connect(conns, _hop(2), conn, _policy(1), 0)  # another endpoint
    assert not http_policy.first_connect(conns, _hop(3), conn, _policy(3), 1)  # a forward's hop
    plain = compile_policy(json.dumps({"on_http_request": [{"actions": [{"type": "deny"}]}]}))
    assert not http_policy.first_connect(conns, _hop(4), conn, plain, 0)  # no such rules


def test_past_the_bound_the_rules_run_again():
    conns, hop, conn = {}, _hop(0), object()
    conns[hop] = conn
    assert http_policy.first_connect(conns, hop, conn, _policy(0), 0)
    for n in range(1, 20):
        http_policy.first_connect(conns, hop, conn, _policy(n), 0)
    assert conns[hop] is conn  # the endpoint's view kept through the clearing
    assert http_policy.first_connect(conns, hop, conn, _policy(0), 0)  # forgotten: again
