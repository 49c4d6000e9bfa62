"""edge.legacy: which endpoint a CLI 2.x tunnel may share its name with."""

from types import SimpleNamespace

import pytest

from edge import legacy


def _tunnel(proto="http", scheme_only=True, internal=False):
    return SimpleNamespace(proto=proto, scheme_only=scheme_only, internal=internal)


@pytest.mark.parametrize(
    "tunnel, want",
    [
        (_tunnel("http"), "https"),
        (_tunnel("https"), "http"),
        (_tunnel("tls"), None),  # no pair: served on the HTTPS listener alone
        (_tunnel("tcp"), None),
        (_tunnel("http", scheme_only=False), None),  # the SDKs: one endpoint per name
        (_tunnel("https", internal=True), None),  # an internal name has no pair
    ],
)
def test_the_partner_scheme_is_the_other_of_http_and_https_for_the_cli_only(tunnel, want):
    assert legacy.partner_proto(tunnel) == want
