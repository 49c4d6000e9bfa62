"""edge/edges.py EdgeRouter.internal_target: which internal endpoint a forward-internal URL
names. A TCP endpoint is named by host and port; the account must be the forwarder's."""

import asyncio
from types import SimpleNamespace

import pytest

from edge.edges import EdgeRouter
from edge.registry import Registry


class _Edge:
    def __init__(self, cloud=None):
        self.registry = Registry()
        self.cloud = cloud or {}

    async def call(self, func, name):
        return self.cloud.get(name)


def _tunnel(account, name, proto, url):
    return SimpleNamespace(
        account_id=account,
        hostname=name,
        proto=proto,
        url=url,
        endpoint_id="ep_1",
        id="tn_1",
        enforcement=None,
        internal=True,
        session=SimpleNamespace(ended=False, mux=SimpleNamespace(closed=False)),
    )


def _target(edge, account, url, protocol):
    return asyncio.run(EdgeRouter(edge).internal_target(account, url, protocol))


@pytest.mark.parametrize(
    "url, found",
    [
        ("tcp://db.internal:5432", True),  # its port
        ("tcp://db.internal", True),  # no port: the name alone
        ("tcp://db.internal:5433", False),  # another port: nothing there
        ("tcp://other.internal:5432", False),
    ],
)
def test_an_agent_tcp_endpoint_is_named_by_host_and_port(url, found):
    edge = _Edge()
    edge.registry.internal[("acct", "db.internal")] = _tunnel(
        "acct", "db.internal", "tcp", "tcp://db.internal:5432"
    )
    routed = _target(edge, "acct", url, "tcp")
    assert (routed is not None) is found
    if found:
        assert routed.error is None and routed.tunnel.url == "tcp://db.internal:5432"
    assert _target(edge, "other-account", url, "tcp") is None


def test_a_cloud_tcp_endpoint_is_named_by_host_and_port():
    from chalicelib.core import online

    cloud = {
        "id": "ep_c",
        "url": "tcp://db.internal:6000",
        "host": "db.internal",
        "account_id": "acct",
        "internal": True,
        "scheme": "tcp",
    }
    edge = _Edge({online.claim_name("db.internal", "acct"): cloud})
    assert _target(edge, "acct", "tcp://db.internal:6000", "tcp").endpoint_id == "ep_c"
    assert _target(edge, "acct", "tcp://db.internal:6001", "tcp") is None


def test_an_http_endpoint_keeps_matching_by_name():
    edge = _Edge()
    edge.registry.internal[("acct", "api.internal")] = _tunnel(
        "acct", "api.internal", "https", "https://api.internal"
    )
    assert _target(edge, "acct", "https://api.internal:8443", "http").error is None
    assert _target(edge, "acct", "https://api.internal", "tcp").error[1] == "ERR_NGROK_3502"


@pytest.mark.parametrize("gone", ["ended", "closed"])
def test_an_endpoint_whose_session_has_ended_is_offline(gone):
    """Its agent gone before the registry dropped it (the session ended, or its connection
    closed first): a forward to it finds nothing, on both paths, rather than a stream that
    cannot open."""
    edge = _Edge()
    tunnel = _tunnel("acct", "api.internal", "https", "https://api.internal")
    edge.registry.internal[("acct", "api.internal")] = tunnel
    assert _target(edge, "acct", "https://api.internal", "http") is not None
    if gone == "ended":
        tunnel.session.ended = True
    else:
        tunnel.session.mux.closed = True
    assert _target(edge, "acct", "https://api.internal", "http") is None
    assert EdgeRouter(edge).internal_here("acct", "https://api.internal") is None
