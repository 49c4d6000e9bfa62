"""The ban index of abuse reports: hostnames the edge refuses (403 ERR_NGROK_3208) for traffic
and binds. Written by ``chalicelib.abuse_reports`` in the transaction that records a report."""

from typing import List

from chalicelib.core import store

BANNED_PK = store.unique_pk("banned_host", "hosts")  # the ban index: sk = hostname


def banned_hosts() -> List[str]:
    """Every hostname some report bans (one Query of the ban index): what the edge refuses."""
    return [item.sk for item in store.query_all(BANNED_PK)]
