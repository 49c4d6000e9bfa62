"""Fixtures the unit tests share."""

import asyncio
import socket

import pytest

from edge import carrier


@pytest.fixture
def core():
    """An agent session the core runs (its other end held here), made on a loop of its own
    that a test may run its checks on (``mux.loop``)."""
    loop = asyncio.new_event_loop()
    made = carrier.Carrier(threads=1)
    ours, theirs = socket.socketpair()

    async def attach():
        return made.attach(ours, "agent")

    mux = loop.run_until_complete(attach())
    mux.loop = loop
    yield mux
    loop.run_until_complete(mux.close())
    theirs.close()
    loop.close()
